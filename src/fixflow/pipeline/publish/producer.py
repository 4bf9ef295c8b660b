"""Sending encoded fact messages to Kafka through librdkafka (the confluent-kafka package).

kafka-python's ``KafkaProducer.send`` costs about 50 µs a record in Python (partitioning,
batching, waking its I/O thread): 200k facts spent 5 s of a 6.5 s ``fixflow publish`` in it
(bench/PUBLISH_RESULTS.md). ``Producer.produce`` hands the bytes to librdkafka's C queue in
about 1 µs; batching, sending and retries happen in librdkafka's threads, outside the GIL.

What the old producer guaranteed still holds: ``acks=all``; keys are partitioned by murmur2
like kafka-python's and the Java client's default partitioner (the same fact lands in the
same partition whichever of them sent it); every message that is not acknowledged is
counted in the PublishError. Idempotence is on as well, so librdkafka's retries neither
duplicate nor reorder messages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fixflow.pipeline.config import Config
from fixflow.pipeline.kafka_security import QuietLog, librdkafka_settings
from fixflow.pipeline.publish.fact_columns import Messages
from fixflow.pipeline.publish.fact_rows import PublishError

if TYPE_CHECKING:  # confluent_kafka is imported where used
    from confluent_kafka import KafkaError, Message, Producer

log = logging.getLogger(__name__)

SEND_TIMEOUT_S = 60.0
"""How long a message may wait for its acknowledgement (librdkafka's message.timeout.ms),
and how long the final flush waits."""
QUEUE_MESSAGES = 200_000
"""librdkafka's queue bound: produce() waits beyond it, so no message waits in the queue
for longer than the broker needs to take this many (the timeout runs from produce())."""
SLICE = 20_000
"""Messages produced between two polls (delivery errors, progress)."""
PROGRESS_INTERVAL_S = 3.0


@dataclass(frozen=True, slots=True)
class Progress:
    sent: int
    """Acknowledged by the broker so far."""
    total: int
    elapsed_s: float

    def __str__(self) -> str:
        rate = self.sent / self.elapsed_s if self.elapsed_s > 0 else 0.0
        return f"{self.sent:,} of {self.total:,} facts sent ({rate:,.0f}/s)"


def producer_settings(config: Config) -> dict[str, Any]:
    """librdkafka settings of ``fixflow publish`` (bench/PUBLISH_RESULTS.md measures them)."""
    return {
        **librdkafka_settings(config.kafka),
        "client.id": "fixflow-publish",
        "acks": "all",
        "enable.idempotence": True,
        # kafka-python's and Java's partitioner: keys keep the partitions they had.
        "partitioner": "murmur2_random",
        # Measured on the embedded broker: uncompressed is fastest over loopback, and
        # lz4/zstd/snappy would need extra libraries in the kafka-python consumer.
        "compression.type": "none",
        # linger.ms 5, 20 or 100 and batches of 10k or 100k messages send alike (bench);
        # batches stay at librdkafka's 10,000 messages because the streaming source's end
        # probe (broker_view.end_offsets) reads a whole last batch in one poll.
        "linger.ms": 20,
        "queue.buffering.max.messages": QUEUE_MESSAGES,
        "message.timeout.ms": int(SEND_TIMEOUT_S * 1000),
        # Delivery callbacks only for failures: a Python call per acknowledged message
        # would cost as much as the produce() itself.
        "delivery.report.only.error": True,
    }


@dataclass
class _Delivery:
    """What librdkafka reported through its callbacks (run inside poll/flush)."""

    failures: list[str] = field(default_factory=list)
    broker_error: str | None = None

    def on_delivery(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self.failures.append(error.str())

    def on_error(self, error: KafkaError) -> None:
        self.broker_error = error.str()


class Publisher:
    """One librdkafka producer, for one or more sends.

    Open it before reading the file: an idempotent producer acquires a producer id before
    it sends, and when the broker connection is not up yet at its start (often, measured),
    librdkafka retries that on a 500 ms timer. Opened early, that wait overlaps reading and
    encoding instead of adding up to half a second to a publish."""

    def __init__(self, config: Config) -> None:
        from confluent_kafka import KafkaException, Producer

        self.delivery = _Delivery()
        try:
            self.producer = Producer(
                producer_settings(config),
                on_delivery=self.delivery.on_delivery,
                error_cb=self.delivery.on_error,
                logger=QuietLog(log, {}),
            )
        except KafkaException as error:
            raise PublishError(f"cannot create a Kafka producer: {error.args[0].str()}") from error

    def send(
        self, topic: str, messages: Messages, progress: Callable[[Progress], None] | None = None
    ) -> int:
        """Send every message; return how many, or raise PublishError saying how many of
        them were not acknowledged and why."""
        self.delivery.failures.clear()
        sender = _Sender(self.producer, topic, len(messages), self.delivery, progress)
        sender.send(messages.keys, messages.values)
        missing = sender.finish()
        if missing:
            raise PublishError(sender.failure_message(missing))
        return len(messages)

    def close(self) -> None:
        # Nothing is left to flush after send(): it purged what was not acknowledged.
        self.producer.purge()
        self.producer.close()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def send_messages(
    config: Config,
    topic: str,
    messages: Messages,
    progress: Callable[[Progress], None] | None = None,
) -> int:
    """``Publisher.send`` with a producer of its own."""
    with Publisher(config) as publisher:
        return publisher.send(topic, messages, progress)


class _Sender:
    def __init__(
        self,
        producer: Producer,
        topic: str,
        total: int,
        delivery: _Delivery,
        progress: Callable[[Progress], None] | None,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.total = total
        self.delivery = delivery
        self.progress = progress
        self.produced = 0
        self.in_slice = 0
        self.sent = 0
        """The acknowledged messages last reported as progress."""
        """Messages of the current slice produced before the queue filled up (in librdkafka's
        queue, not yet in ``produced``)."""
        self.stalled: str | None = None
        """Why sending stopped without a failed message (librdkafka's queue stayed full)."""
        self.started = self.reported = time.monotonic()

    def send(self, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        """Produce in slices, polling between them; stop at the first failure (the
        publish fails anyway, and the rest would only wait for the same timeout)."""
        for start in range(0, self.total, SLICE):
            self.produced += self._produce(
                keys[start : start + SLICE], values[start : start + SLICE]
            )
            self.producer.poll(0)
            if self._stopped():
                return
            self._report()

    def _produce(self, keys: Sequence[bytes], values: Sequence[bytes]) -> int:
        """Produce one slice; return how many messages librdkafka took."""
        from confluent_kafka import KafkaException

        produce, topic = self.producer.produce, self.topic
        for index, (key, value) in enumerate(zip(keys, values, strict=True)):
            try:
                produce(topic, value, key)
            except BufferError:  # the queue is full: let librdkafka catch up
                self.in_slice = index
                if not self._wait_for_room():
                    return index
                produce(topic, value, key)
            except KafkaException as error:  # e.g. a message over message.max.bytes
                self.delivery.failures.append(error.args[0].str())
                return index + 1  # taken, and failed
        return len(keys)

    def _wait_for_room(self) -> bool:
        deadline = time.monotonic() + SEND_TIMEOUT_S
        while len(self.producer) >= QUEUE_MESSAGES and time.monotonic() < deadline:
            self.producer.poll(0.05)
            if self.delivery.failures:
                return False
            self._report(mid_slice=True)
        if len(self.producer) >= QUEUE_MESSAGES:
            self.stalled = f"no acknowledgement within {SEND_TIMEOUT_S:.0f}s"
            return False
        return True

    def finish(self) -> int:
        """Wait for the acknowledgements; return how many messages were not published."""
        # A little longer than message.timeout.ms: librdkafka fails each message with its
        # own reason (timed out, broker error) before anything is left to purge.
        deadline = time.monotonic() + SEND_TIMEOUT_S + 1.0
        while len(self.producer) and not self._stopped() and time.monotonic() < deadline:
            self.producer.flush(min(PROGRESS_INTERVAL_S, max(0.0, deadline - time.monotonic())))
            self._report()
        if len(self.producer):
            # Purged messages get a failed delivery report: counted as not published.
            self.producer.purge()
            self.producer.flush(1.0)
        unconfirmed = len(self.producer)
        self._report(final=True)
        return (self.total - self.produced) + len(self.delivery.failures) + unconfirmed

    def _stopped(self) -> bool:
        return bool(self.delivery.failures or self.stalled)

    def _report(self, final: bool = False, mid_slice: bool = False) -> None:
        now = time.monotonic()
        if self.progress is None or (not final and now - self.reported < PROGRESS_INTERVAL_S):
            return
        self.reported = now
        if final and now - self.started < PROGRESS_INTERVAL_S:
            return  # a quick publish needs no progress line
        # Mid-slice, the slice's messages are queued but not yet in `produced`: without
        # them the count would drop below the last one reported.
        queued = self.produced + (self.in_slice if mid_slice else 0)
        # len(producer) counts librdkafka's pending protocol requests too, so this estimate
        # can dip by one or two; a progress line never goes back.
        estimate = queued - len(self.producer) - len(self.delivery.failures)
        self.sent = max(self.sent, estimate)
        self.progress(Progress(self.sent, self.total, now - self.started))

    def failure_message(self, missing: int) -> str:
        reasons = self.delivery.failures[:1] or [self.stalled or "not acknowledged"]
        if self.delivery.broker_error:
            reasons.append(f"last broker error: {self.delivery.broker_error}")
        reason = "; ".join(reasons)
        return f"{missing} of {self.total} facts were not published to {self.topic}: {reason}"
