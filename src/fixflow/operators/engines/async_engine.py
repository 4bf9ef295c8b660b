"""The sharded asynchronous MRA engine (PowerLog §5.3, A3 §5–6) on Spark.

The MonoTable is split into shards that keep neighbours together (``engines.sharding``
computes the assignment from the graph of the recursive bodies, once per bootstrap, and
keeps it for updates). A *stage* is one Spark job: every task owns one shard and runs the
local asynchronous loop of ``engines.shard_loop`` over vectorized kernels compiled from
the same round plans the sync engine runs on Spark, until it is locally quiescent, one of
its per-destination buffers holds β updates, or its time budget τ is spent. The buffers
leave the task as message rows for their destination shards; the next stage merges them.
A stage is therefore worth many synchronous rounds: on a road-like graph the local loops
follow the shortest paths inside a shard and only the cut is crossed at stage boundaries.

The stage frame (one row layout for everything, see ``Layout``) is checkpointed between
stages, hash-partitioned by shard; the auxiliary rows are checkpointed once with the same
partitioning, so the union of both hands each task exactly its shard without a shuffle of
the auxiliary side. Nothing lives in a Python worker between stages.

Modes: ``async`` flushes buffers by PowerLog's adaptive β rule and τ; ``hybrid`` lets every
shard run to local quiescence before exchanging (synchronous between shards, asynchronous
inside). Both run a stratum whose plans do not compile to kernels on the sync engine and
say why.
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fixflow.operators.engines.async_prepare import (
    arrow_schema_of,
    indexed_start,
    messages,
    prepared,
    seed_candidates,
    state_rows,
)
from fixflow.operators.engines.async_rounds import (
    OrderDependent,
    clause_due,
    in_round_order,
    observed,
    stage_metrics,
)
from fixflow.operators.engines.async_support import (
    UNBOUNDED,
    order_dependence,
    stage_params,
    unsupported,
)
from fixflow.operators.engines.base import (
    EngineEnv,
    MraEngine,
    MraOutcome,
    MraState,
    OnRound,
    RoundInfo,
)
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.engines.shard_loop import AUX, StageParams, run_stage
from fixflow.operators.engines.shard_map import ShardMap
from fixflow.operators.engines.stage_frame import AsyncRun, AsyncState
from fixflow.operators.engines.sync import SyncEngine
from fixflow.operators.materialize import Stored
from fixflow.operators.rounds import clause_holds, session_conf

log = logging.getLogger(__name__)


class AsyncEngine:
    """``MraEngine`` running shards' local loops inside Spark tasks."""

    def __init__(self, hybrid: bool = False) -> None:
        self.hybrid = hybrid
        self.name = "hybrid" if hybrid else "async"
        self.shard_maps: dict[str, ShardMap] = {}
        """Per relation, the assignment computed at its bootstrap (kept for updates)."""

    # ------------------------------------------------------------ MraEngine

    def bootstrap(
        self, program: MraProgram, env: EngineEnv, max_rounds: int, on_round: OnRound
    ) -> MraOutcome:
        self.shard_maps.pop(program.relation, None)
        with _planning(env):
            run = prepared(program, env, self.shard_maps)
            if program.indexed:
                return self._stages(run, indexed_start(run), max_rounds, on_round)
            seeds = seed_candidates(run, [*program.init_plans, *program.constant_plans])
            return self._stages(run, messages(run, seeds), max_rounds, on_round)

    def resume(
        self,
        program: MraProgram,
        env: EngineEnv,
        rows: DataFrame,
        seed: DataFrame,
        max_rounds: int,
        on_round: OnRound,
        carried: object | None = None,
    ) -> MraOutcome:
        with _planning(env):
            run = prepared(program, env, self.shard_maps)
            incoming = messages(run, seed)
            if isinstance(carried, AsyncState):
                base = carried.frame.where(F.col("kind") < AUX)
            else:
                base = state_rows(run, rows)
            try:
                return self._stages(run, base.union(incoming), max_rounds, on_round)
            finally:
                if isinstance(carried, AsyncState):
                    carried.release()

    # ------------------------------------------------------------ stages

    def _params(self, run: AsyncRun) -> StageParams:
        return stage_params(
            run.program,
            run.env.options,
            witness=run.layout.witness,
            shards=run.shard_map.shards,
            hybrid=self.hybrid,
            beta=run.beta,
        )

    def _stage(self, run: AsyncRun, frame: DataFrame) -> Stored:
        layout = run.layout
        arrow_schema = arrow_schema_of(layout.schema)
        kernel = partial(run_stage, self._params(run), arrow_schema)
        union = frame.union(run.aux.frame)
        if run.shard_map.shards == 1:
            # One task reads everything: no exchange, before the stage or after it.
            out = union.coalesce(1).mapInArrow(kernel, layout.schema)
            return run.env.materializer.store(out, stage_metrics(run.program))
        if union.rdd.getNumPartitions() != run.shard_map.shards:
            raise RuntimeError("stage frame and auxiliary rows are not partitioned alike")
        out = union.mapInArrow(kernel, layout.schema)
        out = out.repartition(run.shard_map.shards, "shard")
        return run.env.materializer.store(out, stage_metrics(run.program))

    def _stages(
        self, run: AsyncRun, frame: DataFrame, max_rounds: int, on_round: OnRound
    ) -> MraOutcome:
        program, env = run.program, run.env
        started, last_check = time.monotonic(), -UNBOUNDED
        stage, capped = 0, False
        stored = Stored(frame)
        if run.shard_map.shards > 1:
            # Materialized first: a shard column the optimizer could fold to a constant
            # would not partition like the auxiliary rows.
            stored = env.materializer.store(frame)
            frame = stored.frame.repartition(run.shard_map.shards, "shard")
        try:
            while True:
                stage += 1
                new = self._stage(run, frame)
                env.materializer.release(stored)
                stored = new
                pending, measure, detail = observed(run, stored, self.hybrid)
                on_round(RoundInfo(stage, pending, measure, detail))
                reason = None
                if not in_round_order(run):
                    reason = order_dependence(program.g, run.gain, run.negative)
                if reason is not None:
                    env.materializer.release(stored)
                    raise OrderDependent(program.relation, reason)
                if pending == 0:
                    break
                if program.spec.termination is not None and clause_due(env, last_check):
                    last_check = time.monotonic()
                    if measure is not None and clause_holds(program.spec.termination, measure):
                        break
                if stage >= max_rounds:
                    # The clause may not have been consulted this stage (check_interval_ms):
                    # a stage that meets it converged, whatever the cap.
                    clause = program.spec.termination
                    capped = not (
                        clause is not None and measure is not None and clause_holds(clause, measure)
                    )
                    break
                frame = stored.frame.where(F.col("kind") < AUX)
        finally:
            env.materializer.release(run.aux)
        log.info(
            "%s: %d stage(s), %.2f s, %s shards (%s, cut %s)",
            program.relation,
            stage,
            time.monotonic() - started,
            run.shard_map.shards,
            run.shard_map.method,
            run.shard_map.cut,
        )
        state = AsyncState(stored, program, run.shard_map, run.layout, pending, stage, env)
        return MraOutcome(state.rows(), stage, capped, state)


def _planning(env: EngineEnv) -> AbstractContextManager[None]:
    """Adaptive execution hides the hash partitioning of a checkpointed plan and re-plans
    exchanges, which would break the partition-aligned union of the stage frame with the
    auxiliary rows: it is off while the engine runs."""
    return session_conf(env.spark, {"spark.sql.adaptive.enabled": "false"})


class ShardedEngine:
    """``[engine] mode = "async"`` or ``"hybrid"``: the async engine for every MRA relation
    whose round plans compile to kernels, the sync engine for the others. A sum whose value
    could depend on the order of propagation (``OrderDependent``) is run again in round
    order: one shard, no priority. The choice and its reason are logged once per relation
    and kept in ``choices``."""

    def __init__(self, hybrid: bool) -> None:
        self.sharded = AsyncEngine(hybrid)
        self.sync = SyncEngine()
        self.name = self.sharded.name
        self.choices: dict[str, tuple[str, str]] = {}
        """Per relation: (engine that runs it, why)."""
        self.order_dependent: dict[str, str] = {}
        """Relations the async engine runs in round order (``OrderDependent``), with why."""

    def _engine(self, program: MraProgram) -> MraEngine:
        reason = unsupported(program)
        ordered = self.order_dependent.get(program.relation)
        if reason:
            choice = (self.sync.name, reason)
        elif ordered:
            choice = (self.name, f"in round order, one shard without priority: {ordered}")
        else:
            choice = (self.name, "its plans compile to kernels")
        if self.choices.get(program.relation) != choice:
            self.choices[program.relation] = choice
            level = logging.WARNING if reason and self.name == "async" else logging.INFO
            log.log(level, "%s runs on the %s engine: %s", program.relation, *choice)
        return self.sync if reason else self.sharded

    def _env(self, program: MraProgram, env: EngineEnv) -> EngineEnv:
        if program.relation not in self.order_dependent:
            return env
        return replace(env, options=replace(env.options, shards=1, priority=False))

    def bootstrap(
        self, program: MraProgram, env: EngineEnv, max_rounds: int, on_round: OnRound
    ) -> MraOutcome:
        engine = self._engine(program)
        try:
            return engine.bootstrap(program, self._env(program, env), max_rounds, on_round)
        except OrderDependent as error:
            self.order_dependent[program.relation] = error.reason
            return self.bootstrap(program, env, max_rounds, on_round)

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
        engine = self._engine(program)
        try:
            return engine.resume(
                program, self._env(program, env), rows, seed, max_rounds, on_round, carried
            )
        except OrderDependent as error:
            # The carried state summed in another order: evaluate the current inputs afresh.
            self.order_dependent[program.relation] = error.reason
            return self.bootstrap(program, env, max_rounds, on_round)
