"""Which shard a key belongs to, for the async engine's stages on Spark.

Shard *i* carries a label that Spark's hash partitioning sends to partition *i*
(``shard_labels``), so a stage frame partitioned by its label column hands each task one
shard. Keys are assigned by the locality-aware assignment of ``engines.sharding`` when the
recursive bodies form a graph (``assigned``), by hash otherwise and for keys it does not know.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from fixflow.operators.engines.base import EngineEnv

ROWS_PER_SHARD = 2_000_000
"""With ``[engine] shards = 0``: auxiliary rows per shard before another core gets one.
Every stage ships each shard's auxiliary rows to its task and every cut edge may cost a
stage, so a shard must hold enough work to pay for that: on 2 cores a 1M-row grid ran
SSSP in one shard in a fraction of the time two shards exchanging across a cut took."""


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
    assignment: DataFrame | None = None
    """(key, shard index) for single-column keys; None: hash sharding only."""
    method: str = "hash"
    cut: int | None = None
    links: int | None = None

    def label(self, frame: DataFrame, keys: Sequence[str], out: str) -> DataFrame:
        """``frame`` with column ``out`` = the shard label of the key columns ``keys``."""
        if self.shards == 1:  # nothing to hash or look up
            return frame.withColumn(out, F.lit(self.labels[0]))
        fallback = F.pmod(F.xxhash64(*(F.col(k) for k in keys)), F.lit(self.shards))
        index: Column = fallback
        if self.assignment is not None and len(keys) == 1:
            lookup = self.assignment.select(
                F.col("key").alias("#key"), F.col("shard").alias("#shard")
            )
            frame = frame.join(lookup, frame[keys[0]] == lookup["#key"], "left")
            index = F.coalesce(F.col("#shard").cast("long"), fallback)
        labels = F.array(*(F.lit(x) for x in self.labels))
        labelled = frame.withColumn(out, F.element_at(labels, (index + 1).cast("int")))
        return labelled.drop("#key", "#shard")


def shard_count(env: EngineEnv, aux_rows: int) -> int:
    if env.options.shards > 0:
        return env.options.shards
    cores = env.spark.sparkContext.defaultParallelism
    return max(1, min(cores, -(-aux_rows // ROWS_PER_SHARD)))


def assigned(shard_map: ShardMap, links: DataFrame | None) -> ShardMap:
    """The locality-aware assignment of ``engines.sharding`` (hash when there is no graph)."""
    if links is None or shard_map.shards == 1:
        return shard_map
    from fixflow.operators.engines import sharding

    assignment = sharding.assign(links, shard_map.shards)
    shard_map.assignment = assignment.frame
    shard_map.method = assignment.method
    shard_map.cut = assignment.cut
    shard_map.links = assignment.links
    return shard_map
