"""The maintenance invariant under random epochs: after every epoch of random insertions
and deletions on a tiny graph, the Maintainer's relations equal a fresh evaluation of the
current facts — the oracle's, a from-scratch evaluation (the engine's agreement with the
oracle is tested elsewhere; here every Spark job goes to the Maintainer) — exactly for
fixpoint programs, within the termination tolerance for PageRank."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from .test_maintain import SSSP, TC_AND_DEGREE, Facts, program, run_epochs

NODES = 5
Edge = tuple[int, int]

edges = st.frozensets(
    st.tuples(st.integers(1, NODES), st.integers(1, NODES)).filter(lambda e: e[0] != e[1]),
    max_size=8,
)
epochs = st.lists(st.tuples(edges, edges), min_size=2, max_size=2)
"""Per epoch: edges to insert (those absent) and edges to delete (those present)."""

SETTINGS = settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def weight(edge: Edge) -> float:
    return float((edge[0] * 7 + edge[1] * 3) % 5 + 1)


def steps_of(
    initial: frozenset[Edge], changes: list[tuple[frozenset[Edge], frozenset[Edge]]], rel: str, row
) -> list:
    """Net (inserts, deletes) steps over ``rel``: inserted edges absent, deleted present."""
    current, steps = set(initial), []
    for insert, delete in changes:
        added = sorted(insert - current)
        removed = sorted((delete & current) - set(added))
        current = (current | set(added)) - set(removed)
        steps.append(({rel: [row(e) for e in added]}, {rel: [row(e) for e in removed]}))
    return steps


@SETTINGS
@given(initial=edges, changes=epochs)
def test_sssp_invariant(spark: SparkSession, initial, changes) -> None:
    def row(e: Edge) -> tuple:
        return (e[0], e[1], weight(e))

    facts: Facts = {"warc": [row(e) for e in sorted(initial)]}
    run_epochs(spark, SSSP, facts, steps_of(initial, changes, "warc", row), engine=False)


@SETTINGS
@given(initial=edges, changes=epochs)
def test_cc_invariant(spark: SparkSession, initial, changes) -> None:
    facts: Facts = {"arc": sorted(initial)}
    steps = steps_of(initial, changes, "arc", tuple)
    run_epochs(spark, program("nexus_cc"), facts, steps, engine=False)


@SETTINGS
@given(initial=edges, changes=epochs)
def test_tc_invariant(spark: SparkSession, initial, changes) -> None:
    facts: Facts = {"arc": sorted(initial)}
    steps = steps_of(initial, changes, "arc", tuple)
    run_epochs(spark, TC_AND_DEGREE, facts, steps, engine=False)


@SETTINGS
@given(initial=edges, changes=epochs)
def test_pagerank_invariant(spark: SparkSession, initial, changes) -> None:
    facts: Facts = {
        "edge": sorted(initial),
        "node": [(n,) for n in range(1, NODES + 1)],
    }
    steps = steps_of(initial, changes, "edge", tuple)
    run_epochs(spark, program("a3_pagerank"), facts, steps, tol=1e-4, engine=False)


@SETTINGS
@given(initial=edges, changes=epochs)
def test_attend_invariant(spark: SparkSession, initial, changes) -> None:
    """Mutual recursion through a count (``update:dred-groups``): organizers 1 and 2, random
    friendships; attendance can collapse and return transitively."""
    facts: Facts = {"organizer": [(1,), (2,)], "friend": sorted(initial)}
    steps = steps_of(initial, changes, "friend", tuple)
    epochs_run = run_epochs(spark, program("dcd_attend"), facts, steps, engine=False)
    for epoch in epochs_run:
        assert {s.strategy for s in epoch.strata} <= {"update:dred-groups", "unchanged"}
