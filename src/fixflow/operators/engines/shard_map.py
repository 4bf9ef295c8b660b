"""Which shard a key belongs to, for the async engine's stages on Spark.

Shard *i* carries a label that Spark's hash partitioning sends to partition *i*
(``shard_labels``), so a stage frame partitioned by its label column hands each task one
shard. Keys are assigned by the locality-aware assignment of ``engines.sharding`` when the
recursive bodies form a graph (``assigned``), by hash otherwise and for keys it does not know.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import pyarrow as pa
from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.operators.engines.base import EngineEnv
from fixflow.operators.engines.sharding import KeyShards, assign, label_batch, labelled
from fixflow.operators.thresholds import TASK_LOOP_ROWS

log = logging.getLogger(__name__)

ROWS_PER_SHARD = TASK_LOOP_ROWS
"""With ``[engine] shards = 0``: auxiliary rows per shard before another core gets one:
as many as one Python worker holds (``TASK_LOOP_ROWS``, a memory bound). More shards are
for memory, not speed: on the machines measured a second shard was never faster (engine
time, Spark placement, medians of 3: R-MAT 10M SSSP 30.5 s on one shard against 34.6 s on
two, CC 60.7 s against 99.7 s; grid_1m SSSP 1.5-2.1x; bench/ENGINES.md), since the shards'
loops are a few seconds of a run whose preparation on Spark does not depend on them."""


def murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of a 32-bit integer (Murmur3 x86_32, seed 42), as a signed int."""
    mask = 0xFFFFFFFF
    k1 = (value & mask) * 0xCC9E2D51 & mask
    k1 = ((k1 << 15) | (k1 >> 17)) & mask
    k1 = k1 * 0x1B873593 & mask
    h1 = seed ^ k1
    h1 = ((h1 << 13) | (h1 >> 19)) & mask
    h1 = (h1 * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & mask
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def shard_labels(shards: int) -> list[int]:
    """One label per shard such that Spark's hash partitioning into ``shards`` partitions
    sends each label to a partition of its own (shard i → partition i)."""
    labels: dict[int, int] = {}
    candidate = 0
    while len(labels) < shards:
        labels.setdefault(murmur3_int(candidate) % shards, candidate)
        candidate += 1
    return [labels[p] for p in range(shards)]


@dataclass
class ShardMap:
    """Key → shard label: the locality-aware assignment, with a hash fallback for keys it
    does not know (new keys of later updates)."""

    shards: int
    labels: list[int]
    assignment: Broadcast[KeyShards] | None = None
    """(key, shard index) for single-column keys, broadcast to the tasks; None: hash
    sharding only."""
    method: str = "hash"
    cut: int | None = None
    links: int | None = None

    def label(self, frame: DataFrame, columns: Sequence[tuple[Sequence[str], str]]) -> DataFrame:
        """``frame`` with, per (key columns, out), column ``out`` = the shard label of the
        key: keys of the assignment looked up in the tasks, in one pass
        (``sharding.labelled``), others hashed by Spark."""
        frame, looked_up = self.hashed(frame, columns)
        if looked_up and self.assignment is not None:
            frame = labelled(frame, self.assignment, looked_up, self.labels)
        return frame

    def hashed(
        self, frame: DataFrame, columns: Sequence[tuple[Sequence[str], str]]
    ) -> tuple[DataFrame, list[tuple[str, str]]]:
        """``frame`` with the labels Spark computes (one shard, or the hash), and the
        (key column, out) pairs left for a lookup in the assignment (``lookup``)."""
        if self.shards == 1:  # nothing to hash or look up
            return frame.withColumns({out: F.lit(self.labels[0]) for _, out in columns}), []
        labels = F.array(*(F.lit(x) for x in self.labels))
        looked_up = []
        for keys, out in columns:
            if self.assignment is not None and len(keys) == 1:
                looked_up.append((keys[0], out))
                continue
            index = F.pmod(F.xxhash64(*(F.col(k) for k in keys)), F.lit(self.shards))
            frame = frame.withColumn(out, F.element_at(labels, (index + 1).cast("int")))
        return frame, looked_up

    def lookup(
        self, looked_up: list[tuple[str, str]]
    ) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
        """For a task: a batch with the labels ``hashed`` left to look up."""
        if not looked_up or self.assignment is None:
            return _unchanged
        return partial(label_batch, self.assignment, looked_up, self.labels)


def _unchanged(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


def shard_count(env: EngineEnv, aux_rows: int) -> int:
    """``[engine] shards``, or one per ``ROWS_PER_SHARD`` auxiliary rows; at most the task
    slots Spark has, since a sharded run's tasks all run at once (a barrier stage)."""
    slots = task_slots(env.spark)
    wanted = env.options.shards or -(-aux_rows // ROWS_PER_SHARD)
    if wanted > slots and env.options.shards:
        log.warning(
            "[engine] shards = %d, but Spark has %d task slot(s) and a sharded run needs "
            "one per shard at once: %d shards",
            wanted,
            slots,
            max(1, slots),
        )
    return max(1, min(wanted, slots))


def task_slots(spark: SparkSession) -> int:
    """Tasks Spark can run at once now (``local[N]``: N; a cluster: its executors' cores
    by ``spark.task.cpus``), which a barrier stage's tasks all need."""
    context = spark.sparkContext._jsc.sc()
    profile = context.resourceProfileManager().defaultResourceProfile()
    return int(context.maxNumConcurrentTasks(profile))


def require_slots(spark: SparkSession, shards: int) -> None:
    """Fail in one line, before Spark would wait for slots that may never come."""
    slots = task_slots(spark)
    if shards > slots:
        raise InsufficientSlots(
            f"a run of {shards} shards needs {shards} Spark task slots at once; there are "
            f"{slots} (more executor cores, or fewer [engine] shards)"
        )


class InsufficientSlots(RuntimeError):
    """A sharded run's barrier stage would need more task slots than Spark has."""


def assigned(shard_map: ShardMap, links: DataFrame | None, count: int | None = None) -> ShardMap:
    """The locality-aware assignment of ``engines.sharding`` (hash when there is no graph;
    ``count``: how many links there are at most, when known)."""
    if links is None or shard_map.shards == 1:
        return shard_map
    assignment = assign(links, shard_map.shards, count=count)
    shard_map.assignment = assignment.shared
    shard_map.method = assignment.method
    shard_map.cut = assignment.cut
    shard_map.links = assignment.links
    return shard_map
