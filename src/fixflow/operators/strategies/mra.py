"""``mra`` strata: monotonic recursive aggregates on an MRA engine (``operators.engines``).

The relation is compiled once per run into an ``MraProgram`` (X⁰, C and the round plans of
F′) and handed to the engine the run was given (``engines.engine_for``, looked up once per
evaluation or Maintainer). The strategy reads the engine's state only through
``MraState``'s accessors.

- bootstrap: ``MraEngine.bootstrap`` (from empty: X⁰ and C seed the table).
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
from fixflow.operators.compiler import positional
from fixflow.operators.core import Bootstrapped, StratumRun, atoms_over
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.epoch import Abandon, Outcome, UpdateContext

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- bootstrap


def bootstrap_applies(run: StratumRun) -> bool:
    if run.strategy != "mra":
        return False
    if run.mra_spec() is None:
        log.warning(
            "stratum %s: MRA over several relations is not supported; "
            "falling back to another strategy",
            run.relations,
        )
        return False
    return True


def bootstrap(run: StratumRun) -> Bootstrapped:
    spec = _spec(run)
    program = MraProgram(spec, run.catalog.types)
    outcome = run.engine.bootstrap(program, run.engine_env(), run.max_iterations, run.round)
    # The rows are a projection of the engine's stored state: no job of their own.
    run.frames.full[spec.relation] = outcome.rows
    return Bootstrapped(outcome.rounds, outcome.capped, {spec.relation: outcome.state})


def _spec(run: StratumRun) -> MraSpec:
    spec = run.mra_spec()
    assert spec is not None, "the MRA strategy runs only where mra_spec() is known"
    return spec


# ---------------------------------------------------------------- update: improve


def improve_applies(ctx: UpdateContext) -> bool:
    spec = ctx.mra_spec()
    return (
        ctx.strategy == "mra"
        and spec is not None
        and spec.aggregate in ("min", "max")
        and ctx.insert_only
    )


def improve(ctx: UpdateContext) -> Outcome:
    """Insert-only min/max: the delta rules over the added input rows give candidate
    values; only the keys they improve become pending."""
    relation = _spec(ctx).relation
    return _resume(ctx, ctx.combine(relation, ctx.inserted_rows(relation)))


# ---------------------------------------------------------------- update: correction


def correction_applies(ctx: UpdateContext) -> bool:
    """One non-indexed sum/count MRA relation; removals only as value updates of an
    aggregate input (a key's row replaced), so no key can lose its support."""
    spec = ctx.mra_spec()
    if ctx.strategy != "mra" or spec is None:
        return False
    if spec.index_pos is not None or spec.aggregate not in ("sum", "count"):
        return False
    return all(not d.n_removed or _keys_survive(ctx, rel) for rel, d in ctx.deltas.items())


def _keys_survive(ctx: UpdateContext, relation: str) -> bool:
    """Every key of an input that lost rows still has a row (its value was replaced)."""
    entry = ctx.entry(relation)
    if entry.value_pos is None:
        return False
    current = ctx.frames.full[relation]
    if not entry.key_positions:  # a single group: it survives while the relation has a row
        return not current.limit(1).isEmpty()
    keys = [positional(i) for i in entry.key_positions]
    removed = ctx.deltas[relation].removed.select(*keys)
    return removed.join(current.select(*keys), keys, "left_anti").isEmpty()


def correction(ctx: UpdateContext) -> Outcome:
    """Exact signed corrections (constant/initial facts, and every changed auxiliary fact
    with the recursive atom bound to the current values) resumed on the engine."""
    spec = _spec(ctx)
    relation, value = spec.relation, positional(spec.value_pos)
    keys = [positional(i) for i in spec.key_positions]
    current = ctx.frames.full[relation]
    carried = ctx.carried.get(relation)
    if carried is not None:
        # What has been propagated so far is acc − pending: the auxiliary corrections
        # re-weigh exactly that; the pending part propagates under the new facts anyway.
        ctx.frames.full[relation] = carried.propagated_rows().select(*current.columns)
    seeds = [_constant_correction(ctx, spec, keys, value)]
    for body, atom in zip(spec.recursive_bodies, spec.recursive_atom_index, strict=True):
        for i in atoms_over(body, ctx.deltas):
            if i == atom:
                continue
            for kind, sign in (("add", 1.0), ("del", -1.0)):
                plan = ctx.rule_rows(spec.head, body, relation_of=ctx.telescoped(body, i, kind))
                rows = ctx.head_rows(relation, plan)
                seeds.append(rows.select(*keys, (F.col(value) * F.lit(sign)).alias("d")))
    union = seeds[0]
    for other in seeds[1:]:
        union = union.unionByName(other)
    seed = union.groupBy(*keys).agg(F.sum("d").alias(value))
    ctx.frames.full[relation] = current
    return _resume(ctx, seed)


def _constant_correction(
    ctx: UpdateContext, spec: MraSpec, keys: list[str], value: str
) -> DataFrame:
    """G(X⁰ ∪ C) under the new inputs minus under the old ones, per key."""
    bodies = [(spec.head, b) for b in spec.constant_bodies]
    bodies += [(r, b) for r in spec.init_rules for b in r.bodies]
    empty = ctx.frames.empty(spec.relation).select(*keys, F.col(value).alias("d"))
    if not any(atoms_over(b, ctx.deltas) for _, b in bodies):
        return empty
    new = ctx.combine(spec.relation, [ctx.rule_rows(r, b) for r, b in bodies])
    old = ctx.combine(
        spec.relation,
        [ctx.rule_rows(r, b, relation_of=ctx.before(b)) for r, b in bodies],
    )
    joined = new.select(*keys, F.col(value).alias("n")).join(
        old.select(*keys, F.col(value).alias("o")), keys, "full_outer"
    )
    if not joined.where(F.col("n").isNull() & F.col("o").isNotNull()).isEmpty():
        raise Abandon("a key lost its constant support")
    diff = F.coalesce(F.col("n"), F.lit(0)) - F.coalesce(F.col("o"), F.lit(0))
    # Unchanged keys need no correction; a new key appears even when its value is 0.
    return joined.where((diff != 0) | F.col("o").isNull()).select(*keys, diff.alias("d"))


# ---------------------------------------------------------------- resuming


def _resume(ctx: UpdateContext, seed: DataFrame) -> Outcome:
    """Resume the relation from its current rows (or its carried state) with ``seed``
    (positional rows whose value column holds the candidate or the correction)."""
    spec = _spec(ctx)
    relation = spec.relation
    program = MraProgram(spec, ctx.catalog.types)
    original = ctx.frames.full[relation]
    # The budget counts propagation rounds; the seed's merge comes on top of them.
    budget = min(ctx.max_iterations, ctx.round_budget + 1 if ctx.round_budget else 1 << 62)
    outcome = ctx.engine.resume(
        program,
        ctx.engine_env(),
        original,
        program.candidates(seed),
        budget,
        ctx.round,
        carried=ctx.carried.get(relation),
    )
    current = outcome.rows.select(*original.columns)
    left = {relation: outcome.state} if outcome.capped else {}
    if outcome.capped and ctx.round_budget is None:
        log.warning("%s: hit the iteration cap (%d rounds)", relation, ctx.max_iterations)
    changes = {relation: ctx.changes(original, current)}
    return Outcome({relation: current}, changes, outcome.rounds, carried=left)
