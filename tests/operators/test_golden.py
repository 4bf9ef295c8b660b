"""Every golden directory tests/programs/<name>/ evaluated on every placement its program
admits (``placement.admitted_settings``: the driver, Spark with the sync engine, Spark with
sharded stages over 1 and 2 shards): the results match expected/*.csv within meta.toml's
tolerance AND the pure-Python reference evaluator, and each stratum ran where ``place``
said it would."""

from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.mark import ParameterSet
from pyspark.sql import SparkSession

from fixflow.checker import load
from fixflow.operators.evaluate import EvalOptions, evaluate_with_stats
from fixflow.operators.placement import SETTINGS, admitted_settings, placements
from reference.evaluator import evaluate as reference_evaluate
from reference.golden import GOLDEN_PLACEMENT, GoldenCase, compare_rows, load_golden

from .helpers import edb_frames

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"
CASES = sorted(
    p.name
    for p in PROGRAMS.iterdir()
    if (p / "program.dl").is_file() and (p / "meta.toml").is_file()
)
BASE = EvalOptions(max_iterations=1000)
SETTING = {s.name: s for s in SETTINGS}


def golden_placements() -> list[ParameterSet]:
    """(case, setting) for every setting the case's program admits."""
    pairs = []
    for name in CASES:
        directory = PROGRAMS / name
        report = load((directory / "program.dl").read_text(), str(directory / "program.dl"))
        pairs += [
            pytest.param(name, setting.name, id=f"{name}@{setting.name}")
            for setting in admitted_settings(report, BASE)
        ]
    return pairs


PAIRS = golden_placements()


def test_there_are_golden_programs() -> None:
    assert len(CASES) >= 1


def test_every_placement_is_exercised() -> None:
    """Each kind of placement is some golden's: a setting no program admits is untested."""
    used = {pair.values[1] for pair in PAIRS}
    assert used == set(SETTING)


def _declared_types(case: GoldenCase, relation: str, rows: set[tuple]) -> list[tuple]:
    """Oracle rows with float columns as floats (it keeps ``0`` where a float column
    received an integer literal)."""
    types = [a.type for a in case.program.declaration(relation).attributes]  # type: ignore[union-attr]
    types = types[len(types) - len(next(iter(rows), types)) :]  # the index column is dropped
    return sorted(
        tuple(float(v) if t == "float" else v for v, t in zip(row, types, strict=True))
        for row in rows
    )


@pytest.mark.parametrize(("name", "setting"), PAIRS)
def test_golden_program(
    spark: SparkSession, name: str, setting: str, record_property: pytest.RecordProperty
) -> None:
    record_property(GOLDEN_PLACEMENT, f"{name}@{setting}")
    case = load_golden(PROGRAMS / name)
    report = load(case.source, str(case.directory / "program.dl"))
    options = SETTING[setting].options(BASE)
    evaluation = evaluate_with_stats(report, edb_frames(spark, report, case.facts), spark, options)
    ran = [None if s.placement is None else s.placement.kind for s in evaluation.stats]
    assert ran == [p.kind for p in placements(report, options)]
    assert not evaluation.capped, f"hit the iteration cap: {evaluation.capped}"
    oracle = reference_evaluate(case.program, case.facts)
    assert case.expected, "a golden directory without expected outputs"
    for relation, expected in case.expected.items():
        actual = [tuple(row) for row in evaluation.relations[relation].collect()]
        assert compare_rows(actual, expected, case.tolerance) == [], f"{relation} vs expected"
        reference = _declared_types(case, relation, oracle[relation])
        assert compare_rows(actual, reference, case.tolerance) == [], f"{relation} vs oracle"
