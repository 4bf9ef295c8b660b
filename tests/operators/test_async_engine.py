"""The async MRA engine against the sync engine on every golden program with an `mra`
stratum: the same relation, exactly for min/max and within the golden tolerance for sum,
for several shard counts and both flush policies (async: β/τ; hybrid: local quiescence).
Both are held to the pure-Python reference evaluator on the golden's facts (the sync engine
in tests/operators/test_golden.py), which also gives the async engine its inputs from lower
strata."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from fixflow.checker import load
from fixflow.checker.ast import Attribute
from fixflow.checker.model import Report
from fixflow.operators.engines import shard_map
from fixflow.operators.engines.async_engine import AsyncEngine, ShardedEngine
from fixflow.operators.engines.async_support import unsupported
from fixflow.operators.engines.base import (
    BufferOptions,
    EngineEnv,
    EngineOptions,
    MraEngine,
    RoundInfo,
)
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.materialize import Materializer
from fixflow.operators.spark_backend import positional
from reference.evaluator import evaluate as reference_evaluate
from reference.golden import GoldenCase, load_golden

from .helpers import edb_frames

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"


def _mra_cases() -> list[tuple[str, str]]:
    cases = []
    for directory in sorted(PROGRAMS.iterdir()):
        if not (directory / "program.dl").is_file():
            continue
        report = load((directory / "program.dl").read_text(), str(directory / "program.dl"))
        for relation in sorted(report.mra):
            cases.append((directory.name, relation))
    return cases


CASES = _mra_cases()


def test_the_corpus_has_mra_relations_the_async_engine_runs() -> None:
    runnable = []
    for name, relation in CASES:
        report = _report(name)
        if unsupported(_program(report, relation)) is None:
            runnable.append(relation)
    assert len(runnable) >= 10, runnable
    assert {name for name, _ in CASES} >= HYBRID, HYBRID - {name for name, _ in CASES}


def _report(name: str) -> Report:
    path = PROGRAMS / name / "program.dl"
    return load(path.read_text(), str(path))


def _program(report: Report, relation: str) -> MraProgram:
    schemas = {r: tuple(a.type for a in attrs) for r, attrs in report.analysis.schemas.items()}
    return MraProgram(report.mra[relation], schemas)


def _positional(frame: DataFrame) -> DataFrame:
    return frame.toDF(*(positional(i) for i in range(len(frame.columns))))


def _keyed(rows: list[tuple], value_pos: int) -> dict[tuple, object]:
    return {tuple(v for i, v in enumerate(r) if i != value_pos): r[value_pos] for r in rows}


def _declared_value_pos(program: MraProgram) -> int:
    """The value's position in result rows, which drop an iteration index."""
    index = program.spec.index_pos
    value = program.spec.value_pos
    return value - 1 if index is not None and index < value else value


ORDER_DEPENDENT = {"powerlog_p6_belief_propagation"}
"""Sums the async engine runs again in round order: this golden's F′ is stochastic (it keeps the
total belief) and its iteration-indexed start has deltas of both signs, so the series of
deltas converges only conditionally and another order of propagation gives another sum."""

CONFIGS = [("async", 3), ("hybrid", 2)]
"""(mode, shards): β/τ flushes across the cuts of three shards on every case, and two
shards exchanging only at local quiescence on the ``HYBRID`` cases (the suite's time budget;
shard counts 1–8 and both modes are drawn by the Hypothesis test)."""

HYBRID = {
    "a3_cost",
    "a3_paths_dag",
    "apsp",
    "dcd_delivery",
    "lca",
    "nexus_sssp",
    "powerlog_p5_katz",
    "viterbi",
    "widest_path",
}
"""The goldens also run in hybrid mode: min and max programs of each shape, and one sum
(Katz). The sum programs with many stages (PageRank, SimRank, Jacobi: minutes each on two
loaded cores) run in async mode only."""


def _configs(name: str) -> list[tuple[str, int]]:
    return CONFIGS if name in HYBRID else CONFIGS[:1]


@pytest.mark.parametrize(
    ("name", "relation", "configs"),
    [
        pytest.param(name, relation, _configs(name), id=f"{name}-{relation}")
        for name, relation in CASES
    ],
)
def test_async_equals_sync(
    spark: SparkSession, name: str, relation: str, configs: list[tuple[str, int]]
) -> None:
    case = load_golden(PROGRAMS / name)
    report = _report(name)
    program = _program(report, relation)
    reason = unsupported(program)
    if reason is not None:
        pytest.skip(f"runs on the sync engine: {reason}")
    frames, expected = _inputs_and_expected(spark, report, case, program)
    for mode, shards in configs:
        if name in ORDER_DEPENDENT:
            actual = _run_sharded(spark, program, frames, mode, shards)
        else:
            actual = _run_async(spark, program, frames, mode, shards)
        assert set(actual) == set(expected), (mode, shards)
        if program.g == "sum":
            worst = max((abs(actual[k] - expected[k]) for k in expected), default=0.0)  # type: ignore[operator]
            assert worst <= max(case.tolerance, 1e-9), f"{mode}/{shards}: off by {worst}"
        else:
            assert actual == expected, (mode, shards)


def _inputs_and_expected(
    spark: SparkSession, report: Report, case: GoldenCase, program: MraProgram
) -> tuple[dict[str, DataFrame], dict[tuple, object]]:
    """The relations the MRA program reads (EDB and lower strata) as positional frames, and
    its relation's rows by key, all from the pure-Python reference evaluator. The sync
    engine equals the same evaluator on every golden (tests/operators/test_golden.py and
    tests/test_reference.py), so the async engine is held to what the sync one is; the
    reference costs no Spark rounds, which a sync evaluation per case did (the suite's
    time)."""
    rows = reference_evaluate(case.program, case.facts)
    schemas = report.analysis.schemas
    reads = [*report.analysis.program.inputs, *_lower_relations(report, program.relation)]
    typed = {rel: [_typed(row, schemas[rel]) for row in rows.get(rel, ())] for rel in reads}
    frames = edb_frames(spark, report, typed)
    index = program.spec.index_pos  # the reference drops an iteration index
    attributes = [a for i, a in enumerate(schemas[program.relation]) if i != index]
    declared = [_typed(row, attributes) for row in _reference_rows(report, rows, program.relation)]
    return frames, _keyed(declared, _declared_value_pos(program))


def _reference_rows(report: Report, rows: dict[str, set[tuple]], relation: str) -> set[tuple]:
    """The reference's rows of ``relation``; of a relation the checker tagged (mutual
    recursion, ``checker.mutual``), the rows of the relations it holds, tagged as it does."""
    members = report.analysis.tagged.get(relation)
    if members is None:
        return rows[relation]
    return {(tag, *row) for tag, member in enumerate(members) for row in rows[member]}


def _lower_relations(report: Report, relation: str) -> list[str]:
    """The IDB relations of the strata evaluated before ``relation``'s."""
    lower: list[str] = []
    for stratum in report.strata:
        if relation in stratum.relations:
            return lower
        lower += stratum.relations
    raise AssertionError(f"{relation} is in no stratum")


def _typed(row: tuple, attributes: Sequence[Attribute]) -> tuple:
    """The reference's row with float columns as floats (it may give an integral value as
    an int, which Spark's DoubleType refuses)."""
    return tuple(float(v) if a.type == "float" else v for v, a in zip(row, attributes, strict=True))


def _run_async(
    spark: SparkSession, program: MraProgram, frames: dict[str, DataFrame], mode: str, shards: int
) -> dict[tuple, object]:
    return _run(AsyncEngine(hybrid=mode == "hybrid"), spark, program, frames, mode, shards)


def _run_sharded(
    spark: SparkSession, program: MraProgram, frames: dict[str, DataFrame], mode: str, shards: int
) -> dict[tuple, object]:
    """Through ``[engine] mode``'s engine, whose bootstrap (``mra_bootstrap``) runs an
    order-dependent sum again in round order (one shard, no priority), still on the async
    engine, which keeps it in round order for its resumes."""
    engine = ShardedEngine(hybrid=mode == "hybrid")
    rows = _run(engine, spark, program, frames, mode, shards)
    ran_on, why = engine.choices[program.relation]
    assert ran_on == mode
    assert "round order" in why and "order of propagation" in why
    assert "gain 1.000" in engine.sharded.order_dependent[program.relation]
    assert engine.sharded.shard_maps[program.relation].shards == 1
    return rows


def _run(
    engine: MraEngine,
    spark: SparkSession,
    program: MraProgram,
    frames: dict[str, DataFrame],
    mode: str,
    shards: int,
) -> dict[tuple, object]:
    options = EngineOptions(
        mode,
        shards,
        priority=True,
        schedule_portion=0.5,
        check_interval_ms=0,
        buffer=BufferOptions(initial=8, interval_ms=50),
    )
    env = EngineEnv(spark, lambda rel, _v: frames[rel], Materializer(spark), 2, options=options)
    rounds: list[RoundInfo] = []
    outcome = engine.bootstrap(program, env, 1000, rounds.append)
    assert not outcome.capped
    assert rounds and rounds[-1].round == outcome.rounds
    index = program.spec.index_pos
    declared = [tuple(v for i, v in enumerate(r) if i != index) for r in outcome.rows.collect()]
    rows = _keyed(declared, _declared_value_pos(program))
    outcome.state.release()
    return rows


@pytest.mark.parametrize(
    ("name", "relation", "rows_per_shard"),
    [("a3_sssp", "sssp", 2_000_000), ("a3_sssp", "sssp", 8)],
)
def test_automatic_shard_count_is_one_shard_until_the_auxiliary_rows_outgrow_it(
    spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    relation: str,
    rows_per_shard: int,
) -> None:
    """``shards = 0``: the auxiliary rows are counted while they are packed for one shard;
    more rows than one shard takes send the run down the sharded path, same result."""
    monkeypatch.setattr(shard_map, "ROWS_PER_SHARD", rows_per_shard)
    case = load_golden(PROGRAMS / name)
    report = _report(name)
    program = _program(report, relation)
    frames, expected = _inputs_and_expected(spark, report, case, program)
    engine = AsyncEngine()
    actual = _run(engine, spark, program, frames, "async", 0)
    shards = engine.shard_maps[relation].shards
    assert shards == 1 if rows_per_shard > 1000 else shards > 1
    assert set(actual) == set(expected)
    for key, value in expected.items():
        assert actual[key] == pytest.approx(value, abs=max(case.tolerance, 1e-9))
