"""Deletions without re-evaluation for MRA relations: min/max retraction along witness
chains (``mra-retract``) and a sum's negative corrections with unsupported keys dropped
(``mra-correction``). Every epoch is checked against the oracle's fresh evaluation of the
current facts (``run_epochs``); here we also check which update ran."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from fixflow.checker.model import Report
from fixflow.operators.change import by_relation
from fixflow.operators.core import EvalOptions
from fixflow.operators.engines.base import EngineOptions
from fixflow.operators.evaluate import evaluate
from fixflow.operators.maintain import Maintainer
from fixflow.operators.materialize import checkpoint_rdds
from fixflow.operators.relation import Relation
from fixflow.operators.witness import descendants

from .helpers import report_of
from .test_maintain import SSSP, Facts, Step, program, run_epochs, strategies

ENGINES = ["sync", "async", "driver"]
"""``driver``: the async engine with ``local_rows``, so retractions run in the driver
(``operators.driver``)."""


def _options(mode: str) -> EvalOptions:
    local_rows = 100_000 if mode == "driver" else 0
    engine = EngineOptions(mode="async" if mode == "driver" else mode)
    return EvalOptions(witness=True, engine_options=engine, local_rows=local_rows)


def _where(mode: str, epochs: list, relation: str) -> list[str]:
    """Per epoch, where ``relation``'s stratum was retracted, checked against the jobs."""
    found = []
    for epoch in epochs:
        stratum = next(s for s in epoch.strata if relation in s.relations)
        found.append(stratum.note or "on Spark")
        if stratum.note == "in the driver":
            # At most: the first epoch collects the state, the input and its two changes.
            assert stratum.jobs <= 4, (stratum.jobs, stratum)
    assert set(found) == {"in the driver" if mode == "driver" else "on Spark"}, found
    return found


def _walk(parent: dict, roots: set) -> set:
    """The oracle: keys whose chain of parents reaches a root."""

    def reaches(key: object) -> bool:
        seen = set()
        while key is not None and key not in seen:
            if key in roots:
                return True
            seen.add(key)
            key = parent.get(key)
        return False

    return {k for k in parent if reaches(k)}


def test_descendants_follow_witness_chains(spark: SparkSession) -> None:
    parent = {1: None, 2: 1, 3: 2, 4: 3, 5: 2, 6: None, 7: 6, 8: 7, 9: 1}
    roots = {2, 7, 42}  # 42 is no key: it invalidates nothing
    witnessed = spark.createDataFrame(list(parent.items()), "k0 long, w0 long")
    found = descendants(witnessed, spark.createDataFrame([(r,) for r in roots], "k0 long"), ["k0"])
    assert {r.k0 for r in found.collect()} == _walk(parent, roots) == {2, 3, 4, 5, 7, 8}


def test_descendants_with_composite_string_keys(spark: SparkSession) -> None:
    parent = {("a", 1): None, ("b", 1): ("a", 1), ("c", 2): ("b", 1), ("d", 1): None}
    rows = [(*k, *(w if w else (None, None))) for k, w in parent.items()]
    witnessed = spark.createDataFrame(rows, "k0 string, k1 long, w0 string, w1 long")
    roots = spark.createDataFrame([("b", 1)], "k0 string, k1 long")
    found = descendants(witnessed, roots, ["k0", "k1"])
    assert {(r.k0, r.k1) for r in found.collect()} == _walk(parent, {("b", 1)})


@pytest.mark.parametrize("mode", ENGINES)
def test_sssp_deleting_the_witness_of_a_long_chain(spark: SparkSession, mode: str) -> None:
    chain = [(i, i + 1, 1.0) for i in range(1, 12)]
    facts: Facts = {"warc": [*chain, (1, 20, 5.0), (20, 6, 5.0)]}
    steps: list[Step] = [
        ({}, {"warc": [(2, 3, 1.0)]}),  # every distance past 3 gets worse: via the detour
        ({"warc": [(2, 3, 1.0), (1, 4, 1.5)]}, {"warc": [(20, 6, 5.0)]}),  # one pass
        ({}, {"warc": [(1, 2, 1.0), (1, 4, 1.5)]}),  # 2.. unreachable: rows disappear
    ]
    epochs = run_epochs(spark, SSSP, facts, steps, engine=False, options=_options(mode))
    assert [strategies(e)["sp"] for e in epochs] == ["update:mra-retract"] * 3
    _where(mode, epochs, "sp")


@pytest.mark.parametrize("mode", ["async", "driver"])
def test_cc_split_and_join_in_one_pass(spark: SparkSession, mode: str) -> None:
    edges = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (7, 8)]
    facts: Facts = {"edge": [*edges, *((b, a) for a, b in edges)]}
    steps: list[Step] = [
        ({}, {"edge": [(3, 4), (4, 3)]}),  # a bridge: {4, 5, 6} gets label 4
        ({"edge": [(6, 7), (7, 6)]}, {"edge": [(1, 2), (2, 1)]}),
        ({"edge": [(1, 2), (2, 1)]}, {}),  # insertions only: retracted in the driver too
    ]
    cc = program("powerlog_p3_cc")
    epochs = run_epochs(spark, cc, facts, steps, engine=False, options=_options(mode))
    assert [strategies(e)["cc"] for e in epochs] == ["update:mra-retract"] * 3
    _where(mode, epochs, "cc")


def test_pagerank_node_removal_drops_its_key(spark: SparkSession) -> None:
    edges = [(1, 2), (2, 3), (3, 1), (1, 4), (4, 5), (5, 1), (2, 5), (3, 4), (6, 4)]
    facts: Facts = {"edge": edges, "node": [(n,) for n in range(1, 7)]}
    steps: list[Step] = [
        ({}, {"edge": [(1, 4), (2, 5)]}),
        # node 4 and every edge at it: its key goes, its in-neighbours' degrees change
        ({}, {"node": [(4,)], "edge": [(4, 5), (3, 4), (6, 4)]}),
    ]
    pagerank = program("a3_pagerank")
    epochs = run_epochs(
        spark, pagerank, facts, steps, tol=1e-4, engine=False, options=_options("async")
    )
    assert [strategies(e)["rank"] for e in epochs] == ["update:mra-correction"] * 2


def test_descendants_of_an_empty_forest(spark: SparkSession) -> None:
    witnessed = spark.createDataFrame([], "k0 long, w0 long")
    roots = spark.createDataFrame([(1,)], "k0 long")
    assert descendants(witnessed, roots, ["k0"]).collect() == []


def test_a_mixed_epoch_derives_no_candidate_from_a_deleted_fact(spark: SparkSession) -> None:
    """A new source with an out-edge deleted in the same epoch: the deleted edge must not
    yield a candidate (the telescoped terms of a sum would pair them)."""
    facts: Facts = {"edge": [(5, 1, 4.0), (3, 2, 3.0), (2, 5, 5.0)], "source": [(3,)]}
    steps: list[Step] = [({"source": [(5,)]}, {"edge": [(5, 1, 4.0), (3, 2, 3.0)]})]
    widest = (Path(__file__).resolve().parents[2] / "examples" / "widest_path.dl").read_text()
    epochs = run_epochs(spark, widest, facts, steps, engine=False, options=_options("sync"))
    assert strategies(epochs[0])["wp"] == "update:mra-retract"


def _warc(rows: list[tuple[int, int, float]]) -> pa.Table:
    src, dst, c = zip(*rows, strict=True) if rows else ((), (), ())
    return pa.table(
        {"src": pa.array(src, pa.int64()), "dst": pa.array(dst, pa.int64()), "c": pa.array(c)}
    )


def test_arrow_batches_retract_in_the_driver_without_a_job(spark: SparkSession) -> None:
    """As the stream feeds it (Arrow batches, net counts): the load bootstraps the stratum
    in the driver with its witnesses, and every retraction after it runs no Spark job at
    all, the changed EDB included; the rows equal a fresh evaluation's."""
    report = report_of(SSSP)
    maintainer = Maintainer(report, spark, _options("driver"), switch_fraction=1e6)
    facts = [(i, i + 1, 1.0) for i in range(1, 30)] + [(1, 15, 20.0), (3, 20, 4.0)]
    loaded = maintainer.load({"warc": _warc(facts)})
    assert [(s.strategy, s.note) for s in loaded.strata] == [("bootstrap", "in the driver")]
    # The witness of 16 is 15 (1 + 14 hops), not the direct edge (1, 15, 20.0)'s source.
    witnessed = {tuple(r) for r in maintainer.carried.witnessed["sp"].collect()}
    assert (16, 15.0, 15) in witnessed and (1, 0.0, None) in witnessed
    steps = [([], [(14, 15, 1.0)]), ([(2, 9, 0.5)], [(3, 4, 1.0)]), ([], [(1, 2, 1.0)])]
    for number, (added, removed) in enumerate(steps):
        facts = [f for f in facts if f not in removed] + added
        jobs = maintainer.materializer.jobs
        epoch = maintainer.apply(
            by_relation(
                {"warc": _warc(added)} if added else {},
                {"warc": _warc(removed)},
                {"warc": (len(added), len(removed))},
            )
        )
        stratum = epoch.strata[0]
        assert (stratum.strategy, stratum.note) == ("update:mra-retract", "in the driver")
        assert maintainer.materializer.jobs == jobs, f"a Spark job ran in epoch {number}"
        fresh = evaluate(report, {"warc": spark.createDataFrame(_warc(facts))}, spark)
        assert {tuple(r) for r in maintainer.relation("sp").collect()} == {
            tuple(r) for r in fresh["sp"].collect()
        }


def test_a_large_input_changed_in_the_driver_stays_readable_on_spark(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An input above ``HANDOVER_ROWS`` is stored by the first Spark job that reads it,
    computed from the last stored rows and the changes since (``ChangedSince``). Read after
    many epochs it holds the current facts: the stored rows it reads were not released, and
    crossing ``CHAIN_ROWS`` stores it again (an ever deeper chain of lazy rows replayed every
    epoch and, after a few hundred, overflowed the JVM's stack)."""
    report, maintainer, facts = _driver_chain(spark, monkeypatch, chain_rows=5)
    stores = []
    for number in range(8):
        removed, added = [facts[number * 3]], [(number + 100, number + 101, 1.0)]
        facts = [f for f in facts if f not in removed] + added
        jobs = maintainer.materializer.jobs
        maintainer.apply(
            by_relation({"warc": _warc(added)}, {"warc": _warc(removed)}, {"warc": (1, 1)})
        )
        stores.append(maintainer.materializer.jobs - jobs)
    # Two rows an epoch: the changes outgrow five rows at the third epoch, and again three
    # epochs after each store.
    assert stores[1:] == [0, 1, 0, 0, 1, 0, 0], stores
    assert {tuple(r) for r in maintainer.edb["warc"].collect()} == set(facts)
    fresh = evaluate(report, {"warc": spark.createDataFrame(_warc(facts))}, spark)
    assert {tuple(r) for r in maintainer.relation("sp").collect()} == {
        tuple(r) for r in fresh["sp"].collect()
    }


def test_a_large_input_changed_in_the_driver_is_planned_only_when_spark_reads_it(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The input's rows after a driver epoch are a ``Relation`` nothing has made (no
    Spark plan), declaring the stored rows they read, so the garbage collection keeps those;
    read now and then, later epochs continue from them, and every read holds the facts."""
    report, maintainer, facts = _driver_chain(spark, monkeypatch, chain_rows=100)
    for number in range(6):
        removed, added = [facts[number * 3]], [(number + 100, number + 101, 1.0)]
        facts = [f for f in facts if f not in removed] + added
        maintainer.apply(
            by_relation({"warc": _warc(added)}, {"warc": _warc(removed)}, {"warc": (1, 1)})
        )
        frame = maintainer.frames[maintainer.setting.loaded()["warc"]]
        assert isinstance(frame, Relation) and not frame.made, number
        assert checkpoint_rdds(frame), "it declares no stored rows: they could be released"
        if number in (1, 4):
            assert {tuple(r) for r in frame.collect()} == set(facts), number
    fresh = evaluate(report, {"warc": spark.createDataFrame(_warc(facts))}, spark)
    assert {tuple(r) for r in maintainer.relation("sp").collect()} == {
        tuple(r) for r in fresh["sp"].collect()
    }


def test_an_input_appended_on_spark_is_not_stored_again_for_a_driver_epoch(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Insertions past ``CHAIN_ROWS`` are appended on Spark as a segment; the driver epoch
    after them runs no Spark job (it used to store the segments as one: 4 of the 4.8 s of
    the first update after an R-MAT 10M bootstrap). Spark stores them when it first reads
    the rows, and every read holds the facts."""
    report, maintainer, facts = _driver_chain(spark, monkeypatch, chain_rows=5)
    added = [(i + 100, i + 101, 1.0) for i in range(6)]
    maintainer.apply(by_relation({"warc": _warc(added)}, {}, {"warc": (6, 0)}))
    facts += added
    assert len(checkpoint_rdds(maintainer.edb["warc"])) == 2, "the insertions are no segment"
    for number in range(3):
        removed = [facts[number * 3]]
        facts = [f for f in facts if f not in removed]
        jobs = maintainer.materializer.jobs
        maintainer.apply(by_relation({}, {"warc": _warc(removed)}, {"warc": (0, 1)}))
        assert maintainer.materializer.jobs == jobs, f"a Spark job ran in epoch {number}"
        frame = maintainer.frames[maintainer.setting.loaded()["warc"]]
        assert isinstance(frame, Relation) and not frame.made, number
        if number:
            assert {tuple(r) for r in frame.collect()} == set(facts), number
    fresh = evaluate(report, {"warc": spark.createDataFrame(_warc(facts))}, spark)
    assert {tuple(r) for r in maintainer.relation("sp").collect()} == {
        tuple(r) for r in fresh["sp"].collect()
    }


SYMBOL_PATHS = """
.decl road(src: symbol, dst: symbol, c: float)
.input road
.decl dist(node: symbol, c: float)
.output dist
dist(To, min[C]) :- To = "a", C = 0.0.
dist(To2, min[C]) :- dist(To1, C1), road(To1, To2, C2), C = C1 + C2.
"""


def test_symbol_keys_bootstrap_and_retract_in_the_driver(spark: SparkSession) -> None:
    """Witnesses of symbol type: the driver's bootstrap seeds null string witnesses and a
    retraction walks them, as on Spark."""
    report = report_of(SYMBOL_PATHS)
    maintainer = Maintainer(report, spark, _options("driver"), switch_fraction=1e6)
    roads = [("a", "b", 1.0), ("b", "c", 1.0), ("a", "c", 5.0), ("c", "d", 1.0)]

    def table(rows: list[tuple[str, str, float]]) -> pa.Table:
        src, dst, c = zip(*rows, strict=True)
        return pa.table({"src": list(src), "dst": list(dst), "c": list(c)})

    loaded = maintainer.load({"road": table(roads)})
    assert [s.note for s in loaded.strata] == ["in the driver"]
    epoch = maintainer.apply(by_relation({}, {"road": table([("b", "c", 1.0)])}, {"road": (0, 1)}))
    assert epoch.strata[0].note == "in the driver"
    assert {tuple(r) for r in maintainer.relation("dist").collect()} == {
        ("a", 0.0),
        ("b", 1.0),
        ("c", 5.0),
        ("d", 6.0),
    }


def _driver_chain(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, chain_rows: int
) -> tuple[Report, Maintainer, list[tuple[int, int, float]]]:
    """SSSP maintained in the driver over 41 facts, inputs above 4 rows handed to Spark
    lazily and stored again past ``chain_rows`` changed rows: the report, the Maintainer
    and the facts it loaded."""
    monkeypatch.setattr("fixflow.operators.maintain.inputs.HANDOVER_ROWS", 4)
    monkeypatch.setattr("fixflow.operators.maintain.inputs.CHAIN_ROWS", chain_rows)
    report = report_of(SSSP)
    maintainer = Maintainer(report, spark, _options("driver"), switch_fraction=1e6)
    facts = [(i, i + 1, 1.0) for i in range(1, 40)] + [(1, 20, 30.0), (5, 25, 2.0)]
    maintainer.load({"warc": _warc(facts)})
    return report, maintainer, facts


def test_a_retraction_that_outgrows_the_driver_runs_on_spark(
    spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Placed in the driver, a retraction that reads more than ``local_rows`` rows raises
    ``Outgrown`` and runs again on Spark (the same steps, ``mra_retract.retract_on``); the
    rows equal a fresh evaluation's, and the next epoch retracts from Spark's witnesses."""
    report = report_of(SSSP)
    maintainer = Maintainer(report, spark, _options("driver"), switch_fraction=1e6)
    facts = [(i, i + 1, 1.0) for i in range(1, 30)] + [(1, 15, 20.0), (3, 20, 4.0)]
    loaded = maintainer.load({"warc": _warc(facts)})
    assert [s.note for s in loaded.strata] == ["in the driver"]
    copies = maintainer.setting.copies
    assert copies is not None
    copies.limit = 8  # the auxiliary side alone holds 31 rows
    for removed in ([(14, 15, 1.0)], [(3, 4, 1.0)]):
        facts = [f for f in facts if f not in removed]
        with caplog.at_level("INFO", logger="fixflow.operators.strategies.mra"):
            epoch = maintainer.apply(by_relation({}, {"warc": _warc(removed)}, {"warc": (0, 1)}))
        stratum = epoch.strata[0]
        assert stratum.strategy == "update:mra-retract" and not stratum.note, stratum
        assert "outgrew the driver" in caplog.text
        caplog.clear()
        fresh = evaluate(report, {"warc": spark.createDataFrame(_warc(facts))}, spark)
        assert {tuple(r) for r in maintainer.relation("sp").collect()} == {
            tuple(r) for r in fresh["sp"].collect()
        }
