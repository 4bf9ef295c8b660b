"""``mra`` strata: monotonic recursive aggregates on an MRA engine (``operators.engines``).

The relation is compiled once per run into an ``MraProgram`` (X⁰, C and the round plans of
F′) and handed to the engine the run was given (``engines.engine_for``, looked up once per
evaluation or Maintainer). The strategy reads the engine's state only through
``MraState``'s accessors.

- bootstrap: ``MraEngine.bootstrap`` (from empty: X⁰ and C seed the table).
- ``mra-retract`` (min/max kept with witnesses): in the driver (``operators.local_update``)
  where ``placement.place_retraction`` puts it and it stays within ``local_rows``, else on
  Spark below (the log says why).
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

from fixflow.checker import ast
from fixflow.checker.model import MraSpec
from fixflow.operators import local_update
from fixflow.operators.core import Bootstrapped, StratumRun, atoms_over, union_by_name
from fixflow.operators.engines.program import (
    MraProgram,
    aux_frame,
    head_aux_columns,
    output_column,
)
from fixflow.operators.epoch import Abandon, Outcome, UpdateContext
from fixflow.operators.placement import Outgrown, place_retraction
from fixflow.operators.plan import Plan, Version
from fixflow.operators.spark_backend import SparkBackend, positional
from fixflow.operators.witness import descendants

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- bootstrap


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
        and spec.relation not in ctx.witnessed  # its candidates carry no witness
    )


def improve(ctx: UpdateContext) -> Outcome:
    """Insert-only min/max: the delta rules over the added input rows give candidate
    values; only the keys they improve become pending."""
    relation = _spec(ctx).relation
    return _resume(ctx, ctx.combine(relation, ctx.inserted_rows(relation)))


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
    """KickStarter-style trimming, then one resume: the keys whose witness chain passes
    through a deleted fact (or a key it invalidates) are reset and re-seeded from their
    surviving in-neighbours and X⁰/C; the insertions' candidates (with witnesses) join the
    same seed. Surviving values are still derivable (their chain survived) and no worse
    than before, so resuming from them converges to the new fixpoint."""
    spec = _spec(ctx)
    program = MraProgram(spec, ctx.catalog.types)
    placement = place_retraction(ctx, program)
    log.info("%s: retracting on %s: %s", spec.relation, placement.where, placement.why)
    if placement.in_driver and ctx.copies is not None:
        try:
            return local_update.retract(ctx, program, ctx.copies)
        except Outgrown as error:
            log.info("%s: outgrew the driver (%s): retracting on Spark", spec.relation, error)
    witnessed = ctx.witnessed[spec.relation]
    surviving, seeds = witnessed, []
    roots = _roots(ctx, program, witnessed)
    if roots is not None:
        if spec.relation in ctx.carried:
            raise Abandon("a deletion while deltas are pending")
        gone, n_gone = ctx.materializer.keep_counted(
            descendants(_keyed(program, witnessed, wits=True), roots, program.keys)
        )
        log.info("%s: %d key(s) lost their witness chain", spec.relation, n_gone)
        if n_gone:
            positions = _key_columns(spec)
            renamed = gone.toDF(*positions)
            surviving = witnessed.join(F.broadcast(renamed), positions, "left_anti")
            seeds += _reseeded(ctx, program, surviving, gone)
    seeds += _inserted(ctx, program, surviving)
    return _resume(ctx, _candidate_union(ctx, seeds, program), rows=surviving)


def _key_columns(spec: MraSpec) -> list[str]:
    return [positional(p) for p in spec.key_positions]


def _keyed(program: MraProgram, rows: DataFrame, wits: bool = False) -> DataFrame:
    """Positional relation rows as ``k0..`` (and ``w0..``)."""
    keys = zip(program.keys, program.spec.key_positions, strict=True)
    columns = [F.col(positional(p)).alias(k) for k, p in keys]
    return rows.select(*columns, *((f"w{j}" for j in range(len(program.keys))) if wits else ()))


def _roots(ctx: UpdateContext, program: MraProgram, witnessed: DataFrame) -> DataFrame | None:
    """Keys (``k0..``) a deleted fact supported directly: a recursive derivation through a
    deleted row matching the key's witness, or a deleted X⁰/C derivation of a key without
    a witness. None without deletions."""
    spec, frames = program.spec, []
    wits = [f"w{j}" for j in range(len(program.keys))]
    with_witness = _keyed(program, witnessed, wits=True)
    for i, body in enumerate(spec.recursive_bodies):
        for j in _changed_atoms(ctx, body, "del", skip=spec.recursive_atom_index[i]):
            derived = _derive(ctx, program, i, _through(ctx, body, j, "del"), witnessed)
            # The whole table on the streamed side: the derivations are few (broadcast).
            matched = with_witness.join(F.broadcast(derived), [*program.keys, *wits], "left_semi")
            frames.append(matched.select(*program.keys))
    seeded = with_witness.where(F.col("w0").isNull()).select(*program.keys)
    for rule, body in _seed_bodies(spec):
        for j in _changed_atoms(ctx, body, "del"):
            plan = ctx.rule_rows(rule, body, relation_of=_through(ctx, body, j, "del"))
            rows = _keyed(program, ctx.head_rows(spec.relation, plan))
            frames.append(seeded.join(F.broadcast(rows), list(program.keys), "left_semi"))
    return union_by_name(frames) if frames else None


def _reseeded(
    ctx: UpdateContext, program: MraProgram, surviving: DataFrame, gone: DataFrame
) -> list[DataFrame]:
    """Candidates for the invalidated keys ``gone`` (``k0..``): F′ over their surviving
    in-neighbours under the new facts, and X⁰/C."""
    keys = list(program.keys)
    small = F.broadcast(gone)
    seeds = [
        _derive(ctx, program, i, {}, surviving, heads=gone).join(small, keys, "left_semi")
        for i in range(len(program.bodies))
    ]
    for plan in (*program.init_plans, *program.constant_plans):
        seeds.append(_plan_candidates(ctx, plan).join(small, keys, "left_semi"))
    return seeds


def _inserted(ctx: UpdateContext, program: MraProgram, surviving: DataFrame) -> list[DataFrame]:
    """Candidates the epoch's insertions derive: F′ over the surviving keys through added
    rows (with witnesses), and X⁰/C over added rows."""
    spec, seeds = program.spec, []
    for i, body in enumerate(spec.recursive_bodies):
        for j in _changed_atoms(ctx, body, "add", skip=spec.recursive_atom_index[i]):
            seeds.append(_derive(ctx, program, i, _through(ctx, body, j, "add"), surviving))
    for rule, body in _seed_bodies(spec):
        for j in _changed_atoms(ctx, body, "add"):
            plan = ctx.rule_rows(rule, body, relation_of=_through(ctx, body, j, "add"))
            seeds.append(program.candidates(ctx.head_rows(spec.relation, plan)))
    return seeds


def _changed_atoms(
    ctx: UpdateContext, body: ast.Body, kind: str, skip: int | None = None
) -> list[int]:
    """Atoms of ``body`` over an input that gained (``add``) or lost (``del``) rows."""
    found = []
    for j in atoms_over(body, ctx.deltas):
        atom = body.literals[j]
        assert isinstance(atom, ast.Atom)
        delta = ctx.deltas[atom.relation]
        if j != skip and (delta.n_added if kind == "add" else delta.n_removed):
            found.append(j)
    return found


def _through(ctx: UpdateContext, body: ast.Body, j: int, kind: str) -> dict[int, str]:
    """Derivations through atom ``j``'s added (deleted) rows, every other changed atom
    reading its new (old) rows. Not the telescoped terms of a sum: a min/max candidate must
    be derived from facts that hold now, and a root from facts that held before."""
    others = ctx.before(body) if kind == "del" else {}
    return {**others, j: ctx.projected_delta(body, j, kind)}


def _seed_bodies(spec: MraSpec) -> list[tuple[ast.Rule, ast.Body]]:
    """X⁰ and C: the rule bodies that seed the relation."""
    bodies = [(spec.head, b) for b in spec.constant_bodies]
    return bodies + [(r, b) for r in spec.init_rules for b in r.bodies]


def _derive(
    ctx: UpdateContext,
    program: MraProgram,
    i: int,
    relation_of: dict[int, str],
    frontier: DataFrame,
    heads: DataFrame | None = None,
) -> DataFrame:
    """Recursive body ``i`` over ``frontier`` (positional relation rows) with its atoms
    reading ``relation_of``'s names: candidates ``k0.., v, w0..``. The auxiliary side is
    broadcast: it is an epoch's changed rows, or cut down to the rows leading to the keys
    ``heads`` (``k0..``, few) where the head copies its keys from it."""
    body = program.recursive_body(i, relation_of) if relation_of else program.bodies[i]
    tables = {}
    if body.aux_plan is not None:
        aux = aux_frame(body, ctx.backend)
        columns = head_aux_columns(body, program.keys)
        if heads is not None and columns is not None:
            aux = aux.join(F.broadcast(heads.toDF(*columns)), columns, "left_semi")
        small = relation_of or (heads is not None and columns is not None)
        tables[body.aux_name] = F.broadcast(aux) if small else aux
    rows = frontier.select(*(positional(p) for p in range(len(program.types))))

    def source(relation: str, version: Version) -> DataFrame:
        if version == "aux":
            return tables[relation]
        if version == "delta" and relation == program.relation:
            return rows
        return ctx.frames.source(relation, version)

    derived = SparkBackend(ctx.spark, source).run(body.plan)
    names = [*program.keys, "v", *(f"w{j}" for j in range(len(program.keys)))]
    return derived.select(*(F.col(output_column(n)).alias(n) for n in names))


def _plan_candidates(ctx: UpdateContext, plan: Plan) -> DataFrame:
    """An X⁰/C plan's rows (``k0.., v``) over the current inputs."""
    frame = ctx.backend.run(plan)
    return frame.select(*(F.col(output_column(n)).alias(n) for n, _ in plan.schema))


def _candidate_union(ctx: UpdateContext, frames: list[DataFrame], program: MraProgram) -> DataFrame:
    """Candidates ``k0.., v, w0..`` (a missing witness is null)."""
    names = [*program.keys, "v", *(f"w{j}" for j in range(len(program.keys)))]
    union = program.candidates(ctx.frames.empty(program.relation))
    for other in frames:
        union = union.unionByName(other, allowMissingColumns=True)
    missing = [n for n in names if n not in union.columns]
    return union.select(*union.columns, *(F.lit(None).alias(n) for n in missing))


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
    spec = _spec(ctx)
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
    outcome = _resume(ctx, seed)
    if ctx.insert_only:  # no key can lose a derivation
        return outcome
    return _without_unsupported(ctx, outcome, suspects)


def _constant_correction(
    ctx: UpdateContext, spec: MraSpec, keys: list[str], value: str
) -> tuple[DataFrame, list[DataFrame]]:
    """G(X⁰ ∪ C) under the new inputs minus under the old ones, per key; and the keys that
    lost their constant support (a list of one frame, or none)."""
    bodies = _seed_bodies(spec)
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
    spec = _spec(ctx)
    program, relation = MraProgram(spec, ctx.catalog.types), spec.relation
    rows, positions = outcome.frames[relation], _key_columns(spec)
    keys = list(program.keys)
    present = _keyed(program, rows)
    seeded = ctx.combine(relation, [ctx.rule_rows(r, b) for r, b in _seed_bodies(spec)])
    constant = _keyed(program, seeded).select(*keys)
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
        children = children.join(_keyed(program, rows), keys, "left_semi")
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
        F.broadcast(_positional_keys(program, over)), _key_columns(program.spec), "left_anti"
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
        _derive(ctx, program, i, {}, frontier).select(*keys) for i in range(len(program.bodies))
    ]
    return union_by_name(derived).distinct()


def _positional_keys(program: MraProgram, keyed: DataFrame) -> DataFrame:
    return keyed.toDF(*_key_columns(program.spec))


def _rows_of(program: MraProgram, rows: DataFrame, keyed: DataFrame) -> DataFrame:
    """The rows of ``rows`` whose key is in ``keyed`` (``k0..``)."""
    positions = _key_columns(program.spec)
    return rows.join(F.broadcast(_positional_keys(program, keyed)), positions, "left_semi")


# ---------------------------------------------------------------- resuming


def _resume(ctx: UpdateContext, seed: DataFrame, rows: DataFrame | None = None) -> Outcome:
    """Resume the relation from ``rows`` (default: its current rows; with witnesses when
    kept) or its carried state with ``seed`` (candidates or corrections ``k0.., v``)."""
    spec = _spec(ctx)
    relation = spec.relation
    program = MraProgram(spec, ctx.catalog.types)
    original = ctx.frames.full[relation]
    # The budget counts propagation rounds; the seed's merge comes on top of them.
    budget = min(ctx.max_iterations, ctx.round_budget + 1 if ctx.round_budget else 1 << 62)
    outcome = ctx.engine.resume(
        program,
        ctx.engine_env(),
        original if rows is None else rows,
        seed if rows is not None else program.candidates(seed),
        budget,
        ctx.round,
        carried=ctx.carried.get(relation),
    )
    current = outcome.rows.select(*original.columns)
    left = {relation: outcome.state} if outcome.capped else {}
    if outcome.capped and ctx.round_budget is None:  # the Maintainer warns
        log.info("%s: hit the iteration cap (%d rounds)", relation, ctx.max_iterations)
    changes = {relation: ctx.changes(original, current)}
    witnessed = {relation: outcome.state.witnessed_rows()} if rows is not None else {}
    capped = outcome.capped and ctx.round_budget is None  # else: carried on, not cut short
    return Outcome(
        {relation: current},
        changes,
        outcome.rounds,
        carried=left,
        witnessed=witnessed,
        capped=capped,
    )
