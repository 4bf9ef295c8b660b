"""Every golden directory tests/programs/<name>/ evaluated on Spark: the results match
expected/*.csv within meta.toml's tolerance AND the pure-Python reference evaluator."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from fixflow.checker import load
from fixflow.operators.evaluate import EvalOptions, evaluate_with_stats
from reference.evaluator import evaluate as reference_evaluate
from reference.golden import GoldenCase, compare_rows, load_golden

from .helpers import edb_frames

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"
CASES = sorted(
    p.name
    for p in PROGRAMS.iterdir()
    if (p / "program.dl").is_file() and (p / "meta.toml").is_file()
)


def test_there_are_golden_programs() -> None:
    assert len(CASES) >= 1


def _declared_types(case: GoldenCase, relation: str, rows: set[tuple]) -> list[tuple]:
    """Oracle rows with float columns as floats (it keeps ``0`` where a float column
    received an integer literal)."""
    types = [a.type for a in case.program.declaration(relation).attributes]  # type: ignore[union-attr]
    types = types[len(types) - len(next(iter(rows), types)) :]  # the index column is dropped
    return sorted(
        tuple(float(v) if t == "float" else v for v, t in zip(row, types, strict=True))
        for row in rows
    )


@pytest.mark.parametrize("name", CASES)
def test_golden_program_on_spark(spark: SparkSession, name: str) -> None:
    case = load_golden(PROGRAMS / name)
    report = load(case.source, str(case.directory / "program.dl"))
    evaluation = evaluate_with_stats(
        report, edb_frames(spark, report, case.facts), spark, EvalOptions(max_iterations=1000)
    )
    assert not evaluation.capped, f"hit the iteration cap: {evaluation.capped}"
    oracle = reference_evaluate(case.program, case.facts)
    assert case.expected, "a golden directory without expected outputs"
    for relation, expected in case.expected.items():
        actual = [tuple(row) for row in evaluation.relations[relation].collect()]
        assert compare_rows(actual, expected, case.tolerance) == [], f"{relation} vs expected"
        reference = _declared_types(case, relation, oracle[relation])
        assert compare_rows(actual, reference, case.tolerance) == [], f"{relation} vs oracle"
