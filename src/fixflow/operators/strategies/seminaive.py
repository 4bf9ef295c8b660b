"""``set`` strata (recursion without aggregates): semi-naive evaluation, the one loop.

``continuation(run, seeds, growth)`` runs semi-naive rounds from the stratum relations'
current rows: round 1 derives the ``seeds`` (head-row plans per relation); every later
round derives each relation's ``Growth.step`` (one delta rule per occurrence of a stratum
relation in a body, reading the previous round's new rows). Per round and relation one job
stores the new rows (and counts them) together with the relation's *recent* rows, those
changed since the last compaction; the full relation is its compacted rows overlaid with the
recent ones, and is compacted every ``COMPACT_EVERY`` rounds. ``aggregate_seminaive`` runs
the same loop with growths that keep only improved groups.

Why recent rows are stored again every round: the full relation is read by every delta rule
with a second atom of the stratum (``n(x+1) :- n(x), n(0).``: one rule reads ``n``'s delta
and its full rows, the other the reverse) and by the test of what is new. Merged lazily, one
union (min/max: one anti-join) per round since the last compaction, every such read became a
join per merged delta, so a round's stages, tasks and plan grew with its number until the
next compaction. Overlaid on one stored frame, every read is two scans, whatever the round:
a round costs the same job and the same plan, and copies only the rows of the last few
rounds (``test_round_cost_does_not_grow_with_rounds``).

- bootstrap = the continuation from empty relations, seeded by the exit rules (bodies
  without an atom of the stratum): what semi-naive evaluation is;
- ``seminaive`` update (insertions only) = the continuation from the current fixpoint,
  seeded by the delta rules of the inserted input rows; with deletions, ``dred`` runs the
  loop three times (over-delete, re-derive, continue).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, TypeVar

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fixflow.operators.change import Change
from fixflow.operators.core import (
    Bootstrapped,
    StratumRun,
    StratumView,
    bounded,
    bounded_to,
    union_by_name,
)
from fixflow.operators.engines.base import RoundInfo
from fixflow.operators.epoch import Outcome, UpdateContext
from fixflow.operators.plan import Plan
from fixflow.operators.spark_backend import join_on

COMPACT_EVERY = 8
"""Rounds between compactions of the full relations (their compacted rows overlaid with the
recent ones stored as one), bootstrap and update alike."""

R = TypeVar("R")
"""A backend's rows: a Spark frame, or a numpy batch."""

NEW = "new_this_round"
"""The column that marks a round's new rows among the recent rows stored with them."""


class Growth(Protocol):
    """How one relation grows in a semi-naive round."""

    def step(self, run: StratumRun, relation: str) -> list[Plan]:
        """The head rows to derive in the next round."""
        ...

    def new_rows(self, run: StratumRun, relation: str, derived: DataFrame) -> DataFrame:
        """Of the rows derived this round, those that change the relation (its delta)."""
        ...

    def merged(
        self, run: StratumRun, relation: str, older: DataFrame, newer: DataFrame
    ) -> DataFrame:
        """The relation's rows ``older`` overlaid with later changed rows ``newer`` (a
        round's delta, or those of several rounds overlaid in order)."""
        ...

    def changes(
        self, ctx: UpdateContext, relation: str, original: DataFrame, touched: list[DataFrame]
    ) -> Change[DataFrame]:
        """An update's change of the relation, from its rows before and its deltas."""
        ...


class SetGrowth:
    """A set relation: new tuples are the delta, the relation is their union."""

    def step(self, run: StratumRun, relation: str) -> list[Plan]:
        return delta_rules(run, relation)

    def new_rows(self, run: StratumRun, relation: str, derived: DataFrame) -> DataFrame:
        current = run.frames.full[relation]
        return join_on(derived, current, current.columns, "left_anti")

    def merged(
        self, run: StratumRun, relation: str, older: DataFrame, newer: DataFrame
    ) -> DataFrame:
        return older.unionByName(newer)

    def changes(
        self, ctx: UpdateContext, relation: str, original: DataFrame, touched: list[DataFrame]
    ) -> Change[DataFrame]:
        if not touched:
            return ctx.no_change(relation)
        return ctx.delta(union_by_name(touched).distinct(), ctx.frames.empty(relation))


def delta_rules(run: StratumView, relation: str) -> list[Plan]:
    """One rule per occurrence of a stratum relation in a body, reading its last delta."""
    return [
        run.rule_rows(rule, body, versions={k: "delta"})
        for rule in run.rules(relation)
        for body in rule.bodies
        for k in run.occurrences(body)
    ]


def exit_rules(run: StratumView) -> dict[str, list[Plan]]:
    """Per relation, the head rows of its bodies without an atom of the stratum."""
    return {
        relation: [
            run.rule_rows(rule, body)
            for rule in run.rules(relation)
            for body in rule.bodies
            if not run.occurrences(body)
        ]
        for relation in run.relations
    }


# ---------------------------------------------------------------- the loop


@dataclass
class Grown:
    """What a continuation did: rounds, whether the cap stopped it, every relation's rows
    before it and the deltas of its rounds."""

    original: dict[str, DataFrame]
    touched: dict[str, list[DataFrame]]
    rounds: int = 0
    capped: bool = False
    compacted: dict[str, DataFrame] = field(default_factory=dict)
    """Every relation's rows at its last compaction (stored)."""
    recent: dict[str, DataFrame] = field(default_factory=dict)
    """The rows changed since then, of the relations that changed (one stored frame each):
    the full relation is its compacted rows overlaid with them."""


class RoundBackend(Protocol[R]):
    """A backend's side of the semi-naive loop (``semi_naive``): Spark frames here
    (``SparkRounds``), numpy batches in the driver (``driver.stratum.LocalStratum``)."""

    def changed(self, relation: str, plans: list[Plan]) -> R:
        """G over the round's head-row plans, then the rows that change the relation."""
        ...

    def advance(self, relation: str, new: R) -> int:
        """The round's change made the relation's delta and merged into it; its rows."""
        ...

    def after_round(self, rounds: int) -> None:
        """Housekeeping between rounds (compaction, the driver's size check)."""
        ...


def semi_naive(
    run: StratumRun,
    seeds: Mapping[str, list[Plan]],
    steps: Mapping[str, Callable[[], list[Plan]]],
    backend: RoundBackend[R],
    rounds_done: int = 0,
) -> tuple[int, bool]:
    """The one semi-naive loop: round 1 derives ``seeds``, each later round the ``steps``
    (the delta rules), until no relation changes or ``max_iterations`` rounds ran. Every
    relation's derivation reads the previous round: all are derived, then all advance.
    The rounds run (counting ``rounds_done`` another backend ran before), and whether the
    cap stopped it with changes pending."""
    plans, pending, rounds = dict(seeds), 1, rounds_done
    while pending and rounds < run.max_iterations:
        new = {r: backend.changed(r, plans[r]) for r in run.relations}
        pending = sum(backend.advance(r, new[r]) for r in run.relations)
        rounds += 1
        backend.after_round(rounds)
        run.round(RoundInfo(rounds, pending, None))
        plans = {r: steps[r]() for r in run.relations}
    return rounds, bool(pending)


class SparkRounds:
    """The semi-naive loop's Spark side: each round's change stored with the recent ones
    in one job, the relations compacted every ``COMPACT_EVERY`` rounds."""

    def __init__(self, run: StratumRun, growth: Mapping[str, Growth], grown: Grown) -> None:
        self.run, self.growth, self.grown = run, growth, grown

    def changed(self, relation: str, plans: list[Plan]) -> DataFrame:
        derived = self.run.combine(relation, plans)
        return self.growth[relation].new_rows(self.run, relation, derived)

    def advance(self, relation: str, new: DataFrame) -> int:
        return _advance(self.run, self.growth[relation], relation, new, self.grown)

    def after_round(self, rounds: int) -> None:
        if rounds % COMPACT_EVERY == 0:
            _compact(self.run, self.grown)


def continuation(
    run: StratumRun,
    seeds: Mapping[str, list[Plan]],
    growth: Mapping[str, Growth],
    rounds_done: int = 0,
) -> Grown:
    """Semi-naive rounds on Spark from the relations' current rows (empty when absent),
    the first deriving ``seeds`` (``semi_naive``; ``rounds_done``: rounds the driver ran)."""
    relations, full = run.relations, run.frames.full
    for relation in relations:
        full.setdefault(relation, run.frames.empty(relation))
    grown = Grown({r: full[r] for r in relations}, {r: [] for r in relations})
    grown.compacted = dict(grown.original)
    steps = {r: partial(growth[r].step, run, r) for r in relations}
    backend = SparkRounds(run, growth, grown)
    grown.rounds, grown.capped = semi_naive(run, seeds, steps, backend, rounds_done)
    _compact(run, grown)
    for relation in relations:
        run.frames.delta.pop(relation, None)
    return grown


def _advance(run: StratumRun, growth: Growth, relation: str, new: DataFrame, grown: Grown) -> int:
    """Store one relation's new rows (its delta) with its recent rows, in one job, and
    overlay the relation with them; the number of new rows."""
    recent = grown.recent.get(relation)
    stored = new.withColumn(NEW, F.lit(True))
    if recent is not None:
        earlier = recent.withColumn(NEW, F.lit(False))
        stored = bounded_to(earlier.unionByName(stored), run.partitions)
    kept = run.materializer.store(stored, [F.count(F.when(F.col(NEW), 1)).alias("n")])
    count = int(kept.metric("n"))
    if not count:  # nothing changes: the stored copy is not read
        run.materializer.release(kept)
        run.frames.delta[relation] = run.frames.empty(relation)
        return 0
    delta = kept.frame.where(F.col(NEW)).drop(NEW)
    run.frames.delta[relation] = delta
    grown.touched[relation].append(delta)
    if recent is not None:
        earlier = kept.frame.where(~F.col(NEW)).drop(NEW)
        delta = growth.merged(run, relation, earlier, delta)
    grown.recent[relation] = delta
    run.frames.full[relation] = growth.merged(run, relation, grown.compacted[relation], delta)
    return count


def _compact(run: StratumRun, grown: Grown) -> None:
    """Store the relations changed since their last compaction, in no more partitions than
    they started with (each overlay adds the recent rows'); their recent rows start over."""
    for relation in sorted(grown.recent):
        merged = run.frames.full[relation]
        stored = run.keep(bounded(merged, grown.original[relation]))
        run.frames.full[relation] = grown.compacted[relation] = stored
    grown.recent.clear()


def bootstrap_with(run: StratumRun, growth: Mapping[str, Growth]) -> Bootstrapped:
    """The continuation from empty relations seeded by the exit rules."""
    grown = continuation(run, exit_rules(run), growth)
    return Bootstrapped(grown.rounds, grown.capped)


def resumed(run: StratumRun, growth: Mapping[str, Growth], rounds_done: int) -> Bootstrapped:
    """A bootstrap the driver began (``driver.stratum.LocalStratum``) continued on Spark: the
    relations' rows and last deltas are in ``run.frames``; the next round derives the
    growth's step from them."""
    seeds = {r: growth[r].step(run, r) for r in run.relations}
    grown = continuation(run, seeds, growth, rounds_done)
    return Bootstrapped(grown.rounds, grown.capped)


def update_with(ctx: UpdateContext, growth: Mapping[str, Growth]) -> Outcome:
    """The continuation from the current rows seeded by the inserted rows' delta rules."""
    grown = continuation(ctx, {r: ctx.inserted_rows(r) for r in ctx.relations}, growth)
    deltas = {
        r: growth[r].changes(ctx, r, grown.original[r], grown.touched[r]) for r in ctx.relations
    }
    frames = {r: ctx.frames.full[r] for r in ctx.relations}
    return Outcome(frames, deltas, grown.rounds, capped=grown.capped)


# ---------------------------------------------------------------- the class


SET = SetGrowth()


def bootstrap(run: StratumRun) -> Bootstrapped:
    return bootstrap_with(run, {r: SET for r in run.relations})


def update_applies(ctx: UpdateContext) -> bool:
    """``seminaive``: a ``set`` stratum under insertions."""
    return ctx.stratum.recursive and ctx.strategy == "set" and ctx.insert_only


def update(ctx: UpdateContext) -> Outcome:
    return update_with(ctx, {r: SET for r in ctx.relations})
