"""Cutting lineage between rounds: local checkpoints that are counted and released explicitly.

Every iterative strategy materializes its state once per round with
``DataFrame.localCheckpoint(eager=True)`` (one Spark job; the logical plan of the next round
starts from the stored blocks, so neither the plan nor the lineage grows with the number of
rounds). Round statistics (pending deltas, the termination measure) are collected by a
``pyspark.sql.Observation`` attached to the same job instead of a second action.
Blocks of a round that is no longer needed are unpersisted at once rather than left to the
JVM's garbage-collection-driven cleaner.

Every local checkpoint of ``operators`` goes through a ``Materializer``, so the jobs a
bootstrap or an update runs are counted (``StratumStats.jobs``, ``StratumEpoch.jobs``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

log = logging.getLogger(__name__)

JavaObject = Any
"""A py4j handle to a JVM object (here: the RDD holding checkpointed blocks)."""


@dataclass
class Stored:
    """A materialized DataFrame and the RDD blocks that hold it."""

    frame: DataFrame
    rdd: JavaObject | None = None
    """The JVM RDD holding the checkpointed blocks."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """The observed metrics (Spark returns Python numbers or None)."""

    def metric(self, name: str, default: float = 0) -> float:
        value = self.metrics.get(name)
        return default if value is None else float(value)


class Materializer:
    """Materializes DataFrames, counts the Spark jobs it runs and releases old blocks."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.jobs = 0

    def store(self, frame: DataFrame, metrics: list[Column] | None = None) -> Stored:
        """Run ``frame`` once (one job), keep its rows, and collect ``metrics`` over them."""
        observation = None
        if metrics:
            observation = Observation()
            frame = frame.observe(observation, *metrics)
        stored = frame.localCheckpoint(eager=True)
        self.jobs += 1
        values = dict(observation.get) if observation is not None else {}
        return Stored(stored, checkpoint_rdd(stored), values)

    def keep(self, frame: DataFrame) -> DataFrame:
        """``frame`` materialized (one job)."""
        return self.store(frame).frame

    def keep_counted(self, frame: DataFrame) -> tuple[DataFrame, int]:
        """``frame`` materialized and its rows counted, in one job."""
        stored = self.store(frame, [F.count(F.lit(1)).alias("n")])
        return stored.frame, int(stored.metric("n"))

    def release(self, stored: Stored | None) -> None:
        """Free the blocks of a round nobody reads any more."""
        if stored is None or stored.rdd is None:
            return
        stored.rdd.unpersist(False)
        stored.rdd = None


def checkpoint_rdd(frame: DataFrame) -> JavaObject | None:
    """The checkpointed RDD holding ``frame``'s rows, looking through projections and
    filters (such as an MRA state's relation rows); None when there is none."""
    try:
        plan = frame._jdf.queryExecution().logical()
        while plan.children().size() == 1:
            plan = plan.children().head()
        return plan.rdd()
    except Exception:  # not a checkpointed LogicalRDD (e.g. an empty local relation)
        log.debug("no checkpoint under %s", frame, exc_info=True)
        return None


def live_rdds(frames: Iterable[DataFrame]) -> set[int]:
    """Ids of the checkpointed RDDs under ``frames`` (blocks that must be kept)."""
    ids = set()
    for frame in frames:
        rdd = checkpoint_rdd(frame)
        if rdd is not None:
            ids.add(int(rdd.id()))
    return ids


def release_frame(frame: DataFrame, keep: set[int]) -> None:
    """Free the blocks of a locally checkpointed frame nobody reads any more, unless its
    RDD's id is in ``keep``; its id joins ``keep`` (several frames may project one
    checkpoint, e.g. a ``Delta``'s two sides: it is released once)."""
    rdd = checkpoint_rdd(frame)
    if rdd is not None and int(rdd.id()) not in keep:
        keep.add(int(rdd.id()))
        rdd.unpersist(False)
