"""The async and hybrid engines under random graphs, corpus programs and shard counts 1–8:
a Maintainer on the engine bootstraps, then applies insert-only epochs (resumed on the same
engine, ``update:mra-improve`` / ``update:mra-correction``) and a mixed one; after every
epoch its relations equal the pure-Python oracle's evaluation of the current facts —
exactly for min/max, within the termination tolerance for PageRank."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from fixflow.operators.core import EvalOptions
from fixflow.operators.engines.base import BufferOptions, EngineOptions

from .test_maintain import SSSP, Facts, program, run_epochs, strategies
from .test_maintain_property import NODES, edges, steps_of, weight

pytestmark = pytest.mark.slow

SETTINGS = settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

engines = st.builds(
    lambda mode, shards, beta, priority: EvalOptions(
        local_rows=0,  # the engines on Spark
        engine_options=EngineOptions(
            mode,
            shards,
            priority=priority,
            check_interval_ms=1,
            buffer=BufferOptions(initial=beta, interval_ms=20),
        ),
    ),
    st.sampled_from(["async", "hybrid"]),
    st.integers(1, 8),
    st.sampled_from([1, 3, 1024]),
    st.booleans(),
)
WIDEST = """
.decl edge(src: number, dst: number, c: float)
.input edge
.decl widest(node: number, c: float)
.output widest
widest(X, c) :- X = 1, c = 1000.0.
widest(Y, max[c]) :- widest(X, cx), edge(X, Y, w), c = min(cx, w).
"""
"""Widest path (bottleneck capacity from node 1): max over min, an MRA program."""

inserts = st.lists(st.tuples(edges, st.just(frozenset())), min_size=1, max_size=2)


def _updates(epochs: list) -> set[str]:
    return {s for e in epochs for s in strategies(e).values() if s.startswith("update:mra")}


@SETTINGS
@given(initial=edges, changes=inserts, options=engines)
def test_sssp_on_the_sharded_engines(spark: SparkSession, initial, changes, options) -> None:
    def row(e: tuple[int, int]) -> tuple:
        return (e[0], e[1], weight(e))

    facts: Facts = {"warc": [row(e) for e in sorted(initial)]}
    steps = steps_of(initial, changes, "warc", row)
    epochs = run_epochs(spark, SSSP, facts, steps, engine=False, options=options)
    assert _updates(epochs) <= {"update:mra-improve"}


@SETTINGS
@given(initial=edges, changes=inserts, options=engines)
def test_cc_on_the_sharded_engines(spark: SparkSession, initial, changes, options) -> None:
    facts: Facts = {"arc": sorted(initial)}
    steps = steps_of(initial, changes, "arc", tuple)
    run_epochs(spark, program("nexus_cc"), facts, steps, engine=False, options=options)


@SETTINGS
@given(initial=edges, changes=inserts, options=engines)
def test_widest_path_on_the_sharded_engines(spark: SparkSession, initial, changes, options) -> None:
    def row(e: tuple[int, int]) -> tuple:
        return (e[0], e[1], weight(e) / 10.0)

    facts: Facts = {"edge": [row(e) for e in sorted(initial)]}
    steps = steps_of(initial, changes, "edge", row)
    run_epochs(spark, WIDEST, facts, steps, engine=False, options=options)


@SETTINGS
@given(
    initial=edges,
    changes=st.lists(st.tuples(edges, edges), min_size=1, max_size=2),
    options=engines,
)
def test_pagerank_on_the_sharded_engines(spark: SparkSession, initial, changes, options) -> None:
    facts: Facts = {"edge": sorted(initial), "node": [(n,) for n in range(1, NODES + 1)]}
    steps = steps_of(initial, changes, "edge", tuple)
    run_epochs(spark, program("a3_pagerank"), facts, steps, tol=1e-4, engine=False, options=options)
