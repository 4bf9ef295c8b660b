"""Reading Kafka topics as a Spark stream.

The embedded default is ``fixflow-kafka``: a PySpark Python streaming data source, so no
JVM jar is needed. Offsets are JSON ``{topic: {partition: offset}}`` (next offset to read)
kept in Spark's checkpoint; the driver-side reader plans each micro-batch with kafka-python
(metadata, log ends), and each Spark task reads the offset range [start, end) of one
topic-partition with an assigned, group-less librdkafka consumer (confluent-kafka), which
decodes records in C. A restarted query resumes from the checkpointed offset.

The pieces, each in its module of ``pipeline/kafka/``: ``offsets`` (the checkpointed form),
``broker_view`` (what the broker holds, and lost records), ``records`` (ranges and their
librdkafka reader), ``driver_read`` and ``read_ahead`` (a batch's records read in the
driver), ``batch_limit`` (the per-trigger limit the driver steers). This module is the Spark
side: the data source, its stream reader, and ``read_stream``.

``source = "native"`` in the config selects Spark's built-in ``kafka`` format instead (for
clusters, where spark-sql-kafka is on the classpath; it cannot run in this environment).
Both produce the same columns: ``topic, partition, offset, key, value, timestamp``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from fixflow.pipeline.kafka.broker_view import (
    BrokerView,
    DataLossError,
    Loss,
    broker_view,
    find_losses,
)
from fixflow.pipeline.kafka.offsets import (
    CLUSTER_KEY,
    Offsets,
    cap_offsets,
    normalize,
    positions_of,
    record_count,
    tagged,
)
from fixflow.pipeline.kafka.records import SCHEMA, KafkaRange, kafka_ranges, read_range
from fixflow.pipeline.kafka_security import from_option, spark_kafka_options, to_option

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from fixflow.pipeline.config import Config

log = logging.getLogger(__name__)

SOURCE_NAME = "fixflow-kafka"


class FixflowKafkaDataSource(DataSource):
    """``spark.readStream.format("fixflow-kafka")`` with options ``bootstrap_servers``,
    ``kafka_security`` (``kafka_security.to_option``), ``topics`` (comma-separated),
    ``max_records_per_trigger``, ``max_records_file``, ``probe_end``, ``on_data_loss``
    (``fail`` or ``resume``), ``backoff_max_s`` and ``read_timeout_s``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.kafka = from_option(
            _required(options, "bootstrap_servers"), options.get("kafka_security", "")
        )
        self.bootstrap = self.kafka.bootstrap_servers
        self.topics = [t.strip() for t in _required(options, "topics").split(",") if t.strip()]
        limit = options.get("max_records_per_trigger", "")
        self.max_records = int(limit) if limit else None
        self.probe = options.get("probe_end", "true").lower() == "true"
        self.read_timeout_s = float(options.get("read_timeout_s", "60"))
        self.limit_file = options.get("max_records_file", "")
        self.on_data_loss = options.get("on_data_loss", "fail")
        if self.on_data_loss not in ("fail", "resume"):
            raise ValueError(f"{SOURCE_NAME}: on_data_loss must be fail or resume")
        self.backoff_max_s = float(options.get("backoff_max_s", "30"))
        self.target: BrokerView | None = None
        self.latest_seen: Offsets | None = None
        self._broker_was_down = False

    def initialOffset(self) -> dict:
        view = self._wait_for_view()
        return tagged(view.beginnings, view.cluster)

    def getDefaultReadLimit(self) -> ReadLimit:
        # With a limit file the limit is decided per trigger in latestOffset.
        if self.max_records or self.limit_file:
            return ReadMaxRows(self.max_records or 2**62)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:
        # Shown as latestOffset in the query progress: lag = latest - endOffset.
        return self.latest_seen

    def prepareForTriggerAvailableNow(self) -> None:
        # Fix the target now: data published after this call belongs to a later run.
        self.target = self._wait_for_view()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        view = self.target or self._view()
        if view is None:
            return start  # broker unreachable: no batch now (the driver says it waits)
        positions = self._with_new_partitions(positions_of(start), view)
        losses = find_losses(
            start.get(CLUSTER_KEY), positions, view, self.latest_seen, check_ends=self.probe
        )
        if losses:
            return self._after_loss(losses, positions, view)
        end = normalize(
            {
                t: {p: max(view.ends.get(t, {}).get(p, 0), positions[t][p]) for p in positions[t]}
                for t in positions
            }
        )
        self.latest_seen = end
        if isinstance(limit, ReadMaxRows):
            max_rows = min(limit.max_rows, self._file_limit() or limit.max_rows)
            if record_count(positions, end) > max_rows:
                end = cap_offsets(positions, end, max_rows)
        return tagged(end, view.cluster or start.get(CLUSTER_KEY))

    def _after_loss(self, losses: list[Loss], positions: Offsets, view: BrokerView) -> dict:
        """Fail, or go on from the start of the broker's current logs: a batch that reads
        nothing of the lost partitions and moves their positions there."""
        what = "; ".join(loss.describe() for loss in losses)
        if self.on_data_loss == "fail":
            raise DataLossError(
                f"records were lost before the stream read them: {what}. Run again with "
                "`fixflow run --on-data-loss resume` (or set [kafka] on_data_loss = "
                '"resume") to go on from what the broker holds now, or delete the '
                "query's checkpoint to start over"
            )
        moved = {t: dict(ps) for t, ps in positions.items()}
        for loss in losses:
            moved[loss.topic][loss.partition] = loss.beginning
        resumed = ", ".join(f"{loss.name}@{loss.beginning}" for loss in losses)
        log.warning("kafka: data loss (on_data_loss = resume): %s; resuming at %s", what, resumed)
        self.latest_seen = None
        return tagged(normalize(moved), view.cluster, [loss.name for loss in losses])

    def _view(self) -> BrokerView | None:
        """The broker's view, or None when it cannot be reached now."""
        from kafka.errors import KafkaError

        from fixflow.pipeline.broker.embedded import reachable

        try:
            if reachable(self.kafka):
                view = broker_view(self.kafka, self.topics, self.probe)
                if self._broker_was_down:
                    log.info("kafka: broker at %s answers again", self.bootstrap)
                self._broker_was_down = False
                return view
            error: Exception | str = "connection refused"
        except (KafkaError, OSError) as failure:
            error = failure
        if not self._broker_was_down:
            log.info("kafka: broker at %s unreachable (%s): no batch", self.bootstrap, error)
        self._broker_was_down = True
        return None

    def _wait_for_view(self) -> BrokerView:
        """The broker's view, waiting for the broker with bounded back-off."""
        pause = 0.5
        while (view := self._view()) is None:
            time.sleep(pause)
            pause = min(pause * 2, self.backoff_max_s)
        return view

    def _file_limit(self) -> int | None:
        """The per-trigger limit the driver last wrote (adaptive batch sizing): the reader
        runs in its own Python process, so a small file is how the driver steers it."""
        if not self.limit_file:
            return None
        try:
            value = int(Path(self.limit_file).read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None
        return value if value > 0 else None

    def _with_new_partitions(self, positions: Offsets, view: BrokerView) -> Offsets:
        """Topics or partitions created after the query started are read from the beginning."""
        known = {t: dict(positions.get(t, {})) for t in self.topics}
        for topic in self.topics:
            for partition, offset in view.beginnings.get(topic, {}).items():
                known[topic].setdefault(partition, offset)
        return normalize(known)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return kafka_ranges(self.kafka, start, end, self.read_timeout_s)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange)
        yield from read_range(partition)

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint; no consumer-group commit is needed.
        log.debug("batch committed up to %s", json.dumps(end))


def _required(options: dict[str, str], name: str) -> str:
    value = options.get(name, "").strip()
    if not value:
        raise ValueError(f"{SOURCE_NAME}: option {name!r} is required")
    return value


# ---------------------------------------------------------------- wiring


def register(spark: SparkSession) -> None:
    """Make ``format("fixflow-kafka")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(FixflowKafkaDataSource)


def read_stream(
    spark: SparkSession,
    config: Config,
    topics: Sequence[str],
    max_records_per_trigger: int | None = None,
    limit_file: str | None = None,
) -> DataFrame:
    """The Kafka topics as a streaming DataFrame with the columns of SCHEMA, from the source
    the config selects. ``limit_file`` (python source only) lets the driver change the
    per-trigger limit while the query runs: see ``write_limit_file``."""
    limit = max_records_per_trigger or config.stream.max_records_per_trigger
    if config.kafka.source == "native":
        return _native_stream(spark, config, topics, limit)
    register(spark)
    reader = (
        spark.readStream.format(SOURCE_NAME)
        .option("bootstrap_servers", config.kafka.bootstrap_servers)
        .option("kafka_security", to_option(config.kafka))
        .option("topics", ",".join(topics))
        .option("max_records_per_trigger", str(limit))
        .option("on_data_loss", config.kafka.on_data_loss)
        .option("backoff_max_s", str(config.kafka.backoff_max_s))
    )
    if limit_file:
        reader = reader.option("max_records_file", limit_file)
    return reader.load()


def native_options(config: Config, topics: Sequence[str], limit: int) -> dict[str, str]:
    """Options of Spark's built-in ``kafka`` source equivalent to ``fixflow-kafka``."""
    return {
        **spark_kafka_options(config.kafka),
        "subscribe": ",".join(topics),
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": str(limit),
        "failOnDataLoss": "true" if config.kafka.on_data_loss == "fail" else "false",
    }


def _native_stream(
    spark: SparkSession, config: Config, topics: Sequence[str], limit: int
) -> DataFrame:
    # Needs spark-sql-kafka on the classpath (cluster configs add it via spark.jars.packages).
    reader = spark.readStream.format("kafka")
    for key, value in native_options(config, topics, limit).items():
        reader = reader.option(key, value)
    return reader.load().selectExpr(
        "topic",
        "partition",
        "offset",
        "CAST(key AS STRING) AS key",
        "CAST(value AS STRING) AS value",
        "timestamp",
    )
