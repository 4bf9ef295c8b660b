"""MRA evaluation on a MonoTable (PowerLog §3.1 and §5.2; A3's AsyncTable), synchronous.

The MonoTable is a DataFrame with one row per key of the recursive relation:

    k0 .. km   the key (the relation's non-value, non-index attributes)
    acc        the accumulated aggregate x = G(x, Δx)
    delta      the pending intermediate Δx to propagate next round (null = identity)
    chg        |change of acc| this round (the termination clause's measure)
    wit0..     for min/max, when asked for: the key of the predecessor that gave the current value
               (the recursive atom's key, one typed column per key column), used to
               retract on deletion

The auxiliary side of F′ (the recursive body without its recursive atom, e.g.
``edge(X, Y, w)`` or ``edge(X, Y), degree(X, d)``) is pre-joined once, deduplicated,
hash-partitioned by the variables it shares with the recursive atom and cached: every
round joins only the pending frontier against it.

One synchronous round, ΔX ← G∘F′(ΔX); acc ← G(acc, ΔX); reset Δ:
1. frontier = rows with a pending delta, as tuples of the relation;
2. candidates = F′(frontier ⋈ aux) for every recursive body;
3. the MonoTable and the candidates are unioned and grouped by key in ONE aggregation
   (partial aggregation pre-combines candidates before the shuffle): min/max keep a
   pending delta only where acc improved; sum keeps every non-zero delta;
4. the new table is materialized by one local checkpoint whose Observation yields the
   pending count and the termination measure. One Spark job per round (plus a broadcast
   of the frontier when it is small).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.checker import ast
from fixflow.checker.model import MraSpec
from fixflow.operators.compiler import (
    BodyPlan,
    RuleCompiler,
    SparkBackend,
    column_name,
    positional,
    spark_type,
)
from fixflow.operators.materialize import Materializer, Stored
from fixflow.operators.plan import Col, Join, Plan, Project, Scan, Unit, children, explain

log = logging.getLogger(__name__)

BROADCAST_FRONTIER_ROWS = 100_000
"""Below this many pending keys the frontier is broadcast to the auxiliary table's
partitions instead of shuffling the (large, static) auxiliary side."""


@dataclass(frozen=True)
class RoundInfo:
    round: int
    pending: int
    measure: float | None


@dataclass
class MraOutcome:
    rows: DataFrame
    """The relation in declared positional columns (index column set to the round)."""
    rounds: int
    capped: bool
    stored: Stored


@dataclass
class _RecursiveBody:
    plan: Plan
    aux_name: str | None
    aux_plan: Project | None


def constant_value(expr: ast.Expr) -> float:
    """The value of a constant expression (a termination bound such as ``1e-6``)."""
    match expr:
        case ast.NumberLit(value=value) | ast.FloatLit(value=value):
            return float(value)
        case ast.Neg(operand=operand):
            return -constant_value(operand)
        case ast.BinOp(op=op, left=left, right=right):
            a, b = constant_value(left), constant_value(right)
            return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else float("inf")}[op]
    raise ValueError(f"termination bound is not a constant: {expr!r}")


def clause_holds(termination: ast.Termination, measure: float) -> bool:
    bound = constant_value(termination.bound)
    return {
        "<": measure < bound,
        "<=": measure <= bound,
        ">": measure > bound,
        ">=": measure >= bound,
        "=": measure == bound,
        "!=": measure != bound,
    }[termination.op]


def measure_column(func: str, change: Column) -> Column:
    """The termination clause's aggregate over the round's |Δ| of every key."""
    value = F.coalesce(change, F.lit(0.0))
    match func:
        case "sum":
            return F.coalesce(F.sum(value), F.lit(0.0))
        case "max":
            return F.coalesce(F.max(value), F.lit(0.0))
        case "min":
            return F.coalesce(F.min(value), F.lit(0.0))
        case "count":
            return F.count(F.when(value != 0, 1)).cast("double")
        case _:
            return F.coalesce(F.avg(value), F.lit(0.0))


class MonoTable:
    """Runs one MRA relation to its fixpoint, its termination clause, or the cap."""

    def __init__(
        self,
        spec: MraSpec,
        schemas: dict[str, tuple[ast.TypeName, ...]],
        spark: SparkSession,
        backend: SparkBackend,
        materializer: Materializer,
        register_aux: Callable[[str, DataFrame], None],
        partitions: int,
        witness: bool = False,
    ) -> None:
        self.spec = spec
        self.spark = spark
        self.backend = backend
        self.materializer = materializer
        self.partitions = partitions
        self.types = schemas[spec.relation]
        self.compiler = RuleCompiler(schemas)
        self.g = "sum" if spec.aggregate in ("count", "sum") else spec.aggregate
        self.keys = tuple(f"k{j}" for j in range(len(spec.key_positions)))
        # The witness is kept as plain typed columns: a struct in the aggregation buffer
        # would turn the per-round merge from a HashAggregate into a SortAggregate.
        tracked = witness and self.g != "sum"
        self.wits = tuple(f"wit{j}" for j in range(len(spec.key_positions)) if tracked)
        self.value_type = self.types[spec.value_pos]
        self.register_aux = register_aux
        self.bodies = [self._compile_recursive(i) for i in range(len(spec.recursive_bodies))]

    # ------------------------------------------------------------ compilation

    def _head_outputs(
        self, args: Sequence[ast.HeadArg], types: dict[str, ast.TypeName]
    ) -> list[tuple[str, object]]:
        outputs = []
        for j, pos in enumerate(self.spec.key_positions):
            outputs.append(
                (self.keys[j], self.compiler.head_value(args[pos], types, self.types[pos], True))
            )
        value = self.compiler.head_value(
            args[self.spec.value_pos], types, self.value_type, recursive=True
        )
        outputs.append(("v", value))
        return outputs

    def _compile_recursive(self, i: int) -> _RecursiveBody:
        body = self.spec.recursive_bodies[i]
        atom_index = self.spec.recursive_atom_index[i]
        atom = body.literals[atom_index]
        assert isinstance(atom, ast.Atom)
        atom_vars = frozenset(a.name for a in atom.args if isinstance(a, ast.Var))
        aux = self.compiler.body(body, skip=frozenset({atom_index}), external=atom_vars)
        frontier, frontier_types, tests = self.compiler.atom(atom, "delta")
        plan: Plan = frontier
        types = dict(frontier_types)
        aux_name = aux_plan = None
        if not isinstance(aux.plan, Unit):
            aux_name = f"#aux:{self.spec.relation}:{i}"
            aux_plan = Project(aux.plan, tuple((n, Col(n, t)) for n, t in aux.plan.schema), True)
            names = tuple(n for n, _ in aux.plan.schema)
            scan = Scan(aux_name, "aux", names, tuple(t for _, t in aux.plan.schema))
            plan = Join(plan, scan, tuple(n for n in frontier_types if n in names))
            types.update(aux.types)
        all_vars = set(types) | atom_vars
        finished = self.compiler.finish_body(plan, types, [*aux.deferred, *tests], all_vars)
        outputs = self._head_outputs(self.spec.head.head.args, finished.types)
        witness = [
            (f"w{j}", self.compiler.expr(atom.args[pos], finished.types))
            for j, pos in enumerate(self.spec.key_positions)
            if not isinstance(atom.args[pos], ast.Wildcard)
        ]
        plan = Project(finished.plan, (*outputs, *witness))  # type: ignore[arg-type]
        log.debug("MRA round plan for %s:\n%s", self.spec.relation, explain(plan))
        return _RecursiveBody(plan, aux_name, aux_plan)

    def _rows_of(self, rule_head: ast.Head, body: ast.Body) -> Plan:
        compiled: BodyPlan = self.compiler.body(body)
        plan = Project(compiled.plan, tuple((n, Col(n, t)) for n, t in compiled.plan.schema), True)
        outputs = self._head_outputs(rule_head.args, compiled.types)
        return Project(plan, tuple(outputs))  # type: ignore[arg-type]

    # ------------------------------------------------------------ Spark pieces

    def build_aux(self) -> None:
        """Pre-join, deduplicate, co-partition and cache each recursive body's aux side."""
        for body in self.bodies:
            if body.aux_plan is None or body.aux_name is None:
                continue
            # Deduplicate after partitioning by the join key: hash partitioning by a subset
            # of the columns already clusters duplicates, so the whole build is ONE shuffle.
            frame = self.backend.run(replace(body.aux_plan, distinct=False))
            names = frame.columns
            frame = frame.toDF(*(positional(i) for i in range(len(names))))
            shared = [
                positional(i) for i, n in enumerate(names) if n in self._frontier_columns(body)
            ]
            frame = frame.repartition(self.partitions, *shared) if shared else frame
            self.register_aux(body.aux_name, frame.distinct().cache())

    def _frontier_columns(self, body: _RecursiveBody) -> set[str]:
        join = _find_join(body.plan)
        return {column_name(n) for n in join.on} if join is not None else set()

    def _empty_rows(self) -> DataFrame:
        schema = ", ".join(
            [
                f"{k} {spark_type(self.types[p]).simpleString()}"
                for k, p in zip(self.keys, self.spec.key_positions, strict=True)
            ]
            + [f"v {spark_type(self.value_type).simpleString()}"]
        )
        return self.spark.createDataFrame([], schema)

    def _candidates_from(self, plans: Sequence[Plan]) -> DataFrame:
        frames = []
        for plan in plans:
            df = self.backend.run(plan)
            names = [column_name(k) for k in self.keys]
            witness = [c for c in df.columns if c.startswith("vw")]
            frames.append(
                df.select(
                    *(F.col(n).alias(k) for n, k in zip(names, self.keys, strict=True)),
                    F.col(column_name("v")).alias("v"),
                    *self._witness_columns(witness if self.g != "sum" else []),
                )
            )
        result = frames[0]
        for other in frames[1:]:
            result = result.unionByName(other, allowMissingColumns=True)
        return result

    def _witness_columns(self, sources: Sequence[str]) -> list[Column]:
        columns = []
        for j, wit in enumerate(self.wits):
            type_ = spark_type(self.types[self.spec.key_positions[j]])
            value = F.col(sources[j]) if j < len(sources) else F.lit(None)
            columns.append(value.cast(type_).alias(wit))
        return columns

    def _frontier_source(self, frontier: DataFrame, small: bool) -> DataFrame:
        """The pending deltas as tuples of the relation (positional, index column 0)."""
        cols = {}
        for k, pos in zip(self.keys, self.spec.key_positions, strict=True):
            cols[pos] = F.col(k)
        cols[self.spec.value_pos] = F.col("v")
        if self.spec.index_pos is not None:
            cols[self.spec.index_pos] = F.lit(0).cast("long")
        frame = frontier.select(*(cols[i].alias(positional(i)) for i in range(len(self.types))))
        # Small frontiers are broadcast to the aux partitions; large ones are the build side
        # of a shuffled hash join, so the big static aux side is neither moved nor sorted.
        return F.broadcast(frame) if small else frame.hint("shuffle_hash")

    def _combine(self, candidates: DataFrame) -> DataFrame:
        """G over the candidates alone, one row per key.

        Grouping the candidates by themselves hash-partitions them by key like the stored
        MonoTable, so the union below keeps that partitioning
        (``spark.sql.unionOutputPartitioning``) and the merge needs no exchange: only the
        candidates are shuffled each round, never the whole table."""
        v = F.col("v")
        if self.g == "sum":
            return candidates.groupBy(*self.keys).agg(
                F.sum(v).alias("v"), *self._witness_columns([])
            )
        best = F.min if self.g == "min" else F.max
        best_by = F.min_by if self.g == "min" else F.max_by
        return candidates.groupBy(*self.keys).agg(
            best(v).alias("v"), *(best_by(F.col(w), v).alias(w) for w in self.wits)
        )

    def _merge(
        self,
        state: DataFrame,
        candidates: DataFrame,
        replace: bool = False,
        carry: bool = False,
    ) -> DataFrame:
        """acc ← G(acc, G(candidates)) with the next pending delta, in one aggregation.

        ``replace`` (indexed sum, first round): the candidates are X¹, the table X⁰, and
        the delta is X¹ − X⁰. ``carry``: the table's own pending deltas (left by a
        round-bounded update, async consistency) stay pending, combined with the new ones."""
        # The carried pending delta rides along as column p only when asked for: the
        # bootstrap's rounds pay nothing for it.
        p_old = [F.col("delta").alias("p")] if carry else []
        p_new = [F.lit(None).cast(spark_type(self.value_type)).alias("p")] if carry else []
        old_rows = state.select(
            *self.keys, F.col("acc").alias("v"), *p_old, *self.wits, F.lit(0).alias("t")
        )
        new_rows = self._combine(candidates).select(
            *self.keys, "v", *p_new, *self.wits, F.lit(1).alias("t")
        )
        union = old_rows.unionByName(new_rows)
        is_old, is_new = F.col("t") == 0, F.col("t") == 1
        if self.g == "sum":
            grouped = union.groupBy(*self.keys).agg(
                F.sum(F.when(is_old, F.col("v"))).alias("old"),
                F.sum(F.when(is_new, F.col("v"))).alias("d"),
                *([F.sum(F.col("p")).alias("p")] if carry else []),
            )
            old, d = F.coalesce(F.col("old"), F.lit(0)), F.col("d")
            if replace:
                d = F.coalesce(d, F.lit(0)) - old
            acc = old + F.coalesce(d, F.lit(0))
            # A carried delta is already in acc, but not yet propagated.
            total = F.coalesce(d, F.lit(0)) + F.coalesce(F.col("p"), F.lit(0)) if carry else d
            pending = F.when(total != 0, total)
            return grouped.select(
                *self.keys,
                acc.cast(spark_type(self.value_type)).alias("acc"),
                pending.cast(spark_type(self.value_type)).alias("delta"),
                F.abs(F.coalesce(pending, F.lit(0))).cast("double").alias("chg"),
                *self._witness_columns([]),
            )
        best = F.min if self.g == "min" else F.max
        best_by = F.min_by if self.g == "min" else F.max_by
        new_only = F.when(is_new, F.col("v"))
        # The witness rides along with the best value (min_by/max_by compare the value only,
        # cheaper than ordering (value, witness) structs).
        grouped = union.groupBy(*self.keys).agg(
            best(F.when(is_old, F.col("v"))).alias("old"),
            best(new_only).alias("new_v"),
            *([F.first(F.col("p"), ignorenulls=True).alias("p")] if carry else []),
            *(
                F.first(F.when(is_old, F.col(w)), ignorenulls=True).alias(f"old_{w}")
                for w in self.wits
            ),
            *(best_by(F.when(is_new, F.col(w)), new_only).alias(f"new_{w}") for w in self.wits),
        )
        new_value, old = F.col("new_v"), F.col("old")
        better = new_value < old if self.g == "min" else new_value > old
        improved = new_value.isNotNull() & (old.isNull() | better)
        return grouped.select(
            *self.keys,
            F.when(improved, new_value).otherwise(old).alias("acc"),
            F.when(improved, new_value).otherwise(F.col("p") if carry else None).alias("delta"),
            F.when(improved, F.abs(new_value - F.coalesce(old, F.lit(0))))
            .cast("double")
            .alias("chg"),
            *(
                F.when(improved, F.col(f"new_{w}")).otherwise(F.col(f"old_{w}")).alias(w)
                for w in self.wits
            ),
        )

    def _store(self, frame: DataFrame) -> Stored:
        metrics = [F.count(F.col("delta")).alias("pending")]
        if self.spec.termination is not None:
            metrics.append(measure_column(self.spec.termination.func, F.col("chg")).alias("m"))
        return self.materializer.store(frame, metrics)

    # ------------------------------------------------------------ driver

    def run(
        self,
        max_rounds: int,
        on_round: Callable[[RoundInfo], None] = lambda info: None,
        set_frontier: Callable[[DataFrame], None] = lambda df: None,
    ) -> MraOutcome:
        self.build_aux()
        spec = self.spec
        init = [self._rows_of(r.head, b) for r in spec.init_rules for b in r.bodies]
        constant = [self._rows_of(spec.head.head, b) for b in spec.constant_bodies]
        empty_state = self._empty_state()
        if spec.index_pos is None:
            seed = self._candidates_from(init + constant) if init + constant else None
            frame = self._merge(empty_state, seed if seed is not None else self._no_candidates())
        else:
            x0 = self._merge(
                empty_state, self._candidates_from(init) if init else self._no_candidates()
            )
            x0_stored = self.materializer.store(
                x0.select(
                    *self.keys,
                    "acc",
                    F.lit(None).cast("double").alias("delta"),
                    F.lit(None).cast("double").alias("chg"),
                    *self.wits,
                )
            )
            state0 = x0_stored.frame
            set_frontier(
                self._frontier_source(
                    state0.select(*self.keys, F.col("acc").alias("v")), small=False
                )
            )
            seed_frames = [self._candidates_from([b.plan for b in self.bodies])]
            if constant:
                seed_frames.append(self._candidates_from(constant))
            seed = seed_frames[0]
            for other in seed_frames[1:]:
                seed = seed.unionByName(other)
            frame = self._merge(state0, seed, replace=self.g == "sum")
        return self._rounds(self._store(frame), max_rounds, on_round, set_frontier)

    def resume(
        self,
        rows: DataFrame,
        seed: DataFrame,
        max_rounds: int,
        on_round: Callable[[RoundInfo], None] = lambda info: None,
        set_frontier: Callable[[DataFrame], None] = lambda df: None,
        carried: DataFrame | None = None,
    ) -> MraOutcome:
        """Continue from a fixpoint after the inputs changed (incremental maintenance).

        ``rows`` are the relation's current rows (positional columns, no index), ``seed``
        the change as candidates ``k0.., v``: for min/max new candidate values (only keys
        they improve become pending), for sum signed corrections Δ (every non-zero one
        becomes pending). ``carried``, when given, replaces ``rows``: a MonoTable an earlier
        round-bounded resume left with pending deltas, which stay pending. The auxiliary
        tables are built from the current inputs, so the rounds propagate under the new
        facts exactly as a bootstrap's would. ``max_rounds`` bounds this call's rounds
        (the seed's merge is the first); the outcome is ``capped`` if deltas remain."""
        assert self.spec.index_pos is None, "iteration-indexed relations are re-evaluated"
        self.build_aux()
        state = carried if carried is not None else self.state_of(rows)
        candidates = seed.select(*self.keys, "v", *self._witness_columns([]))
        stored = self._store(self._merge(state, candidates, carry=carried is not None))
        return self._rounds(stored, max_rounds, on_round, set_frontier)

    def state_of(self, rows: DataFrame) -> DataFrame:
        """A MonoTable (nothing pending) holding the relation rows ``rows``."""
        return rows.select(
            *(
                F.col(positional(p)).alias(k)
                for k, p in zip(self.keys, self.spec.key_positions, strict=True)
            ),
            F.col(positional(self.spec.value_pos)).alias("acc"),
            F.lit(None).cast(spark_type(self.value_type)).alias("delta"),
            F.lit(None).cast("double").alias("chg"),
            *self._witness_columns([]),
        )

    def release_aux(self, drop: Callable[[str], None]) -> None:
        """Unpersist the cached auxiliary tables (``drop`` unregisters one by name)."""
        for body in self.bodies:
            if body.aux_name is not None:
                drop(body.aux_name)

    def _rounds(
        self,
        stored: Stored,
        max_rounds: int,
        on_round: Callable[[RoundInfo], None],
        set_frontier: Callable[[DataFrame], None],
    ) -> MraOutcome:
        """Synchronous rounds from a stored table until no delta is pending, the
        termination clause holds, or ``max_rounds`` rounds have run in all."""
        rounds, pending = 1, int(stored.metrics.get("pending", 0))  # type: ignore[arg-type]
        on_round(RoundInfo(rounds, pending, _measure(stored)))
        while pending and not self._terminated(stored) and rounds < max_rounds:
            frontier = stored.frame.where(F.col("delta").isNotNull()).select(
                *self.keys, F.col("delta").alias("v")
            )
            small = self.partitions > 1 and pending <= BROADCAST_FRONTIER_ROWS
            set_frontier(self._frontier_source(frontier, small))
            candidates = self._candidates_from([b.plan for b in self.bodies])
            new = self._store(self._merge(stored.frame, candidates))
            self.materializer.release(stored)
            stored = new
            rounds += 1
            pending = int(stored.metrics.get("pending", 0))  # type: ignore[arg-type]
            on_round(RoundInfo(rounds, pending, _measure(stored)))
        capped = bool(pending) and not self._terminated(stored)
        return MraOutcome(self._relation_rows(stored.frame, rounds), rounds, capped, stored)

    def _terminated(self, stored: Stored) -> bool:
        termination = self.spec.termination
        if termination is None:
            return False
        return clause_holds(termination, float(stored.metrics.get("m", 0.0)))  # type: ignore[arg-type]

    def _empty_state(self) -> DataFrame:
        rows = self._empty_rows()
        return rows.select(
            *self.keys,
            F.col("v").alias("acc"),
            F.col("v").alias("delta"),
            F.lit(None).cast("double").alias("chg"),
            *self._witness_columns([]),
        )

    def _no_candidates(self) -> DataFrame:
        return self._empty_rows().select(*self.keys, "v", *self._witness_columns([]))

    def _relation_rows(self, state: DataFrame, rounds: int) -> DataFrame:
        cols: dict[int, Column] = {}
        for k, pos in zip(self.keys, self.spec.key_positions, strict=True):
            cols[pos] = F.col(k)
        cols[self.spec.value_pos] = F.col("acc").cast(spark_type(self.value_type))
        if self.spec.index_pos is not None:
            cols[self.spec.index_pos] = F.lit(rounds).cast("long")
        return state.where(F.col("acc").isNotNull()).select(
            *(cols[i].alias(positional(i)) for i in range(len(self.types)))
        )


def _measure(stored: Stored) -> float | None:
    value = stored.metrics.get("m")
    return None if value is None else float(value)  # type: ignore[arg-type]


def _find_join(plan: Plan) -> Join | None:
    """The join of the frontier with the auxiliary table in a round plan."""
    if isinstance(plan, Join):
        return plan
    for child in children(plan):
        found = _find_join(child)
        if found is not None:
            return found
    return None
