"""The Maintainer's incremental updates, class by class: after every epoch the maintained
relations equal a fresh evaluation of the current facts (the engine's and the oracle's),
and the stratum ran the update strategy we expect (not a bootstrap) where one applies."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from fixflow.checker.model import Report
from fixflow.operators.change import Change, by_relation
from fixflow.operators.core import SEGMENTS, EvalOptions
from fixflow.operators.evaluate import evaluate
from fixflow.operators.maintain import Epoch, Maintainer
from fixflow.operators.maintain.elastic import ElasticSwitch
from fixflow.operators.materialize import checkpoint_rdds
from reference.evaluator import evaluate as oracle

from .helpers import ON_SPARK, Row, edb_frames, report_of

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"

TC_AND_DEGREE = """
.decl arc(src: number, dst: number)
.input arc
.decl tc(src: number, dst: number)
.output tc
.decl deg(n: number, d: number)
.output deg
tc(X, Y) :- arc(X, Y).
tc(X, Y) :- tc(X, Z), arc(Z, Y).
deg(X, count[Y]) :- arc(X, Y).
"""

SSSP = """
.decl warc(src: number, dst: number, c: float)
.input warc
.decl sp(node: number, c: float)
.output sp
sp(To, min[C]) :- To = 1, C = 0.0.
sp(To2, min[C]) :- sp(To1, C1), warc(To1, To2, C2), C = C1 + C2.
"""

Facts = dict[str, list[Row]]
Step = tuple[Mapping[str, Sequence[Row]], Mapping[str, Sequence[Row]]]


def program(name: str) -> str:
    return (PROGRAMS / name / "program.dl").read_text()


def declared(report: Report, frames: Mapping[str, DataFrame]) -> dict[str, DataFrame]:
    """Frames with the relations' declared column names, as the pipeline hands them over."""
    return {
        rel: df.toDF(*(a.name for a in report.analysis.schemas[rel])) for rel, df in frames.items()
    }


def by_key(report: Report, relation: str, rows: set[Row]) -> dict[Row, object]:
    """Rows by key: an aggregate relation's group, a set relation's non-float columns
    (float columns are compared within the tolerance)."""
    info = report.catalog[relation]
    if info.value_pos is None:
        return {
            tuple(v for v in row if not isinstance(v, float)): tuple(
                v for v in row if isinstance(v, float)
            )
            for row in rows
        }
    value = info.value_pos - (1 if info.index_pos is not None else 0)
    return {row[:value] + row[value + 1 :]: row[value] for row in rows}


def _close(a: object, b: object, tol: float) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= tol
    return a == b


def assert_same(report: Report, relation: str, actual: set[Row], expected: set[Row], tol: float):
    got, want = by_key(report, relation, actual), by_key(report, relation, expected)
    assert set(got) == set(want), f"{relation}: keys differ"
    for key, value in want.items():
        assert _close(got[key], value, tol), f"{relation}{key}: {got[key]} vs {value}"


def check_current(
    spark: SparkSession,
    report: Report,
    maintainer: Maintainer,
    facts: Facts,
    tol: float,
    *,
    engine: bool,
) -> None:
    """The maintained relations equal the oracle's on ``facts`` and, if ``engine``, a
    fresh Spark evaluation (the costlier check, so run once per sequence)."""
    kinds = {rel: type(frame).__name__ for rel, frame in maintainer.frames.items()}
    assert set(kinds.values()) == {"Relation"}, f"current rows that are no Relation: {kinds}"
    expected = oracle(report.analysis.program, facts)
    fresh = (
        evaluate(report, declared(report, edb_frames(spark, report, facts)), spark)
        if engine
        else {}
    )
    for relation in sorted(report.analysis.idb):
        actual = {tuple(r) for r in maintainer.relation(relation).collect()}
        assert_same(report, relation, actual, expected[relation], max(tol, 1e-9))
        if relation in fresh:
            rows = {tuple(r) for r in fresh[relation].collect()}
            assert_same(report, relation, actual, rows, tol)


def run_epochs(
    spark: SparkSession,
    text: str,
    facts: Facts,
    steps: Sequence[Step],
    *,
    tol: float = 0.0,
    switch_fraction: float = 1e6,
    engine: bool = True,
    options: EvalOptions | None = None,
    check: Callable[[int, Epoch], None] | None = None,
) -> list[Epoch]:
    """Load ``facts``, apply each (inserts, deletes) step, check after every epoch against
    the oracle and, with ``engine``, after the last one against a fresh Spark evaluation.
    ``options`` configure the Maintainer (e.g. its MRA engine); ``check``, if given, is
    called after those checks with each epoch's number (from 0) and its ``Epoch``."""
    report = report_of(text)
    maintainer = Maintainer(report, spark, options or ON_SPARK, switch_fraction=switch_fraction)
    maintainer.load(declared(report, edb_frames(spark, report, facts)))
    epochs = []
    for inserts, deletes in steps:
        for rel, rows in inserts.items():
            facts[rel] = [*facts.get(rel, []), *rows]
        for rel, rows in deletes.items():
            facts[rel] = [r for r in facts[rel] if r not in rows]
        epochs.append(
            maintainer.apply(
                by_relation(
                    declared(report, edb_frames(spark, report, inserts)),
                    declared(report, edb_frames(spark, report, deletes)),
                )
            )
        )
        last = len(epochs) == len(steps)
        check_current(spark, report, maintainer, facts, tol, engine=engine and last)
        if check is not None:
            check(len(epochs) - 1, epochs[-1])
    return epochs


def strategies(epoch: Epoch) -> dict[str, str]:
    return {rel: s.strategy for s in epoch.strata for rel in s.relations}


def test_set_and_count_strata(spark: SparkSession) -> None:
    epochs = run_epochs(
        spark,
        TC_AND_DEGREE,
        {"arc": [(1, 2), (2, 3)]},
        [({"arc": [(3, 4), (1, 3)]}, {}), ({}, {"arc": [(2, 3)]})],
    )
    assert strategies(epochs[0]) == {"tc": "update:seminaive", "deg": "update:affected-groups"}
    assert strategies(epochs[1]) == {"tc": "update:dred", "deg": "update:affected-groups"}
    assert epochs[0].strata[0].rounds >= 2  # (1,4) needs a round beyond the seed


def test_delta_rules_and_unchanged_strata(spark: SparkSession) -> None:
    text = """
    .decl a(x: number, y: number)
    .input a
    .decl b(x: number)
    .input b
    .decl two(x: number, z: number)
    .output two
    .decl lone(x: number)
    .output lone
    two(X, Z) :- a(X, Y), a(Y, Z).
    lone(X) :- b(X), !a(X, _).
    """
    epochs = run_epochs(
        spark,
        text,
        {"a": [(1, 2)], "b": [(1,), (5,)]},
        [({"a": [(2, 3)]}, {}), ({"b": [(7,)]}, {}), ({"a": [(5, 1)]}, {})],
    )
    assert strategies(epochs[0]) == {"two": "update:delta-rules", "lone": "bootstrap"}
    assert strategies(epochs[1]) == {"two": "unchanged", "lone": "update:delta-rules"}
    assert strategies(epochs[2])["lone"] == "bootstrap"  # a negated relation changed


@pytest.mark.parametrize("witness", [False, True], ids=["no-witness", "witness"])
def test_mra_min_sssp(spark: SparkSession, witness: bool) -> None:
    """With witnesses (as streams keep them) deletions retract; without, they re-evaluate."""
    epochs = run_epochs(
        spark,
        SSSP,
        {"warc": [(1, 2, 1.0), (2, 3, 1.0), (3, 4, 5.0)]},
        [({"warc": [(1, 4, 2.0), (4, 5, 1.0)]}, {}), ({}, {"warc": [(1, 4, 2.0)]})],
        options=EvalOptions(witness=witness, local_rows=0),
    )
    if witness:
        assert [strategies(e) for e in epochs] == [{"sp": "update:mra-retract"}] * 2
    else:
        assert strategies(epochs[0]) == {"sp": "update:mra-improve"}
        assert strategies(epochs[1]) == {"sp": "bootstrap"}


def test_mra_min_cc_with_count_of_labels(spark: SparkSession) -> None:
    epochs = run_epochs(
        spark,
        program("nexus_cc"),
        {"arc": [(2, 3), (3, 2), (5, 6)]},
        [({"arc": [(6, 2), (1, 5)]}, {}), ({}, {"arc": [(1, 5)]})],
        options=EvalOptions(witness=True, local_rows=0),
    )
    assert strategies(epochs[0]) == {"hcc": "update:mra-retract", "cc": "update:affected-groups"}
    assert strategies(epochs[1])["hcc"] == "update:mra-retract"


def test_mra_sum_pagerank_degree_change(spark: SparkSession) -> None:
    facts: Facts = {"edge": [(1, 2), (2, 3), (3, 1), (2, 1)], "node": [(1,), (2,), (3,)]}
    epochs = run_epochs(
        spark,
        program("a3_pagerank"),
        facts,
        [
            ({"edge": [(1, 3)]}, {}),  # degree(1) 1 → 2: a removed and an added degree row
            ({"edge": [(3, 4)], "node": [(4,)]}, {}),  # a new key
            ({}, {"edge": [(2, 1)]}),
        ],
        tol=1e-4,
    )
    assert strategies(epochs[0]) == {
        "degree": "update:affected-groups",
        "rank": "update:mra-correction",
    }
    assert strategies(epochs[1])["rank"] == "update:mra-correction"
    assert strategies(epochs[2])["rank"] == "update:mra-correction"  # an edge gone


def test_mra_sum_constant_change(spark: SparkSession) -> None:
    """dcd_pagerank: a new vertex changes vnum, hence the constant term of every key."""
    epochs = run_epochs(
        spark,
        program("dcd_pagerank"),
        {"matrix": [(1, 2, 1), (2, 1, 2), (2, 3, 2), (3, 1, 1)]},
        [({"matrix": [(4, 1, 1)]}, {})],
        tol=1e-6,
    )
    assert strategies(epochs[0])["rank"] == "update:mra-correction"


def test_aggregate_seminaive_apsp(spark: SparkSession) -> None:
    epochs = run_epochs(
        spark,
        program("dcd_apsp"),
        {"warc": [(1, 2, 1.0), (2, 3, 2.0), (3, 4, 1.0)]},
        [({"warc": [(1, 3, 1.5), (4, 1, 1.0)]}, {}), ({}, {"warc": [(1, 3, 1.5)]})],
    )
    assert strategies(epochs[0]) == {
        "path": "update:continuation",
        "apsp": "update:affected-groups",
    }
    assert strategies(epochs[1])["path"] == "update:dred-groups"


def test_naive_gcn_is_reevaluated(spark: SparkSession) -> None:
    epochs = run_epochs(
        spark,
        program("powerlog_p7_gcn_forward"),
        {"H0": [(1, 1.0), (2, 0.5)], "A": [(1, 2, 0.5), (2, 1, 0.25)], "Para": [(0.5,)]},
        [({"A": [(1, 3, 0.5)]}, {}), ({}, {"A": [(2, 1, 0.25)]})],
        tol=1e-6,
    )
    assert strategies(epochs[0]) == {"GCN": "bootstrap"}


def test_elastic_switch_bootstraps(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    # The deadline alone: with switch_fraction 0 the prediction would fire first.
    monkeypatch.setattr(ElasticSwitch, "outgrown", lambda self, stratum, changes: "")
    epochs = run_epochs(
        spark,
        SSSP,
        {"warc": [(1, 2, 1.0), (2, 3, 1.0)]},
        [({"warc": [(3, 4, 1.0)]}, {})],
        switch_fraction=0.0,
    )
    assert strategies(epochs[0]) == {"sp": "bootstrap:switched"}
    assert "abandoned" in epochs[0].strata[0].note


def test_elastic_switch_predicts_a_change_that_outgrows_the_inputs(spark: SparkSession) -> None:
    base = {"warc": [(1, 2, 1.0), (2, 3, 1.0)]}
    small = {"warc": [(3, 4, 1.0)]}  # 1 fact against 2: an update
    large = {"warc": [(4, 5, 1.0), (5, 6, 1.0), (6, 7, 1.0), (7, 8, 1.0)]}  # 4 against 3
    epochs = run_epochs(spark, SSSP, base, [(small, {}), (large, {})], switch_fraction=1.0)
    assert "outgrows" not in epochs[0].strata[0].note  # (an update, unless its deadline ran out)
    assert strategies(epochs[1]) == {"sp": "bootstrap:switched"}
    assert "the change of warc (4 facts) outgrows its 3 facts before" in epochs[1].strata[0].note


def test_an_abandoned_update_sends_changes_as_large_to_a_bootstrap_for_a_while(
    spark: SparkSession,
) -> None:
    """The elastic switch's lesson: after an update ran past its budget, a change at least
    as large (relative to its input) is bootstrapped at once, a smaller one is updated, and
    after LESSON_EPOCHS epochs the lesson is forgotten."""
    report = report_of(SSSP)
    # No prediction from size alone, and no abandonment after the first epoch's: its
    # bootstrap measures the budget anew, a million times what the bootstrap took.
    maintainer = Maintainer(report, spark, ON_SPARK, switch_fraction=1e6)
    facts = {"warc": [(i, i + 1, 1.0) for i in range(1, 11)]}  # 10 facts
    maintainer.load(declared(report, edb_frames(spark, report, facts)))
    elastic = maintainer.elastic
    elastic.bootstrap_seconds = dict.fromkeys(elastic.bootstrap_seconds, 0.0)
    steps = [
        [(11, 12, 1.0), (12, 13, 1.0)],  # 2/10: abandoned (a zero budget)
        [(13, 14, 1.0), (14, 15, 1.0), (15, 16, 1.0)],  # 3/12 >= 2/10: the lesson
        [(16, 17, 1.0)],  # 1/15: an update
        [(20 + i, 21 + i, 1.0) for i in range(5)],  # 5/16: the lesson
        [(30 + i, 31 + i, 1.0) for i in range(6)],  # 6/21: the lesson, its last epoch
        [(40 + i, 41 + i, 1.0) for i in range(7)],  # 7/27: forgotten, an update
    ]
    epochs = []
    for rows in steps:
        facts["warc"] += rows
        epochs.append(
            maintainer.apply(
                by_relation(declared(report, edb_frames(spark, report, {"warc": rows})), {})
            )
        )
        check_current(spark, report, maintainer, facts, 0.0, engine=False)
    assert "abandoned" in epochs[0].strata[0].note
    assert [strategies(e)["sp"] for e in epochs] == [
        "bootstrap:switched",
        "bootstrap:switched",
        "update:mra-improve",
        "bootstrap:switched",
        "bootstrap:switched",
        "update:mra-improve",
    ]
    assert "no smaller than one whose update was abandoned (20.00%" in epochs[1].strata[0].note
    assert maintainer.elastic.lessons == {}


def test_changes_are_relative_to_published(spark: SparkSession) -> None:
    report = report_of(SSSP)
    maintainer = Maintainer(report, spark, ON_SPARK, switch_fraction=1e6)
    facts = {"warc": [(1, 2, 1.0), (2, 3, 5.0)]}
    maintainer.load(declared(report, edb_frames(spark, report, facts)))
    assert maintainer.pending_changes().changes["sp"].change.added.count() == 3
    epoch = maintainer.apply(
        by_relation(
            declared(report, edb_frames(spark, report, {"warc": [(1, 3, 2.0), (3, 4, 1.0)]})), {}
        )
    )
    change = epoch.changes["sp"]
    assert change.key_columns == ("node",)
    assert {tuple(r) for r in change.change.added.collect()} == {(3, 2.0), (4, 3.0)}
    assert change.change.removed.count() == 0
    epoch = maintainer.apply(
        by_relation({}, declared(report, edb_frames(spark, report, {"warc": [(3, 4, 1.0)]})))
    )
    assert {tuple(r) for r in epoch.changes["sp"].change.removed.collect()} == {(4,)}
    assert epoch.changes["sp"].change.added.count() == 0


def test_no_change_is_unchanged(spark: SparkSession) -> None:
    report = report_of(SSSP)
    maintainer = Maintainer(report, spark, ON_SPARK, switch_fraction=1e6)
    maintainer.load(declared(report, edb_frames(spark, report, {"warc": [(1, 2, 1.0)]})))
    # Inserting a fact already present is no change at all.
    epoch = maintainer.apply(
        by_relation(declared(report, edb_frames(spark, report, {"warc": [(1, 2, 1.0)]})), {})
    )
    assert strategies(epoch) == {"sp": "unchanged"}


def test_partitions_stay_bounded_across_epochs(spark: SparkSession) -> None:
    """Every epoch stores the EDB and the changed relations again; a union adds its inputs'
    partitions, and the EDB's removed rows are read from the EDB itself, so without a bound
    the partition count doubled every epoch (and so did the time of every scan)."""
    report = report_of(TC_AND_DEGREE)
    maintainer = Maintainer(report, spark, ON_SPARK, switch_fraction=1e6)
    # A 12-arc chain: every epoch deletes one of its arcs (each TC round is a Spark job
    # here, so a longer chain only costs rounds: 30 arcs took 200 s of the suite).
    arcs = [(i, i + 1) for i in range(12)]
    maintainer.load(declared(report, edb_frames(spark, report, {"arc": arcs})))
    limit = max(spark.sparkContext.defaultParallelism, *_partitions(maintainer).values())
    for i in range(6):
        inserts = {"arc": [(100 + i, 200 + i), (200 + i, 0)]}
        deletes = {"arc": [(2 * i, 2 * i + 1)]}
        maintainer.apply(
            by_relation(
                declared(report, edb_frames(spark, report, inserts)),
                declared(report, edb_frames(spark, report, deletes)),
            )
        )
        grown = {r: n for r, n in _partitions(maintainer).items() if n > limit}
        assert not grown, f"epoch {i}: partitions above {limit}: {grown}"


def _partitions(maintainer: Maintainer) -> dict[str, int]:
    return {r: f.rdd.getNumPartitions() for r, f in maintainer.frames.items()}


COPY_AND_TWO_HOPS = """
.decl arc(src: number, dst: number)
.input arc
.decl copy(src: number, dst: number)
.output copy
.decl two(src: number, dst: number)
.output two
copy(X, Y) :- arc(X, Y).
two(X, Z) :- arc(X, Y), arc(Y, Z).
"""


def test_insert_only_relations_grow_by_segments_and_compact_releasing_them(
    spark: SparkSession,
) -> None:
    """Under insertions the EDB and the delta-rule relations gain a stored segment per
    epoch instead of being stored whole again; at ``SEGMENTS`` they are stored as one and
    the old segments' blocks are freed (a freed block still read would fail the check)."""
    persistent = spark.sparkContext._jsc.getPersistentRDDs().size()
    report = report_of(COPY_AND_TWO_HOPS)
    maintainer = Maintainer(report, spark, ON_SPARK, switch_fraction=1e6)
    facts: Facts = {"arc": [(100, 101)]}
    maintainer.load(declared(report, edb_frames(spark, report, facts)))
    seen = []
    for i in range(SEGMENTS + 2):
        step = {"arc": [(i, i + 1)]}
        facts["arc"].extend(step["arc"])
        epoch = maintainer.apply(by_relation(declared(report, edb_frames(spark, report, step)), {}))
        assert set(strategies(epoch).values()) == {"update:delta-rules"}
        check_current(spark, report, maintainer, facts, 0.0, engine=False)
        seen.append({r: len(checkpoint_rdds(f)) for r, f in maintainer.frames.items()})
    assert sorted(seen[0]) == sorted([*report.analysis.loaded.values(), "copy", "two"])
    counts = [max(by_relation.values()) for by_relation in seen]
    assert max(counts) == SEGMENTS, counts  # grown to the limit ...
    assert counts[SEGMENTS] < SEGMENTS, counts  # ... then stored as one
    # Still persisted: the live segments (at most SEGMENTS per relation) and the last
    # epoch's deltas; without releasing, every epoch's segments would pile up.
    grown = spark.sparkContext._jsc.getPersistentRDDs().size() - persistent
    assert grown <= 3 * SEGMENTS, grown


def _shuffles(frame: DataFrame) -> bool:
    return "Exchange" in frame._jdf.queryExecution().executedPlan().toString()


def test_an_insert_only_change_is_reported_without_a_shuffle(spark: SparkSession) -> None:
    """Insertions only: the epoch's exact delta is the change (its added rows upserted, no
    key deleted), with no EXCEPT against the removed side, so collecting it shuffles
    nothing; an epoch that also deletes still diffs the two sides."""
    report = report_of(COPY_AND_TWO_HOPS)
    maintainer = Maintainer(report, spark, ON_SPARK, switch_fraction=1e6)
    maintainer.load(declared(report, edb_frames(spark, report, {"arc": [(100, 101)]})))
    maintainer.pending_changes()  # the consumer now holds the loaded rows
    epoch = maintainer.apply(
        by_relation(declared(report, edb_frames(spark, report, {"arc": [(1, 2), (2, 3)]})), {})
    )
    copy, two = epoch.changes["copy"], epoch.changes["two"]
    assert {tuple(r) for r in copy.change.added.collect()} == {(1, 2), (2, 3)}
    assert {tuple(r) for r in two.change.added.collect()} == {(1, 3)}
    assert copy.change.removed.count() == two.change.removed.count() == 0
    assert not any(_shuffles(f) for c in (copy, two) for f in (c.change.added, c.change.removed))
    epoch = maintainer.apply(
        by_relation(
            declared(report, edb_frames(spark, report, {"arc": [(3, 4)]})),
            declared(report, edb_frames(spark, report, {"arc": [(1, 2)]})),
        )
    )
    copy = epoch.changes["copy"]
    assert {tuple(r) for r in copy.change.added.collect()} == {(3, 4)}
    assert {tuple(r) for r in copy.change.removed.collect()} == {(1, 2)}
    assert _shuffles(copy.change.removed)


COPIES = """
.decl arc(src: number, dst: number)
.input arc
.decl copy(src: number, dst: number)
.output copy
.decl flip(dst: number, src: number, tag: number)
.output flip
.decl up(src: number, dst: number)
.output up
.decl loop(n: number)
.output loop
.decl from1(dst: number)
.output from1
.decl src(n: number)
.output src
.decl both(src: number, dst: number)
.output both
copy(X, Y) :- arc(X, Y).
flip(Y, X, 7) :- arc(X, Y).
up(X, Y) :- arc(X, Y), X < Y.
loop(X) :- arc(X, X).
from1(Y) :- arc(1, Y).
src(X) :- arc(X, _).
both(X, Y) :- arc(X, Y).
both(X, Y) :- arc(Y, X).
"""


@pytest.mark.parametrize("net", [False, True], ids=["diffed", "net-counts"])
def test_a_one_to_one_copy_takes_the_inserted_rows_without_a_job(
    spark: SparkSession, net: bool
) -> None:
    """A relation whose one rule maps one changed atom one to one onto its rows gains the
    input's new rows as they are: a plain copy (``copy``, ``flip``) runs no job of its
    own, a filter (``up``, ``loop``, ``from1``) one store and no shuffle; a projection
    (``src``) or a second rule (``both``) still takes the anti join. The relations stay
    equal to the oracle's, whether the caller's rows are diffed or given as net."""
    from fixflow.operators.strategies.nonrecursive import copied_atom

    report = report_of(COPIES)
    maintainer = Maintainer(report, spark, ON_SPARK, switch_fraction=1e6)
    facts: Facts = {"arc": [(1, 2), (3, 3)]}
    maintainer.load(declared(report, edb_frames(spark, report, facts)))
    maintainer.pending_changes()  # the consumer now holds the loaded rows
    for step in ([(1, 5), (4, 4), (6, 2)], [(1, 7), (8, 9)]):
        facts["arc"] = [*facts["arc"], *step]
        frames = declared(report, edb_frames(spark, report, {"arc": step}))
        counts = {"arc": (len(step), 0)} if net else None
        epoch = maintainer.apply(by_relation(frames, {}, counts))
        assert set(strategies(epoch).values()) == {"update:delta-rules"}
        check_current(spark, report, maintainer, facts, 0.0, engine=False)
        jobs = {rel: s.jobs for s in epoch.strata for rel in s.relations}
        assert jobs["copy"] == jobs["flip"] == 0, jobs
        assert jobs["up"] == jobs["loop"] == jobs["from1"] == 1, jobs
        assert epoch.changes["up"].change.added.count() == sum(x < y for x, y in step)
    for relation, copied in [("copy", True), ("up", True), ("src", False), ("both", False)]:
        stratum = next(s for s in report.strata if relation in s.relations)
        delta = _one_row_delta(spark)
        old = {"arc": delta.added}
        ctx = maintainer.strata.context(stratum, maintainer.frames, 2, old, {"arc": delta}, {}, 0.0)
        assert (copied_atom(ctx, relation) is not None) == copied, relation


def _one_row_delta(spark: SparkSession) -> Change[DataFrame]:
    rows = spark.createDataFrame([(1, 2)], "c0 long, c1 long")
    return Change(rows, rows.limit(0), (1, 0), stored=True)


def test_a_first_batch_into_an_empty_input_is_copied_not_bootstrapped(spark: SparkSession) -> None:
    """The elastic switch sends a change larger than its input to a bootstrap; a stratum
    of one-to-one copies is updated anyway, as a map of the change is cheaper than any
    bootstrap (which takes the distinct of the whole relation)."""
    report = report_of(COPIES)
    maintainer = Maintainer(report, spark, ON_SPARK)
    maintainer.load(declared(report, edb_frames(spark, report, {"arc": []})))
    step = [(1, 5), (4, 4), (6, 2)]
    epoch = maintainer.apply(
        by_relation(declared(report, edb_frames(spark, report, {"arc": step})), {})
    )
    chosen = strategies(epoch)
    assert chosen["copy"] == chosen["up"] == "update:delta-rules", chosen
    assert chosen["src"] == chosen["both"] == "bootstrap:switched", chosen
    check_current(spark, report, maintainer, {"arc": step}, 0.0, engine=False)


CHAIN = """\
.decl start(x: number)
.input start
.decl n(x: number)
.output n
n(x) :- start(x).
n(x + 1) :- n(x), x < 10.
"""


def test_a_capped_stratum_stays_partial_until_a_bootstrap_converges(
    spark: SparkSession,
) -> None:
    """A user's cap stops the counter's bootstrap: the epoch lists the stratum as partial
    (what the stream marks its commits with); an update continues from the partial rows,
    so it stays partial. Without the cap the same stratum converges: nothing partial."""
    report = report_of(CHAIN)
    start = declared(report, edb_frames(spark, report, {"start": [(0,)]}))
    capped = Maintainer(
        report, spark, EvalOptions(max_iterations=3, local_rows=0), switch_fraction=1e6
    )
    epoch = capped.load(start)
    (counter,) = [s for s in epoch.strata if s.relations == ("n",)]
    assert (counter.capped, counter.cap, counter.rounds) == (True, 3, 3)
    assert [s.stratum for s in epoch.partial] == [counter.stratum]
    more = declared(report, edb_frames(spark, report, {"start": [(20,)]}))
    epoch = capped.apply(by_relation(more, {}))
    assert [s.stratum for s in epoch.partial] == [counter.stratum]
    free = Maintainer(report, spark, ON_SPARK, switch_fraction=1e6)
    epoch = free.load(start)
    assert epoch.partial == [] and not any(s.capped for s in epoch.strata)
    assert sorted(r[0] for r in free.relation("n").collect()) == list(range(11))
