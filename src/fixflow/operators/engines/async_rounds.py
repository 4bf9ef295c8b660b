"""The driver's bookkeeping between the async engine's stages: what a stage reports
(``stage_metrics``, read back by ``observed``), PowerLog's adaptive β per buffer
(``adapted``), and the watch for sums whose value could depend on the order of
propagation (``observe_signs``; ``mra_bootstrap`` acts on it).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from fixflow.operators.engines import blocks
from fixflow.operators.engines.blocks import BLOB
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.engines.shard_loop import MESSAGE, STATE, STATS
from fixflow.operators.engines.stage_frame import AsyncRun
from fixflow.operators.materialize import Stored
from fixflow.operators.rounds import measure_column


def stage_metrics(program: MraProgram) -> list[Column]:
    """What a stage's job observes on its way out: pending deltas, messages in flight, the
    tasks' statistics blocks, and the termination clause's measure of the change."""
    kind = F.col("kind")
    pending = (kind == STATE) & F.col("delta").isNotNull()
    metrics = [
        F.count(F.when(pending, 1)).alias("pending"),
        F.count(F.when(kind == MESSAGE, 1)).alias("messages"),
        F.collect_list(F.when(kind == STATS, F.col(BLOB))).alias("stats"),
    ]
    if program.spec.termination is not None:
        change = F.when(pending, F.col("delta")).when(kind == MESSAGE, F.col("acc"))
        metrics.append(
            measure_column(program.spec.termination.func, F.abs(change).cast("double")).alias("m")
        )
    return metrics


def observed(
    run: AsyncRun, stored: Stored, hybrid: bool
) -> tuple[int, float | None, dict[str, float]]:
    """A stored stage's (pending deltas and messages, clause measure, round detail), and
    the run's buffers and sign watch brought up to date from its statistics."""
    metrics = stored.metrics
    pending = int(metrics.get("pending") or 0) + int(metrics.get("messages") or 0)
    measure = metrics.get("m")
    stats = [row for blob in metrics.get("stats") or [] for row in blocks.decode(blob).to_pylist()]
    detail = adapted(run, stats, hybrid)
    observe_signs(run, stats)
    detail["messages"] = float(metrics.get("messages") or 0)
    detail["cut"] = float(run.shard_map.cut or 0)
    per_shard = {int(row["shard"]): int(row["s_propagated"]) for row in stats}
    detail["propagated"] = float(sum(per_shard.values()))
    return pending, None if measure is None else float(measure), detail


def adapted(run: AsyncRun, stats: list[dict[str, Any]], hybrid: bool) -> dict[str, float]:
    """PowerLog's rule per buffer: when its fill rate |B|/ΔT leaves the band
    [β/(r·τ), r·β/τ], β becomes α·τ·|B|/ΔT."""
    buffer = run.env.options.buffer
    tau = buffer.interval_ms / 1000.0
    iterations = 0.0
    for row in stats:
        src, dst = int(row["shard"]), int(row["s_dst"])
        count, seconds = float(row["s_count"]), float(row["s_seconds"])
        iterations = max(iterations, float(row["s_iters"]))
        if dst < 0 or hybrid:
            continue
        beta = run.beta.get((src, dst), float(buffer.initial))
        rate = count / max(seconds, 1e-6)
        if rate > buffer.r * beta / tau or rate < beta / (buffer.r * tau):
            run.beta[(src, dst)] = max(1.0, buffer.alpha * tau * rate)
    betas = list(run.beta.values()) or [float(buffer.initial)]
    return {
        "local_iterations": iterations,
        "beta_min": min(betas),
        "beta_max": max(betas),
    }


def observe_signs(run: AsyncRun, stats: list[dict[str, Any]]) -> None:
    """Accumulate the shards' F′ gains and negative deltas (``order_dependence``)."""
    per_shard: dict[int, tuple[float, int]] = {}
    for row in stats:
        per_shard[int(row["shard"])] = (float(row["s_gain"] or 0), int(row["s_negative"] or 0))
    for gain, negative in per_shard.values():
        run.gain = max(run.gain, gain)
        run.negative += negative
