"""Small strata in the driver (``fixflow.operators.driver``): the numpy kernels of anti-joins
and aggregates agree with Spark SQL (nulls included), a local stratum runs no Spark job,
and whatever the driver cannot run, or outgrows the limit, runs on Spark with the same
results. Every golden program is also evaluated with the local path on
(``test_golden_program_in_the_driver``), and those with `mra` strata with the hybrid
engine's loop in the driver (``test_mra_golden_program_in_the_driver``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from fixflow.checker import load
from fixflow.checker.model import Report, Stratum
from fixflow.operators.driver import stratum as driver_stratum
from fixflow.operators.driver.stratum import LocalStratum
from fixflow.operators.engines.async_support import unsupported
from fixflow.operators.engines.base import EngineOptions
from fixflow.operators.engines.batches import Batch
from fixflow.operators.engines.joins import anti_join
from fixflow.operators.engines.kernels import Kernel
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.evaluate import EvalOptions, evaluate_with_stats
from fixflow.operators.plan import Aggregate, AntiJoin, Scan
from fixflow.operators.spark_backend import SparkBackend, relation_struct
from reference.golden import compare_rows, load_golden

from .helpers import edb_frames, report_of, run
from .test_golden import CASES, PROGRAMS
from .test_strategies import APSP as APSP_SQUARED

LOCAL = 100_000

TC = """
.decl edge(x: number, y: number)
.input edge
.decl path(x: number, y: number)
.output path
path(x, y) :- edge(x, y).
path(x, z) :- path(x, y), edge(y, z).
"""

CHAIN = [(i, i + 1) for i in range(30)]


def _batch(rows: list[tuple[object, ...]], types: list[str]) -> Batch:
    """Positional columns c0.. with None as null."""
    batch = Batch(len(rows))
    for i, type_ in enumerate(types):
        values = [r[i] for r in rows]
        filler = "" if type_ == "symbol" else 0
        dtype = {"number": np.int64, "float": np.float64, "symbol": object}[type_]
        batch.cols[f"c{i}"] = np.array([filler if v is None else v for v in values], dtype=dtype)
        batch.valid[f"c{i}"] = np.array([v is not None for v in values], dtype=bool)
    return batch


def _rows(batch: Batch, names: list[str]) -> list[tuple[object, ...]]:
    columns = [
        [v if ok else None for v, ok in zip(batch.cols[n], batch.mask(n), strict=True)]
        for n in names
    ]
    return sorted(
        (
            tuple(v.item() if hasattr(v, "item") else v for v in row)
            for row in zip(*columns, strict=True)
        ),
        key=repr,
    )


GROUPED = [(1, 5), (1, None), (2, None), (None, 3), (None, 4), (3, 7), (3, 2)]


@pytest.mark.parametrize("func", ["min", "max", "sum", "count", "mean"])
@pytest.mark.parametrize("keys", [("k",), ()])
@pytest.mark.parametrize("rows", [GROUPED, []], ids=["rows", "empty"])
def test_aggregate_kernel_matches_spark(
    spark: SparkSession, func: str, keys: tuple[str, ...], rows: list[tuple[object, ...]]
) -> None:
    types = ["number", "number"]
    scan = Scan("r", "full", ("k", "v"), ("number", "number"))
    out_type = "float" if func == "mean" else "number"
    plan = Aggregate(scan, keys, func, "v", "out", out_type)  # type: ignore[arg-type]
    local = Kernel(plan).run({("r", "full"): _batch(rows, types)})
    frame = spark.createDataFrame(rows, relation_struct(types))  # type: ignore[arg-type]
    on_spark = SparkBackend(spark, lambda _r, _v: frame).run(plan)
    expected = sorted((tuple(r) for r in on_spark.collect()), key=repr)
    assert _rows(local, [*keys, "out"]) == expected


def test_count_of_rows_without_keys_over_nothing_is_zero(spark: SparkSession) -> None:
    scan = Scan("r", "full", ("k",), ("number",))
    plan = Aggregate(scan, (), "count", None, "n", "number")
    assert _rows(Kernel(plan).run({("r", "full"): _batch([], ["number"])}), ["n"]) == [(0,)]


def test_anti_join_kernel_matches_spark(spark: SparkSession) -> None:
    left_rows = [(1, "a"), (2, "b"), (None, "c"), (4, None)]
    right_rows = [(1, "a"), (None, "c"), (4, None), (2, "x")]
    types = ["number", "symbol"]
    frames = {
        "l": spark.createDataFrame(left_rows, relation_struct(types)),  # type: ignore[arg-type]
        "r": spark.createDataFrame(right_rows, relation_struct(types)),  # type: ignore[arg-type]
    }
    for on in [("a", "b"), ("a",), ()]:
        left = Scan("l", "full", ("a", "b"), ("number", "symbol"))
        right = Scan("r", "full", ("a", "b"), ("number", "symbol"))
        plan = AntiJoin(left, right, on)
        sources = {
            ("l", "full"): _batch(left_rows, types),
            ("r", "full"): _batch(right_rows, types),
        }
        local = Kernel(plan).run(sources)
        on_spark = SparkBackend(spark, lambda rel, _v: frames[rel]).run(plan)
        expected = sorted((tuple(r) for r in on_spark.collect()), key=repr)
        assert _rows(local, ["a", "b"]) == expected, on


def test_anti_join_on_no_columns() -> None:
    left = _batch([(1,), (2,)], ["number"])
    assert anti_join(left, _batch([], ["number"]), ()).n == 2
    assert anti_join(left, _batch([(5,)], ["number"]), ()).n == 0


def test_a_local_stratum_runs_no_spark_job_and_one_in_a_task(spark: SparkSession) -> None:
    local, in_driver = run(spark, TC, {"edge": CHAIN}, local_rows=LOCAL)
    on_spark, spark_run = run(spark, TC, {"edge": CHAIN})
    assert local == on_spark
    assert len(local["path"]) == 31 * 30 // 2
    (stats,) = in_driver.stats
    assert stats.local and stats.jobs == 0 and stats.rounds == 31
    assert not spark_run.stats[0].local and spark_run.stats[0].jobs >= 30
    in_task, task_run = run(spark, TC, {"edge": CHAIN}, task_rows=1_000)
    assert in_task == local
    (stats,) = task_run.stats
    assert stats.placement is not None and stats.placement.where == "task"
    assert stats.rounds == 31 and stats.jobs <= 3  # the task's job and the stored relation


def test_arrow_inputs_stay_in_the_driver(spark: SparkSession) -> None:
    report = report_of(TC)
    edge = pa.table({"c0": [x for x, _ in CHAIN], "c1": [y for _, y in CHAIN]})
    evaluation = evaluate_with_stats(report, {"edge": edge}, spark, EvalOptions(local_rows=LOCAL))
    assert evaluation.stats[0].local
    table = evaluation.tables["path"]
    assert table.num_rows == 465 and set(table.column_names) == {"c0", "c1"}
    assert {tuple(r) for r in evaluation.relations["path"].collect()} == set(
        zip(table.column("c0").to_pylist(), table.column("c1").to_pylist(), strict=True)
    )


def test_a_stratum_that_outgrows_the_limit_continues_on_spark(spark: SparkSession) -> None:
    """The chain's paths pass 100 rows in round 4: the semi-naive loop goes on from there
    on Spark (its rows and last delta handed over), with the rounds of a driver-only run."""
    rows, evaluation = run(spark, TC, {"edge": CHAIN}, local_rows=100)
    (stats,) = evaluation.stats
    assert stats.placement is not None and not stats.local and stats.jobs > 0
    assert "continued on Spark after 4 rounds" in stats.placement.why
    assert len(rows["path"]) == 465 and stats.rounds == 31


def test_what_the_kernels_lack_runs_on_spark(spark: SparkSession) -> None:
    text = """
.decl name(x: symbol)
.input name
.decl long(x: symbol, n: number)
.output long
long(x, strlen(x)) :- name(x), strlen(x) > 2.
.decl short(x: symbol)
.output short
short(x) :- name(x), !long(x, _).
"""
    rows, evaluation = run(spark, text, {"name": [("ab",), ("abcd",), ("xyz",)]}, local_rows=LOCAL)
    assert rows["long"] == {("abcd", 4), ("xyz", 3)}
    assert rows["short"] == {("ab",)}
    by_relation = {s.relations: (s.local, s.jobs) for s in evaluation.stats}
    assert by_relation[("long",)][0] is False and by_relation[("long",)][1] > 0
    assert by_relation[("short",)] == (True, 1)  # one job collects `long`, then the driver


def _driver_cases() -> list[str]:
    """The golden programs whose strata are all non-recursive, ``set`` or min/max
    ``aggregate-seminaive`` (non-linear and mutual recursion): the ones the driver runs
    wholly (the others' MRA strata run on Spark, as test_golden checks)."""
    local = []
    for name in CASES:
        case = load_golden(PROGRAMS / name)
        report = load(case.source, name)
        if all(_semi_naive_in_the_driver(report, s) for s in report.strata):
            local.append(name)
    return local


def _semi_naive_in_the_driver(report: Report, stratum: Stratum) -> bool:
    if stratum.eval_class in (None, "set"):
        return True
    entries = [report.catalog[r] for r in stratum.relations]
    return stratum.eval_class == "aggregate-seminaive" and all(
        e.aggregate in (None, "min", "max") and e.index_pos is None for e in entries
    )


DRIVER_CASES = _driver_cases()


def test_some_golden_programs_run_in_the_driver() -> None:
    assert len(DRIVER_CASES) >= 5, DRIVER_CASES


@pytest.mark.parametrize("name", DRIVER_CASES)
def test_golden_program_in_the_driver(spark: SparkSession, name: str) -> None:
    case = load_golden(PROGRAMS / name)
    report = load(case.source, str(case.directory / "program.dl"))
    evaluation = evaluate_with_stats(
        report, edb_frames(spark, report, case.facts), spark, EvalOptions(local_rows=LOCAL)
    )
    assert all(s.local and s.jobs == 0 for s in evaluation.stats), evaluation.stats
    for relation, expected in case.expected.items():
        actual = [tuple(row) for row in evaluation.relations[relation].collect()]
        assert compare_rows(actual, expected, case.tolerance) == [], f"{relation} vs expected"


def _driver_runs_mra(name: str) -> bool:
    """Every stratum of the golden is non-recursive, `set`, or an `mra` relation whose
    plans compile to kernels and that is not iteration-indexed (its start runs on Spark)."""
    report = load(load_golden(PROGRAMS / name).source, name)
    if any(s.eval_class not in (None, "set", "mra") for s in report.strata):
        return False
    schemas = {r: tuple(a.type for a in attrs) for r, attrs in report.analysis.schemas.items()}
    for spec in report.mra.values():
        program = MraProgram(spec, schemas)
        if program.indexed or unsupported(program) is not None:
            return False
    return bool(report.mra)


MRA_DRIVER_CASES = [name for name in CASES if _driver_runs_mra(name)]
HYBRID = EngineOptions(mode="hybrid")


def test_some_mra_golden_programs_run_in_the_driver() -> None:
    assert len(MRA_DRIVER_CASES) >= 8, MRA_DRIVER_CASES


@pytest.mark.parametrize("name", MRA_DRIVER_CASES)
def test_mra_golden_program_in_the_driver(spark: SparkSession, name: str) -> None:
    """With the hybrid engine, a small `mra` stratum runs its one shard's loop in the
    driver: no Spark job, the golden's expected rows (within its tolerance for sums)."""
    case = load_golden(PROGRAMS / name)
    report = load(case.source, str(case.directory / "program.dl"))
    options = EvalOptions(local_rows=LOCAL, engine_options=HYBRID)
    evaluation = evaluate_with_stats(report, edb_frames(spark, report, case.facts), spark, options)
    assert all(s.local and s.jobs == 0 for s in evaluation.stats), evaluation.stats
    for relation, expected in case.expected.items():
        actual = [tuple(row) for row in evaluation.relations[relation].collect()]
        assert compare_rows(actual, expected, case.tolerance) == [], f"{relation} vs expected"


def test_sync_and_asked_for_shards_keep_mra_on_spark(spark: SparkSession) -> None:
    """`--engine sync` means rounds on Spark, and `--shards 2` shards on Spark: neither
    runs in the driver, and both give the driver's rows."""
    name = MRA_DRIVER_CASES[0]
    case = load_golden(PROGRAMS / name)
    report = load(case.source, name)
    results = {}
    for engine in (HYBRID, EngineOptions(mode="sync"), EngineOptions(mode="hybrid", shards=2)):
        options = EvalOptions(local_rows=LOCAL, engine_options=engine)
        evaluation = evaluate_with_stats(
            report, edb_frames(spark, report, case.facts), spark, options
        )
        mra = [s for s in evaluation.stats if set(s.relations) & set(report.mra)]
        assert all(s.local == (engine is HYBRID) for s in mra), (engine, evaluation.stats)
        results[engine] = {
            r: sorted(tuple(row) for row in evaluation.relations[r].collect())
            for r in case.expected
        }
    first, *others = results.values()
    for other in others:
        for relation in case.expected:
            assert compare_rows(other[relation], first[relation], case.tolerance) == []


APSP = """
.decl edge(x: number, y: number)
.input edge
.decl path(x: number, y: number, d: number)
.output path
path(x, y, 1) :- edge(x, y).
path(x, z, min[d]) :- path(x, y, dy), edge(y, z), d = dy + 1.
"""


def test_an_mra_stratum_that_outgrows_the_limit_runs_on_spark(spark: SparkSession) -> None:
    """30 chain edges fit a limit of 100 rows, their 465 shortest paths do not: the loop
    stops in the driver and the stratum runs on Spark, with the same rows."""
    small, in_driver = run(spark, APSP, {"edge": CHAIN}, local_rows=LOCAL, engine_options=HYBRID)
    grown, on_spark = run(spark, APSP, {"edge": CHAIN}, local_rows=100, engine_options=HYBRID)
    assert small == grown and len(grown["path"]) == 465
    assert in_driver.stats[0].local and in_driver.stats[0].jobs == 0
    assert not on_spark.stats[0].local and on_spark.stats[0].jobs > 0


TC_SQUARED = """
.decl edge(x: number, y: number, w: number)
.input edge
.decl path(x: number, y: number)
.output path
path(x, y) :- edge(x, y, _).
path(x, y) :- path(x, z), path(z, y).
"""


def _shortest(edges: list[tuple[int, int, int]], nodes: int) -> dict[tuple[int, int], int]:
    """Floyd–Warshall over paths of at least one edge: the oracle of ``APSP_SQUARED``."""
    inf = 10**9
    best = [[inf] * nodes for _ in range(nodes)]
    for x, y, w in edges:
        best[x][y] = min(best[x][y], w)
    for z in range(nodes):
        for x in range(nodes):
            for y in range(nodes):
                best[x][y] = min(best[x][y], best[x][z] + best[z][y])
    return {(x, y): best[x][y] for x in range(nodes) for y in range(nodes) if best[x][y] < inf}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_round_reads_a_large_delta_in_slices_with_the_same_rows(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """With slices of a few candidates, a non-linear min recursion and a non-linear set
    recursion read each round's delta in many slices, hold a fraction of the rows at once,
    and give what the oracle does."""
    rng = np.random.default_rng(seed)
    nodes = 24
    edges = sorted(
        {(int(x), int(y), int(rng.integers(1, 9))) for x, y in rng.integers(0, nodes, (60, 2))}
    )
    shortest = _shortest(edges, nodes)
    widest: dict[bool, int] = {}
    for sliced in (False, True):
        if sliced:
            monkeypatch.setattr(driver_stratum, "SLICE_CANDIDATES", 40)
            monkeypatch.setattr(driver_stratum, "FIRST_SLICE", 2)
        seen = _widest_derivations(monkeypatch)
        weighted = [(x, y, float(w)) for x, y, w in edges]
        rows, evaluation = run(spark, APSP_SQUARED, {"warc": weighted}, local_rows=LOCAL)
        assert evaluation.stats[0].local
        assert {(x, y): d for x, y, d in rows["path"]} == shortest
        closure, _ = run(spark, TC_SQUARED, {"edge": edges}, local_rows=LOCAL)
        assert closure["path"] == set(shortest)
        widest[sliced] = max(seen)
    assert widest[True] * 4 < widest[False]


def _widest_derivations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The most rows a kernel run held, per ``LocalStratum.derive`` from now on."""
    seen: list[int] = []
    derive = LocalStratum.derive

    def recorded(self: LocalStratum, relation: str, plans: object) -> Batch:
        rows = derive(self, relation, plans)  # type: ignore[arg-type]
        seen.append(self.widest)
        return rows

    monkeypatch.setattr(LocalStratum, "derive", recorded)
    return seen
