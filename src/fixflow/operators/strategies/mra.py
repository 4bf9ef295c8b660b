"""``mra`` strata: monotonic recursive aggregates on an MRA engine (``operators.engines``).

The relation is compiled once per run into an ``MraProgram`` (X⁰, C and the round plans of
F′) and handed to the engine the run was given (``engines.engine_for``, looked up once per
evaluation or Maintainer). The strategy reads the engine's state only through
``MraState``'s accessors.

- bootstrap: ``MraEngine.bootstrap`` (from empty: X⁰ and C seed the table).
- ``mra-retract`` (min/max kept with witnesses): ``mra_retract.retract_on``, in the driver
  (``driver.retraction.DriverRetraction``) where ``placement.place_retraction`` puts it and it
  stays within ``local_rows``, else on Spark (``mra_retract.SparkRetraction``; the log
  says why).
- ``mra-improve`` (min/max, insertions only): the delta rules over the inserted input rows
  give candidate values; the engine resumes from the current fixpoint and only the keys
  they improve become pending.
- ``mra-correction`` (sum/count): exact signed corrections from every changed auxiliary,
  constant or initial fact with the recursive atom bound to the current values, then the
  engine resumes rounds ΔX ← F′(ΔX) under the new facts until the termination clause.

Both updates honour a round budget (async consistency): a resume that runs out leaves its
state with pending deltas, which the Maintainer carries into the next epoch.
"""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fixflow.checker.model import MraSpec
from fixflow.operators.core import Bootstrapped, StratumRun, atoms_over, union_by_name
from fixflow.operators.driver.retraction import DriverRetraction
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.epoch import Abandon, Outcome, UpdateContext
from fixflow.operators.placement import Outgrown, place_retraction
from fixflow.operators.spark_backend import positional
from fixflow.operators.strategies.mra_frames import (
    derive,
    key_columns,
    keyed,
    mra_spec_of,
    resume,
    seed_bodies,
)
from fixflow.operators.strategies.mra_retract import SparkRetraction, retract_on

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- bootstrap


def bootstrap(run: StratumRun) -> Bootstrapped:
    spec = mra_spec_of(run)
    program = MraProgram(spec, run.catalog.types)
    outcome = run.engine.bootstrap(program, run.engine_env(), run.max_iterations, run.round)
    # The rows are a projection of the engine's stored state: no job of their own.
    run.frames.full[spec.relation] = outcome.rows
    return Bootstrapped(outcome.rounds, outcome.capped, {spec.relation: outcome.state})


# ---------------------------------------------------------------- update: improve


def improve_applies(ctx: UpdateContext) -> bool:
    spec = ctx.mra_spec()
    return (
        ctx.strategy == "mra"
        and spec is not None
        and spec.aggregate in ("min", "max")
        and ctx.insert_only
        and spec.relation not in ctx.witnessed  # its candidates carry no witness
    )


def improve(ctx: UpdateContext) -> Outcome:
    """Insert-only min/max: the delta rules over the added input rows give candidate
    values; only the keys they improve become pending."""
    relation = mra_spec_of(ctx).relation
    return resume(ctx, ctx.combine(relation, ctx.inserted_rows(relation)))


# ---------------------------------------------------------------- update: retract


def retract_applies(ctx: UpdateContext) -> bool:
    """min/max kept with its witness: insertions and deletions in one pass."""
    spec = ctx.mra_spec()
    return (
        ctx.strategy == "mra"
        and spec is not None
        and spec.aggregate in ("min", "max")
        and spec.index_pos is None
        and spec.relation in ctx.witnessed
    )


def retract(ctx: UpdateContext) -> Outcome:
    """KickStarter-style trimming, then one resume (``mra_retract.retract_on``): in the
    driver where ``placement.place_retraction`` puts it, else on Spark (the log says why);
    a driver retraction that outgrows ``local_rows`` runs again on Spark."""
    spec = mra_spec_of(ctx)
    program = MraProgram(spec, ctx.catalog.types)
    placement = place_retraction(ctx, program)
    log.info("%s: retracting on %s: %s", spec.relation, placement.where, placement.why)
    if placement.in_driver and ctx.copies is not None:
        try:
            return retract_on(DriverRetraction(ctx, program, ctx.copies), ctx)
        except Outgrown as error:
            log.info("%s: outgrew the driver (%s): retracting on Spark", spec.relation, error)
    return retract_on(SparkRetraction(ctx, program), ctx)


# ---------------------------------------------------------------- update: correction


def correction_applies(ctx: UpdateContext) -> bool:
    """One non-indexed sum/count MRA relation: insertions, deletions and value updates."""
    spec = ctx.mra_spec()
    if ctx.strategy != "mra" or spec is None:
        return False
    return spec.index_pos is None and spec.aggregate in ("sum", "count")


def correction(ctx: UpdateContext) -> Outcome:
    """Exact signed corrections (constant/initial facts, and every changed auxiliary fact
    with the recursive atom bound to the current values) resumed on the engine; then the
    keys that lost every derivation are dropped (``_unsupported``)."""
    spec = mra_spec_of(ctx)
    relation, value = spec.relation, positional(spec.value_pos)
    keys = [positional(i) for i in spec.key_positions]
    current = ctx.frames.full[relation]
    carried = ctx.carried.get(relation)
    if carried is not None:
        # What has been propagated so far is acc − pending: the auxiliary corrections
        # re-weigh exactly that; the pending part propagates under the new facts anyway.
        ctx.frames.full[relation] = carried.propagated_rows().select(*current.columns)
    constant, suspects = _constant_correction(ctx, spec, keys, value)
    seeds = [constant]
    for body, atom in zip(spec.recursive_bodies, spec.recursive_atom_index, strict=True):
        for i in atoms_over(body, ctx.deltas):
            if i == atom:
                continue
            for kind, sign in (("add", 1.0), ("del", -1.0)):
                plan = ctx.rule_rows(spec.head, body, relation_of=ctx.telescoped(body, i, kind))
                rows = ctx.head_rows(relation, plan)
                seeds.append(rows.select(*keys, (F.col(value) * F.lit(sign)).alias("d")))
                if kind == "del":
                    suspects.append(rows.select(*keys))
    seed = union_by_name(seeds).groupBy(*keys).agg(F.sum("d").alias(value))
    ctx.frames.full[relation] = current
    outcome = resume(ctx, seed)
    if ctx.insert_only:  # no key can lose a derivation
        return outcome
    return _without_unsupported(ctx, outcome, suspects)


def _constant_correction(
    ctx: UpdateContext, spec: MraSpec, keys: list[str], value: str
) -> tuple[DataFrame, list[DataFrame]]:
    """G(X⁰ ∪ C) under the new inputs minus under the old ones, per key; and the keys that
    lost their constant support (a list of one frame, or none)."""
    bodies = seed_bodies(spec)
    empty = ctx.frames.empty(spec.relation).select(*keys, F.col(value).alias("d"))
    if not any(atoms_over(b, ctx.deltas) for _, b in bodies):
        return empty, []
    new = ctx.combine(spec.relation, [ctx.rule_rows(r, b) for r, b in bodies])
    old = ctx.combine(
        spec.relation,
        [ctx.rule_rows(r, b, relation_of=ctx.before(b)) for r, b in bodies],
    )
    joined = new.select(*keys, F.col(value).alias("n")).join(
        old.select(*keys, F.col(value).alias("o")), keys, "full_outer"
    )
    lost = joined.where(F.col("n").isNull() & F.col("o").isNotNull()).select(*keys)
    diff = F.coalesce(F.col("n"), F.lit(0)) - F.coalesce(F.col("o"), F.lit(0))
    # Unchanged keys need no correction; a new key appears even when its value is 0.
    changed = joined.where((diff != 0) | F.col("o").isNull()).select(*keys, diff.alias("d"))
    return changed, [lost]


# ---------------------------------------------------------------- support after deletions


def _without_unsupported(
    ctx: UpdateContext, outcome: Outcome, suspects: list[DataFrame]
) -> Outcome:
    """Drop the keys that lost every derivation. A sum's corrections make a key's value
    exact but leave its row; the fresh fixpoint has a row only for a key derivable from
    X⁰/C through the recursive bodies. Only keys downstream of a ``suspect`` (a key a
    deleted fact derived) can have lost that, so this is DRed over derivability:
    over-delete the suspects and what they derive (keys without constant support), then
    re-derive from the rest."""
    spec = mra_spec_of(ctx)
    program, relation = MraProgram(spec, ctx.catalog.types), spec.relation
    rows, positions = outcome.frames[relation], key_columns(spec)
    keys = list(program.keys)
    present = keyed(program, rows)
    seeded = ctx.combine(relation, [ctx.rule_rows(r, b) for r, b in seed_bodies(spec)])
    constant = keyed(program, seeded).select(*keys)
    named = union_by_name(suspects).select(
        *(F.col(p).alias(k) for p, k in zip(positions, keys, strict=True))
    )
    over, n = ctx.materializer.keep_counted(
        named.distinct().join(present, keys, "left_semi").join(constant, keys, "left_anti")
    )
    if not n:
        return outcome
    if outcome.carried:
        raise Abandon("a key may have lost its support while deltas are pending")
    over = _over_deleted(ctx, program, rows, over, constant)
    over = _rederived(ctx, program, rows, over)
    kept = rows.join(F.broadcast(over.toDF(*positions)), positions, "left_anti")
    kept = ctx.materializer.keep(kept.select(*rows.columns))
    original = ctx.frames.full[relation]
    changes = {relation: ctx.changes(original, kept)}
    return Outcome({relation: kept}, changes, outcome.rounds, carried=outcome.carried)


def _over_deleted(
    ctx: UpdateContext, program: MraProgram, rows: DataFrame, over: DataFrame, constant: DataFrame
) -> DataFrame:
    """``over`` (keys ``k0..``) and every key it derives that has no constant support."""
    keys, frontier = list(program.keys), over
    for _ in range(ctx.max_iterations):
        children = _derived_keys(ctx, program, _rows_of(program, rows, frontier))
        children = children.join(keyed(program, rows), keys, "left_semi")
        children = children.join(constant, keys, "left_anti").join(over, keys, "left_anti")
        frontier, n = ctx.materializer.keep_counted(children)
        if not n:
            return over
        over = ctx.materializer.keep(over.unionByName(frontier))
    raise Abandon("over-deleting unsupported keys did not end within the round cap")


def _rederived(
    ctx: UpdateContext, program: MraProgram, rows: DataFrame, over: DataFrame
) -> DataFrame:
    """The keys of ``over`` that nothing outside it derives, transitively: unsupported."""
    keys = list(program.keys)
    frontier = rows.join(
        F.broadcast(_positional_keys(program, over)), key_columns(program.spec), "left_anti"
    )
    for _ in range(ctx.max_iterations):
        back = _derived_keys(ctx, program, frontier).join(over, keys, "left_semi")
        back, n = ctx.materializer.keep_counted(back)
        if not n:
            return over
        over = ctx.materializer.keep(over.join(back, keys, "left_anti"))
        frontier = _rows_of(program, rows, back)
    raise Abandon("re-deriving supported keys did not end within the round cap")


def _derived_keys(ctx: UpdateContext, program: MraProgram, frontier: DataFrame) -> DataFrame:
    """The keys ``k0..`` the recursive bodies derive from ``frontier`` under the new facts."""
    keys = list(program.keys)
    derived = [
        derive(ctx, program, i, {}, frontier).select(*keys) for i in range(len(program.bodies))
    ]
    return union_by_name(derived).distinct()


def _positional_keys(program: MraProgram, keyed: DataFrame) -> DataFrame:
    return keyed.toDF(*key_columns(program.spec))


def _rows_of(program: MraProgram, rows: DataFrame, keyed: DataFrame) -> DataFrame:
    """The rows of ``rows`` whose key is in ``keyed`` (``k0..``)."""
    positions = key_columns(program.spec)
    return rows.join(F.broadcast(_positional_keys(program, keyed)), positions, "left_semi")
