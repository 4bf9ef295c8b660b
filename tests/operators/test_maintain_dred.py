"""Deletions without re-evaluation: epochs that delete (and mix insertions with deletions)
in ``set`` strata (``update:dred``), ``aggregate-seminaive`` strata (``update:dred-groups``)
and non-recursive aggregates (``update:affected-groups``). ``run_epochs`` checks every epoch
against the oracle and the last one against a fresh Spark evaluation; each test also checks
that the stratum was updated, not bootstrapped."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from fixflow.operators.maintain.elastic import ElasticSwitch

from .test_maintain import Facts, program, run_epochs, strategies

EVEN_ODD = """
.decl arc(src: number, dst: number)
.input arc
.decl odd(x: number, y: number)
.output odd
.decl even(x: number, y: number)
.output even
odd(X, Y) :- arc(X, Y).
even(X, Y) :- odd(X, Z), arc(Z, Y).
odd(X, Y) :- even(X, Z), arc(Z, Y).
"""

SALES = """
.decl sale(shop: number, item: number, amount: number)
.input sale
.decl items(shop: number, n: number)
.output items
.decl revenue(shop: number, total: number)
.output revenue
.decl shops(n: number)
.output shops
items(S, count[I]) :- sale(S, I, _).
revenue(S, sum[A]) :- sale(S, _, A).
shops(count[S]) :- sale(S, _, _).
"""


def test_tc_break_cycle_and_bridge(spark: SparkSession) -> None:
    """A cycle 1→2→3→1 with a tail 3→4 bridged to 5→6: deleting 3→1 breaks the cycle
    (its pairs are over-deleted and most re-derived); then, in one epoch, deleting the
    bridge 4→5 splits reachability while insertions add paths."""
    epochs = run_epochs(
        spark,
        program("dcd_tc"),
        {"arc": [(1, 2), (2, 3), (3, 1), (3, 4), (4, 5), (5, 6)]},
        [({}, {"arc": [(3, 1)]}), ({"arc": [(6, 1), (2, 4)]}, {"arc": [(4, 5), (1, 2)]})],
    )
    for epoch in epochs:
        assert strategies(epoch) == {"tc": "update:dred"}
    assert epochs[0].strata[0].rounds >= 3  # over-delete rounds, then the continuation


def test_sg_deletions(spark: SparkSession) -> None:
    tree = [(1, 2), (1, 3), (2, 4), (2, 5), (3, 6), (3, 7)]
    epochs = run_epochs(
        spark,
        program("nexus_sg"),
        {"arc": tree},
        [({"arc": [(8, 3), (8, 2)]}, {"arc": [(1, 3), (2, 5)]})],
        engine=False,
    )
    assert strategies(epochs[0]) == {"sg": "update:dred"}


def test_reachability_deletions(spark: SparkSession) -> None:
    """Two paths from 1 to 4: deleting one keeps 4 (re-derived), deleting the other loses
    4 and what only it reaches."""
    epochs = run_epochs(
        spark,
        program("nexus_reachability"),
        {"arc": [(1, 2), (2, 4), (1, 3), (3, 4), (4, 5), (5, 4)]},
        [({}, {"arc": [(2, 4)]}), ({"arc": [(5, 6)]}, {"arc": [(3, 4)]})],
        engine=False,
    )
    assert [strategies(e) for e in epochs] == [{"reach": "update:dred"}] * 2


def test_mutually_recursive_set_relations(spark: SparkSession) -> None:
    epochs = run_epochs(
        spark,
        EVEN_ODD,
        {"arc": [(1, 2), (2, 3), (3, 4), (4, 1), (2, 5)]},
        [({"arc": [(5, 1)]}, {"arc": [(4, 1), (2, 3)]})],
        engine=False,
    )
    for epoch in epochs:
        assert strategies(epoch) == {"odd": "update:dred", "even": "update:dred"}


def attend_facts() -> Facts:
    """Organizers 1, 2, 3; 4 has three attending friends, 5 needs 4, 6 needs 5."""
    friends = [(4, 1), (4, 2), (4, 3), (5, 1), (5, 2), (5, 4), (6, 4), (6, 5), (6, 1)]
    return {"organizer": [(1,), (2,), (3,)], "friend": friends}


def test_attend_collapses_transitively(spark: SparkSession) -> None:
    """Deleting organizer 3 drops 4's count below 3, and with it 5 and 6; a new organizer
    who is 4's friend brings them back (an insert-only epoch is an update too)."""
    epochs = run_epochs(
        spark,
        program("dcd_attend"),
        attend_facts(),
        [({}, {"organizer": [(3,)]}), ({"friend": [(4, 7)], "organizer": [(7,)]}, {})],
        engine=False,
    )
    for epoch in epochs:
        assert strategies(epoch) == {"attend": "update:dred-groups", "cnt": "update:dred-groups"}


def test_party_friend_deletion(spark: SparkSession) -> None:
    facts: Facts = {
        "sure": [(1,), (2,), (3,)],
        "friend": [(4, 1), (4, 2), (4, 3), (5, 4), (5, 1), (5, 2)],
    }
    steps = [({}, {"friend": [(4, 2)]})]
    epochs = run_epochs(spark, program("a3_party"), facts, steps, engine=False)
    assert strategies(epochs[0]) == {
        "coming": "update:dred-groups",
        "cntComing": "update:dred-groups",
    }


def test_max_probability_path_deletion(spark: SparkSession) -> None:
    """Non-linear max: the best path 1→2→4 loses an arc; 1→3→4 gives the new value."""
    net = [(1, 2, 0.9), (2, 4, 0.9), (1, 3, 0.5), (3, 4, 0.5), (4, 5, 0.8)]
    epochs = run_epochs(
        spark,
        program("a3_max_prob_path"),
        {"net": net},
        [({}, {"net": [(2, 4, 0.9)]}), ({"net": [(3, 1, 0.5)]}, {"net": [(4, 5, 0.8)]})],
        tol=1e-9,
        engine=False,
    )
    assert [strategies(e) for e in epochs] == [{"reach": "update:dred-groups"}] * 2


def test_galaxy_head_expression(spark: SparkSession) -> None:
    """``galaxies(t+1, gid2)``: a head key that is not a variable."""
    particles = [(1, 1, 1), (1, 2, 2), (2, 1, 1), (2, 2, 2), (3, 2, 2), (3, 3, 3), (4, 2, 2)]
    particles += [(4, 3, 3), (5, 3, 3), (5, 4, 4)]
    epochs = run_epochs(
        spark,
        program("a3_galaxy"),
        {"galaxies_seed": [(1,)], "particles": particles},
        [({"particles": [(6, 3, 3), (6, 4, 4)]}, {"particles": [(4, 3, 3)]})],
        engine=False,
    )
    for epoch in epochs:
        assert set(strategies(epoch).values()) == {"update:dred-groups"}


def test_nonrecursive_count_and_sum_deletions(spark: SparkSession) -> None:
    """Groups shrink, vanish and appear; the one-group count too."""
    sales = [(1, 10, 5), (1, 11, 7), (2, 10, 3), (3, 12, 4)]
    epochs = run_epochs(
        spark,
        SALES,
        {"sale": sales},
        [({"sale": [(4, 13, 1)]}, {"sale": [(1, 11, 7), (3, 12, 4), (2, 10, 3)]})],
        engine=False,
    )
    for epoch in epochs:
        assert set(strategies(epoch).values()) == {"update:affected-groups"}


def test_elastic_switch_abandons_dred(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the elastic switch sends a deletion to the bootstrap (here its deadline: with
    switch_fraction 0 its prediction would fire before the update starts)."""
    monkeypatch.setattr(ElasticSwitch, "outgrown", lambda self, stratum, changes: "")
    epochs = run_epochs(
        spark,
        program("nexus_reachability"),
        {"arc": [(1, 2), (2, 3)]},
        [({}, {"arc": [(2, 3)]})],
        switch_fraction=0.0,
        engine=False,
    )
    assert strategies(epochs[0]) == {"reach": "bootstrap:switched"}
    assert "update:dred abandoned" in epochs[0].strata[0].note
