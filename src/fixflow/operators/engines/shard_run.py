"""A sharded MRA run as one Spark job: every task owns a shard for all the run's stages.

The job's tasks (a barrier stage when there is more than one shard) each build their
shard's loop (``engines.shard_loop.ShardLoop``) from the rows Spark hands them: the stage
frame (state and message rows) and the auxiliary blocks, partitioned alike by shard. The
loop, its auxiliary index and its MonoTable stay in the task's memory from the first stage
to the last. A *stage* (a superstep) is:

1. every task runs its loop until it is locally quiescent, a buffer holds β updates or τ is
   spent (hybrid: until local quiescence), as a stage job of the old engine did;
2. it sends every other task one small fact (pending keys, messages sent, the clause's
   partial measure, F′'s gain and negative deltas, counts for the log) and its buffer for
   that task, and receives theirs (``engines.shard_exchange``: Arrow over TCP);
3. every task combines the same facts into the same ``Stage`` and asks the same
   ``mra_bootstrap.StageRule`` whether to stop (nothing pending anywhere and no message in
   flight, the termination clause, the cap, or an order-dependent sum), so they agree
   without a coordinator; the clause's check interval runs on the first task's clock;
4. the messages each task received are merged by the next stage, or, after the last,
   left pending as message rows.

Then each task emits its shard's rows in the stage layout (state rows, messages in flight)
and the first task one statistics row holding every stage's ``Stage`` as JSON, which the
driver replays through the same rule to log the stages (``async_engine.SparkShards``).

PowerLog's adaptive β is applied by each task to its own buffers after each stage (it reads
only their fill rate). Nothing outlives the job: a failed task fails the barrier stage and
Spark runs it again from its inputs, the stored stage frame and auxiliary blocks.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from fixflow.operators.engines.blocks import BLOB, layout_rows
from fixflow.operators.engines.mra_bootstrap import OrderDependent, Stage, StageRule
from fixflow.operators.engines.shard_exchange import Fact, Peers, joined
from fixflow.operators.engines.shard_loop import STATS, ShardLoop
from fixflow.operators.engines.shard_table import StageParams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BetaRule:
    """PowerLog's adaptive flush size: when a buffer's fill rate |B|/ΔT leaves the band
    [β/(r·τ), r·β/τ], β becomes α·τ·|B|/ΔT (``[buffer]``)."""

    initial: float
    alpha: float
    r: float
    tau: float


@dataclass(frozen=True)
class RunParams:
    """What every task of a run needs (shipped with the job, small)."""

    stage: StageParams
    labels: tuple[int, ...]
    """The shard label each task owns, by task index (partition)."""
    rule: StageRule
    beta: BetaRule
    hybrid: bool
    """No β, no τ: every shard flushes at local quiescence (β is only reported)."""
    measure: str | None
    """The termination clause's aggregate (None: no clause)."""
    cut: float
    rendezvous: tuple[str, int] | None = None
    """Where the tasks of a run of several shards meet (``shard_exchange.Rendezvous``)."""


def run_shards(
    params: RunParams, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of a run: this task's shard, every stage."""
    rows = pa.Table.from_batches(list(batches), schema=schema)
    peers = joined(len(params.labels), params.rendezvous)
    try:
        out = ShardTask(params, peers, rows).run(schema)
    finally:
        peers.close()
    yield from out.to_batches()


class ShardTask:
    """One task's shard and its stages."""

    def __init__(self, params: RunParams, peers: Peers, rows: pa.Table) -> None:
        self.started = time.monotonic()
        self.params = params
        self.peers = peers
        self.label = params.labels[peers.index]
        labels = set(rows.column("shard").to_numpy().tolist())
        if not labels <= {self.label}:
            raise RuntimeError(f"task {peers.index} (shard {self.label}) was handed {labels}")
        self.loop = ShardLoop(params.stage, self.label, rows)
        self.setup = time.monotonic() - self.started
        """Seconds from the task's rows to its loop (indexes, table, kernels)."""
        self.gain, self.negative = 0.0, 0
        self.waited = 0.0
        """Seconds of the last exchange: sending, and waiting for every other task."""
        self.cpu = 0.0
        """CPU seconds of the last stage's loop: its work, whatever else the machine runs
        (the wall time of a loop on a loaded machine is not)."""

    def run(self, schema: pa.Schema) -> pa.Table:
        """Stages until the rule stops them; this shard's rows and (first task) the stages."""
        stages: list[Stage] = []
        checked = -float("inf")
        while True:
            cpu = time.process_time()
            seconds, _ = self.loop.run()
            self.cpu = time.process_time() - cpu
            outgoing = self.loop.outgoing(schema)
            sent = {self.params.labels.index(d): t for d, t in outgoing.items()}
            fact = self._fact(outgoing, seconds)
            exchanged = time.monotonic()
            facts, received = self.peers.exchange(len(stages) + 1, fact, sent)
            self.waited = time.monotonic() - exchanged
            stage = self._combined(facts)
            stages.append(stage)
            stop, checked = self._verdict(len(stages), stage, checked)
            self._adapt_beta(seconds)
            self.loop.next_stage()
            if stop:
                return self._emitted(schema, received, stages)
            self.loop.receive(_concat(schema, received))

    def _verdict(self, count: int, stage: Stage, checked: float) -> tuple[bool, float]:
        try:
            stop, checked = self.params.rule.after(count, stage, checked)
        except OrderDependent:
            return True, checked  # the driver's replay raises it again at this stage
        return stop is not None, checked

    # ------------------------------------------------------------ facts

    def _fact(self, outgoing: dict[int, pa.Table], seconds: float) -> Fact:
        loop, table = self.loop, self.loop.table
        changes = [np.abs(table.delta[table.pending]).astype(np.float64)]
        changes += [
            np.abs(t.column("acc").to_numpy(zero_copy_only=False)) for t in outgoing.values()
        ]
        change = np.concatenate(changes).astype(np.float64)
        betas = list(self.loop.params.beta.values())
        return {
            "pending": int(table.pending.sum()),
            "sent": sum(len(t) for t in outgoing.values()),
            "change": change_partials(change),
            "gain": loop.gain,
            "negative": loop.negative,
            "iterations": loop.iterations,
            "propagated": loop.propagated,
            "betas": [min(betas), max(betas)] if betas else None,
            "at": time.monotonic() - self.started,
            "loop_s": seconds,
            "cpu_s": self.cpu,
            "wait_s": self.waited,
            "setup_s": self.setup,
        }

    def _combined(self, facts: Sequence[Fact]) -> Stage:
        """The stage all tasks see (the same facts in the same order on every task)."""
        self.gain = max([self.gain, *(float(f["gain"]) for f in facts)])
        self.negative += sum(int(f["negative"]) for f in facts)
        sent = sum(int(f["sent"]) for f in facts)
        betas = [b for f in facts if f["betas"] for b in f["betas"]]
        betas = betas or [self.params.beta.initial]
        detail = {
            "local_iterations": float(max(int(f["iterations"]) for f in facts)),
            "beta_min": float(min(betas)),
            "beta_max": float(max(betas)),
            "messages": float(sent),
            "cut": self.params.cut,
            "propagated": float(sum(int(f["propagated"]) for f in facts)),
            # Where the tasks' time goes: the busiest loop of the stage, the CPU of all
            # its loops, the longest exchange of the stage before (sending and waiting),
            # the slowest setup.
            "loop_s": max(float(f["loop_s"]) for f in facts),
            "cpu_s": sum(float(f["cpu_s"]) for f in facts),
            "wait_s": max(float(f["wait_s"]) for f in facts),
            "setup_s": max(float(f["setup_s"]) for f in facts),
        }
        return Stage(
            pending=sum(int(f["pending"]) for f in facts) + sent,
            measure=measure_of(self.params.measure, [f["change"] for f in facts]),
            detail=detail,
            gain=self.gain,
            negative=self.negative,
            at=float(facts[0]["at"]),
        )

    def _adapt_beta(self, seconds: float) -> None:
        """β per buffer this shard filled (``BetaRule``)."""
        rule, loop = self.params.beta, self.loop
        if self.params.hybrid or not loop.buffered:
            return
        beta = dict(loop.params.beta)
        for dest, count in loop.buffered.items():
            current = beta.get((self.label, dest), rule.initial)
            rate = count / max(seconds, 1e-6)
            if rate > rule.r * current / rule.tau or rate < current / (rule.r * rule.tau):
                beta[(self.label, dest)] = max(1.0, rule.alpha * rule.tau * rate)
        loop.params = replace(loop.params, beta=beta)

    # ------------------------------------------------------------ output

    def _emitted(
        self, schema: pa.Schema, received: list[pa.Table], stages: list[Stage]
    ) -> pa.Table:
        parts = [self.loop.state_rows(schema), *received]
        if self.peers.index == 0:
            record = json.dumps([_stage_json(s) for s in stages]).encode("utf-8")
            parts.append(layout_rows(schema, 1, self.label, STATS, {BLOB: [record]}))
        return pa.concat_tables(parts)


def change_partials(change: np.ndarray) -> list[float]:
    """[Σ, nonzero, n, max, min] of a shard's |Δ|: what combines into any clause measure."""
    if change.size == 0:
        return [0.0, 0.0, 0.0, 0.0, 0.0]
    nonzero = float(np.count_nonzero(change))
    return [
        float(change.sum()),
        nonzero,
        float(change.size),
        float(change.max()),
        float(change.min()),
    ]


def measure_of(func: str | None, partials: Sequence[Sequence[float]]) -> float | None:
    """The clause's aggregate of |Δ| over every shard's pending deltas and messages in
    flight (0 over none), from the shards' ``change_partials``."""
    if func is None:
        return None
    filled = [p for p in partials if p[2] > 0]
    if not filled:
        return 0.0
    match func:
        case "sum":
            return sum(p[0] for p in filled)
        case "count":
            return sum(p[1] for p in filled)
        case "max":
            return max(p[3] for p in filled)
        case "min":
            return min(p[4] for p in filled)
    return sum(p[0] for p in filled) / sum(p[2] for p in filled)


def _stage_json(stage: Stage) -> dict[str, object]:
    return {
        "pending": stage.pending,
        "measure": stage.measure,
        "detail": dict(stage.detail),
        "gain": stage.gain,
        "negative": stage.negative,
        "at": stage.at,
    }


def stages_of(record: bytes) -> list[Stage]:
    """The stages a run's statistics row holds (``_emitted``)."""
    return [
        Stage(
            pending=int(s["pending"]),
            measure=None if s["measure"] is None else float(s["measure"]),
            detail={k: float(v) for k, v in s["detail"].items()},
            gain=float(s["gain"]),
            negative=int(s["negative"]),
            at=float(s["at"]),
        )
        for s in json.loads(record)
    ]


def _concat(schema: pa.Schema, tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if tables else schema.empty_table()
