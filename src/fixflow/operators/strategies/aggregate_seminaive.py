"""``aggregate-seminaive`` strata: the semi-naive loop of ``seminaive`` over aggregates.

Min/max recursion that is monotone but not linear (APSP ``path ⋈ path``, max-probability
paths) and mutual recursion through a monotone count (Attend/Party). A round keeps, per
relation:

- min/max: only the groups whose value improves (``rounds.improves``); the delta rules read
  the improved groups;
- count/sum/mean (not idempotent): the whole aggregate recomputed from the full relations;
  the groups whose value changed are the delta;
- a set relation of the stratum: new tuples (``seminaive.SetGrowth``).

Also the fallback of an ``mra`` stratum the MRA engine cannot run (several relations).
Bootstrap = the continuation from empty, seeded by the exit rules; the ``continuation``
update (min/max, insertions only) = the continuation from the current fixpoint, seeded by
the delta rules of the inserted rows. Deletions (and count insertions): ``dred``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fixflow.checker.catalog import RelationEntry
from fixflow.operators.change import Change
from fixflow.operators.core import Bootstrapped, StratumRun
from fixflow.operators.epoch import Outcome, UpdateContext
from fixflow.operators.plan import Plan
from fixflow.operators.rounds import improves
from fixflow.operators.spark_backend import join_on, minus, positional
from fixflow.operators.strategies.seminaive import (
    SET,
    Growth,
    SetGrowth,
    bootstrap_with,
    update_with,
)


class ImprovingGrowth(SetGrowth):
    """min/max: the delta is the groups whose value improves; they replace their rows."""

    def new_rows(self, run: StratumRun, relation: str, derived: DataFrame) -> DataFrame:
        entry = run.entry(relation)
        current = run.frames.full[relation]
        keys, value = _keys(entry), positional(_value_pos(entry))
        joined = derived.withColumnRenamed(value, "n").join(
            current.select(*keys, F.col(value).alias("o")), keys, "left"
        )
        new, old = F.col("n"), F.col("o")
        better = new.isNotNull() & (old.isNull() | improves(str(entry.aggregate), new, old))
        improved = joined.where(better).select(*keys, new.alias(value))
        return improved.select(*current.columns)

    def merged(
        self, run: StratumRun, relation: str, older: DataFrame, newer: DataFrame
    ) -> DataFrame:
        keys = _keys(run.entry(relation))
        return join_on(older, newer.select(*keys), keys, "left_anti").unionByName(newer)

    def changes(
        self, ctx: UpdateContext, relation: str, original: DataFrame, touched: list[DataFrame]
    ) -> Change[DataFrame]:
        if not touched:
            return ctx.no_change(relation)
        keys = _keys(ctx.entry(relation))
        changed = touched[0].select(*keys)
        for other in touched[1:]:
            changed = changed.unionByName(other.select(*keys))
        changed = changed.distinct()
        now = join_on(ctx.frames.full[relation], changed, keys, "left_semi")
        before = join_on(original, changed, keys, "left_semi")
        return ctx.delta(minus(now, before), minus(before, now))


class RecomputingGrowth(ImprovingGrowth):
    """count/sum/mean: every round recomputes the aggregate from the full relations; the
    groups whose row changed are the delta (the bootstrap's; ``dred.Regrouping``
    recomputes only the groups a delta reaches)."""

    def step(self, run: StratumRun, relation: str) -> list[Plan]:
        return [run.rule_rows(r, b) for r in run.rules(relation) for b in r.bodies]

    def new_rows(self, run: StratumRun, relation: str, derived: DataFrame) -> DataFrame:
        current = run.frames.full[relation]
        return derived.join(current, current.columns, "left_anti")


IMPROVING, RECOMPUTING = ImprovingGrowth(), RecomputingGrowth()


def growth_for(entry: RelationEntry) -> Growth:
    if entry.aggregate is None:
        return SET
    return IMPROVING if entry.aggregate in ("min", "max") else RECOMPUTING


def _keys(entry: RelationEntry) -> list[str]:
    return [positional(i) for i in entry.key_positions]


def _value_pos(entry: RelationEntry) -> int:
    assert entry.value_pos is not None, f"`{entry.name}` has no aggregate"
    return entry.value_pos


def improving_only(run: StratumRun) -> bool:
    return all(e.aggregate in (None, "min", "max") for e in run.entries())


# ---------------------------------------------------------------- the class


def bootstrap(run: StratumRun) -> Bootstrapped:
    return bootstrap_with(run, {r: growth_for(run.entry(r)) for r in run.relations})


def update_applies(ctx: UpdateContext) -> bool:
    """``continuation``: min/max (or set) relations under insertions."""
    fallback = ctx.strategy == "mra" and ctx.mra_spec() is None
    return (
        (ctx.strategy == "aggregate-seminaive" or fallback)
        and ctx.insert_only
        and improving_only(ctx)
    )


def update(ctx: UpdateContext) -> Outcome:
    return update_with(ctx, {r: growth_for(ctx.entry(r)) for r in ctx.relations})
