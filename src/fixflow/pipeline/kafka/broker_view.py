"""What the broker holds of the source's topics, asked through kafka-python: its cluster id
and each partition's first and next offset (``BrokerView``), with the reported ends checked
by a fetch (``end_offsets``), and the partitions whose unread records are gone
(``find_losses``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fixflow.pipeline.kafka.offsets import Offsets, normalize
from fixflow.pipeline.kafka.records import librdkafka_consumer, records_among

if TYPE_CHECKING:
    from fixflow.pipeline.config import KafkaConfig


def _consumer(kafka: KafkaConfig, **overrides: Any) -> Any:
    from kafka import KafkaConsumer

    from fixflow.pipeline.kafka_security import kafka_python_settings

    settings: dict[str, Any] = {
        **kafka_python_settings(kafka),
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


def broker_view(kafka: KafkaConfig, topics: Sequence[str], probe: bool = True) -> BrokerView:
    """The broker's view of ``topics`` through one consumer (see ``end_offsets``)."""
    consumer = _consumer(kafka)
    try:
        tps = _topic_partitions(consumer, topics)
        first = consumer.beginning_offsets(tps) if tps else {}
        reported = consumer.end_offsets(tps) if tps else {}
        silent: set[Any] = set()
        if probe and tps:
            reported, silent = _probe_true_ends(kafka, reported, first)
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


def beginning_offsets(kafka: KafkaConfig, topics: Sequence[str]) -> Offsets:
    return broker_view(kafka, topics, probe=False).beginnings


def end_offsets(kafka: KafkaConfig, topics: Sequence[str], probe: bool = True) -> Offsets:
    """The next offset to be written in every partition.

    With ``probe`` the reported end is verified by fetching from it: Tansu 0.6 reports the
    last record batch's base offset + 1 (memory), or an older batch's (s3), which understates
    the end; the fetch's high watermark and last record give the true end. On a broker that
    reports correctly the probe reads at most the last record.
    """
    return broker_view(kafka, topics, probe).ends


def _probe_true_ends(
    kafka: KafkaConfig,
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
    consumer = librdkafka_consumer(kafka)
    ends, pending = dict(reported), set(probed)
    try:
        consumer.assign([TopicPartition(t, p, probed[tp] - 1) for (t, p), tp in by_name.items()])
        deadline = time.monotonic() + limit_s
        while pending and time.monotonic() < deadline:
            # Partitions answer one fetch at a time, and slowly from an object store: wait
            # for each, not just the first. consume() waits its whole timeout for a count
            # it cannot reach: ask for one record per silent partition.
            for message in records_among(consumer.consume(len(pending), 0.1)):
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


class DataLossError(RuntimeError):
    """Records between the checkpointed offset and the broker's end no longer exist."""


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
