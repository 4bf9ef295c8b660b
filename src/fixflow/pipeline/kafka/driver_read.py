"""Reading a micro-batch's records in the driver, from the ranges Spark's offset log gives.

Small batches skip the source's Spark job (and its Python worker): see ``DriverRead``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from fixflow.pipeline.config import KafkaConfig
from fixflow.pipeline.kafka.offsets import positions_of
from fixflow.pipeline.kafka.read_ahead import ReadAhead, end_positions
from fixflow.pipeline.kafka.records import ARROW_SCHEMA, KafkaRange, kafka_ranges, read_ranges


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
        self,
        kafka: KafkaConfig,
        checkpoint: str,
        max_records: int,
        *,
        read_ahead: bool = False,
    ) -> None:
        self.kafka = kafka
        self.checkpoint = checkpoint
        self.max_records = max_records
        self.timeout_s = 60.0
        self.read_ahead = ReadAhead(kafka, max_records) if read_ahead else None

    def __call__(self, batch_id: int) -> pa.Table | None:
        """The batch's records (the columns of SCHEMA, the timestamps null: ingestion does
        not read them, and they were about an eighth of the read's time), or None: read it
        through Spark."""
        offsets = self.logged_offsets(batch_id)
        if offsets is None:
            return None
        start, end = offsets
        ranges = kafka_ranges(self.kafka, start, end, self.timeout_s)
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
        return None if offsets is None else kafka_ranges(self.kafka, *offsets, self.timeout_s)

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
