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
    rdd_ids: frozenset[int] = field(default_factory=frozenset)
    metrics: dict[str, object] = field(default_factory=dict)


class Materializer:
    """Materializes DataFrames, counts the Spark jobs it runs and releases old blocks."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.jobs = 0

    def _persistent_ids(self) -> set[int]:
        return {int(k) for k in self.spark.sparkContext._jsc.getPersistentRDDs().keySet()}

    def store(self, frame: DataFrame, metrics: list[Column] | None = None) -> Stored:
        """Run ``frame`` once (one job), keep its rows, and collect ``metrics`` over them."""
        before = self._persistent_ids()
        observation = None
        if metrics:
            observation = Observation()
            frame = frame.observe(observation, *metrics)
        stored = frame.localCheckpoint(eager=True)
        self.jobs += 1
        values = dict(observation.get) if observation is not None else {}
        return Stored(stored, frozenset(self._persistent_ids() - before), values)

    def release(self, stored: Stored | None) -> None:
        """Free the blocks of a round nobody reads any more."""
        if stored is None or not stored.rdd_ids:
            return
        rdds = self.spark.sparkContext._jsc.getPersistentRDDs()
        for rdd_id in stored.rdd_ids:
            rdd = rdds.get(rdd_id)
            if rdd is not None:
                rdd.unpersist(False)
