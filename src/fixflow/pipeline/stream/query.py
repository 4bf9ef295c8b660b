"""The Structured Streaming side of ingestion: the query that reads the Kafka topics and
hands every micro-batch to ``foreachBatch``.

``batch_handler`` is that function: it reads the batch's records (in the driver with
``kafka.driver_read.DriverRead`` when it can, else from the batch's DataFrame) and runs a
``BatchPipeline``: ``ingest.ingest_records`` (validation, dead letters, normalization:
Arrow only), the maintenance hook, the EDB commit (``memory_source`` runs the same
pipeline over records held in memory). ``start_ingest_query`` wires the source, the handler
and the checkpoint together. Everything here needs Spark; ``ingest`` does not.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from fixflow.checker.ast import Program
from fixflow.pipeline.lake.checkpoint_mirror import CheckpointMirror
from fixflow.pipeline.lake.lakehouse import ProgramLake
from fixflow.pipeline.stream.ingest import (
    RECORD_COLUMNS,
    HeldEdb,
    IngestResult,
    Phases,
    ensure_edb_tables,
    ingest_records,
    topics_for,
)
from fixflow.pipeline.stream.metrics import Metrics

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

    from fixflow.pipeline.config import Config

log = logging.getLogger(__name__)


QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Spark sets this local property on the thread that runs foreachBatch."""


def ingest_batch(
    batch_df: DataFrame,
    batch_id: int,
    program: Program,
    lake: ProgramLake,
    metrics: Metrics | None = None,
    *,
    topic_prefix: str = "",
    query_id: str | None = None,
    driver_read: Callable[[int], pa.Table | None] | None = None,
) -> IngestResult:
    """Validate, dead-letter and normalize one micro-batch (``ingest.ingest_records``) of the
    query running this ``foreachBatch`` (or ``query_id``): its records read by
    ``read_records``."""
    query = query_id or streaming_query_id(batch_df)
    phases = Phases()
    with phases.timed("read"):
        records = read_records(batch_df, batch_id, driver_read)
    return ingest_records(
        records,
        batch_id,
        program,
        lake,
        metrics,
        query_id=query,
        topic_prefix=topic_prefix,
        phases=phases,
    )


def read_records(
    batch_df: DataFrame,
    batch_id: int,
    driver_read: Callable[[int], pa.Table | None] | None = None,
) -> pa.Table:
    """A Spark micro-batch's records as Arrow (at least ``RECORD_COLUMNS``): read in the
    driver by ``driver_read`` (``kafka.driver_read.DriverRead``) when it can, else through
    Spark. One way to get a batch's records; ``memory_source`` is another."""
    table = driver_read(batch_id) if driver_read is not None else None
    return table if table is not None else batch_df.select(*RECORD_COLUMNS).toArrow()


def streaming_query_id(batch_df: DataFrame) -> str:
    """The id of the streaming query running this foreachBatch (stable across restarts
    from the same checkpoint, new for a new checkpoint)."""
    value = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    if not value:
        raise RuntimeError("not inside a streaming foreachBatch: pass query_id explicitly")
    return value


Maintain = Callable[[IngestResult], None]
"""The maintenance engine's hook: given a batch's changes, update state and results (with
``result.commit`` on every Delta commit). It runs before the EDB commit."""


@dataclass
class BatchGate:
    """Between a stream's batches and whoever stops it: which batch is in flight, and
    whether another may start (``running.RunningStream.stop`` closes it)."""

    closed: threading.Event = field(default_factory=threading.Event)
    in_flight: int | None = None
    finished: int | None = None
    """The last batch whose pipeline ran to its end (Spark commits it after that)."""


class StopRequested(Exception):
    """Raised by a batch that starts after its stream was asked to stop: nothing of it is
    read, applied or committed (Spark has not committed it either, so the next start runs
    it), and the query ends (``running.RunningStream.stop`` takes it as the stop)."""


@dataclass(frozen=True)
class BatchPipeline:
    """What one micro-batch runs, whatever carried its records (the Kafka query's
    ``batch_handler``, ``memory_source.MemorySource``): read → ingest → ``maintain`` (the
    engine) → EDB commit → metrics.

    Any exception propagates without committing the EDB, so the batch is replayed on
    restart (the Kafka query does not commit it in Spark's checkpoint); the idempotent
    commits make that safe. ``lock`` is held for the whole batch (work between batches,
    such as carrying pending deltas on under async consistency, takes it too). With
    ``spark``, each batch counts the Spark jobs it started. Once ``gate`` is closed, a batch
    that starts raises ``StopRequested`` before it reads anything."""

    program: Program
    lake: ProgramLake
    metrics: Metrics | None = None
    maintain: Maintain | None = None
    topic_prefix: str = ""
    lock: AbstractContextManager[Any] | None = None
    spark: SparkSession | None = None
    gate: BatchGate | None = None
    mirror: CheckpointMirror | None = None
    """For an object-store lake: Spark's local checkpoint, copied into the lake before the
    batch commits anything (``checkpoint_mirror``)."""
    held: HeldEdb = field(default_factory=HeldEdb)
    """The EDB rows the last batch committed, which the next one normalizes against."""

    def run(self, read: Callable[[], pa.Table], batch_id: int, query_id: str) -> IngestResult:
        """One batch: ``read`` gives its records (timed as the ``read`` phase)."""
        started = time.monotonic()
        jobs = None
        if self.spark is not None:
            jobs = _JobCounter(self.spark, f"fixflow-batch-{batch_id}-{uuid.uuid4()}")
        with self.lock or nullcontext(), self._in_flight(batch_id):
            phases = Phases()
            if self.mirror is not None:
                with phases.timed("checkpoint"):
                    self.mirror.push()
            with phases.timed("read"):
                records = read()
            result = ingest_records(
                records,
                batch_id,
                self.program,
                self.lake,
                self.metrics,
                query_id=query_id,
                topic_prefix=self.topic_prefix,
                phases=phases,
                held=self.held,
            )
            if self.maintain is not None:
                self.maintain(result)
            with result.phases.timed("edb_commit"):
                result.commit_edb()
        result.phases.jobs = jobs.count() if jobs is not None else 0
        log.info("batch %d took %s", batch_id, result.phases.describe())
        if self.metrics is not None:
            if result.replayed:
                self.metrics.batches_replayed.inc()
            self.metrics.batch_committed(batch_id)
            self.metrics.batch_duration.observe(time.monotonic() - started)
        return result

    @contextmanager
    def _in_flight(self, batch_id: int) -> Iterator[None]:
        if self.gate is None:
            yield
            return
        if self.gate.closed.is_set():
            raise StopRequested(f"batch {batch_id} not started: the stream is stopping")
        self.gate.in_flight = batch_id
        try:
            yield
            self.gate.finished = batch_id
        finally:
            self.gate.in_flight = None


def batch_handler(
    pipeline: BatchPipeline,
    driver_read: Callable[[int], pa.Table | None] | None = None,
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function: ``pipeline`` over the batch's records (``read_records``,
    with ``driver_read``), under the streaming query's id."""

    def handle(batch_df: DataFrame, batch_id: int) -> None:
        query_id = streaming_query_id(batch_df)
        pipeline.run(lambda: read_records(batch_df, batch_id, driver_read), batch_id, query_id)

    return handle


class _JobCounter:
    """Counts the Spark jobs this thread starts from now on (a job group per batch)."""

    def __init__(self, spark: SparkSession, group: str) -> None:
        self.context = spark.sparkContext
        self.group = group
        self.context.setJobGroup(group, group)

    def count(self) -> int:
        return len(self.context.statusTracker().getJobIdsForGroup(self.group))


def start_ingest_query(
    spark: SparkSession,
    config: Config,
    program: Program,
    lake: ProgramLake,
    metrics: Metrics | None = None,
    maintain: Maintain | None = None,
    *,
    available_now: bool = False,
    processing_time: str | None = None,
    limit_file: str | None = None,
    lock: AbstractContextManager[Any] | None = None,
    gate: BatchGate | None = None,
    mirror: CheckpointMirror | None = None,
) -> StreamingQuery:
    """Start the streaming query of a program: its input topics (created if missing) →
    ``batch_handler`` → the lake, checkpointed under ``lake.checkpoint()``.

    ``available_now`` processes what is published, then stops (``fixflow run
    --available-now``, tests); otherwise a batch starts every ``processing_time`` (Spark's
    interval, e.g. ``"5 seconds"``), by default every ``[stream] trigger_ms``.
    """
    from fixflow.pipeline.broker.embedded import ensure_topics
    from fixflow.pipeline.kafka.driver_read import DriverRead, local_dir
    from fixflow.pipeline.kafka.source import read_stream

    prefix = config.kafka.topic_prefix
    topics = topics_for(program, prefix)
    ensure_topics(config, topics)
    ensure_edb_tables(program, lake)
    driver_read = None
    if config.kafka.source == "python" and config.stream.driver_read_max_records:
        driver_read = DriverRead(
            config.kafka,
            lake.checkpoint(),
            config.stream.driver_read_max_records,
            read_ahead=config.stream.read_ahead,
        )
    pipeline = BatchPipeline(
        program,
        lake,
        metrics,
        maintain,
        topic_prefix=prefix,
        lock=lock,
        spark=spark,
        gate=gate,
        mirror=mirror,
    )
    handler = batch_handler(pipeline, driver_read)
    writer = (
        read_stream(spark, config, topics, limit_file=limit_file)
        .writeStream.foreachBatch(handler)
        .option("checkpointLocation", lake.checkpoint())
        .queryName(f"fixflow-{lake.program}")
    )
    writer = with_trigger(writer, config, available_now, processing_time)
    choose_checkpoint_files(spark, local=local_dir(lake.checkpoint()) is not None)
    return writer.start()


def with_trigger(
    writer: DataStreamWriter, config: Config, available_now: bool, processing_time: str | None
) -> DataStreamWriter:
    """``writer`` triggered once over what is there (``available_now``), or every
    ``processing_time``, by default ``[stream] trigger_ms``."""
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(
        processingTime=processing_time or f"{config.stream.trigger_ms} milliseconds"
    )


CHECKPOINT_FILES = "spark.sql.streaming.checkpointFileManagerClass"


RENAMING_FILES = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def choose_checkpoint_files(spark: SparkSession, local: bool) -> None:
    """How the query writes its offset and commit logs. Spark's default goes through
    Hadoop's FileContext, ~35 ms a write on a local disk: two writes a trigger, a quarter
    of an empty batch. On a local file system, writing a temporary file and renaming it
    (Spark's ``FileSystemBasedCheckpointFileManager``) is as atomic, since a POSIX rename
    is, and takes ~10 ms. Elsewhere (HDFS, object stores) Spark's default stays; a class
    set in ``[spark.conf]`` is left alone."""
    chosen = spark.conf.get(CHECKPOINT_FILES, None)
    if chosen not in (None, RENAMING_FILES):
        return
    if local:
        spark.conf.set(CHECKPOINT_FILES, RENAMING_FILES)
    elif chosen is not None:
        spark.conf.unset(CHECKPOINT_FILES)


CONNECT_BACK = "Python worker failed to connect back"


START_ATTEMPTS = 3


START_AGAIN = (
    "the Kafka source's Python worker did not connect back to Spark within its fixed 10 s "
    "(a loaded machine): starting the query again on its checkpoint (attempt %d of %d failed)"
)


def missed_connect_back(query: Any) -> bool:
    """Whether ``query`` failed because a Python worker Spark started (the Kafka source's
    runner, a data source's planner) did not connect back in time: Spark 4.2 gives it a
    hard-coded 10 s (PythonWorkerFactory.createSimpleWorker), which a start on a loaded
    machine can miss. Those workers run while a micro-batch is planned, before Fixflow's
    batch function runs, so nothing was applied or committed: starting the query again on
    the same checkpoint reads the same offsets."""
    error = query.exception()
    return error is not None and CONNECT_BACK in str(error)
