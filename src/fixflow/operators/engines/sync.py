"""The synchronous MRA engine (PowerLog §3.1 and §5.2; A3's AsyncTable run in rounds).

The MonoTable is a DataFrame with one row per key of the recursive relation:

    k0 .. km   the key (the relation's non-value, non-index attributes)
    acc        the accumulated aggregate x = G(x, Δx)
    delta      the pending intermediate Δx to propagate next round (null = identity)
    chg        |change of acc| this round (the termination clause's measure)
    wit0..     for min/max with ``EngineEnv.witness``: the key of the predecessor that gave
               the current value (the recursive atom's key, one typed column per key
               column), what retraction on deletion needs

These columns are this module's own: everything else reads a ``SyncState`` through the
``MraState`` accessors. The auxiliary side of F′ (``MraProgram.aux_frames``) is pre-joined
once, deduplicated, hash-partitioned by the variables it shares with the recursive atom and
cached (ONE shuffle): every round joins only the pending frontier against it.

One synchronous round, ΔX ← G∘F′(ΔX); acc ← G(acc, ΔX); reset Δ:
1. frontier = rows with a pending delta, as tuples of the relation;
2. candidates = F′(frontier ⋈ aux) for every recursive body;
3. the MonoTable and the candidates are unioned and grouped by key in ONE aggregation
   (partial aggregation pre-combines candidates before the shuffle; the stored table keeps
   its hash partitioning by key, so it is not re-shuffled): min/max keep a pending delta
   only where acc improved; sum keeps every non-zero delta;
4. the new table is materialized by one local checkpoint whose Observation yields the
   pending count and the termination measure. One Spark job per round (plus a broadcast
   of the frontier when it is small). The witness costs a second aggregate per round and
   is kept only when asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from fixflow.operators.engines.base import EngineEnv, MraOutcome, MraState, OnRound, RoundInfo
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.materialize import Stored
from fixflow.operators.plan import Plan, Version
from fixflow.operators.rounds import clause_holds, improves, measure_column
from fixflow.operators.spark_backend import SparkBackend, column_name, positional, spark_type

BROADCAST_FRONTIER_ROWS = 100_000
"""Below this many pending keys the frontier is broadcast to the auxiliary table's
partitions instead of shuffling the (large, static) auxiliary side."""


class SyncState:
    """The MonoTable after a run (an ``MraState``)."""

    def __init__(self, run: _Run, stored: Stored, rounds: int, capped: bool) -> None:
        self._run = run
        self.stored = stored
        self.rounds = rounds
        self.capped = capped

    @property
    def frame(self) -> DataFrame:
        return self.stored.frame

    @property
    def has_pending(self) -> bool:
        return self.capped

    def rows(self) -> DataFrame:
        return self._run.relation_rows(self.frame, F.col("acc"), self.rounds)

    def pending_rows(self) -> DataFrame:
        pending = self.frame.where(F.col("delta").isNotNull())
        return self._run.relation_rows(pending, F.col("acc"), None, F.col("delta"))

    def propagated_rows(self) -> DataFrame:
        value = F.col("acc") - F.coalesce(F.col("delta"), F.lit(0))
        return self._run.relation_rows(self.frame, value, None)

    def witnessed_rows(self) -> DataFrame:
        return self._run.relation_rows(self.frame, F.col("acc"), self.rounds, witness=True)

    def release(self) -> None:
        self._run.env.materializer.release(self.stored)


class SyncEngine:
    """``MraEngine``: rounds of one Spark job each over the whole MonoTable."""

    name = "sync"

    def bootstrap(
        self, program: MraProgram, env: EngineEnv, max_rounds: int, on_round: OnRound
    ) -> MraOutcome:
        run = _Run(program, env)
        try:
            if program.indexed:
                frame = run.indexed_start()
            else:
                seeds = [*program.init_plans, *program.constant_plans]
                frame = run.merge(run.empty_state(), run.candidates_from(seeds))
            return run.rounds(run.store(frame), max_rounds, on_round)
        finally:
            run.release_aux()

    def resume(
        self,
        program: MraProgram,
        env: EngineEnv,
        rows: DataFrame,
        seed: DataFrame,
        max_rounds: int,
        on_round: OnRound,
        carried: MraState | None = None,
    ) -> MraOutcome:
        """See ``MraEngine.resume``. The auxiliary tables are built from the current
        inputs, so the rounds propagate under the new facts exactly as a bootstrap's."""
        assert not program.indexed, "iteration-indexed relations are re-evaluated"
        if carried is not None and not isinstance(carried, SyncState):
            raise TypeError(f"the sync engine cannot resume a {type(carried).__name__}")
        run = _Run(program, env)
        try:
            state = carried.frame if carried is not None else run.state_of(rows)
            candidates = seed.select(*program.keys, "v", *run.given_witness(seed))
            frame = run.merge(state, candidates, carry=carried is not None)
            return run.rounds(run.store(frame), max_rounds, on_round)
        finally:
            run.release_aux()


class _Run:
    """One bootstrap or resume of one MRA relation: its frontier, aux tables and rounds."""

    def __init__(self, program: MraProgram, env: EngineEnv) -> None:
        self.program = program
        self.env = env
        self.keys = program.keys
        self.g = program.g
        # The witness is kept as plain typed columns: a struct in the aggregation buffer
        # would turn the per-round merge from a HashAggregate into a SortAggregate.
        tracked = env.witness and self.g != "sum"
        self.wits = tuple(f"wit{j}" for j in range(len(self.keys)) if tracked)
        self.frontier: DataFrame | None = None
        self.backend = SparkBackend(env.spark, self.source)
        self.aux: dict[str, DataFrame] = program.aux_frames(self.backend, env.partitions)

    # ------------------------------------------------------------ inputs

    def source(self, relation: str, version: Version) -> DataFrame:
        if version == "aux":
            return self.aux[relation]
        if version == "delta" and relation == self.program.relation:
            assert self.frontier is not None, "a round plan ran before its frontier was set"
            return self.frontier
        return self.env.source(relation, version)

    def release_aux(self) -> None:
        for frame in self.aux.values():
            frame.unpersist()
        self.aux = {}

    def set_frontier(self, pending: DataFrame, small: bool) -> None:
        """The pending deltas (``k0.., v``) as tuples of the relation (index column 0)."""
        spec = self.program.spec
        cols = {pos: F.col(k) for k, pos in zip(self.keys, spec.key_positions, strict=True)}
        cols[spec.value_pos] = F.col("v")
        if spec.index_pos is not None:
            cols[spec.index_pos] = F.lit(0).cast("long")
        frame = pending.select(*(cols[i].alias(positional(i)) for i in range(len(cols))))
        # Small frontiers are broadcast to the aux partitions; large ones are the build side
        # of a shuffled hash join, so the big static aux side is neither moved nor sorted.
        self.frontier = F.broadcast(frame) if small else frame.hint("shuffle_hash")

    def candidates_from(self, plans: Sequence[Plan]) -> DataFrame:
        """Candidate rows ``k0.., v`` (and witnesses) of ``plans``; none without plans."""
        if not plans:
            return self.empty_rows().select(*self.keys, "v", *self.witness_columns([]))
        frames = []
        for plan in plans:
            df = self.backend.run(plan)
            witness = [c for c in df.columns if c.startswith("vw")] if self.g != "sum" else []
            frames.append(
                df.select(
                    *(F.col(column_name(k)).alias(k) for k in self.keys),
                    F.col(column_name("v")).alias("v"),
                    *self.witness_columns(witness),
                )
            )
        result = frames[0]
        for other in frames[1:]:
            result = result.unionByName(other, allowMissingColumns=True)
        return result

    def witness_columns(self, sources: Sequence[str], named: str = "wit") -> list[Column]:
        """The tracked witness columns (``wit0..``, or ``<named>0..``) from ``sources``
        (null where missing)."""
        columns = []
        for j in range(len(self.wits)):
            type_ = spark_type(self.program.key_types[j])
            value = F.col(sources[j]) if j < len(sources) else F.lit(None)
            columns.append(value.cast(type_).alias(f"{named}{j}"))
        return columns

    def null_witness(self) -> list[Column]:
        """Witness columns ``w0..`` of a table that keeps none."""
        return [
            F.lit(None).cast(spark_type(t)).alias(f"w{j}")
            for j, t in enumerate(self.program.key_types)
        ]

    def given_witness(self, frame: DataFrame) -> list[Column]:
        """The tracked witness columns from ``frame``'s ``w0..`` when it has them."""
        names = [f"w{j}" for j in range(len(self.keys))]
        found = all(n in frame.columns for n in names)
        return self.witness_columns(names if found else [])

    # ------------------------------------------------------------ tables

    def empty_rows(self) -> DataFrame:
        fields = [
            f"{k} {spark_type(t).simpleString()}"
            for k, t in zip(self.keys, self.program.key_types, strict=True)
        ]
        fields.append(f"v {spark_type(self.program.value_type).simpleString()}")
        return self.env.spark.createDataFrame([], ", ".join(fields))

    def empty_state(self) -> DataFrame:
        return self.empty_rows().select(
            *self.keys,
            F.col("v").alias("acc"),
            F.col("v").alias("delta"),
            F.lit(None).cast("double").alias("chg"),
            *self.witness_columns([]),
        )

    def state_of(self, rows: DataFrame) -> DataFrame:
        """A MonoTable (nothing pending) holding the relation rows ``rows``."""
        spec = self.program.spec
        keys = zip(self.keys, spec.key_positions, strict=True)
        return rows.select(
            *(F.col(positional(p)).alias(k) for k, p in keys),
            F.col(positional(spec.value_pos)).alias("acc"),
            F.lit(None).cast(spark_type(self.program.value_type)).alias("delta"),
            F.lit(None).cast("double").alias("chg"),
            *self.given_witness(rows),
        )

    def relation_rows(
        self,
        state: DataFrame,
        value: Column,
        index: int | None,
        pending: Column | None = None,
        witness: bool = False,
    ) -> DataFrame:
        """MonoTable rows as positional relation rows (``value`` in the value column, the
        index column set to ``index``), plus ``pending`` when given and the witness
        ``w0..`` (null where none is kept) with ``witness``; keys without acc left out."""
        spec, value_type = self.program.spec, spark_type(self.program.value_type)
        cols: dict[int, Column] = {
            pos: F.col(k) for k, pos in zip(self.keys, spec.key_positions, strict=True)
        }
        cols[spec.value_pos] = value.cast(value_type)
        if spec.index_pos is not None:
            cols[spec.index_pos] = F.lit(index or 0).cast("long")
        out = [cols[i].alias(positional(i)) for i in sorted(cols)]
        if pending is not None:
            out.append(pending.cast(value_type).alias("pending"))
        if witness:
            out += self.witness_columns(self.wits, named="w") if self.wits else self.null_witness()
        return state.where(F.col("acc").isNotNull()).select(*out)

    def indexed_start(self) -> DataFrame:
        """X⁰ as the table, then the first merge: X¹ = G(C ∪ F′(X⁰)) against it (sum: the
        delta is X¹ − X⁰, G⁻ being pairwise subtraction)."""
        x0 = self.merge(self.empty_state(), self.candidates_from(self.program.init_plans))
        stored = self.env.materializer.store(
            x0.select(
                *self.keys,
                "acc",
                F.lit(None).cast("double").alias("delta"),
                F.lit(None).cast("double").alias("chg"),
                *self.wits,
            )
        )
        state0 = stored.frame
        self.set_frontier(state0.select(*self.keys, F.col("acc").alias("v")), small=False)
        plans = [b.plan for b in self.program.bodies]
        seed = self.candidates_from(plans)
        if self.program.constant_plans:
            seed = seed.unionByName(self.candidates_from(self.program.constant_plans))
        return self.merge(state0, seed, replace=self.g == "sum")

    # ------------------------------------------------------------ one round

    def merge(
        self, state: DataFrame, candidates: DataFrame, replace: bool = False, carry: bool = False
    ) -> DataFrame:
        """acc ← G(acc, G(candidates)) with the next pending delta, in one aggregation.

        Grouping the candidates by themselves first hash-partitions them by key like the
        stored MonoTable, so the union keeps that partitioning
        (``spark.sql.unionOutputPartitioning``) and the merge needs no exchange: only the
        candidates are shuffled each round, never the whole table.

        ``replace`` (indexed sum, first round): the candidates are X¹, the table X⁰, and
        the delta is X¹ − X⁰. ``carry``: the table's own pending deltas (left by a
        round-bounded update, async consistency) stay pending, combined with the new ones
        (they ride along as column ``p`` only then: a bootstrap's rounds pay nothing)."""
        p_old = [F.col("delta").alias("p")] if carry else []
        p_new = [F.lit(None).cast(spark_type(self.program.value_type)).alias("p")] if carry else []
        old_rows = state.select(
            *self.keys, F.col("acc").alias("v"), *p_old, *self.wits, F.lit(0).alias("t")
        )
        new_rows = self._combine(candidates).select(
            *self.keys, "v", *p_new, *self.wits, F.lit(1).alias("t")
        )
        union = old_rows.unionByName(new_rows)
        if self.g == "sum":
            return self._merge_sum(union, replace, carry)
        return self._merge_best(union, carry)

    def _combine(self, candidates: DataFrame) -> DataFrame:
        """G over the candidates alone, one row per key."""
        v = F.col("v")
        if self.g == "sum":
            return candidates.groupBy(*self.keys).agg(
                F.sum(v).alias("v"), *self.witness_columns([])
            )
        best = F.min if self.g == "min" else F.max
        best_by = F.min_by if self.g == "min" else F.max_by
        return candidates.groupBy(*self.keys).agg(
            best(v).alias("v"), *(best_by(F.col(w), v).alias(w) for w in self.wits)
        )

    def _merge_sum(self, union: DataFrame, replace: bool, carry: bool) -> DataFrame:
        is_old, is_new = F.col("t") == 0, F.col("t") == 1
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
        # A delta that no longer changes acc in floating point stops (shard_loop.changes_acc):
        # a sum without a termination clause ends at its float fixpoint.
        pending = F.when((total != 0) & (acc + total != acc), total)
        value_type = spark_type(self.program.value_type)
        return grouped.select(
            *self.keys,
            acc.cast(value_type).alias("acc"),
            pending.cast(value_type).alias("delta"),
            F.abs(F.coalesce(pending, F.lit(0))).cast("double").alias("chg"),
            *self.witness_columns([]),
        )

    def _merge_best(self, union: DataFrame, carry: bool) -> DataFrame:
        is_old, is_new = F.col("t") == 0, F.col("t") == 1
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
        improved = new_value.isNotNull() & (old.isNull() | improves(self.g, new_value, old))
        kept = F.col("p") if carry else F.lit(None)
        return grouped.select(
            *self.keys,
            F.when(improved, new_value).otherwise(old).alias("acc"),
            F.when(improved, new_value).otherwise(kept).alias("delta"),
            F.when(improved, F.abs(new_value - F.coalesce(old, F.lit(0))))
            .cast("double")
            .alias("chg"),
            *(
                F.when(improved, F.col(f"new_{w}")).otherwise(F.col(f"old_{w}")).alias(w)
                for w in self.wits
            ),
        )

    def store(self, frame: DataFrame) -> Stored:
        metrics = [F.count(F.col("delta")).alias("pending")]
        termination = self.program.spec.termination
        if termination is not None:
            metrics.append(measure_column(termination.func, F.col("chg")).alias("m"))
        return self.env.materializer.store(frame, metrics)

    # ------------------------------------------------------------ rounds

    def rounds(self, stored: Stored, max_rounds: int, on_round: OnRound) -> MraOutcome:
        """Synchronous rounds from a stored table until no delta is pending, the
        termination clause holds, or ``max_rounds`` rounds have run in all."""
        rounds, pending = 1, int(stored.metric("pending"))
        on_round(RoundInfo(rounds, pending, _measure(stored)))
        plans = [b.plan for b in self.program.bodies]
        while pending and not self._terminated(stored) and rounds < max_rounds:
            frontier = stored.frame.where(F.col("delta").isNotNull())
            small = self.env.partitions > 1 and pending <= BROADCAST_FRONTIER_ROWS
            self.set_frontier(frontier.select(*self.keys, F.col("delta").alias("v")), small)
            new = self.store(self.merge(stored.frame, self.candidates_from(plans)))
            self.env.materializer.release(stored)
            stored = new
            rounds += 1
            pending = int(stored.metric("pending"))
            on_round(RoundInfo(rounds, pending, _measure(stored)))
        capped = bool(pending) and not self._terminated(stored)
        state = SyncState(self, stored, rounds, capped)
        return MraOutcome(state.rows(), rounds, capped, state)

    def _terminated(self, stored: Stored) -> bool:
        termination = self.program.spec.termination
        return termination is not None and clause_holds(termination, stored.metric("m"))


def _measure(stored: Stored) -> float | None:
    return None if stored.metrics.get("m") is None else stored.metric("m")
