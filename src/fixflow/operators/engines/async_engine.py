"""The sharded asynchronous MRA engine (PowerLog §5.3, A3 §5–6) on Spark.

The MonoTable is split into shards that keep neighbours together (``engines.sharding``
computes the assignment from the graph of the recursive bodies, once per bootstrap, and
keeps it for updates). A run is one Spark job (``engines.shard_run``): with several shards
a barrier stage, every task owning one shard for all the run's *stages*. In a stage each
task runs the local asynchronous loop of ``engines.shard_loop`` over vectorized kernels
compiled from the same round plans the sync engine runs on Spark, until it is locally
quiescent, one of its per-destination buffers holds β updates, or its time budget τ is
spent; then the tasks exchange their buffers and small facts directly over TCP
(``engines.shard_exchange``) and decide together whether to stop. A stage is therefore
worth many synchronous rounds, and costs no Spark job: on a road-like graph the local
loops follow the shortest paths inside a shard and only the cut is crossed between stages.

The first stage frame (one row layout for everything, see ``Layout``) is stored
hash-partitioned by shard; the auxiliary rows are stored once with the same partitioning,
so the union of both hands each task exactly its shard without a shuffle of the auxiliary
side. The tasks emit their shards' rows in the same layout (``AsyncState``), shuffled by
shard: the exchange makes the barrier stage a map stage, which Spark retries as a whole
when a task fails (a failed barrier result stage is not retried). State lives in a Python
worker for that one job only; a retry starts again from the stored inputs. A barrier stage
needs a task slot per shard at once (``shard_map.shard_count`` and ``require_slots``).

Modes: ``async`` flushes buffers by PowerLog's adaptive β rule and τ; ``hybrid`` lets every
shard run to local quiescence before exchanging (synchronous between shards, asynchronous
inside). Both run a stratum whose plans do not compile to kernels on the sync engine and
say why.

The bootstrap's algorithm (auxiliary sides, seeds, stages to quiescence, the clause or the
cap, the round-order retry) is ``engines.mra_bootstrap``'s, shared with the driver; this
module is its Spark backend (``SparkShards``), whose first ``stage`` runs the job and whose
others replay the stages it recorded; resumes run the same job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
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
from fixflow.operators.engines.async_rounds import recorded, run_metrics
from fixflow.operators.engines.async_support import stage_params, unsupported
from fixflow.operators.engines.base import (
    EngineEnv,
    MraEngine,
    MraOutcome,
    MraState,
    OnRound,
)
from fixflow.operators.engines.kernels import KernelUnsupported
from fixflow.operators.engines.mra_bootstrap import (
    OrderDependent,
    Stage,
    StageRule,
    aux_sides,
    bootstrap_on,
    in_round_order,
    round_ordered,
    run_stages,
)
from fixflow.operators.engines.program import MraProgram, RecursiveBody, aux_frame
from fixflow.operators.engines.shard_exchange import Rendezvous
from fixflow.operators.engines.shard_loop import AUX
from fixflow.operators.engines.shard_map import ShardMap, require_slots
from fixflow.operators.engines.shard_run import BetaRule, RunParams, run_shards
from fixflow.operators.engines.stage_frame import AsyncRun, AsyncState
from fixflow.operators.engines.sync import SyncEngine
from fixflow.operators.materialize import Stored
from fixflow.operators.rounds import session_conf
from fixflow.operators.spark_backend import SparkBackend

log = logging.getLogger(__name__)


class AsyncEngine:
    """``MraEngine`` running shards' local loops inside Spark tasks."""

    def __init__(self, hybrid: bool = False) -> None:
        self.hybrid = hybrid
        self.name = "hybrid" if hybrid else "async"
        self.shard_maps: dict[str, ShardMap] = {}
        """Per relation, the assignment computed at its bootstrap (kept for updates)."""
        self.order_dependent: dict[str, str] = {}
        """Relations run in round order (``mra_bootstrap.OrderDependent``), with why."""

    # ------------------------------------------------------------ MraEngine

    def bootstrap(
        self, program: MraProgram, env: EngineEnv, max_rounds: int, on_round: OnRound
    ) -> MraOutcome:
        ordered = program.relation in self.order_dependent
        shards = SparkShards(self, program, env)
        with _planning(env):
            count, capped, why = bootstrap_on(
                program, shards, env.options, max_rounds, on_round, ordered
            )
        if why is not None:
            self.order_dependent[program.relation] = why
        return shards.outcome(count, capped)

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
        shards = SparkShards(self, program, env)
        try:
            with _planning(env):
                run = shards.prepared(
                    aux_sides(program, shards), program.relation in self.order_dependent
                )
                if isinstance(carried, AsyncState):
                    base = carried.frame.where(F.col("kind") < AUX)
                else:
                    base = state_rows(run, rows)
                shards.begin(run, base.union(messages(run, seed)))
                # ``carried`` stays: the caller still diffs the rows it holds against the
                # new ones, and frees it (the Maintainer's garbage, ``CarriedState.carry``).
                count, capped = run_stages(program, shards, env.options, max_rounds, on_round)
        except OrderDependent as error:
            # The carried state summed in another order: evaluate the current inputs afresh.
            self.order_dependent[program.relation] = error.reason
            return self.bootstrap(program, env, max_rounds, on_round)
        return shards.outcome(count, capped)


class SparkShards:
    """``mra_bootstrap.MraBackend`` on Spark: frames; the auxiliary rows are packed into
    blocks per shard and every stage runs in one Spark job whose tasks each keep a shard's
    loop (``engines.shard_run``); ``stage`` replays the stages that job recorded."""

    def __init__(self, engine: AsyncEngine, program: MraProgram, env: EngineEnv) -> None:
        reason = unsupported(program)
        if reason is not None:
            raise KernelUnsupported(reason)
        self.engine = engine
        self.program = program
        self.env = env

    def aux(self, body: RecursiveBody, distinct: bool) -> DataFrame:
        frame = aux_frame(body, SparkBackend(self.env.spark, self.env.source))
        return frame.distinct() if distinct else frame

    def seeds(self) -> DataFrame:
        program = self.program
        return seed_candidates(program, self.env, [*program.init_plans, *program.constant_plans])

    def start(self, aux: list[DataFrame], seeds: DataFrame, round_order: bool) -> None:
        self.engine.shard_maps.pop(self.program.relation, None)
        run = self.prepared(aux, round_order)
        self.begin(run, indexed_start(run, aux) if self.program.indexed else messages(run, seeds))

    def prepared(self, aux: list[DataFrame], round_order: bool) -> AsyncRun:
        env = self.env
        if round_order:
            env = replace(env, options=round_ordered(env.options))
        return prepared(self.program, env, self.engine.shard_maps, aux)

    def begin(self, run: AsyncRun, frame: DataFrame) -> None:
        """A run over ``run`` from ``frame``, its first stage frame."""
        self.run, self.count, self.started = run, 0, time.monotonic()
        self.round_order = in_round_order(run.env.options, run.shard_map.shards)
        self.replay: Iterator[Stage] | None = None
        self.stages: list[Stage] = []
        self.stored = Stored(frame)
        if run.shard_map.shards > 1:
            # Materialized first: a shard column the optimizer could fold to a constant
            # would not partition like the auxiliary rows.
            self.stored = run.env.materializer.store(frame)
            frame = self.stored.frame.repartition(run.shard_map.shards, "shard")
        self.frame = frame

    def stage(self, rule: StageRule) -> Stage:
        """The next of the stages the run's one job ran (``rule`` stops them in the tasks)."""
        if self.replay is None:
            self.stages = self._ran(rule)
            self.replay = iter(self.stages)
        stage = next(self.replay, None)
        if stage is None:
            raise RuntimeError(f"{self.run.program.relation}: the shards stopped sooner")
        self.count, self.pending = self.count + 1, stage.pending
        return stage

    def _ran(self, rule: StageRule) -> list[Stage]:
        """Run every stage in one job (``engines.shard_run``); the stages it recorded."""
        run = self.run
        shards = run.shard_map.shards
        schema = arrow_schema_of(run.layout.schema)
        union = self.frame.union(run.aux.frame)
        if shards == 1:
            # One task reads everything: no exchange, no barrier.
            task = partial(run_shards, self._params(rule), schema)
            stored = run.env.materializer.store(
                union.coalesce(1).mapInArrow(task, run.layout.schema), run_metrics()
            )
        else:
            if union.rdd.getNumPartitions() != shards:
                raise RuntimeError("stage frame and auxiliary rows are not partitioned alike")
            require_slots(run.env.spark, shards)
            rendezvous = Rendezvous(run.env.spark.conf.get("spark.driver.host") or "localhost")
            try:
                task = partial(run_shards, self._params(rule, rendezvous.address), schema)
                # The exchange after the barrier stage makes it a map stage, which Spark runs
                # again when a task fails (a failed barrier result stage is not retried).
                out = union.mapInArrow(task, run.layout.schema, barrier=True)
                out = out.repartition(shards, "shard")
                stored = run.env.materializer.store(out, run_metrics())
            finally:
                rendezvous.close()
        run.env.materializer.release(self.stored)
        self.stored = stored
        return recorded(stored)

    def _params(self, rule: StageRule, rendezvous: tuple[str, int] | None = None) -> RunParams:
        run = self.run
        hybrid = self.engine.hybrid
        buffer = run.env.options.buffer
        stage = stage_params(
            run.program,
            run.env.options,
            witness=run.layout.witness,
            shards=run.shard_map.shards,
            hybrid=hybrid,
        )
        termination = run.program.spec.termination
        return RunParams(
            stage=stage,
            labels=tuple(run.shard_map.labels),
            rule=rule,
            beta=BetaRule(
                float(buffer.initial), buffer.alpha, buffer.r, buffer.interval_ms / 1000.0
            ),
            hybrid=hybrid,
            measure=termination.func if termination is not None else None,
            cut=float(run.shard_map.cut or 0),
            rendezvous=rendezvous,
        )

    def end(self, abandoned: bool) -> None:
        run = self.run
        run.env.materializer.release(run.aux)
        if abandoned:
            run.env.materializer.release(self.stored)
        elif self.replay is not None and next(self.replay, None) is not None:
            raise RuntimeError(f"{run.program.relation}: the shards ran more stages")
        stages = self.stages
        log.info(
            "%s: %d stage(s) in one job, %.2f s, %s shards (%s, cut %s); in the tasks: setup "
            "%.2f s, loops %.2f s (CPU of all loops %.2f s), exchanges %.2f s, the first task's "
            "run %.2f s",
            run.program.relation,
            self.count,
            time.monotonic() - self.started,
            run.shard_map.shards,
            run.shard_map.method,
            run.shard_map.cut,
            max([s.detail.get("setup_s", 0.0) for s in stages] or [0.0]),
            sum(s.detail.get("loop_s", 0.0) for s in stages),
            sum(s.detail.get("cpu_s", 0.0) for s in stages),
            sum(s.detail.get("wait_s", 0.0) for s in stages),
            stages[-1].at if stages else 0.0,
        )

    def outcome(self, stages: int, capped: bool) -> MraOutcome:
        run = self.run
        state = AsyncState(
            self.stored, run.program, run.shard_map, run.layout, self.pending, stages, run.env
        )
        return MraOutcome(state.rows(), stages, capped, state)


def _planning(env: EngineEnv) -> AbstractContextManager[None]:
    """Adaptive execution hides the hash partitioning of a checkpointed plan and re-plans
    exchanges, which would break the partition-aligned union of the stage frame with the
    auxiliary rows: it is off while the engine runs."""
    return session_conf(env.spark, {"spark.sql.adaptive.enabled": "false"})


class ShardedEngine:
    """``[engine] mode = "async"`` or ``"hybrid"``: the async engine for every MRA relation
    whose round plans compile to kernels, the sync engine for the others. A sum whose value
    could depend on the order of propagation runs in round order (one shard, no priority:
    ``mra_bootstrap``). The choice and its reason are logged once per relation and kept in
    ``choices``."""

    def __init__(self, hybrid: bool) -> None:
        self.sharded = AsyncEngine(hybrid)
        self.sync = SyncEngine()
        self.name = self.sharded.name
        self.choices: dict[str, tuple[str, str]] = {}
        """Per relation: (engine that runs it, why)."""

    def _engine(self, program: MraProgram) -> MraEngine:
        """The engine for ``program``, the choice logged when it changes (also after a
        run: it may have gone to round order)."""
        reason = unsupported(program)
        ordered = self.sharded.order_dependent.get(program.relation)
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

    def bootstrap(
        self, program: MraProgram, env: EngineEnv, max_rounds: int, on_round: OnRound
    ) -> MraOutcome:
        outcome = self._engine(program).bootstrap(program, env, max_rounds, on_round)
        self._engine(program)
        return outcome

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
        outcome = engine.resume(program, env, rows, seed, max_rounds, on_round, carried)
        self._engine(program)
        return outcome
