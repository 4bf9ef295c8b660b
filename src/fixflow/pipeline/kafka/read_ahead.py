"""Reading ahead: the records after the last micro-batch, fetched and decoded in the driver
while the stream waits for its next trigger.

A batch read at its trigger pays for fetching and decoding its records then (100k records:
~0.25 s, most of it librdkafka's per-message objects turned into Arrow columns). Records
arrive before the trigger that takes them, so a thread can do that work as they come, as a
Kafka client's fetcher does. ``ReadAhead`` keeps one librdkafka consumer positioned at the
last batch's end offsets and buffers, per partition, the records read from there on. When
the next batch's ranges (from Spark's offset log, ``driver_read.DriverRead``) start where
the buffers start, the batch takes its records from them, waiting for the thread to reach
the ranges' ends; otherwise it reads them as before.

What a batch holds never depends on the read-ahead: its ranges come from Spark's offset
log, and the buffer gives the records with offsets inside them, exactly those a range read
gives. The buffer is a cache in the driver's memory, nothing a replay needs: a restarted
query starts with an empty one.

Bounds: the buffers hold at most ``max_records`` records (then the thread stops fetching
until a batch takes some); a thread that has fetched nothing and served no batch for
``idle_s`` closes its consumer and ends (a stopped query's read-ahead ends so; the next
batch of a running one reads at its trigger and starts it again). ``close`` ends it at once
and every one still open is closed at interpreter exit.

Cost: librdkafka fetches again as soon as a fetch is answered, and the embedded broker
answers at once with whatever has arrived, so while records trickle in the consumer
fetches them a few at a time: the broker spends about a fifth of a core more (a publisher
on the same two cores was slowed by a fifth to a half). Pacing it did not pay: librdkafka's
``fetch.queue.backoff.ms`` at 10-100 ms barely lowered the broker's work and at 100 ms slowed
a thread that was behind (100k records in 2.5 s); pausing caught-up partitions delayed the
fetches a waiting batch needed. ``[stream] read_ahead = false`` turns it off.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from fixflow.pipeline.config import KafkaConfig
from fixflow.pipeline.kafka.records import (
    ARROW_SCHEMA,
    READ_CHUNK,
    KafkaRange,
    by_partition,
    librdkafka_consumer,
    records_batch,
)

log = logging.getLogger(__name__)

Key = tuple[str, int]
"""A topic-partition."""

POLL_S = 0.02
"""How long one fetch call waits for records: the most a batch waits for records that have
arrived already (librdkafka hands them out at a full chunk or at this timeout)."""


@dataclass
class _Buffer:
    """One partition's records read ahead: offsets from ``start`` (the last batch's end)
    up to ``position`` (the next offset to read)."""

    start: int
    position: int
    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0

    def add(self, batch: pa.RecordBatch, last_offset: int) -> None:
        self.batches.append(batch)
        self.rows += batch.num_rows
        self.position = max(self.position, last_offset + 1)

    def cut(self, end: int, schema: pa.Schema) -> pa.Table:
        """The records before ``end`` (taken out of the buffer, which then starts there)."""
        table = pa.Table.from_batches(self.batches, schema=schema)
        # In offset order (one partition's, as consumed); records before ``start`` come
        # only from a consumer reset to the log start.
        first, stop = np.searchsorted(table.column("offset").to_numpy(), [self.start, end])
        rest = table.slice(stop)
        self.batches, self.rows, self.start = rest.to_batches(), rest.num_rows, end
        return table.slice(first, stop - first)


class ReadAhead:
    """Reads the records after the last batch's end ahead of the next trigger (see the
    module docstring). ``follow`` after every batch, ``take`` for the next one."""

    def __init__(
        self, kafka: KafkaConfig, max_records: int, idle_s: float = 30.0, wait_s: float = 10.0
    ) -> None:
        self.kafka = kafka
        self.max_records = max_records
        self.idle_s = idle_s
        self.wait_s = wait_s
        self._changed = threading.Condition()
        self._buffers: dict[Key, _Buffer] = {}
        self._generation = 0
        self._running = False
        self._touched = time.monotonic()
        self.served = 0
        """Batches taken from the buffers so far."""
        _OPEN.add(self)

    # ------------------------------------------------------------ the batch's side

    def take(self, ranges: Sequence[KafkaRange]) -> pa.Table | None:
        """The records of ``ranges`` from the buffers, once the thread has read to their
        ends; None when the buffers do not start at the ranges' starts (a new partition,
        a batch Spark read, a thread that ended) or the records are not there in time:
        then the caller reads them itself."""
        with self._changed:
            self._touched = time.monotonic()
            if not self._serves(ranges) or not self._wait_for(ranges):
                return None
            parts = [self._buffers[(r.topic, r.partition)].cut(r.end, ARROW_SCHEMA) for r in ranges]
            self._changed.notify_all()  # the buffers have room again
            if any(p.num_rows != r.end - r.start for p, r in zip(parts, ranges, strict=True)):
                # Offsets with gaps (compaction, transactions, a log start past the range's
                # start): correct as read, but only a range read is sure to be complete.
                log.debug("read-ahead: a range's offsets have gaps; read it")
                return None
            self.served += 1
        return pa.concat_tables(parts) if parts else ARROW_SCHEMA.empty_table()

    def follow(self, end: Mapping[Key, int]) -> None:
        """Read on from ``end``, the offsets the last batch ended at (every partition of
        the source's): buffers that start there are kept, otherwise reading starts anew."""
        with self._changed:
            self._touched = time.monotonic()
            starts = {key: buffer.start for key, buffer in self._buffers.items()}
            if self._running and starts == dict(end):
                return
            self._generation += 1
            self._buffers = {key: _Buffer(offset, offset) for key, offset in end.items()}
            self._running = bool(end)
            self._changed.notify_all()
        if end:
            threading.Thread(
                target=self._read,
                args=(self._generation, dict(end)),
                name=f"fixflow-read-ahead-{self._generation}",
                daemon=True,
            ).start()

    def close(self) -> None:
        with self._changed:
            self._generation += 1
            self._running = False
            self._buffers = {}
            self._changed.notify_all()
        _OPEN.discard(self)

    def _serves(self, ranges: Sequence[KafkaRange]) -> bool:
        buffers = self._buffers
        return self._running and all(
            (r.topic, r.partition) in buffers and buffers[(r.topic, r.partition)].start == r.start
            for r in ranges
        )

    def _wait_for(self, ranges: Sequence[KafkaRange]) -> bool:
        """Until the buffers reach every range's end: False if the thread ends, the
        buffers fill up short of it (partitions read unevenly), or ``wait_s`` passes."""
        deadline = time.monotonic() + self.wait_s
        while not all(self._buffers[(r.topic, r.partition)].position >= r.end for r in ranges):
            left = deadline - time.monotonic()
            if not self._running or self._full() or left <= 0:
                log.debug("read-ahead: the batch's records are not buffered; read them")
                return False
            self._changed.wait(left)
        return True

    def _full(self) -> bool:
        return self._rows() >= self.max_records

    def _rows(self) -> int:
        return sum(b.rows for b in self._buffers.values())

    # ------------------------------------------------------------ the thread's side

    def _read(self, generation: int, start: dict[Key, int]) -> None:
        from confluent_kafka import TopicPartition

        consumer = librdkafka_consumer(self.kafka)
        try:
            consumer.assign([TopicPartition(t, p, o) for (t, p), o in start.items()])
            while room := self._room(generation):
                messages = consumer.consume(min(READ_CHUNK, room), POLL_S)
                if messages and not self._add(generation, messages, len(start)):
                    break
        except Exception as error:  # the batch then reads its records itself
            log.warning("read-ahead stopped: %s", error)
        finally:
            with self._changed:
                if generation == self._generation:
                    self._running = False
                    self._changed.notify_all()
            consumer.close()

    def _room(self, generation: int) -> int:
        """How many records the buffers have room for (waiting while they are full); 0
        once this thread's generation is over or it has been idle ``idle_s``."""
        with self._changed:
            while generation == self._generation:
                if time.monotonic() - self._touched > self.idle_s:
                    log.debug("read-ahead: idle for %.0f s; closing its consumer", self.idle_s)
                    self._running = False
                    self._changed.notify_all()
                    return 0
                room = self.max_records - self._rows()
                if room > 0:
                    return room
                self._changed.wait(POLL_S * 10)
            return 0

    def _add(self, generation: int, messages: list[Any], partitions: int) -> bool:
        """Buffer the records among ``messages`` (of ``partitions`` assigned ones); False
        if this thread's generation is over."""
        groups = by_partition(messages, partitions)
        batches = {
            key: (records_batch(key[0], key[1], group, timestamps=False), group[-1].offset())
            for key, group in groups.items()
        }
        with self._changed:
            if generation != self._generation:
                return False
            for key, (batch, last) in batches.items():
                buffer = self._buffers.get(key)
                if buffer is not None:
                    buffer.add(batch, last)
            self._touched = time.monotonic()
            self._changed.notify_all()
        return True


def end_positions(offset: Mapping[str, Mapping[str, int]]) -> dict[Key, int]:
    """``{(topic, partition): next offset}`` of one of the source's offsets."""
    return {(t, int(p)): int(o) for t, parts in offset.items() for p, o in parts.items()}


_OPEN: weakref.WeakSet[ReadAhead] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Stop every thread before the interpreter's exit stops them mid-call."""
    for read_ahead in list(_OPEN):
        read_ahead.close()
