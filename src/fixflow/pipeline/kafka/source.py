"""Reading Kafka topics as a Spark stream.

The embedded default is ``fixflow-kafka``: a PySpark Python streaming data source, so no
JVM jar is needed. Offsets are JSON ``{topic: {partition: offset}}`` (next offset to read)
kept in Spark's checkpoint; the driver-side reader plans each micro-batch with kafka-python
(metadata, log ends), and each Spark task reads the offset range [start, end) of one
topic-partition with an assigned, group-less librdkafka consumer (confluent-kafka), which
decodes records in C. A restarted query resumes from the checkpointed offset.

``source = "native"`` in the config selects Spark's built-in ``kafka`` format instead (for
clusters, where spark-sql-kafka is on the classpath; it cannot run in this environment).
Both produce the same columns: ``topic, partition, offset, key, value, timestamp``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from fixflow.pipeline.kafka.read_ahead import ReadAhead, end_positions

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


def record_count(start: Mapping[str, Any], end: Mapping[str, Any]) -> int:
    """Records between two offsets (reserved ``@`` keys are ignored)."""
    first, last = positions_of(start), positions_of(end)
    return sum(max(0, last[t][p] - first.get(t, {}).get(p, 0)) for t in last for p in last[t])


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


@dataclass(frozen=True, slots=True)
class BrokerView:
    """What the broker holds of some topics: its cluster id (a restarted in-memory broker
    has a new one: its logs start over) and each partition's first and next offset."""

    cluster: str | None
    beginnings: Offsets
    ends: Offsets
    unconfirmed: frozenset[tuple[str, str]] = frozenset()
    """(topic, partition)s whose probe got no answer: their end is the broker's report,
    possibly below the truth, so it proves no truncation."""


def broker_view(bootstrap: str, topics: Sequence[str], probe: bool = True) -> BrokerView:
    """The broker's view of ``topics`` through one consumer (see ``end_offsets``)."""
    consumer = _consumer(bootstrap)
    try:
        tps = _topic_partitions(consumer, topics)
        first = consumer.beginning_offsets(tps) if tps else {}
        reported = consumer.end_offsets(tps) if tps else {}
        silent: set[Any] = set()
        if probe and tps:
            reported, silent = _probe_true_ends(bootstrap, reported, first)
        # kafka-python keeps the Metadata response's cluster id on the client's cluster
        # metadata only; None from a broker that sends none (then no reset is detected).
        cluster = getattr(getattr(consumer, "_client", None), "cluster", None)
        return BrokerView(
            getattr(cluster, "cluster_id", None),
            normalize(_as_offsets(first, topics)),
            normalize(_as_offsets(reported, topics)),
            frozenset((tp.topic, str(tp.partition)) for tp in silent),
        )
    finally:
        consumer.close()


def beginning_offsets(bootstrap: str, topics: Sequence[str]) -> Offsets:
    return broker_view(bootstrap, topics, probe=False).beginnings


def end_offsets(bootstrap: str, topics: Sequence[str], probe: bool = True) -> Offsets:
    """The next offset to be written in every partition.

    With ``probe`` the reported end is verified by fetching from it: Tansu 0.6 reports the
    last record batch's base offset + 1 (memory), or an older batch's (s3), which understates
    the end; the fetch's high watermark and last record give the true end. On a broker that
    reports correctly the probe reads at most the last record.
    """
    return broker_view(bootstrap, topics, probe).ends


def _probe_true_ends(
    bootstrap: str,
    reported: dict[Any, int],
    first: dict[Any, int],
    quiet_s: float = 1.0,
    limit_s: float = 5.0,
) -> tuple[dict[Any, int], set[Any]]:
    """Fetch from ``reported - 1`` once per partition: the fetch's high watermark, and the
    last record it returns, give the true end. Stop after one answer per partition, so a
    busy topic is not chased. A partition that stays silent (``limit_s``, or ``quiet_s``
    after the others answered) keeps the reported end and is returned as silent.

    The fetch goes through librdkafka, which decodes the record batch in C: the answer is
    a whole batch (``fixflow publish`` sends 10,000 records a batch), and kafka-python
    decoding it (and checking its CRC in Python) cost 100-130 ms per partition on every
    trigger that found new records."""
    from confluent_kafka import TopicPartition

    probed = {tp: end for tp, end in reported.items() if end > first.get(tp, 0)}
    if not probed:
        return dict(reported), set()
    by_name = {(tp.topic, tp.partition): tp for tp in probed}
    consumer = librdkafka_consumer(bootstrap)
    ends, pending = dict(reported), set(probed)
    try:
        consumer.assign([TopicPartition(t, p, probed[tp] - 1) for (t, p), tp in by_name.items()])
        deadline = time.monotonic() + limit_s
        while pending and time.monotonic() < deadline:
            # Partitions answer one fetch at a time, and slowly from an object store: wait
            # for each, not just the first. consume() waits its whole timeout for a count
            # it cannot reach: ask for one record per silent partition.
            for message in _records(consumer.consume(len(pending), 0.1)):
                tp = by_name[(message.topic(), message.partition())]
                # The fetch's high watermark is the end; Tansu's s3 engine answers
                # ListOffsets with a batch picked by its 1-second modification time.
                _, highwater = consumer.get_watermark_offsets(
                    TopicPartition(tp.topic, tp.partition), cached=True
                )
                ends[tp] = max(ends[tp], message.offset() + 1, highwater)
                if tp in pending:
                    pending.discard(tp)
                    deadline = min(deadline, time.monotonic() + quiet_s)
    finally:
        consumer.close()
    return ends, pending


def _as_offsets(found: dict[Any, int], topics: Sequence[str]) -> dict[str, dict[str, int]]:
    offsets: dict[str, dict[str, int]] = {t: {} for t in topics}
    for tp, offset in found.items():
        offsets[tp.topic][str(tp.partition)] = int(offset)
    return offsets


# ---------------------------------------------------------------- the data source


class DataLossError(RuntimeError):
    """Records between the checkpointed offset and the broker's end no longer exist."""


CLUSTER_KEY = "@cluster"
"""Offsets name the broker cluster they count in: a restarted in-memory broker has a new
cluster id and its logs start over at 0, so an offset of the old one means nothing there.
(Kafka topic names cannot start with "@".)"""
REALIGNED_KEY = "@realigned"
"""In an end offset: the ``topic/partition``s moved to the start of the broker's current
log after a data loss (``on_data_loss = resume``); that batch reads nothing of them."""


def positions_of(offsets: Mapping[str, Any]) -> Offsets:
    """The topic-partition positions of an offset, without the reserved ``@`` keys."""
    return normalize({t: p for t, p in offsets.items() if not t.startswith("@")})


def tagged(positions: Offsets, cluster: str | None, realigned: Sequence[str] = ()) -> dict:
    """An offset for Spark's checkpoint: positions plus the cluster and realigned keys."""
    offset: dict[str, Any] = dict(positions)
    if cluster:
        offset[CLUSTER_KEY] = cluster
    if realigned:
        offset[REALIGNED_KEY] = sorted(realigned)
    return offset


@dataclass(frozen=True, slots=True)
class Loss:
    """Records of one partition that are gone before the stream read them."""

    topic: str
    partition: str
    position: int
    """The checkpoint's next offset to read."""
    beginning: int
    """Where the broker's current log of the partition starts (the stream goes on there)."""
    end: int
    cause: str
    """``reset`` (new cluster id), ``truncated`` (log ends before the position) or
    ``retention`` (log starts after it)."""
    last_seen_end: int | None = None
    """The old log's end as this reader last saw it (None: not seen by this process)."""

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.partition}"

    def describe(self) -> str:
        where = f"{self.topic}[{self.partition}]"
        if self.cause == "retention":
            return (
                f"{where}: offsets {self.position}..{self.beginning - 1} were deleted before "
                "they were read (retention)"
            )
        cause = (
            "the broker's log was reset (its cluster id changed: a restarted in-memory broker?)"
            if self.cause == "reset"
            else f"the broker's log ends at {self.end}, before the checkpoint's offset"
        )
        seen = self.last_seen_end
        if seen is None:
            unread = f"whatever the old log held from offset {self.position} on was never read"
        elif seen > self.position:
            unread = f"offsets {self.position}..{seen - 1} of the old log were never read"
        else:
            unread = (
                f"all the old log held when last seen was read (up to offset {seen - 1}); "
                "records written to it after that were never read"
            )
        return f"{where}: checkpoint at offset {self.position}, but {cause}: {unread}"


def find_losses(
    cluster_before: str | None,
    positions: Offsets,
    view: BrokerView,
    last_seen: Offsets | None = None,
    check_ends: bool = True,
) -> list[Loss]:
    """The partitions whose unread records are gone. ``check_ends`` compares positions
    with the log ends, which only a probed (true) end allows on Tansu."""
    reset = bool(cluster_before and view.cluster and cluster_before != view.cluster)
    losses = []
    for topic, partitions in positions.items():
        for partition, position in partitions.items():
            first = view.beginnings.get(topic, {}).get(partition)
            end = view.ends.get(topic, {}).get(partition)
            if reset and (first is None or end is None):
                first = end = 0  # not created again yet: its new log will start at 0
            if first is None or end is None:
                continue  # a partition the broker does not know (any more): nothing to read
            seen = (last_seen or {}).get(topic, {}).get(partition)
            cause = (
                "reset"
                if reset and position > first
                else "truncated"
                if check_ends and end < position and (topic, partition) not in view.unconfirmed
                else "retention"
                if position < first
                else None
            )
            if cause:
                losses.append(Loss(topic, partition, position, first, end, cause, seen))
    return losses


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
    ``probe_end``, ``on_data_loss`` (``fail`` or ``resume``), ``backoff_max_s`` and
    ``read_timeout_s``."""

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
                f"records were lost before the stream read them: {what}. Set [kafka] "
                'on_data_loss = "resume" to go on from what the broker holds now, or delete '
                "the query's checkpoint to start over"
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
            if reachable(self.bootstrap):
                view = broker_view(self.bootstrap, self.topics, self.probe)
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
        return kafka_ranges(self.bootstrap, start, end, self.read_timeout_s)

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


def kafka_ranges(
    bootstrap: str, start: Mapping[str, Any], end: Mapping[str, Any], timeout_s: float
) -> list[KafkaRange]:
    """The non-empty topic-partition ranges between two offsets of the source (a partition
    new in ``end`` starts at 0; a realigned one reads nothing in this batch)."""
    realigned = set(end.get(REALIGNED_KEY, ()))
    begins = positions_of(start)
    ranges = []
    for topic, ends in positions_of(end).items():
        for partition, stop in ends.items():
            begin = begins.get(topic, {}).get(partition, 0)
            if stop > begin and f"{topic}/{partition}" not in realigned:
                ranges.append(KafkaRange(bootstrap, topic, int(partition), begin, stop, timeout_s))
    return ranges


class DriverRead:
    """Reads a small micro-batch's records in the driver instead of in a Spark job.

    Reading a batch through the source is a Spark job (a task per range, each in a Python
    worker), ~0.15-0.25 s on local[2] however few the records: most of the fixed cost of an
    empty-change batch. The driver can read the same records itself: Spark writes the
    batch's end offset to the checkpoint's offset log (``offsets/<batch id>``) before the
    batch runs, and its start is the previous batch's entry, so the ranges are exactly
    the ones the source's ``partitions`` would give. Applies to batches of at most
    ``max_records`` records (``[stream] driver_read_max_records``) under a checkpoint on a
    local file system; otherwise the batch is read through Spark.

    The first batch starts at the source's initial offset, which Spark does not log: the
    log start of every partition (``initialOffset``). Its ranges start at 0 instead, which
    reads the same records: a range whose start is gone reads from the log start. Reading
    it here spares a fresh query's first Spark job its Python worker (3-4 s on a loaded
    2-core machine, where ``fixflow run --available-now`` on a backlog paid it).

    With ``read_ahead`` (``[stream] read_ahead``), a thread reads the records after each
    batch while the stream waits for the next trigger (``read_ahead.ReadAhead``), and the
    next batch takes them from its buffers when they start where the batch's ranges do."""

    def __init__(
        self, bootstrap: str, checkpoint: str, max_records: int, *, read_ahead: bool = False
    ) -> None:
        self.bootstrap = bootstrap
        self.checkpoint = checkpoint
        self.max_records = max_records
        self.timeout_s = 60.0
        self.read_ahead = ReadAhead(bootstrap, max_records) if read_ahead else None

    def __call__(self, batch_id: int) -> pa.Table | None:
        """The batch's records (the columns of SCHEMA, the timestamps null: ingestion does
        not read them, and they were about an eighth of the read's time), or None: read it
        through Spark."""
        offsets = self.logged_offsets(batch_id)
        if offsets is None:
            return None
        start, end = offsets
        ranges = kafka_ranges(self.bootstrap, start, end, self.timeout_s)
        table = None
        if sum(r.end - r.start for r in ranges) <= self.max_records:
            table = self.read_ahead.take(ranges) if self.read_ahead is not None else None
            if table is None:
                batches = list(read_ranges(ranges, timestamps=False))
                table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
        if self.read_ahead is not None:
            self.read_ahead.follow(end_positions(positions_of(end)))
        return table

    def ranges(self, batch_id: int) -> list[KafkaRange] | None:
        """The batch's ranges, from the offset log (None: not readable here)."""
        offsets = self.logged_offsets(batch_id)
        return None if offsets is None else kafka_ranges(self.bootstrap, *offsets, self.timeout_s)

    def logged_offsets(self, batch_id: int) -> tuple[dict, dict] | None:
        """The source's (start, end) offsets of the batch in the offset log."""
        log_dir = local_dir(self.checkpoint)
        if log_dir is None:
            return None
        start = logged_offset(log_dir / "offsets" / str(batch_id - 1)) if batch_id else {}
        end = logged_offset(log_dir / "offsets" / str(batch_id))
        if start is None or end is None:
            return None
        return start, end

    def close(self) -> None:
        """End the read-ahead's thread (it also ends by itself when idle)."""
        if self.read_ahead is not None:
            self.read_ahead.close()


def logged_offset(path: Path) -> dict | None:
    """This source's offset in one entry of Spark's offset log: ``v1``, the batch's
    metadata, then one line per source (the query has one); None if the entry is absent
    or of another form."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    if len(lines) != 3 or lines[0] != "v1" or lines[2] == "-":
        return None
    try:
        offset = json.loads(lines[2])
    except json.JSONDecodeError:
        return None
    return offset if isinstance(offset, dict) else None


def local_dir(location: str) -> Path | None:
    """A checkpoint location on the local file system as a path (None for another one)."""
    if location.startswith("file:"):
        location = location.removeprefix("file:")
    elif "://" in location:
        return None
    return Path(location)


def read_range(part: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Every record of ``part`` in offset order, as Arrow batches of up to READ_CHUNK rows
    (what a Spark task of the source reads; ``read_ranges``)."""
    return read_ranges([part])


def read_ranges(parts: Sequence[KafkaRange], timestamps: bool = True) -> Iterator[pa.RecordBatch]:
    """Every record of each range, in offset order within a range, as Arrow batches of up to
    READ_CHUNK rows of one range each (without ``timestamps``, that column is null).

    Read through librdkafka (confluent-kafka): it fetches and decodes record batches in C
    (500k records of one partition: 1.2 s where kafka-python's decoding in Python took
    11 s; bench/READ_RESULTS.md). One consumer reads every range: its fetches ask for all
    the partitions at once, so a batch of several partitions waits for one first fetch
    (~50 ms), not one per range; a range read to its end is paused (no more fetches)."""
    if not parts:
        return
    from confluent_kafka import TopicPartition

    from fixflow.pipeline.broker.embedded import reachable

    reading = {(p.topic, p.partition): _RangeRead(p) for p in parts}
    consumer = librdkafka_consumer(parts[0].bootstrap)
    try:
        consumer.assign([TopicPartition(p.topic, p.partition, p.start) for p in parts])
        timeout_s = max(p.timeout_s for p in parts)
        deadline = time.monotonic() + timeout_s
        while unread := [r for r in reading.values() if not r.done]:
            # Never ask for more than the ranges still hold: consume() waits its whole
            # timeout for a count it cannot reach (0.2 s of every small batch's read).
            wanted = min(READ_CHUNK, sum(r.part.end - r.position for r in unread))
            groups = by_partition(consumer.consume(wanted, 0.2), len(parts))
            for key, group in groups.items():
                read = reading.get(key)
                batch = None if read is None else read.take(group, timestamps)
                if batch is not None:
                    deadline = time.monotonic() + timeout_s
                    yield batch
                if read is not None and read.done:
                    consumer.pause([TopicPartition(*key)])
            if groups:
                continue
            if time.monotonic() > deadline and not reachable(parts[0].bootstrap):
                # The broker went away mid-read: wait for it rather than fail the batch.
                log.warning("kafka: broker at %s unreachable; waiting", parts[0].bootstrap)
                deadline = time.monotonic() + timeout_s
            elif time.monotonic() > deadline:
                late = unread[0]
                raise TimeoutError(
                    f"{late.part.topic}[{late.part.partition}]: offsets "
                    f"{late.position}..{late.part.end - 1} not readable within "
                    f"{timeout_s:.0f}s (deleted by retention?)"
                )
    finally:
        consumer.close()


class _RangeRead:
    """How far the read of one range has come."""

    def __init__(self, part: KafkaRange) -> None:
        self.part = part
        self.position = part.start

    @property
    def done(self) -> bool:
        return self.position >= self.part.end

    def take(self, records: list[Any], timestamps: bool) -> pa.RecordBatch | None:
        """The records of this range among ``records`` (its partition's, in offset order);
        a record past the range's start (the log start moved on) moves it on too."""
        if not records:
            return None
        part = self.part
        first, last = records[0].offset(), records[-1].offset()
        self.position = max(self.position, last + 1)
        wanted = records
        if first < part.start or last >= part.end:  # in offset order: else all are wanted
            wanted = [r for r in records if part.start <= r.offset() < part.end]
        return records_batch(part.topic, part.partition, wanted, timestamps) if wanted else None


def by_partition(messages: list[Any], partitions: int) -> dict[tuple[str, int], list[Any]]:
    """The records among ``messages`` (``_records``) grouped by topic-partition, each group
    in the order consumed (offsets); one pass over them."""
    if partitions == 1:  # a consumer assigned one partition: one group
        records = _records(messages)
        return {(records[0].topic(), records[0].partition()): records} if records else {}
    groups: dict[tuple[str, int], list[Any]] = {}
    for record in messages:
        if record.error() is not None:
            log.debug("kafka: %s", record.error())
            continue
        key = (record.topic(), record.partition())
        group = groups.get(key)
        if group is None:
            groups[key] = group = []
        group.append(record)
    return groups


def librdkafka_consumer(bootstrap: str) -> Any:
    """A group-less librdkafka consumer, not yet assigned."""
    from confluent_kafka import Consumer

    from fixflow.pipeline.kafka.librdkafka import QuietLog

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            # Required by the client, never joined: offsets are assigned and not committed.
            "group.id": "fixflow-range-reader",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # As the planner assumes: a range whose start is gone reads from the log start.
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            # librdkafka stops fetching a partition whose queue holds queued.min.messages
            # (100k) and by default waits 1 s before it asks again: a range of more than
            # ~150k records stalled that long (240k records: 1.2 s; with 10 ms, 0.24 s).
            "fetch.queue.backoff.ms": 10,
            "enable.partition.eof": False,
        },
        logger=QuietLog(log, {}),
    )


def _records(messages: list[Any]) -> list[Any]:
    """The records among ``messages``; librdkafka also hands out events (a broker that went
    away, a reset offset), which the caller's deadline and reachability check handle."""
    records = []
    for message in messages:
        if message.error() is None:
            records.append(message)
        else:
            log.debug("kafka: %s", message.error())
    return records


def records_batch(
    topic: str, partition: int, records: list[Any], timestamps: bool = True
) -> pa.RecordBatch:
    if timestamps:
        millis = _millis(np.array([r.timestamp() for r in records], np.int64).reshape(-1, 2))
    else:
        millis = pa.nulls(len(records), pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * len(records), pa.string()),
            pa.array([partition] * len(records), pa.int32()),
            pa.array([r.offset() for r in records], pa.int64()),
            _texts([r.key() for r in records]),
            _texts([r.value() for r in records]),
            millis.cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
        ],
        schema=ARROW_SCHEMA,
    )


def _texts(raw: list[bytes | None]) -> pa.Array:
    """Bytes as UTF-8 strings, checked in one Arrow cast; invalid UTF-8 must reach the
    dead-letter table, not fail the task, so then each value is decoded with replacement."""
    try:
        return pa.array(raw, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if b is None else b.decode("utf-8", errors="replace") for b in raw], pa.string()
        )


def _millis(timestamps: np.ndarray) -> pa.Array:
    """Messages' (type, milliseconds) timestamps as milliseconds; null where the type says
    unavailable (0) or the time is negative."""
    kind, millis = timestamps[:, 0], timestamps[:, 1]
    return pa.array(millis, pa.int64(), mask=(kind == 0) | (millis < 0))


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
        .option("on_data_loss", config.kafka.on_data_loss)
        .option("backoff_max_s", str(config.kafka.backoff_max_s))
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
