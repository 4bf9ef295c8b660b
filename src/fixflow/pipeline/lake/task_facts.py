"""Facts files read by Spark tasks: a large input bound for Spark never passes the driver.

``fixflow eval`` reads a facts file in the driver (``facts.read_table``). An input the
driver will not hold (more rows than ``local_rows``) then travels driver → JVM → executors
as a local relation: on R-MAT 10M under ``--local-rows 0`` that hand-over took longer than
the run (bench/FACTS_RESULTS.md). Such a file is read by Spark tasks instead:

1. the driver splits the file into byte ranges of about ``RANGE_BYTES``; a range owns the
   lines that *start* in it (the usual rule of splittable text files), so every line is
   read by exactly one task;
2. one job parses every range with the driver's own rules (``facts.parse_lines``: Arrow's
   CSV parser, the same types and checks) and returns only its row count, or that Arrow
   refused it;
3. if every range parsed, the input is a frame whose tasks parse their range again when
   the evaluation reads it (parsing is ~1 s per 10M edges a core; keeping the parsed rows
   instead would hold the input twice in executor memory); if one was refused (a
   malformed line, a spelling only the row reader accepts), the driver reads the file as
   before, which reads it as Python would or names the line (``file:line``).

Only plain files are split: a gzip stream cannot be entered mid-way, and a relation of one
``symbol`` column or none has no Arrow path (``facts.arrow_table``); those stay in the
driver. The file must be readable at the same path by every executor (a shared or local
file system: this machine, a cluster on loopback, NFS).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from fixflow.checker.ast import Attribute
from fixflow.operators.evaluate import CountedFrame
from fixflow.operators.thresholds import TASK_READ_ROWS
from fixflow.pipeline.kafka.messages import is_one_symbol
from fixflow.pipeline.lake.delta import arrow_schema
from fixflow.pipeline.lake.facts import BOM, GZIP_MAGIC, is_csv, parse_lines, read_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

RANGE_BYTES = 64 * 1024 * 1024
"""Bytes of a file one task parses: ~3.5M edges of R-MAT text, ~0.3 s of Arrow."""

MIN_RANGE_BYTES = 1024 * 1024
"""Below this many bytes a range is not worth a task of its own."""

SAMPLE_BYTES = 64 * 1024
"""The head of a file whose lines estimate its row count (``estimated_rows``)."""

POSITIONS = "start long, end long"

ArrowMap = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
"""A ``mapInArrow`` function."""


@dataclass(frozen=True)
class FactsFile:
    """A plain facts file as Spark tasks read it: its lines split at ``separator``, a
    ``.csv`` one's header fields in ``names`` (None for a ``.facts`` file)."""

    path: str
    attributes: tuple[Attribute, ...]
    delimiter: str | None
    """As the ``.input`` directive gives it (None: by the file's suffix)."""
    separator: str
    names: tuple[str, ...] | None

    @property
    def csv_file(self) -> bool:
        return self.names is not None

    def parsed(self, start: int, end: int) -> pa.Table | None:
        """The rows of the lines starting in ``[start, end)``; None when Arrow refuses
        them (the driver's row reader then reads the whole file)."""
        data = lines_starting_in(self.path, start, end)
        if start == 0 and self.csv_file:
            data = data.split(b"\n", 1)[1] if b"\n" in data else b""  # the header line
        return parse_lines(data, self.attributes, self.separator, self.csv_file, self.names)


def read_by_tasks_above(
    files: Mapping[str, Sequence[tuple[Path, str | None]]],
    relations: Mapping[str, Sequence[Attribute]],
    local_rows: int,
) -> dict[str, FactsFile]:
    """The inputs Spark tasks read: a relation of one plain file of more rows (estimated)
    than the driver holds (``local_rows``) and at least ``TASK_READ_ROWS``."""
    chosen = {}
    for relation, paths in files.items():
        if len(paths) != 1:
            continue
        path, delimiter = paths[0]
        facts = splittable(path, relations[relation], delimiter)
        if facts is None:
            continue
        rows = estimated_rows(path)
        if rows > local_rows and rows >= TASK_READ_ROWS:
            chosen[relation] = facts
    return chosen


def read_input(spark: SparkSession, facts: FactsFile) -> pa.Table | CountedFrame:
    """The file's rows read by tasks, or, when Arrow refused a range, by the driver
    (``facts.read_table``: as Python reads them, or a ``FactsError`` naming the line)."""
    read = read_by_tasks(spark, facts)
    if read is None:
        return read_table(Path(facts.path), facts.attributes, facts.delimiter)
    return CountedFrame(*read)


def splittable(
    path: Path, attributes: Sequence[Attribute], delimiter: str | None
) -> FactsFile | None:
    """``path`` as tasks read it; None when only the driver reads it (gzip, no Arrow path,
    a multi-character delimiter, a ``.csv`` without a header line)."""
    if not attributes or is_one_symbol(attributes):
        return None
    with path.open("rb") as file:
        head = file.read(SAMPLE_BYTES)
    if head[:2] == GZIP_MAGIC:
        return None
    csv_file = delimiter is None and is_csv(path)
    separator = "," if csv_file else delimiter or "\t"
    if len(separator) != 1:
        return None
    names = None
    if csv_file:
        first, newline, _ = head.removeprefix(BOM).partition(b"\n")
        if not newline or b'"' in first:  # quoted: the row reader's (``parse_lines``)
            return None
        try:
            names = tuple(first.rstrip(b"\r").decode("utf-8").split(","))
        except UnicodeDecodeError:
            return None
    return FactsFile(str(path), tuple(attributes), delimiter, separator, names)


def estimated_rows(path: Path) -> int:
    """The file's lines, estimated from the mean length of those in its head."""
    size = path.stat().st_size
    with path.open("rb") as file:
        head = file.read(SAMPLE_BYTES)
    lines = head.count(b"\n")
    if size <= len(head) or not lines:
        return lines + (1 if head and not head.endswith(b"\n") else 0)
    return int(size * lines / len(head))


def lines_starting_in(path: str, start: int, end: int) -> bytes:
    """The bytes of the lines of ``path`` that start at an offset in ``[start, end)``,
    whole (the last one read past ``end`` to its newline); a byte-order mark dropped."""
    with open(path, "rb") as file:
        if start > 0:
            file.seek(start - 1)
            if file.read(1) != b"\n":  # mid-line: that line belongs to the range before
                file.readline()
        begin = file.tell()
        if begin >= end:
            return b""
        data = file.read(end - begin)
        if not data.endswith(b"\n"):
            data += file.readline()
    return data[len(BOM) :] if start == 0 and data.startswith(BOM) else data


def ranges(size: int, slots: int, range_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
    """``[0, size)`` in consecutive ranges of at most ``range_bytes``, and at least one a
    task slot (``slots``) when the file has ``MIN_RANGE_BYTES`` for each."""
    count = max(-(-size // range_bytes), min(slots, size // MIN_RANGE_BYTES), 1)
    step = -(-size // count) if size else 1
    return [(s, min(s + step, size)) for s in range(0, max(size, 1), step)]


def read_by_tasks(
    spark: SparkSession, facts: FactsFile, range_bytes: int = RANGE_BYTES
) -> tuple[DataFrame, int] | None:
    """The file's rows as a frame read by Spark tasks, in positional columns (``c0..``,
    the declared types), and their number; None when Arrow refused a range (one job)."""
    from fixflow.operators.spark_backend import relation_struct

    slots = spark.sparkContext.defaultParallelism
    positions = ranges(os.path.getsize(facts.path), slots, range_bytes)
    frame = spark.sparkContext.parallelize(positions, len(positions)).toDF(POSITIONS)
    counted = frame.mapInArrow(_counter(facts), "rows long").collect()
    if any(row.rows < 0 for row in counted):
        log.info("%s: Arrow refused a range; the driver reads the file", facts.path)
        return None
    rows = sum(row.rows for row in counted)
    log.info("tasks read %d facts from %s in %d ranges", rows, facts.path, len(positions))
    struct = relation_struct([a.type for a in facts.attributes])
    return frame.mapInArrow(_reader(facts), struct), rows


def _positions(batch: pa.RecordBatch) -> list[tuple[int, int]]:
    """The (start, end) ranges of a batch of ``POSITIONS`` rows."""
    starts, ends = batch.column(0).to_pylist(), batch.column(1).to_pylist()
    return list(zip(starts, ends, strict=True))


def _counter(facts: FactsFile) -> ArrowMap:
    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            counts = []
            for start, end in _positions(batch):
                table = facts.parsed(start, end)
                counts.append(-1 if table is None else table.num_rows)
            yield pa.RecordBatch.from_pydict({"rows": pa.array(counts, pa.int64())})

    return count


def _reader(facts: FactsFile) -> ArrowMap:
    names = [f"c{i}" for i in range(len(facts.attributes))]
    schema = arrow_schema(facts.attributes)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for start, end in _positions(batch):
                table = facts.parsed(start, end)
                if table is None:  # the file changed since it was counted
                    raise ValueError(f"{facts.path}: bytes {start}-{end} no longer parse")
                yield from table.cast(schema).rename_columns(names).to_batches()

    return read
