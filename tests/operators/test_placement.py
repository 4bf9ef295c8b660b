"""``placement.place``: where a stratum runs and why, decided before it runs, from its
class, the engine options, the kernels' support and its inputs' sizes (no Spark here)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fixflow.checker import load
from fixflow.checker.model import Report
from fixflow.operators.core import EvalOptions, StratumView
from fixflow.operators.engines.base import EngineOptions
from fixflow.operators.memory_model import auto_local_rows, physical_memory, resolved_local_rows
from fixflow.operators.placement import (
    DRIVER_RULES,
    Placement,
    Sizes,
    admitted_settings,
    place,
    placement_table,
)
from fixflow.operators.thresholds import (
    DRIVER_BYTES_PER_ROW,
    DRIVER_FIXED_BYTES,
    DRIVER_MEMORY_SHARE,
)

SSSP = """
.decl edge(x: number, y: number, w: float)
.input edge
.decl sssp(x: number, d: float)
.output sssp
sssp(X, d) :- X = 1, d = 0.
sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
"""
TC = """
.decl edge(x: number, y: number)
.input edge
.decl tc(x: number, y: number)
.output tc
tc(X, Y) :- edge(X, Y).
tc(X, Z) :- tc(X, Y), edge(Y, Z).
"""
INDEXED = """
.decl edge(x: number, y: number)
.input edge
.decl node(id: number)
.input node
.decl rank(i: number, node: number, r: float)
.output rank
rank(0, X, r) :- node(X), r = 0.0.
rank(i+1, Y, sum[ry]) :- node(Y), ry = 0.15
                       ; rank(i, X, rx), edge(X, Y), ry = 0.85 * rx
                       ; {sum[Δrx] < 0.000001}.
"""
CONCAT = """
.decl name(x: symbol)
.input name
.decl greeting(s: symbol)
.output greeting
greeting(cat("hello ", X)) :- name(X).
"""
PAIR = """
.decl a(x: number, y: number)
.input a
.decl b(x: number, y: number)
.input b
.decl tc(x: number, y: number)
.output tc
tc(X, Y) :- a(X, Y).
tc(X, Z) :- tc(X, Y), b(Y, Z).
"""
SMALL: Sizes = lambda relation: 3  # noqa: E731


def options(mode: str = "hybrid", shards: int = 1, local_rows: int = 100_000) -> EvalOptions:
    engine = EngineOptions(mode=mode, shards=shards)
    return EvalOptions(engine_options=engine, local_rows=local_rows)


def placed(text: str, opts: EvalOptions, sizes: Sizes = SMALL, stratum: int = -1) -> Placement:
    report = load(text)
    return place(StratumView(report, report.strata[stratum], opts), sizes)


def test_a_small_mra_stratum_runs_in_the_driver_on_one_shard() -> None:
    placement = placed(SSSP, options())
    assert placement == Placement("driver", "hybrid", 1, "inputs 3 rows <= local_rows 100000")
    assert placement.describe() == (
        "driver, hybrid engine, 1 shard — inputs 3 rows <= local_rows 100000"
    )


def test_the_sync_engine_and_two_shards_place_mra_on_spark() -> None:
    sync = placed(SSSP, options(mode="sync"))
    assert sync.kind == ("spark", "sync", 0 if sync.shards == 0 else sync.shards)
    assert "sync engine" in sync.why
    two = placed(SSSP, options(shards=2))
    assert two.kind == ("spark", "hybrid", 2) and "2 shards were asked for" in two.why


def test_a_large_input_places_a_loop_in_one_spark_task_and_names_it() -> None:
    placement = placed(TC, options(), sizes=lambda relation: None)
    assert placement.kind == ("task", None, 1)
    assert placement.why == (
        "input `edge` has more than local_rows 100000 rows; its loop runs in one Spark task"
    )


def test_without_task_rows_a_loop_off_the_driver_runs_on_spark() -> None:
    """``task_rows`` 0 turns the task off: a job a round; an ``mra`` stratum off the driver
    runs on its engine's tasks whatever ``task_rows`` says."""
    off = replace(options(local_rows=0), task_rows=0)
    assert placed(TC, off).kind == ("spark", None, 1)
    assert placed(TC, options(local_rows=0)).kind == ("task", None, 1)
    assert placed(SSSP, options(local_rows=0)).kind == ("spark", "hybrid", 1)


def test_a_loop_the_kernels_cannot_run_stays_on_spark() -> None:
    """A recursive plan with a string functor: neither the driver nor a task runs it."""
    names = """
.decl name(x: symbol)
.input name
.decl long(s: symbol)
.output long
long(X) :- name(X).
long(cat(X, "!")) :- long(X), strlen(X) < 5.
"""
    placement = placed(names, options())
    assert placement.where == "spark", placement


def test_inputs_count_together_against_local_rows() -> None:
    """The memory model counts every input row a stratum holds: two inputs within the limit
    each but not together go to Spark."""
    sizes: Sizes = lambda relation: 60_000  # noqa: E731
    placement = placed(TC, options(), sizes=sizes)
    assert placement.where == "driver"
    pair = placed(PAIR, options(), sizes=sizes)
    assert pair.kind == ("task", None, 1)
    assert pair.why.startswith("inputs 120000 rows > local_rows 100000;")


def test_auto_local_rows_is_half_the_memory_at_the_bytes_a_row_of_the_model() -> None:
    gib = 1 << 30
    assert auto_local_rows(24 * gib) == 116_000_000  # (12 GiB - 0.6 GB) / 105 B, in millions
    assert auto_local_rows(gib // 4) == 1_000_000  # never below a million
    assert resolved_local_rows("auto") == auto_local_rows()
    assert resolved_local_rows(0) == 0 and resolved_local_rows(7) == 7
    needed = DRIVER_FIXED_BYTES + DRIVER_BYTES_PER_ROW * auto_local_rows()
    assert needed <= DRIVER_MEMORY_SHARE * physical_memory() or auto_local_rows() == 1_000_000


def test_local_rows_zero_places_everything_off_the_driver() -> None:
    placement = placed(TC, options(local_rows=0))
    assert placement.where == "task" and "local_rows is 0" in placement.why
    assert placed(SSSP, options(local_rows=0)).where == "spark"


def test_an_iteration_indexed_stratum_runs_on_spark() -> None:
    placement = placed(INDEXED, options())
    assert placement.where == "spark" and "iteration-indexed" in placement.why


def test_a_plan_without_kernels_runs_on_spark_and_says_which() -> None:
    placement = placed(CONCAT, options())
    assert placement.where == "spark" and "cat" in placement.why


@pytest.mark.parametrize("text", [SSSP, TC, INDEXED, CONCAT])
def test_each_refusal_comes_from_the_rule_table(text: str) -> None:
    """A Spark placement's reason is the first ``DRIVER_RULES`` rule that refuses."""
    report: Report = load(text)
    view = StratumView(report, report.strata[-1], options())
    reasons = [rule(view) for _, _, rule in DRIVER_RULES]
    first = next((r for r in reasons if r is not None), None)
    placement = place(view, SMALL)
    assert (placement.where == "driver") == (first is None)
    if first is not None:
        assert placement.why == first


def test_a_program_without_mra_admits_the_driver_and_spark_only() -> None:
    names = [s.name for s in admitted_settings(load(TC), EvalOptions())]
    assert names == ["spark-sync", "driver"]


def test_an_mra_program_admits_every_placement() -> None:
    names = [s.name for s in admitted_settings(load(SSSP), EvalOptions())]
    assert names == ["spark-sync", "spark-sharded-1", "spark-sharded-2", "driver"]


def test_a_program_the_kernels_cannot_run_admits_spark_only() -> None:
    assert [s.name for s in admitted_settings(load(CONCAT), EvalOptions())] == ["spark-sync"]


def test_the_table_lists_every_rule_in_order() -> None:
    table = placement_table().splitlines()
    conditions = [condition for condition, _, _ in DRIVER_RULES]
    assert [row.split(" | ")[0].lstrip("| ") for row in table[2 : 2 + len(conditions)]] == [
        c for c in conditions
    ]
    assert replace(placed(TC, options()), why="").kind == ("driver", None, 1)


def test_the_architecture_document_shows_the_generated_table() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    begin, end = "<!-- placement-table:begin -->\n", "<!-- placement-table:end -->"
    shown = doc[doc.index(begin) + len(begin) : doc.index(end)]
    assert shown == placement_table() + "\n", "regenerate it from placement.placement_table()"
