"""Cutting lineage between rounds: local checkpoints that are released explicitly.

Every iterative strategy materializes its state once per round with
``DataFrame.localCheckpoint(eager=True)`` (one Spark job; the logical plan of the next round
starts from the stored blocks, so neither the plan nor the lineage grows with the number of
rounds). Round statistics (pending deltas, the termination measure) are collected by a
``pyspark.sql.Observation`` attached to the same job instead of a second action.
Blocks of a round that is no longer needed are unpersisted at once rather than left to the
JVM's garbage-collection-driven cleaner.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, Observation, SparkSession

log = logging.getLogger(__name__)


@dataclass
class Stored:
    """A materialized DataFrame and the RDD blocks that hold it."""

    frame: DataFrame
    rdd: object | None = None
    """The JVM RDD holding the checkpointed blocks (py4j handle)."""
    metrics: dict[str, object] = field(default_factory=dict)


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
        return Stored(stored, _checkpointed_rdd(stored), values)

    def release(self, stored: Stored | None) -> None:
        """Free the blocks of a round nobody reads any more."""
        if stored is None or stored.rdd is None:
            return
        stored.rdd.unpersist(False)  # type: ignore[attr-defined]
        stored.rdd = None


def _checkpointed_rdd(frame: DataFrame) -> object | None:
    """The RDD under a checkpointed DataFrame's LogicalRDD (the one holding its blocks)."""
    try:
        return frame._jdf.queryExecution().logical().rdd()
    except Exception:  # not a LogicalRDD (e.g. an empty local relation): nothing to free
        log.debug("no checkpointed RDD under %s", frame, exc_info=True)
        return None
