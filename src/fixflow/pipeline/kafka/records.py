"""Kafka records as Arrow: the ranges a batch reads and the librdkafka reader of them.

A batch reads, per topic-partition, the offset range [start, end) (``KafkaRange``: one Spark
task of the source, or one range of a read in the driver). ``read_ranges`` reads ranges
through librdkafka (confluent-kafka), which fetches and decodes record batches in C, and
hands them out as Arrow batches with the columns of ``ARROW_SCHEMA`` (``SCHEMA`` in Spark's
notation): ``topic, partition, offset, key, value, timestamp``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from fixflow.pipeline.kafka.offsets import REALIGNED_KEY, positions_of

if TYPE_CHECKING:
    from fixflow.pipeline.config import KafkaConfig

log = logging.getLogger(__name__)

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


class KafkaRange(InputPartition):
    """One Spark task: the records [start, end) of one topic-partition."""

    def __init__(
        self,
        kafka: KafkaConfig,
        topic: str,
        partition: int,
        start: int,
        end: int,
        timeout_s: float,
    ) -> None:
        super().__init__((topic, partition, start, end))
        self.kafka = kafka
        """The brokers and security keys (names of secrets only: a task reads them)."""
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.timeout_s = timeout_s


def kafka_ranges(
    kafka: KafkaConfig, start: Mapping[str, Any], end: Mapping[str, Any], timeout_s: float
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
                ranges.append(KafkaRange(kafka, topic, int(partition), begin, stop, timeout_s))
    return ranges


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
    kafka = parts[0].kafka
    consumer = librdkafka_consumer(kafka)
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
            if time.monotonic() > deadline and not reachable(kafka):
                # The broker went away mid-read: wait for it rather than fail the batch.
                log.warning("kafka: broker at %s unreachable; waiting", kafka.bootstrap_servers)
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
    """The records among ``messages`` (``records_among``) grouped by topic-partition, each group
    in the order consumed (offsets); one pass over them."""
    if partitions == 1:  # a consumer assigned one partition: one group
        records = records_among(messages)
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


def librdkafka_consumer(kafka: KafkaConfig) -> Any:
    """A group-less librdkafka consumer, not yet assigned."""
    from confluent_kafka import Consumer

    from fixflow.pipeline.kafka_security import QuietLog, librdkafka_settings

    return Consumer(
        {
            **librdkafka_settings(kafka),
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


def records_among(messages: list[Any]) -> list[Any]:
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
