"""Incremental update strategies: bring one stratum up to date from its inputs' changes.

Every function here takes an ``UpdateContext`` (the stratum, the current rows of every
relation, the epoch's changes of the stratum's inputs as added/removed rows, the elastic
deadline) and returns an ``Outcome``: the stratum relations' new rows and their changes.
All frames use positional columns ``c0..`` (``fixflow.operators.compiler.positional``);
rule bodies are compiled by the one compiler, reading other versions of a relation
through ``relation_of`` names:

- ``R`` the current (new) rows, ``R@old`` the rows before the epoch,
  ``R@add`` / ``R@del`` the epoch's added / removed rows, ``R@delta`` a round's delta.

Strategies (each exact; the Maintainer picks, see ``choose``):

- ``update:delta-rules`` (non-recursive, insert-only, no aggregate): one delta rule per
  body atom over a changed relation; added = derived − current.
- ``update:affected-groups`` (non-recursive otherwise): the groups (head keys) whose
  bindings gained or lost a row are re-derived from the new inputs, joined onto the
  affected keys; old vs new rows of those groups give the change.
- ``update:seminaive`` / ``update:continuation`` (recursive set or aggregate-seminaive,
  insert-only inputs): semi-naive continuation from the current fixpoint, seeded by the
  delta rules over the added input rows; for min/max a round keeps only improved keys.
- ``update:mra-improve`` (MRA min/max, insert-only inputs): the same delta rules give
  candidate values, and the relation's MonoTable resumes from the current fixpoint: only
  improved keys become pending, one Spark job per round over the cached, co-partitioned
  auxiliary tables (``MonoTable.resume``), exactly the engine's bootstrap rounds.
- ``update:mra-correction`` (MRA sum): exact signed corrections from every changed
  auxiliary, constant or initial fact with the recursive atom bound to the current
  values, then ΔX ← F′(ΔX) rounds on the resumed MonoTable under the new auxiliaries until
  the termination clause.

An update that outlives its deadline raises ``Abandon`` between rounds (the elastic
switch); so does one that finds its method does not apply after all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.checker import ast
from fixflow.checker.model import Report, Stratum
from fixflow.operators.compiler import (
    RuleCompiler,
    SparkBackend,
    aggregate_rows,
    column_name,
    head_columns,
    positional,
    relation_struct,
    set_rows,
    spark_type,
)
from fixflow.operators.evaluate import RelationInfo, relation_info
from fixflow.operators.materialize import Materializer
from fixflow.operators.monotable import MonoTable
from fixflow.operators.plan import Plan, Scan, Version

log = logging.getLogger(__name__)


class Abandon(Exception):
    """The update gives up: the stratum is bootstrapped instead. ``switched``: because it
    ran past the elastic switch's budget (not because its method did not apply)."""

    def __init__(self, reason: str, switched: bool = False) -> None:
        super().__init__(reason)
        self.switched = switched


@dataclass
class Delta:
    """One relation's change in this epoch (positional columns, materialized)."""

    added: DataFrame
    removed: DataFrame
    n_added: int
    n_removed: int

    @property
    def empty(self) -> bool:
        return self.n_added == 0 and self.n_removed == 0

    @property
    def frames(self) -> tuple[DataFrame, DataFrame]:
        return (self.added, self.removed)


@dataclass
class Outcome:
    frames: dict[str, DataFrame]
    """New rows of every stratum relation."""
    deltas: dict[str, Delta]
    rounds: int = 1
    note: str = ""
    carried: dict[str, DataFrame] = field(default_factory=dict)
    """MonoTables left with pending deltas because the round budget ran out."""


@dataclass
class UpdateContext:
    report: Report
    stratum: Stratum
    spark: SparkSession
    frames: dict[str, DataFrame]
    """Current rows of every relation (inputs already new, the stratum's still old)."""
    old: dict[str, DataFrame]
    """Rows before the epoch of every changed input."""
    deltas: dict[str, Delta]
    """Changes of the stratum's inputs (only non-empty ones)."""
    deadline: float
    max_iterations: int
    extra: dict[str, DataFrame] = field(default_factory=dict)
    """Frames registered under derived names (``R@add``, ``R@delta``, ...)."""
    carried: dict[str, DataFrame] = field(default_factory=dict)
    """MonoTables an earlier round-bounded update left with pending deltas (async)."""
    round_budget: int | None = None
    """Rounds an MRA resume may run in this epoch (async consistency); None: to the end."""

    def __post_init__(self) -> None:
        self.types = {
            rel: tuple(a.type for a in attrs) for rel, attrs in self.report.analysis.schemas.items()
        }
        self.backend = SparkBackend(self.spark, self._source)
        for rel, delta in self.deltas.items():
            self.extra[f"{rel}@add"] = delta.added
            self.extra[f"{rel}@del"] = delta.removed
            self.extra[f"{rel}@old"] = self.old[rel]

    def _source(self, relation: str, version: Version) -> DataFrame:
        if relation in self.extra:
            return self.extra[relation]
        return self.frames[relation]

    def info(self, relation: str) -> RelationInfo:
        return relation_info(self.report, relation)

    def rules(self, relation: str) -> list[ast.Rule]:
        return [r for r in self.stratum.rules if r.head.relation == relation]

    def check_deadline(self) -> None:
        if time.monotonic() > self.deadline:
            raise Abandon("ran past the elastic switch's budget", switched=True)

    def empty(self, relation: str) -> DataFrame:
        return self.spark.createDataFrame([], relation_struct(self.types[relation]))


# ---------------------------------------------------------------- compiling helpers


def _atoms_over(body: ast.Body, relations: Mapping[str, object] | set[str]) -> list[int]:
    return [
        i
        for i, lit in enumerate(body.literals)
        if isinstance(lit, ast.Atom) and lit.relation in relations
    ]


def negates_changed(ctx: UpdateContext) -> bool:
    return any(
        isinstance(lit, ast.Negation) and lit.atom.relation in ctx.deltas
        for rule in ctx.stratum.rules
        for body in rule.bodies
        for lit in body.literals
    )


def _rule_rows(
    ctx: UpdateContext,
    rule: ast.Rule,
    body: ast.Body,
    relation_of: Mapping[int, str],
    start: tuple[Plan, Mapping[str, ast.TypeName]] | None = None,
) -> Plan:
    compiler = RuleCompiler(ctx.types)
    info = ctx.info(rule.head.relation)
    compiled = compiler.body(body, relation_of=relation_of, start=start)
    return compiler.head(
        rule,
        compiled,
        info.types,
        aggregated=info.aggregate is not None,
        recursive=ctx.stratum.recursive,
    )


def _combine(
    ctx: UpdateContext, relation: str, rows: list[Plan], *, signed: bool = False
) -> DataFrame:
    """G over head rows (distinct union for a set relation), as positional columns."""
    info = ctx.info(relation)
    if not rows:
        return ctx.empty(relation)
    if info.aggregate is None:
        plan = set_rows(rows)
    else:
        assert info.value_pos is not None
        plan = aggregate_rows(
            rows, len(info.types), info.value_pos, info.aggregate, info.types[info.value_pos]
        )
    return _positional(ctx, relation, ctx.backend.run(plan))


def _positional(ctx: UpdateContext, relation: str, frame: DataFrame) -> DataFrame:
    types = ctx.types[relation]
    return frame.select(
        *(
            F.col(column_name(h)).cast(spark_type(t)).alias(positional(i))
            for i, (h, t) in enumerate(zip(head_columns(len(types)), types, strict=True))
        )
    )


def _versions(ctx: UpdateContext, body: ast.Body, target: int, kind: str) -> dict[int, str]:
    """Telescoping delta term: atom ``target`` reads ``R@kind``; changed atoms before it
    read the new rows, after it the old rows (so the terms sum to new − old exactly)."""
    mapping: dict[int, str] = {}
    for i in _atoms_over(body, ctx.deltas):
        atom = body.literals[i]
        assert isinstance(atom, ast.Atom)
        if i == target:
            mapping[i] = _projected_delta(ctx, atom, kind)
        elif i > target:
            mapping[i] = f"{atom.relation}@old"
    return mapping


def _projected_delta(ctx: UpdateContext, atom: ast.Atom, kind: str) -> str:
    """The name of the atom's added/removed rows. With ``_`` arguments a row change need not
    change the atom's projection, so the delta is taken on the projection."""
    rel = atom.relation
    wild = [i for i, a in enumerate(atom.args) if isinstance(a, ast.Wildcard)]
    if not wild:
        return f"{rel}@{kind}"
    name = f"{rel}@{kind}#{'.'.join(map(str, wild))}"
    if name not in ctx.extra:
        types = ctx.types[rel]

        def project(frame: DataFrame) -> DataFrame:
            return frame.select(
                *(
                    (F.lit(None).cast(spark_type(t)) if i in wild else F.col(positional(i))).alias(
                        positional(i)
                    )
                    for i, t in enumerate(types)
                )
            ).distinct()

        delta = ctx.extra[f"{rel}@{kind}"]
        other = ctx.extra[f"{rel}@old"] if kind == "add" else ctx.frames[rel]
        columns = [positional(i) for i in range(len(types)) if i not in wild]
        ctx.extra[name] = project(delta).join(project(other), columns, "left_anti")
    return name


def _store(frame: DataFrame) -> tuple[DataFrame, int]:
    """Materialize (cutting lineage) and count in one job."""
    from pyspark.sql import Observation

    observation = Observation()
    stored = frame.observe(observation, F.count(F.lit(1)).alias("n")).localCheckpoint(eager=True)
    return stored, int(observation.get["n"])


def _delta(added: DataFrame, removed: DataFrame) -> Delta:
    added, n_added = _store(added)
    removed, n_removed = _store(removed)
    return Delta(added, removed, n_added, n_removed)


stored_delta = _delta


def changes_between(old: DataFrame, new: DataFrame) -> Delta:
    """Rows only in ``new`` (added) and only in ``old`` (removed), materialized."""
    return _delta(new.subtract(old), old.subtract(new))


def checkpoint_rdd(frame: DataFrame) -> object | None:
    """The checkpointed RDD holding ``frame``'s rows, looking through projections and
    filters (such as a MonoTable's relation rows); None when there is none."""
    try:
        plan = frame._jdf.queryExecution().logical()
        while plan.children().size() == 1:
            plan = plan.children().head()
        return plan.rdd()
    except Exception:  # not a checkpointed LogicalRDD (e.g. an empty local relation)
        log.debug("no checkpoint under %s", frame, exc_info=True)
        return None


def release(frame: DataFrame, keep: set[int] | None = None) -> None:
    """Free the blocks of a locally checkpointed frame nobody reads any more, unless its
    RDD's id is in ``keep``."""
    rdd = checkpoint_rdd(frame)
    if rdd is not None and (keep is None or rdd.id() not in keep):  # type: ignore[attr-defined]
        rdd.unpersist(False)  # type: ignore[attr-defined]


def _key_columns(info: RelationInfo) -> list[str]:
    return [positional(i) for i in info.key_positions]


# ---------------------------------------------------------------- non-recursive


def delta_rules(ctx: UpdateContext) -> Outcome:
    """Insert-only, no aggregate, no negated change: added = ∪ delta rules − current."""
    frames, deltas = {}, {}
    for relation in ctx.stratum.relations:
        rows = [
            _rule_rows(ctx, rule, body, {i: _projected_delta(ctx, body.literals[i], "add")})  # type: ignore[arg-type]
            for rule in ctx.rules(relation)
            for body in rule.bodies
            for i in _atoms_over(body, ctx.deltas)
        ]
        current = ctx.frames[relation]
        derived = _combine(ctx, relation, rows)
        added = derived.join(current, current.columns, "left_anti")
        delta = _delta(added, ctx.empty(relation))
        frames[relation] = _store(current.unionByName(delta.added))[0] if delta.n_added else current
        deltas[relation] = delta
    return Outcome(frames, deltas)


def affected_groups_apply(ctx: UpdateContext) -> bool:
    """Every head's key arguments are distinct variables (they seed the re-derivation)."""
    for rule in ctx.stratum.rules:
        info = ctx.info(rule.head.relation)
        if info.index_pos is not None:
            return False
        keys = [rule.head.args[i] for i in info.key_positions]
        if not all(isinstance(k, ast.Var) for k in keys):
            return False
        if len({k.name for k in keys}) != len(keys):  # type: ignore[union-attr]
            return False
    return not negates_changed(ctx)


def affected_groups(ctx: UpdateContext) -> Outcome:
    """Re-derive only the groups whose bindings changed, and diff them."""
    frames, deltas = {}, {}
    for relation in ctx.stratum.relations:
        info = ctx.info(relation)
        keys = _key_columns(info)
        current = ctx.frames[relation]
        touched = [
            _rule_rows(ctx, rule, body, _versions(ctx, body, i, kind))
            for rule in ctx.rules(relation)
            for body in rule.bodies
            for i in _atoms_over(body, ctx.deltas)
            for kind in ("add", "del")
        ]
        if not touched:
            frames[relation], deltas[relation] = (
                current,
                _delta(ctx.empty(relation), ctx.empty(relation)),
            )
            continue
        if keys:
            new_rows, old_rows = _affected_rows(ctx, relation, touched)
        else:  # one group (e.g. ``n(count[X])``): re-derive it
            rows = [_rule_rows(ctx, r, b, {}) for r in ctx.rules(relation) for b in r.bodies]
            value = positional(info.value_pos)  # type: ignore[arg-type]
            # An aggregate over no bindings is no row (a global aggregate yields a null one).
            new_rows = _combine(ctx, relation, rows).where(F.col(value).isNotNull())
            old_rows = current
        delta = _delta(new_rows.subtract(old_rows), old_rows.subtract(new_rows))
        frames[relation] = _replace_keys(current, delta, keys)
        deltas[relation] = delta
    return Outcome(frames, deltas)


def _affected_rows(
    ctx: UpdateContext, relation: str, touched: list[Plan]
) -> tuple[DataFrame, DataFrame]:
    """(new, old) rows of the groups whose bindings changed; the new ones are derived by
    joining every body onto the affected keys."""
    info = ctx.info(relation)
    keys = _key_columns(info)
    affected = _positional(ctx, relation, ctx.backend.run(set_rows(touched)))
    affected, _ = _store(affected.select(*keys).distinct())
    # The scan of the keys names its columns c0.. in key order.
    ctx.extra["#keys"] = affected.toDF(*(positional(j) for j in range(len(keys))))
    rows = [
        _rule_rows(ctx, rule, body, {}, start=_keys_start(ctx, rule, info))
        for rule in ctx.rules(relation)
        for body in rule.bodies
    ]
    new_rows, _ = _store(_combine(ctx, relation, rows))
    return new_rows, ctx.frames[relation].join(affected, keys, "left_semi")


def _keys_start(
    ctx: UpdateContext, rule: ast.Rule, info: RelationInfo
) -> tuple[Plan, dict[str, ast.TypeName]]:
    names = tuple(rule.head.args[i].name for i in info.key_positions)  # type: ignore[union-attr]
    types = tuple(info.types[i] for i in info.key_positions)
    return Scan("#keys", "full", names, types), dict(zip(names, types, strict=True))


def _replace_keys(current: DataFrame, delta: Delta, keys: list[str]) -> DataFrame:
    """``current`` with the delta applied (rows removed, rows added), materialized."""
    if delta.empty:
        return current
    kept = current.subtract(delta.removed)  # null-safe, unlike an equi-join
    frame, _ = _store(kept.unionByName(delta.added))
    return frame


# ---------------------------------------------------------------- recursive continuation


def continuation_applies(ctx: UpdateContext) -> bool:
    if negates_changed(ctx) or any(d.n_removed for d in ctx.deltas.values()):
        return False
    for relation in ctx.stratum.relations:
        info = ctx.info(relation)
        if info.index_pos is not None or info.aggregate not in (None, "min", "max"):
            return False
    return True


def continuation(ctx: UpdateContext) -> Outcome:
    """Semi-naive from the current fixpoint: seed with the delta rules over the added input
    rows; each round keeps new tuples (set) or improved keys (min/max)."""
    relations = ctx.stratum.relations
    original = {r: ctx.frames[r] for r in relations}
    touched: dict[str, list[DataFrame]] = {r: [] for r in relations}
    derived = {
        r: [
            _rule_rows(ctx, rule, body, {i: _projected_delta(ctx, body.literals[i], "add")})  # type: ignore[arg-type]
            for rule in ctx.rules(r)
            for body in rule.bodies
            for i in _atoms_over(body, ctx.deltas)
        ]
        for r in relations
    }
    rounds, pending = 0, 1
    while pending and rounds < ctx.max_iterations:
        ctx.check_deadline()
        frames = {r: _combine(ctx, r, derived[r]) for r in relations}
        pending = 0
        for relation in relations:
            new, count = _store(_improved(ctx, relation, frames[relation]))
            pending += count
            ctx.extra[f"{relation}@delta"] = new
            if count:
                touched[relation].append(new)
                ctx.frames[relation] = _merge_improved(ctx, relation, new)
        if rounds % COMPACT_EVERY == COMPACT_EVERY - 1:
            _compact(ctx, relations, original)
        rounds += 1
        derived = {
            r: [
                _rule_rows(ctx, rule, body, {k: f"{body.literals[k].relation}@delta"})  # type: ignore[union-attr]
                for rule in ctx.rules(r)
                for body in rule.bodies
                for k in _atoms_over(body, set(relations))
            ]
            for r in relations
        }
    _compact(ctx, relations, original)
    deltas = {r: _continuation_delta(ctx, r, original[r], touched[r]) for r in relations}
    return Outcome({r: ctx.frames[r] for r in relations}, deltas, rounds)


def _improved(ctx: UpdateContext, relation: str, derived: DataFrame) -> DataFrame:
    info = ctx.info(relation)
    current = ctx.frames[relation]
    if info.aggregate is None:
        return derived.join(current, current.columns, "left_anti")
    keys = _key_columns(info)
    value = positional(info.value_pos)  # type: ignore[arg-type]
    better = F.col("n") < F.col("o") if info.aggregate == "min" else F.col("n") > F.col("o")
    joined = derived.withColumnRenamed(value, "n").join(
        current.select(*keys, F.col(value).alias("o")), keys, "left"
    )
    improved = joined.where(F.col("n").isNotNull() & (F.col("o").isNull() | better))
    return improved.select(*keys, F.col("n").alias(value)).select(*current.columns)


def _merge_improved(ctx: UpdateContext, relation: str, new: DataFrame) -> DataFrame:
    info = ctx.info(relation)
    current = ctx.frames[relation]
    if info.aggregate is None:
        frame = current.unionByName(new)
    else:
        keys = _key_columns(info)
        frame = current.join(new.select(*keys), keys, "left_anti").unionByName(new)
    return frame


COMPACT_EVERY = 4
"""Continuation rounds between materializations of the (lazily merged) full relations."""


def _compact(
    ctx: UpdateContext, relations: tuple[str, ...], original: dict[str, DataFrame]
) -> None:
    """Materialize the full relations that changed, cutting the lineage of the merges."""
    for relation in relations:
        if ctx.frames[relation] is not original[relation]:
            ctx.frames[relation] = ctx.frames[relation].localCheckpoint(eager=True)


def _continuation_delta(
    ctx: UpdateContext, relation: str, original: DataFrame, touched: list[DataFrame]
) -> Delta:
    if not touched:
        return _delta(ctx.empty(relation), ctx.empty(relation))
    info = ctx.info(relation)
    union = touched[0]
    for other in touched[1:]:
        union = union.unionByName(other)
    final = ctx.frames[relation]
    if info.aggregate is None:
        return _delta(union.distinct(), ctx.empty(relation))
    keys = _key_columns(info)
    changed = union.select(*keys).distinct()
    now = final.join(changed, keys, "left_semi")
    before = original.join(changed, keys, "left_semi")
    return _delta(now.subtract(before), before.subtract(now))


# ---------------------------------------------------------------- MRA sum corrections


def correction_applies(ctx: UpdateContext) -> bool:
    """One non-indexed sum/count MRA relation; removals only as value updates of an
    aggregate input (a key's row replaced), so no key can lose its support."""
    if len(ctx.stratum.relations) != 1 or negates_changed(ctx):
        return False
    spec = ctx.report.mra.get(ctx.stratum.relations[0])
    if spec is None or spec.index_pos is not None or spec.aggregate not in ("sum", "count"):
        return False
    for rel, delta in ctx.deltas.items():
        if not delta.n_removed:
            continue
        info = ctx.info(rel)
        if info.value_pos is None:
            return False
        keys = _key_columns(info)
        if not keys:  # a single group: it survives while the relation has a row
            lost = ctx.frames[rel].limit(1)
            if lost.isEmpty():
                return False
            continue
        lost = delta.removed.select(*keys).join(ctx.frames[rel].select(*keys), keys, "left_anti")
        if not lost.isEmpty():
            return False
    return True


def mra_correction(ctx: UpdateContext) -> Outcome:
    """Exact signed corrections (constant/initial facts, and every changed auxiliary fact
    with the recursive atom bound to the current values) resumed on a MonoTable."""
    relation = ctx.stratum.relations[0]
    spec = ctx.report.mra[relation]
    info = ctx.info(relation)
    keys = _key_columns(info)
    value = positional(info.value_pos)  # type: ignore[arg-type]
    current = ctx.frames[relation]
    if relation in ctx.carried:
        # What has been propagated so far is acc − pending: the auxiliary corrections
        # re-weigh exactly that; the pending part propagates under the new facts anyway.
        ctx.frames[relation] = _propagated_rows(ctx, relation, ctx.carried[relation])
    seeds = [_constant_correction(ctx, relation, keys, value)]
    for body, atom in zip(spec.recursive_bodies, spec.recursive_atom_index, strict=True):
        for i in _atoms_over(body, ctx.deltas):
            if i == atom:
                continue
            for kind, sign in (("add", 1.0), ("del", -1.0)):
                plan = _rule_rows(ctx, spec.head, body, _versions(ctx, body, i, kind))
                rows = _positional(ctx, relation, ctx.backend.run(plan))
                seeds.append(rows.select(*keys, (F.col(value) * F.lit(sign)).alias("d")))
    seed = _summed(seeds, keys).withColumnRenamed("d", value)
    ctx.frames[relation] = current
    return _resume(ctx, relation, seed)


def _propagated_rows(ctx: UpdateContext, relation: str, table: DataFrame) -> DataFrame:
    """A sum MonoTable's acc − pending Δ as positional relation rows."""
    info = ctx.info(relation)
    columns = {p: F.col(f"k{j}") for j, p in enumerate(info.key_positions)}
    columns[info.value_pos] = F.col("acc") - F.coalesce(F.col("delta"), F.lit(0))  # type: ignore[index]
    types = ctx.types[relation]
    return table.select(
        *(columns[i].cast(spark_type(t)).alias(positional(i)) for i, t in enumerate(types))
    )


def mra_improve(ctx: UpdateContext) -> Outcome:
    """Insert-only min/max MRA: the delta rules over the added input rows give candidate
    values; only the keys they improve become pending, and rounds resume on a MonoTable."""
    relation = ctx.stratum.relations[0]
    rows = [
        _rule_rows(ctx, rule, body, {i: _projected_delta(ctx, body.literals[i], "add")})  # type: ignore[arg-type]
        for rule in ctx.rules(relation)
        for body in rule.bodies
        for i in _atoms_over(body, ctx.deltas)
    ]
    return _resume(ctx, relation, _combine(ctx, relation, rows))


def _resume(ctx: UpdateContext, relation: str, seed: DataFrame) -> Outcome:
    """Run ``relation``'s MonoTable from its current rows and a seed (positional rows whose
    value column holds the candidate or the correction), under the new inputs."""
    spec = ctx.report.mra[relation]
    info = ctx.info(relation)
    frontier: dict[str, DataFrame] = {}
    aux: dict[str, DataFrame] = {}

    def source(name: str, version: Version) -> DataFrame:
        if version == "aux":
            return aux[name]
        if version == "delta" and name == relation:
            return frontier[name]
        return ctx.frames[name] if name in ctx.frames else ctx.empty(name)

    partitions = int(ctx.spark.conf.get("spark.sql.shuffle.partitions") or 1)
    table = MonoTable(
        spec,
        ctx.types,
        ctx.spark,
        SparkBackend(ctx.spark, source),
        Materializer(ctx.spark),
        aux.__setitem__,
        partitions,
    )
    candidates = seed.select(
        *(
            F.col(positional(p)).alias(k)
            for k, p in zip(table.keys, info.key_positions, strict=True)
        ),
        F.col(positional(info.value_pos)).alias("v"),  # type: ignore[arg-type]
    )
    original = ctx.frames[relation]
    # The budget counts propagation rounds; the seed's merge comes on top of them.
    budget = min(ctx.max_iterations, ctx.round_budget + 1 if ctx.round_budget else 1 << 62)
    try:
        outcome = table.resume(
            original,
            candidates,
            budget,
            lambda _round: ctx.check_deadline(),
            lambda frame: frontier.__setitem__(relation, frame),
            carried=ctx.carried.get(relation),
        )
    finally:
        table.release_aux(lambda name: aux.pop(name).unpersist())
    current = outcome.rows.select(*original.columns)
    left = {relation: outcome.stored.frame} if outcome.capped else {}
    if outcome.capped and ctx.round_budget is None:
        log.warning("%s: hit the iteration cap (%d rounds)", relation, ctx.max_iterations)
    changes = {relation: changes_between(original, current)}
    return Outcome({relation: current}, changes, outcome.rounds, carried=left)


def _summed(parts: list[DataFrame], keys: list[str]) -> DataFrame:
    union = parts[0]
    for other in parts[1:]:
        union = union.unionByName(other)
    return union.groupBy(*keys).agg(F.sum("d").alias("d"))


def _constant_correction(
    ctx: UpdateContext, relation: str, keys: list[str], value: str
) -> DataFrame:
    """G(X⁰ ∪ C) under the new inputs minus under the old ones, per key."""
    spec = ctx.report.mra[relation]
    bodies = [(spec.head, b) for b in spec.constant_bodies]
    bodies += [(r, b) for r in spec.init_rules for b in r.bodies]
    changed = [(r, b) for r, b in bodies if _atoms_over(b, ctx.deltas)]
    empty = ctx.empty(relation).select(*keys, F.col(value).alias("d"))
    if not changed:
        return empty
    new = _combine(ctx, relation, [_rule_rows(ctx, r, b, {}) for r, b in bodies])
    old = _combine(
        ctx,
        relation,
        [
            _rule_rows(
                ctx,
                r,
                b,
                {i: f"{b.literals[i].relation}@old" for i in _atoms_over(b, ctx.deltas)},  # type: ignore[union-attr]
            )
            for r, b in bodies
        ],
    )
    joined = new.select(*keys, F.col(value).alias("n")).join(
        old.select(*keys, F.col(value).alias("o")), keys, "full_outer"
    )
    if not joined.where(F.col("n").isNull() & F.col("o").isNotNull()).isEmpty():
        raise Abandon("a key lost its constant support")
    diff = F.coalesce(F.col("n"), F.lit(0)) - F.coalesce(F.col("o"), F.lit(0))
    # Unchanged keys need no correction; a new key appears even when its value is 0.
    return joined.where((diff != 0) | F.col("o").isNull()).select(*keys, diff.alias("d"))
