"""Non-recursive strata: joins, filters, group-by aggregates and anti-joins, evaluated once.

Bootstrap: G over every body, materialized. Updates (exact):

- ``delta-rules`` (insertions only, no aggregate): one delta rule per body atom over a
  changed input, reading its added rows; added = derived − current.
- ``affected-groups`` (otherwise, when every head key is a distinct variable): the groups
  (head keys) whose bindings gained or lost a row are re-derived from the new inputs,
  joined onto the affected keys; old vs new rows of those groups give the change.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from fixflow.checker import ast
from fixflow.checker.catalog import RelationEntry
from fixflow.operators.change import Change
from fixflow.operators.core import Bootstrapped, StratumRun, appended, atoms_over, extended
from fixflow.operators.epoch import Outcome, UpdateContext
from fixflow.operators.plan import Plan, Scan, Union
from fixflow.operators.spark_backend import join_on, minus, positional

# ---------------------------------------------------------------- bootstrap


def bootstrap(run: StratumRun) -> Bootstrapped:
    for relation in run.relations:
        run.frames.full[relation] = run.keep(run.derive(relation))
    return Bootstrapped(rounds=1)


# ---------------------------------------------------------------- update: delta rules


def delta_rules_applies(ctx: UpdateContext) -> bool:
    return (
        not ctx.stratum.recursive
        and ctx.insert_only
        and all(e.aggregate is None for e in ctx.entries())
    )


def delta_rules(ctx: UpdateContext) -> Outcome:
    """Insert-only, no aggregate: added = ∪ delta rules − current; for a one-to-one copy
    of one input (``copied_atom``), added = the input's added rows, mapped."""
    frames, deltas = {}, {}
    for relation in ctx.relations:
        current = ctx.frames.full[relation]
        copied = copied_atom(ctx, relation)
        if copied is not None:
            delta = _copied_delta(ctx, relation, copied)
        else:
            derived = ctx.combine(relation, ctx.inserted_rows(relation))
            added = join_on(derived, current, current.columns, "left_anti")
            delta = ctx.delta(added, ctx.frames.empty(relation))
        # A stored delta (ctx.delta, or a map of a stored input delta) becomes a segment of
        # the relation with no job.
        frames[relation] = (
            extended(ctx.materializer, current, delta.added, stored=delta.stored)
            if delta.n_added
            else current
        )
        deltas[relation] = delta
    return Outcome(frames, deltas)


def copies_only(ctx: UpdateContext) -> bool:
    """``delta-rules`` applies and every relation of the stratum is a one-to-one copy of
    a changed atom: the update maps the input's new rows, at no more than one map-only
    job per relation, whatever their number."""
    return delta_rules_applies(ctx) and all(copied_atom(ctx, r) is not None for r in ctx.relations)


def copied_atom(ctx: UpdateContext, relation: str) -> int | None:
    """The literal index of the one changed atom that ``relation``'s only rule maps one to
    one onto head rows (``out(x, y) :- edge(x, y), x < y.``), else None.

    One to one: every variable of the atom is a head argument of the same type and the
    atom's other arguments are constants, so distinct input rows give distinct head rows.
    As no other rule derives the relation, the rows new inputs derive are new rows: no
    distinct and no anti join against the relation is needed, i.e. no shuffle."""
    rules = ctx.rules(relation)
    if len(rules) != 1 or len(rules[0].bodies) != 1:
        return None
    head, body = rules[0].head, rules[0].bodies[0]
    atoms = [(i, lit) for i, lit in enumerate(body.literals) if isinstance(lit, ast.Atom)]
    if len(atoms) != 1 or atoms[0][1].relation not in ctx.deltas:
        return None
    index, atom = atoms[0]
    in_types = ctx.entry(atom.relation).types
    head_types = ctx.entry(relation).types
    head_vars = {
        arg.name: head_types[i] for i, arg in enumerate(head.args) if isinstance(arg, ast.Var)
    }
    for arg, type_ in zip(atom.args, in_types, strict=True):
        if isinstance(arg, ast.Var) and head_vars.get(arg.name) == type_:
            continue
        if not isinstance(arg, ast.NumberLit | ast.FloatLit | ast.StringLit):
            return None
    return index


def _copied_delta(ctx: UpdateContext, relation: str, index: int) -> Change[DataFrame]:
    """The head rows of the input's added rows. A body of the atom alone, over distinct
    variables, keeps every row: their count is the input's, and the rows are a map of its
    (stored) rows, so no job runs; a filter (constants, comparisons) is stored and
    counted in one job."""
    rule = ctx.rules(relation)[0]
    body = rule.bodies[0]
    atom = body.literals[index]
    assert isinstance(atom, ast.Atom)
    source = ctx.deltas[atom.relation]
    rows = ctx.head_rows(
        relation, ctx.rule_rows(rule, body, relation_of={index: f"{atom.relation}@add"})
    )
    names = [a.name for a in atom.args if isinstance(a, ast.Var)]
    if len(body.literals) == 1 and len(names) == len(atom.args) == len(set(names)):
        return Change(
            rows, ctx.frames.empty(relation), counts=(source.n_added, 0), stored=source.stored
        )
    return ctx.delta(rows, ctx.frames.empty(relation))


# ---------------------------------------------------------------- update: affected groups


def affected_groups_applies(ctx: UpdateContext) -> bool:
    """Every head's key arguments are distinct variables (they seed the re-derivation)."""
    if ctx.stratum.recursive:
        return False
    for rule in ctx.stratum.rules:
        keys = [rule.head.args[i] for i in ctx.entry(rule.head.relation).key_positions]
        names = [k.name for k in keys if isinstance(k, ast.Var)]
        if len(names) != len(keys) or len(set(names)) != len(names):
            return False
    return True


def affected_groups(ctx: UpdateContext) -> Outcome:
    """Re-derive only the groups whose bindings changed, and diff them."""
    frames, deltas = {}, {}
    for relation in ctx.relations:
        entry = ctx.entry(relation)
        current = ctx.frames.full[relation]
        touched = [
            ctx.rule_rows(rule, body, relation_of=ctx.telescoped(body, i, kind))
            for rule in ctx.rules(relation)
            for body in rule.bodies
            for i in atoms_over(body, ctx.deltas)
            for kind in ("add", "del")
        ]
        if not touched:
            frames[relation], deltas[relation] = current, ctx.no_change(relation)
            continue
        if entry.key_positions:
            new_rows, old_rows = _affected_rows(ctx, entry, touched)
        else:  # one group (e.g. ``n(count[X])``): re-derive it
            new_rows, old_rows = ctx.derive(relation), current
        delta = ctx.delta(minus(new_rows, old_rows), minus(old_rows, new_rows))
        frames[relation] = _replaced(ctx, current, delta)
        deltas[relation] = delta
    return Outcome(frames, deltas)


def _affected_rows(
    ctx: UpdateContext, entry: RelationEntry, touched: list[Plan]
) -> tuple[DataFrame, DataFrame]:
    """(new, old) rows of the groups whose bindings changed; the new ones are derived by
    joining every body onto the affected keys."""
    keys = [positional(i) for i in entry.key_positions]
    rows = ctx.head_rows(entry.name, Union(tuple(touched), distinct=False))
    affected = ctx.keep(rows.select(*keys).distinct())
    # The scan of the keys names its columns c0.. in key order.
    ctx.frames.named["#keys"] = affected.toDF(
        *(positional(j) for j in range(len(entry.key_positions)))
    )
    plans = [
        ctx.rule_rows(rule, body, start=_keys_start(entry, rule))
        for rule in ctx.rules(entry.name)
        for body in rule.bodies
    ]
    new_rows = ctx.keep(ctx.combine(entry.name, plans))
    return new_rows, join_on(ctx.frames.full[entry.name], affected, keys, "left_semi")


def _keys_start(entry: RelationEntry, rule: ast.Rule) -> tuple[Plan, dict[str, ast.TypeName]]:
    names = tuple(_var_name(rule.head.args[i]) for i in entry.key_positions)
    types = tuple(entry.types[i] for i in entry.key_positions)
    return Scan("#keys", "full", names, types), dict(zip(names, types, strict=True))


def _var_name(arg: ast.HeadArg) -> str:
    assert isinstance(arg, ast.Var), "affected-groups applies only when keys are variables"
    return arg.name


def _replaced(ctx: UpdateContext, current: DataFrame, delta: Change[DataFrame]) -> DataFrame:
    """``current`` with the delta applied (rows removed, rows added), materialized."""
    if delta.empty:
        return current
    kept = minus(current, delta.removed)  # null-safe, unlike an equi-join
    return ctx.keep(appended(kept, delta.added))
