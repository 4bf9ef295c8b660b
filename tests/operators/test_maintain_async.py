"""Async consistency in the Maintainer: an incremental MRA update runs at most
``round_budget`` rounds per epoch and carries the deltas still pending into the next epoch.

While deltas are pending the epoch says so (``provisional``) and the rows need not be the
fixpoint yet; epochs without input carry them on, and once nothing is pending the rows equal
a fresh evaluation of the current facts (within the termination clause's tolerance)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from fixflow.operators.change import by_relation
from fixflow.operators.maintain import Epoch, Maintainer

from .helpers import ON_SPARK, Row, edb_frames, report_of
from .test_maintain import SSSP, Facts, check_current, declared, program, strategies

PATH = [(i, i + 1, 10.0) for i in range(1, 12)]
"""A 12-node path with heavy arcs: a light shortcut from node 1 improves every later node,
one more hop per round."""


def _maintainer(spark: SparkSession, text: str, facts: Facts, budget: int) -> Maintainer:
    report = report_of(text)
    maintainer = Maintainer(report, spark, ON_SPARK, switch_fraction=1e6, round_budget=budget)
    maintainer.load(declared(report, edb_frames(spark, report, facts)))
    return maintainer


def _apply(spark: SparkSession, maintainer: Maintainer, inserts: dict[str, list[Row]]) -> Epoch:
    report = maintainer.report
    return maintainer.apply(
        by_relation(
            declared(report, edb_frames(spark, report, inserts)),
            declared(report, edb_frames(spark, report, {})),
        )
    )


def _drain(spark: SparkSession, maintainer: Maintainer, limit: int = 50) -> list[Epoch]:
    """Epochs without input until nothing is pending."""
    epochs = []
    while maintainer.provisional:
        assert len(epochs) < limit, "pending deltas never drained"
        epochs.append(_apply(spark, maintainer, {}))
    return epochs


def test_min_update_is_spread_over_epochs(spark: SparkSession) -> None:
    facts: Facts = {"warc": list(PATH)}
    maintainer = _maintainer(spark, SSSP, facts, budget=2)
    report = maintainer.report
    shortcut = {"warc": [(1, 3, 1.0)]}
    first = _apply(spark, maintainer, shortcut)
    facts["warc"] += shortcut["warc"]
    assert first.provisional and maintainer.provisional
    assert strategies(first) == {"sp": "update:mra-improve"}
    assert first.rounds == 3  # the seed's merge and two propagation rounds
    rows = {r[0]: r[1] for r in maintainer.relation("sp").collect()}
    # Improved near the change (3, 4, 5), not yet farther away.
    assert (rows[3], rows[5], rows[6], rows[12]) == (1.0, 21.0, 50.0, 110.0)
    second = _apply(spark, maintainer, {})
    # Each epoch reports what it moved (read before the next epoch frees it): two more hops.
    assert {row["node"] for row in second.changes["sp"].change.added.collect()} == {6, 7}
    rest = [second, *_drain(spark, maintainer)]
    assert len(rest) >= 2 and not rest[-1].provisional
    assert all(strategies(e) == {"sp": "update:mra-improve"} for e in rest)
    check_current(spark, report, maintainer, facts, 0.0, engine=True)


def test_new_input_while_deltas_are_pending(spark: SparkSession) -> None:
    facts: Facts = {"warc": list(PATH)}
    maintainer = _maintainer(spark, SSSP, facts, budget=1)
    report = maintainer.report
    for step in ({"warc": [(1, 3, 1.0)]}, {"warc": [(3, 9, 1.0)]}, {"warc": [(2, 12, 0.5)]}):
        epoch = _apply(spark, maintainer, step)
        facts["warc"] += step["warc"]
        assert epoch.provisional
    _drain(spark, maintainer)
    check_current(spark, report, maintainer, facts, 0.0, engine=True)


def test_sum_corrections_with_pending_deltas(spark: SparkSession) -> None:
    """PageRank: a degree change while deltas are pending re-weighs only what has been
    propagated (acc − pending); the result still equals a fresh evaluation."""
    facts: Facts = {
        "edge": [(1, 2), (2, 3), (3, 1), (2, 1), (3, 4), (4, 1)],
        "node": [(1,), (2,), (3,), (4,)],
    }
    maintainer = _maintainer(spark, program("a3_pagerank"), facts, budget=2)
    report = maintainer.report
    steps: list[Facts] = [
        {"edge": [(1, 3)]},
        {"edge": [(4, 2)]},
        {"edge": [(1, 4), (5, 1)], "node": [(5,)]},
    ]
    for step in steps:
        epoch = _apply(spark, maintainer, step)
        for relation, rows in step.items():
            facts[relation] += rows
        assert strategies(epoch)["rank"] == "update:mra-correction"
        assert epoch.provisional
    _drain(spark, maintainer, limit=200)
    check_current(spark, report, maintainer, facts, 1e-4, engine=True)


def test_without_budget_every_epoch_converges(spark: SparkSession) -> None:
    facts: Facts = {"warc": list(PATH)}
    report = report_of(SSSP)
    maintainer = Maintainer(report, spark, ON_SPARK, switch_fraction=1e6)
    maintainer.load(declared(report, edb_frames(spark, report, facts)))
    epoch = _apply(spark, maintainer, {"warc": [(1, 3, 1.0)]})
    assert not epoch.provisional and not maintainer.provisional
    assert epoch.rounds > 2
