"""Micro-batches from memory: a stream's record transport without a broker.

Like bytewax's ``bytewax.testing.TestingSource``, this is a real source shipped with the
library, for tests and for embedding: records sent here are held in the driver, shaped
exactly as the Kafka source's (``kafka.records.ARROW_SCHEMA``: topic, partition, offset,
key, value, timestamp), with offsets assigned per topic-partition as a broker does. Each
batch runs the same ``query.BatchPipeline`` as a Kafka micro-batch (validation, dead
letters, normalization, the engine's epoch, every Delta commit); only the transport
differs.

Batches are numbered from 0 under one query id that stays the source's, as a Kafka
query's stays with its checkpoint, so every commit carries (query id, batch id) and
``replay`` of a batch after a restart changes nothing, as Spark's replay after a crash.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from fixflow.pipeline.kafka.records import ARROW_SCHEMA
from fixflow.pipeline.stream.ingest import IngestResult
from fixflow.pipeline.stream.query import BatchPipeline

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sent:
    """Where a sent record was stored, as a broker's acknowledgement says."""

    topic: str
    partition: int
    offset: int


class MemorySource:
    """Records held in memory, taken a batch at a time into ``BatchPipeline.run``.

    ``partitions`` per topic: a keyed record goes to the partition of its key's hash (so
    the operations on one fact keep their order, as with Kafka's default partitioner), a
    record without a key to the next partition in turn. ``batches`` is the log of what
    each batch read (batch id = position), which ``replay`` reads again."""

    def __init__(self, partitions: int = 1, query_id: str | None = None) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be at least 1, not {partitions}")
        self.partitions = partitions
        self.query_id = query_id or f"memory-{uuid.uuid4()}"
        self.batches: list[pa.Table] = []
        self._pending: list[dict[str, object]] = []
        self._next_offset: dict[tuple[str, int], int] = {}
        self._turn = itertools.count()

    @property
    def pending(self) -> int:
        """Records sent and not yet taken by a batch."""
        return len(self._pending)

    def send(self, topic: str, key: str | None, value: str | None) -> Sent:
        """Store one record at the end of its topic-partition."""
        partition = self._partition_of(key)
        offset = self._next_offset.get((topic, partition), 0)
        self._next_offset[(topic, partition)] = offset + 1
        self._pending.append(
            {
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "key": key,
                "value": value,
                "timestamp": dt.datetime.now(dt.UTC),
            }
        )
        return Sent(topic, partition, offset)

    def send_all(self, messages: Iterable[tuple[str, str | None, str | None]]) -> list[Sent]:
        """Store (topic, key, value) records in order."""
        return [self.send(topic, key, value) for topic, key, value in messages]

    def run_batch(
        self, pipeline: BatchPipeline, max_records: int | None = None
    ) -> IngestResult | None:
        """One batch of the pending records (at most ``max_records``, oldest first)
        through ``pipeline``; None when nothing is pending (no batch, as a Kafka trigger
        without new records runs none)."""
        if not self._pending:
            return None
        taken = len(self._pending) if max_records is None else max(1, max_records)
        records = pa.Table.from_pylist(self._pending[:taken], schema=ARROW_SCHEMA)
        batch_id = len(self.batches)
        self.batches.append(records)
        del self._pending[:taken]
        log.debug("memory batch %d: %d records", batch_id, records.num_rows)
        # Taken into the log first: a batch that fails is replayed, not lost.
        return pipeline.run(lambda: records, batch_id, self.query_id)

    def run_available_now(
        self, pipeline: BatchPipeline, max_records: int | None = None
    ) -> list[IngestResult]:
        """Batches until nothing is pending (``fixflow run --available-now``)."""
        results = []
        while (result := self.run_batch(pipeline, max_records)) is not None:
            results.append(result)
        return results

    def replay(self, pipeline: BatchPipeline, batch_id: int) -> IngestResult:
        """Run a batch of the log again, with its id and its records (what a restarted
        Kafka query does with a batch whose run did not finish)."""
        records = self.batches[batch_id]
        return pipeline.run(lambda: records, batch_id, self.query_id)

    def _partition_of(self, key: str | None) -> int:
        if self.partitions == 1:
            return 0
        if key is None:
            return next(self._turn) % self.partitions
        return zlib.crc32(key.encode()) % self.partitions
