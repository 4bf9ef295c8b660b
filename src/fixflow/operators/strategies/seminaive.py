"""``set`` strata (recursion without aggregates): semi-naive evaluation, the one loop.

``continuation(run, seeds, growth)`` runs semi-naive rounds from the stratum relations'
current rows: round 1 derives the ``seeds`` (head-row plans per relation); every later
round derives each relation's ``Growth.step`` (one delta rule per occurrence of a stratum
relation in a body, reading the previous round's new rows). Per round and relation one job
materializes the new rows (and counts them); the full relation is merged lazily and
materialized every ``COMPACT_EVERY`` rounds. ``aggregate_seminaive`` runs the same
loop with growths that keep only improved groups.

- bootstrap = the continuation from empty relations, seeded by the exit rules (bodies
  without an atom of the stratum): what semi-naive evaluation is;
- ``seminaive`` update (insertions only) = the continuation from the current fixpoint,
  seeded by the delta rules of the inserted input rows; with deletions, ``dred`` runs the
  loop three times (over-delete, re-derive, continue).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pyspark.sql import DataFrame

from fixflow.operators.core import Bootstrapped, StratumRun, bounded, union_by_name
from fixflow.operators.engines.base import RoundInfo
from fixflow.operators.epoch import Delta, Outcome, UpdateContext
from fixflow.operators.plan import Plan

COMPACT_EVERY = 8
"""Rounds between materializations of the (lazily merged) full relations, bootstrap and
update alike."""


class Growth(Protocol):
    """How one relation grows in a semi-naive round."""

    def step(self, run: StratumRun, relation: str) -> list[Plan]:
        """The head rows to derive in the next round."""
        ...

    def new_rows(self, run: StratumRun, relation: str, derived: DataFrame) -> DataFrame:
        """Of the rows derived this round, those that change the relation (its delta)."""
        ...

    def merged(self, run: StratumRun, relation: str, delta: DataFrame) -> DataFrame:
        """The relation's rows with this round's delta."""
        ...

    def changes(
        self, ctx: UpdateContext, relation: str, original: DataFrame, touched: list[DataFrame]
    ) -> Delta:
        """An update's change of the relation, from its rows before and its deltas."""
        ...


class SetGrowth:
    """A set relation: new tuples are the delta, the relation is their union."""

    def step(self, run: StratumRun, relation: str) -> list[Plan]:
        return delta_rules(run, relation)

    def new_rows(self, run: StratumRun, relation: str, derived: DataFrame) -> DataFrame:
        current = run.frames.full[relation]
        return derived.join(current, current.columns, "left_anti")

    def merged(self, run: StratumRun, relation: str, delta: DataFrame) -> DataFrame:
        return run.frames.full[relation].unionByName(delta)

    def changes(
        self, ctx: UpdateContext, relation: str, original: DataFrame, touched: list[DataFrame]
    ) -> Delta:
        if not touched:
            return ctx.no_change(relation)
        return ctx.delta(union_by_name(touched).distinct(), ctx.frames.empty(relation))


def delta_rules(run: StratumRun, relation: str) -> list[Plan]:
    """One rule per occurrence of a stratum relation in a body, reading its last delta."""
    return [
        run.rule_rows(rule, body, versions={k: "delta"})
        for rule in run.rules(relation)
        for body in rule.bodies
        for k in run.occurrences(body)
    ]


def exit_rules(run: StratumRun) -> dict[str, list[Plan]]:
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
    dirty: set[str] = field(default_factory=set)
    """Relations merged since their last materialization."""


def continuation(
    run: StratumRun, seeds: Mapping[str, list[Plan]], growth: Mapping[str, Growth]
) -> Grown:
    """Semi-naive rounds from the relations' current rows (empty when absent), round 1
    deriving ``seeds``, until no relation changes or ``max_iterations`` rounds ran."""
    relations, full = run.relations, run.frames.full
    for relation in relations:
        full.setdefault(relation, run.frames.empty(relation))
    grown = Grown({r: full[r] for r in relations}, {r: [] for r in relations})
    plans, pending = dict(seeds), 1
    while pending and grown.rounds < run.max_iterations:
        # Every relation's derivation reads the previous round: build all, then update.
        new = {r: growth[r].new_rows(run, r, run.combine(r, plans[r])) for r in relations}
        pending = sum(_advance(run, growth[r], r, new[r], grown) for r in relations)
        grown.rounds += 1
        if grown.rounds % COMPACT_EVERY == 0:
            _compact(run, grown)
        run.round(RoundInfo(grown.rounds, pending, None))
        plans = {r: growth[r].step(run, r) for r in relations}
    _compact(run, grown)
    for relation in relations:
        run.frames.delta.pop(relation, None)
    grown.capped = bool(pending)
    return grown


def _advance(run: StratumRun, growth: Growth, relation: str, new: DataFrame, grown: Grown) -> int:
    """Store one relation's new rows as its delta and merge them; their number."""
    delta, count = run.materializer.keep_counted(new)
    run.frames.delta[relation] = delta
    if count:
        grown.touched[relation].append(delta)
        run.frames.full[relation] = growth.merged(run, relation, delta)
        grown.dirty.add(relation)
    return count


def _compact(run: StratumRun, grown: Grown) -> None:
    """Materialize the relations merged since the last time, cutting their lineage (in no
    more partitions than they started with: each merge adds its delta's)."""
    for relation in sorted(grown.dirty):
        merged = run.frames.full[relation]
        run.frames.full[relation] = run.keep(bounded(merged, grown.original[relation]))
    grown.dirty.clear()


def bootstrap_with(run: StratumRun, growth: Mapping[str, Growth]) -> Bootstrapped:
    """The continuation from empty relations seeded by the exit rules."""
    grown = continuation(run, exit_rules(run), growth)
    return Bootstrapped(grown.rounds, grown.capped)


def update_with(ctx: UpdateContext, growth: Mapping[str, Growth]) -> Outcome:
    """The continuation from the current rows seeded by the inserted rows' delta rules."""
    grown = continuation(ctx, {r: ctx.inserted_rows(r) for r in ctx.relations}, growth)
    deltas = {
        r: growth[r].changes(ctx, r, grown.original[r], grown.touched[r]) for r in ctx.relations
    }
    return Outcome({r: ctx.frames.full[r] for r in ctx.relations}, deltas, grown.rounds)


# ---------------------------------------------------------------- the class


SET = SetGrowth()


def bootstrap_applies(run: StratumRun) -> bool:
    return run.strategy in ("set", "mra") and all(e.aggregate is None for e in run.entries())


def bootstrap(run: StratumRun) -> Bootstrapped:
    return bootstrap_with(run, {r: SET for r in run.relations})


def update_applies(ctx: UpdateContext) -> bool:
    """``seminaive``: a ``set`` stratum under insertions."""
    return ctx.stratum.recursive and ctx.strategy == "set" and ctx.insert_only


def update(ctx: UpdateContext) -> Outcome:
    return update_with(ctx, {r: SET for r in ctx.relations})
