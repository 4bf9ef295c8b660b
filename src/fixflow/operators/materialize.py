"""Cutting lineage between rounds: local checkpoints that are counted and released explicitly.

Every iterative strategy materializes its state once per round with
``DataFrame.localCheckpoint(eager=True)`` (one Spark job; the logical plan of the next round
starts from the stored blocks, so neither the plan nor the lineage grows with the number of
rounds). Round statistics (pending deltas, the termination measure) are collected by a
``pyspark.sql.Observation`` attached to the same job instead of a second action.
Blocks of a round that is no longer needed are unpersisted at once rather than left to the
JVM's garbage-collection-driven cleaner.

A stored frame is estimated by the optimizer at its real size (``exact_size``). Spark keeps,
in a checkpoint, the optimizer's estimate of the plan that computed it (SPARK-39834), and
without cost-based optimization a join is estimated at the product of its sides' sizes: with
two atoms of a recursive relation in one body (``n(x+1) :- n(x), n(y), y = 0.``) every round
squared the estimate of the last, its number of digits doubled per round and planning a
round took exponentially long (a minute at round 22, nothing after; with one such atom the
digits only grow linearly). A store whose estimate is implausible therefore counts its rows
(in the same job) and the stored frame carries the size of those rows.

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

from fixflow.operators.relation import Checkpoint, Relation

log = logging.getLogger(__name__)

ROWS = "stored_rows"
"""The rows a store stored: collected whenever the store observes anything."""

PLAUSIBLE_BITS = 40
"""Size estimates up to 2**40 bytes (1 TiB) are left as the optimizer made them; a larger
one on this engine is a product of join estimates (module docstring), and a stored frame
gets its exact size instead. Reading the estimate is one call on a plan the store plans
anyway; counting rows and replacing the statistics cost a store about twice as much on
small frames, so only implausible estimates pay for it."""

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

    def store(
        self, frame: DataFrame, metrics: list[Column] | None = None, *, count: bool = False
    ) -> Stored:
        """Run ``frame`` once (one job), keep its rows, and collect ``metrics`` over them
        (and ``ROWS`` with ``count``, or whenever anything is observed). An implausible size
        estimate (``overestimated``) is replaced by the exact one."""
        wanted = list(metrics or [])
        if count or wanted or overestimated(frame):  # observed anyway: a count costs nothing
            wanted.append(F.count(F.lit(1)).alias(ROWS))
        observation = Observation() if wanted else None
        if observation is not None:
            frame = frame.observe(observation, *wanted)
        corrected = observation is not None and overestimated(frame)
        stored = frame.localCheckpoint(eager=True)
        self.jobs += 1
        values = dict(observation.get) if observation is not None else {}
        if corrected:
            stored = exact_size(stored, int(values[ROWS]))
        (rdd,) = _walk(stored) or [None]  # a fresh store has exactly one
        relation = Relation.of(stored)
        if rdd is not None:
            relation.checkpoints = ((int(rdd.id()), rdd),)
        return Stored(relation, rdd, values)

    def keep(self, frame: DataFrame) -> DataFrame:
        """``frame`` materialized (one job)."""
        return self.store(frame).frame

    def keep_later(self, frame: DataFrame, rows: int) -> DataFrame:
        """``frame``, known to hold ``rows`` rows, stored by the first job that reads it
        rather than by a job now: for rows a caller already holds (a micro-batch's net
        facts), which that job computes as cheaply as a store would. It is sized as
        ``rows`` rows (``exact_size``), as a store that counted them would be."""
        return exact_size(frame.localCheckpoint(eager=False), rows)

    def keep_counted(self, frame: DataFrame) -> tuple[DataFrame, int]:
        """``frame`` materialized and its rows counted, in one job."""
        stored = self.store(frame, count=True)
        return stored.frame, int(stored.metric(ROWS))

    def release(self, stored: Stored | None) -> None:
        """Free the blocks of a round nobody reads any more."""
        if stored is None or stored.rdd is None:
            return
        stored.rdd.unpersist(False)
        stored.rdd = None


def overestimated(frame: DataFrame) -> bool:
    """Whether the optimizer's size estimate of ``frame`` is implausible (``PLAUSIBLE_BITS``;
    also when it cannot be read)."""
    try:
        estimate = int(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    except Exception:  # a number too long for Python's int parsing, or another Spark
        return True
    return estimate.bit_length() > PLAUSIBLE_BITS


def exact_size(stored: DataFrame, rows: int) -> DataFrame:
    """A local checkpoint of ``rows`` rows whose statistics are those of ``rows`` rows of its
    schema, instead of the estimate of the plan that computed it (module docstring).

    PySpark has no API for a plan's statistics, and py4j turns Scala's ``BigInt`` into a
    Python number, so the statistics are taken from a plan Spark estimates exactly: ``rows``
    rows of the same columns (``spark.range`` projected to typed nulls). The checkpoint is
    returned as it is when Spark's internals differ (a warning: planning may slow down)."""
    spark = stored.sparkSession
    like = spark.range(rows).select(
        *(F.lit(None).cast(field.dataType).alias(field.name) for field in stored.schema.fields)
    )
    try:
        jvm: JavaObject = spark._jvm
        plan = stored._jdf.queryExecution().logical()
        session = spark._jsparkSession
        stats = like._jdf.queryExecution().optimizedPlan().stats()
        sized = plan.copy(
            plan.output(),
            plan.rdd(),
            plan.outputPartitioning(),
            plan.outputOrdering(),
            plan.isStreaming(),
            getattr(plan, "copy$default$6")(),  # the streaming source (none)
            session,
            jvm.scala.Option.apply(stats),
            jvm.scala.Option.apply(plan.constraints()),
        )
        frame = jvm.org.apache.spark.sql.classic.Dataset.ofRows(session, sized)
    except Exception:  # another Spark version: keep the checkpoint's own estimate
        log.warning("cannot set the statistics of a stored frame", exc_info=True)
        return stored
    return DataFrame(frame, spark)


def checkpoint_rdds(frame: DataFrame) -> list[JavaObject]:
    """Every RDD-backed leaf of ``frame``'s plan: the checkpoints a segmented relation (a
    union of stored segments, ``core.extended``) reads, or the one under a stored frame
    (looking through projections and filters, such as an MRA state's relation rows)."""
    return [rdd for _, rdd in _checkpoints(frame)]


def _checkpoints(frame: DataFrame) -> tuple[Checkpoint, ...]:
    """(id, RDD) of the checkpoints under ``frame``: walked once per ``Relation`` and kept
    in its ``checkpoints``, since the walk is three or four py4j calls a plan node and a
    segmented relation is walked at every epoch (its segments, the garbage collection):
    a one-fact epoch's calls grew by ~130 a segment. A plain frame (a projection of a
    store, such as a delta's side) is walked each time it is asked about."""
    if isinstance(frame, Relation) and not frame.made:
        # Driver rows, or what it declares it will read (``reading_checkpoints_of``):
        # walking would make it.
        return frame.checkpoints or ()
    known = frame.checkpoints if isinstance(frame, Relation) else None
    if known is None:
        known = tuple((int(rdd.id()), rdd) for rdd in _walk(frame))
        if isinstance(frame, Relation):
            frame.checkpoints = known
    return known


def reading_checkpoints_of(frame: DataFrame, *parts: DataFrame) -> Relation:
    """``frame``, recorded as reading exactly the checkpoints of ``parts`` (it is their
    union, maybe re-partitioned): its plan, which grows with the parts, is never walked."""
    relation = Relation.of(frame)
    relation.checkpoints = tuple(c for part in parts for c in _checkpoints(part))
    return relation


def _walk(frame: DataFrame) -> list[JavaObject]:
    try:
        pending = [frame._jdf.queryExecution().logical()]
    except Exception:
        log.debug("no plan under %s", frame, exc_info=True)
        return []
    found = []
    while pending:
        plan = pending.pop()
        children = plan.children()
        if children.size() == 0:
            if plan.nodeName() == "LogicalRDD":
                found.append(plan.rdd())
            continue
        pending.extend(children.apply(i) for i in range(children.size()))
    return found


def live_rdds(frames: Iterable[DataFrame]) -> set[int]:
    """Ids of the checkpointed RDDs under ``frames`` (blocks that must be kept)."""
    return {rdd_id for frame in frames for rdd_id, _ in _checkpoints(frame)}


def release_frame(frame: DataFrame, keep: set[int]) -> None:
    """Free the blocks of a locally checkpointed frame (every segment of a segmented one)
    nobody reads any more, except RDDs whose id is in ``keep``; released ids join ``keep``
    (several frames may project one checkpoint, e.g. a ``Change``'s two sides: it is
    released once)."""
    for rdd_id, rdd in _checkpoints(frame):
        if rdd_id not in keep:
            keep.add(rdd_id)
            rdd.unpersist(False)
