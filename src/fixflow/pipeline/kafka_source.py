"""Reading Kafka topics as a Spark stream.

The embedded default is ``fixflow-kafka``: a PySpark Python streaming data source over
kafka-python, so no JVM jar is needed. Offsets are JSON ``{topic: {partition: offset}}``
(next offset to read) kept in Spark's checkpoint; each micro-batch reads the offset range
[start, end) of every topic-partition with one Spark task per range, consuming it with an
assigned (group-less) KafkaConsumer. A restarted query resumes from the checkpointed offset.

``source = "native"`` in the config selects Spark's built-in ``kafka`` format instead (for
clusters, where spark-sql-kafka is on the classpath; it cannot run in this environment).
Both produce the same columns: ``topic, partition, offset, key, value, timestamp``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
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

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from fixflow.pipeline.config import Config

log = logging.getLogger(__name__)

SOURCE_NAME = "fixflow-kafka"
SCHEMA = "topic string, partition int, offset long, key string, value string, timestamp timestamp"
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.string()),
        ("value", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)
READ_CHUNK = 2000
"""Records per Arrow batch handed to Spark."""

Offsets = dict[str, dict[str, int]]
"""``{topic: {partition (as a string, JSON keys are): next offset}}``."""


# ---------------------------------------------------------------- offsets


def normalize(offsets: dict[str, dict[str, int]]) -> Offsets:
    """A canonical order (topics by name, partitions by number): Spark compares offsets as
    JSON text, so the same position must always serialize the same way."""
    return {
        topic: {str(p): int(offsets[topic][p]) for p in sorted(offsets[topic], key=int)}
        for topic in sorted(offsets)
    }


def cap_offsets(start: Offsets, end: Offsets, max_records: int) -> Offsets:
    """``end`` moved back so that at most ``max_records`` lie between ``start`` and it,
    shared fairly between partitions (water-filling: small backlogs are read in full)."""
    available = {
        (t, p): max(0, end[t][p] - start.get(t, {}).get(p, end[t][p])) for t in end for p in end[t]
    }
    granted = _water_fill(available, max_records)
    capped = {
        t: {p: (start.get(t, {}).get(p, end[t][p]) + granted[(t, p)]) for p in end[t]} for t in end
    }
    return normalize(capped)


def _water_fill(available: dict[tuple[str, str], int], budget: int) -> dict[tuple[str, str], int]:
    granted = dict.fromkeys(available, 0)
    hungry = sorted((k for k, n in available.items() if n > 0), key=lambda k: (k[0], int(k[1])))
    while hungry and budget > 0:
        share = max(1, budget // len(hungry))
        for key in list(hungry):
            take = min(share, available[key] - granted[key], budget)
            granted[key] += take
            budget -= take
            if granted[key] == available[key]:
                hungry.remove(key)
            if budget == 0:
                break
    return granted


def record_count(start: Offsets, end: Offsets) -> int:
    return sum(max(0, end[t][p] - start.get(t, {}).get(p, 0)) for t in end for p in end[t])


# ---------------------------------------------------------------- the broker side


def _consumer(bootstrap: str, **overrides: Any) -> Any:
    from kafka import KafkaConsumer

    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 100,
        "request_timeout_ms": 30000,
    }
    settings.update(overrides)
    return KafkaConsumer(**settings)


def _topic_partitions(consumer: Any, topics: Sequence[str]) -> list[Any]:
    from kafka import TopicPartition

    result: list[Any] = []
    for topic in topics:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            # Metadata may lag a topic created a moment ago: one refresh before giving up.
            consumer.topics()
            partitions = consumer.partitions_for_topic(topic) or set()
        result.extend(TopicPartition(topic, p) for p in sorted(partitions))
    return result


def beginning_offsets(bootstrap: str, topics: Sequence[str]) -> Offsets:
    consumer = _consumer(bootstrap)
    try:
        tps = _topic_partitions(consumer, topics)
        found = consumer.beginning_offsets(tps) if tps else {}
        return normalize(_as_offsets(found, topics))
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topics: Sequence[str], probe: bool = True) -> Offsets:
    """The next offset to be written in every partition.

    With ``probe`` the reported high watermark is verified by fetching the last batch:
    Tansu 0.6 reports the last record batch's base offset + 1, which understates the end
    whenever a producer batched several records; reading from there finds the true end. On a
    broker that reports correctly the probe reads at most the last record.
    """
    consumer = _consumer(bootstrap)
    try:
        tps = _topic_partitions(consumer, topics)
        if not tps:
            return normalize(_as_offsets({}, topics))
        reported = consumer.end_offsets(tps)
        if probe:
            first = consumer.beginning_offsets(tps)
            reported = _probe_true_ends(consumer, reported, first)
        return normalize(_as_offsets(reported, topics))
    finally:
        consumer.close()


def _probe_true_ends(
    consumer: Any,
    reported: dict[Any, int],
    first: dict[Any, int],
    quiet_ms: int = 150,
    limit_s: float = 5.0,
) -> dict[Any, int]:
    """Fetch from ``reported - 1`` once per partition: that fetch returns the whole last
    batch, whose final record gives the true end. Stop after one answer per partition, so
    a busy topic is not chased."""
    probed = {tp: end for tp, end in reported.items() if end > first.get(tp, 0)}
    if not probed:
        return dict(reported)
    consumer.assign(list(probed))
    for tp, end in probed.items():
        consumer.seek(tp, end - 1)
    ends = dict(reported)
    pending = set(probed)
    deadline = time.monotonic() + limit_s
    while pending and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=quiet_ms, max_records=100_000)
        if not batch:
            break
        for tp, records in batch.items():
            ends[tp] = max(ends[tp], records[-1].offset + 1)
            pending.discard(tp)
    return ends


def _as_offsets(found: dict[Any, int], topics: Sequence[str]) -> dict[str, dict[str, int]]:
    offsets: dict[str, dict[str, int]] = {t: {} for t in topics}
    for tp, offset in found.items():
        offsets[tp.topic][str(tp.partition)] = int(offset)
    return offsets


# ---------------------------------------------------------------- the data source


class DataLossError(RuntimeError):
    """Records between the checkpointed offset and the broker's end no longer exist."""


class KafkaRange(InputPartition):
    """One Spark task: the records [start, end) of one topic-partition."""

    def __init__(
        self, bootstrap: str, topic: str, partition: int, start: int, end: int, timeout_s: float
    ) -> None:
        super().__init__((topic, partition, start, end))
        self.bootstrap = bootstrap
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.timeout_s = timeout_s


class FixflowKafkaDataSource(DataSource):
    """``spark.readStream.format("fixflow-kafka")`` with options ``bootstrap_servers``,
    ``topics`` (comma-separated), ``max_records_per_trigger``, ``max_records_file``,
    ``probe_end``, ``fail_on_data_loss`` and ``read_timeout_s``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.bootstrap = _required(options, "bootstrap_servers")
        self.topics = [t.strip() for t in _required(options, "topics").split(",") if t.strip()]
        limit = options.get("max_records_per_trigger", "")
        self.max_records = int(limit) if limit else None
        self.probe = options.get("probe_end", "true").lower() == "true"
        self.read_timeout_s = float(options.get("read_timeout_s", "60"))
        self.limit_file = options.get("max_records_file", "")
        self.fail_on_data_loss = options.get("fail_on_data_loss", "true").lower() == "true"
        self.target: Offsets | None = None
        self.latest_seen: Offsets | None = None

    def initialOffset(self) -> dict:
        return beginning_offsets(self.bootstrap, self.topics)

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
        self.target = end_offsets(self.bootstrap, self.topics, self.probe)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = self.target or end_offsets(self.bootstrap, self.topics, self.probe)
        start = self._with_new_partitions(normalize(start))
        self._check_no_data_loss(start, latest)
        end = normalize(
            {t: {p: max(latest.get(t, {}).get(p, 0), start[t][p]) for p in start[t]} for t in start}
        )
        self.latest_seen = end
        if isinstance(limit, ReadMaxRows):
            max_rows = min(limit.max_rows, self._file_limit() or limit.max_rows)
            if record_count(start, end) > max_rows:
                end = cap_offsets(start, end, max_rows)
        return end

    def _check_no_data_loss(self, start: Offsets, latest: Offsets) -> None:
        """A partition whose end lies before the checkpointed position lost records (the
        embedded broker keeps topics in memory: a restarted broker starts from offset 0).
        Continuing would silently skip everything up to the old position."""
        if not (self.fail_on_data_loss and self.probe):
            return  # without the probe, Tansu's understated ends would look like a loss
        for topic, partitions in start.items():
            for partition, position in partitions.items():
                end = latest.get(topic, {}).get(partition)
                if end is not None and end < position:
                    raise DataLossError(
                        f"{topic}[{partition}]: the checkpoint is at offset {position} but the "
                        f"broker ends at {end}: records were lost (a restarted in-memory "
                        "broker?). Delete the query's checkpoint to start over (or set "
                        "fail_on_data_loss=false to ignore records below the old offset)."
                    )

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

    def _with_new_partitions(self, start: Offsets) -> Offsets:
        """Topics or partitions created after the query started are read from the beginning."""
        known = {t: dict(start.get(t, {})) for t in self.topics}
        if all(known[t] for t in self.topics):
            return normalize(known)
        first = beginning_offsets(self.bootstrap, self.topics)
        for topic in self.topics:
            for partition, offset in first.get(topic, {}).items():
                known[topic].setdefault(partition, offset)
        return normalize(known)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = []
        for topic, ends in normalize(end).items():
            for partition, stop in ends.items():
                begin = start.get(topic, {}).get(partition, 0)
                if stop > begin:
                    ranges.append(
                        KafkaRange(
                            self.bootstrap, topic, int(partition), begin, stop, self.read_timeout_s
                        )
                    )
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange)
        yield from read_range(partition)

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint; no consumer-group commit is needed.
        log.debug("batch committed up to %s", json.dumps(end))


def write_limit_file(path: str | Path, max_records: int) -> None:
    """Set the per-trigger record limit of running ``fixflow-kafka`` readers that were
    started with ``max_records_file=path`` (atomic replace: readers never see half a
    number)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_suffix(".tmp")
    temporary.write_text(f"{int(max_records)}\n", encoding="utf-8")
    temporary.replace(target)


def next_batch_limit(
    beta: int, arrived: int, elapsed_s: float, tau_s: float, alpha: float, r: float, cap: int
) -> int:
    """PowerLog's adaptive buffer rule applied to the per-trigger record limit β.

    ``arrived`` records came in over ``elapsed_s``; a batch should take about ``tau_s``.
    When the arrival rate |B|/ΔT leaves the band [β/(r·τ), r·β/τ], β becomes α·τ·|B|/ΔT;
    inside the band β stays (no oscillation on noise). The result is kept in [1, cap].
    """
    if elapsed_s <= 0 or tau_s <= 0:
        return max(1, min(beta, cap))
    rate = arrived / elapsed_s
    if rate > r * beta / tau_s or rate < beta / (r * tau_s):
        beta = int(alpha * tau_s * rate)
    return max(1, min(beta, cap))


def lag_from_progress(progress: Mapping[str, Any] | None) -> dict[str, int]:
    """Records not yet processed per topic, from a StreamingQuery's ``lastProgress``
    (``latestOffset - endOffset`` of every Kafka source; both sources report
    ``{topic: {partition: offset}}``)."""
    lags: dict[str, int] = {}
    for source in (progress or {}).get("sources", []):
        latest, end = _offsets_of(source.get("latestOffset")), _offsets_of(source.get("endOffset"))
        for topic, partitions in latest.items():
            done = end.get(topic, {})
            lags[topic] = lags.get(topic, 0) + sum(
                max(0, int(offset) - int(done.get(p, 0))) for p, offset in partitions.items()
            )
    return lags


def _offsets_of(value: Any) -> dict[str, dict[str, int]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {t: p for t, p in value.items() if isinstance(p, dict)}


def _required(options: dict[str, str], name: str) -> str:
    value = options.get(name, "").strip()
    if not value:
        raise ValueError(f"{SOURCE_NAME}: option {name!r} is required")
    return value


def read_range(part: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Every record of ``part`` in offset order, as Arrow batches of READ_CHUNK rows."""
    from kafka import TopicPartition

    tp = TopicPartition(part.topic, part.partition)
    consumer = _consumer(part.bootstrap, max_poll_records=READ_CHUNK)
    try:
        consumer.assign([tp])
        consumer.seek(tp, part.start)
        position = part.start
        deadline = time.monotonic() + part.timeout_s
        while position < part.end:
            records = consumer.poll(timeout_ms=200).get(tp, [])
            wanted = [r for r in records if part.start <= r.offset < part.end]
            if wanted:
                position = wanted[-1].offset + 1
                deadline = time.monotonic() + part.timeout_s
                yield _to_batch(part.topic, part.partition, wanted)
            elif records:
                position = max(position, records[-1].offset + 1)
            elif time.monotonic() > deadline:
                raise TimeoutError(
                    f"{part.topic}[{part.partition}]: offsets {position}..{part.end - 1} "
                    f"not readable within {part.timeout_s:.0f}s (deleted by retention?)"
                )
    finally:
        consumer.close()


def _to_batch(topic: str, partition: int, records: list[Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * len(records), pa.string()),
            pa.array([partition] * len(records), pa.int32()),
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([_text(r.key) for r in records], pa.string()),
            pa.array([_text(r.value) for r in records], pa.string()),
            pa.array([_timestamp(r.timestamp) for r in records], pa.timestamp("us", tz="UTC")),
        ],
        schema=ARROW_SCHEMA,
    )


def _text(raw: bytes | None) -> str | None:
    # Invalid UTF-8 must reach the dead-letter table, not fail the task.
    return None if raw is None else raw.decode("utf-8", errors="replace")


def _timestamp(millis: int | None) -> dt.datetime | None:
    if millis is None or millis < 0:
        return None
    return dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC)


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
        .option("topics", ",".join(topics))
        .option("max_records_per_trigger", str(limit))
    )
    if limit_file:
        reader = reader.option("max_records_file", limit_file)
    return reader.load()


def native_options(config: Config, topics: Sequence[str], limit: int) -> dict[str, str]:
    """Options of Spark's built-in ``kafka`` source equivalent to ``fixflow-kafka``."""
    return {
        "kafka.bootstrap.servers": config.kafka.bootstrap_servers,
        "subscribe": ",".join(topics),
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": str(limit),
        "failOnDataLoss": "true",
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
