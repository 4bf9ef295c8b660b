"""Writing a Spark frame into a Delta table without its rows passing through the driver.

Each Spark task writes its partition as one Parquet file straight into the table's
directory (a name no other task or attempt uses) and returns one small row: the file's
path, size, row count and statistics. The driver commits every returned file in ONE
Delta transaction (delta-rs's write-transaction API with the files' add actions: no JVM
jars), carrying the same commit properties as ``lakehouse`` (the batch's application
transaction and its offsets), so ``lakehouse.already_committed`` holds for it as for any
other commit.

Only the files whose rows the successful job returned are committed. A failed or retried
task attempt may leave a file behind in the directory: no commit names it, so readers never
see it, and ``DeltaTable.vacuum`` removes such files once they are older than the retention
period. ``lakehouse`` keeps the driver's path for frames of at most ``task_io_rows`` rows
(``thresholds.TASK_IO_ROWS``) and for merges of changes (delta-rs merges in the driver).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import Schema
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from fixflow.operators.relation import Relation
from fixflow.operators.thresholds import ROW_GROUP_ROWS
from fixflow.pipeline.lake.lakehouse import (
    BatchCommit,
    already_committed,
    commit_properties,
    filesystem_of,
    join_path,
    open_table,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

FILE_ROW = "path string, size long, num_records long, stats string, modified long"
"""What a task returns for each file it wrote (Spark's DDL)."""


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """One Parquet file a task wrote, as the driver commits it."""

    path: str
    """Relative to the table's directory."""
    size: int
    num_records: int
    stats: str
    """Delta's per-file statistics (JSON): row count, null counts, numeric min/max."""
    modified: int
    """Milliseconds since the epoch."""

    def add_action(self) -> AddAction:
        return AddAction(self.path, self.size, {}, self.modified, True, self.stats)


@dataclass(frozen=True, slots=True)
class TaskWrite:
    """A commit ``write_frame`` made: the files the tasks wrote and the rows in them."""

    files: tuple[WrittenFile, ...]

    @property
    def rows(self) -> int:
        return sum(f.num_records for f in self.files)


def write_frame(
    table_path: str,
    frame: DataFrame,
    schema: pa.Schema,
    mode: Literal["append", "overwrite"],
    commit: BatchCommit | None = None,
    metadata: Mapping[str, str] | None = None,
    row_group_rows: int = ROW_GROUP_ROWS,
) -> TaskWrite | None:
    """Write ``frame`` (the table's columns by position) into the Delta table at
    ``table_path`` with the table's ``schema``: ``append`` adds its rows, ``overwrite``
    replaces the table's rows (and schema). With ``commit``, a batch already in the table
    is skipped (None), as ``lakehouse.append_rows`` and ``overwrite_rows`` do.
    ``row_group_rows``: rows a task gathers into each Parquet row group."""
    if commit is not None and already_committed(table_path, commit.query_id, commit.batch_id):
        log.info("%s: batch %d already committed, skipping", table_path, commit.batch_id)
        return None
    files = write_files(table_path, frame, schema, row_group_rows)
    commit_files(table_path, files, schema, mode, commit, metadata)
    written = TaskWrite(tuple(files))
    log.info(
        "tasks wrote %d rows to %s in %d files (%s)", written.rows, table_path, len(files), mode
    )
    return written


def by_tasks(frame: DataFrame, limit: int) -> bool:
    """Whether Spark tasks write ``frame``: it is not a local relation (rows the driver
    holds already) and holds more than ``limit`` rows (``[lake] task_io_rows``), which
    one job finds without counting past ``limit + 1``."""
    if isinstance(frame, Relation) and not frame.made:
        return False  # rows the driver holds; asking Spark would start it (or make them)
    if frame.isLocal():
        return False
    return bool(frame.limit(limit + 1).count() > limit)


def write_files(
    table_path: str, frame: DataFrame, schema: pa.Schema, row_group_rows: int = ROW_GROUP_ROWS
) -> list[WrittenFile]:
    """Spark tasks write ``frame``'s partitions as Parquet files into the table's directory;
    the driver receives only a row per file (one Spark job)."""
    if len(frame.columns) != len(schema):
        raise ValueError(f"expected {len(schema)} columns, got {len(frame.columns)}")
    rows = frame.mapInArrow(
        partition_writer(table_path, schema, row_group_rows), FILE_ROW
    ).collect()
    return [
        WrittenFile(r["path"], r["size"], r["num_records"], r["stats"], r["modified"]) for r in rows
    ]


def commit_files(
    table_path: str,
    files: Sequence[WrittenFile],
    schema: pa.Schema,
    mode: Literal["append", "overwrite"],
    commit: BatchCommit | None = None,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """One Delta transaction adding ``files`` (already in the table's directory); a table
    that does not exist yet is created by it."""
    actions = [f.add_action() for f in files]
    properties = commit_properties(commit, metadata)
    table = open_table(table_path)
    if table is None:
        create_table_with_add_actions(
            table_path, Schema.from_arrow(schema), actions, commit_properties=properties
        )
    else:
        changes: list[AddAction | RemoveAction] = list(actions)
        table.create_write_transaction(changes, mode, schema, commit_properties=properties)


def partition_writer(
    table_path: str, schema: pa.Schema, row_group_rows: int = ROW_GROUP_ROWS
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function each task runs over its partition's Arrow batches (``mapInArrow``)."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        written = _write_partition(table_path, schema, batches, row_group_rows)
        if written is not None:
            yield pa.RecordBatch.from_pylist(
                [
                    {
                        "path": written.path,
                        "size": written.size,
                        "num_records": written.num_records,
                        "stats": written.stats,
                        "modified": written.modified,
                    }
                ],
                schema=_FILE_ROW_SCHEMA,
            )

    return write


_FILE_ROW_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("num_records", pa.int64()),
        ("stats", pa.string()),
        ("modified", pa.int64()),
    ]
)


def _write_partition(
    table_path: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch], row_group_rows: int
) -> WrittenFile | None:
    """One partition's batches as one Parquet file (none for an empty partition). The name
    is new for every call, so a retried attempt never overwrites the file of another."""
    filesystem, base = filesystem_of(table_path)
    name = f"part-{uuid.uuid4().hex}-c000.snappy.parquet"
    stats = _Stats(schema)
    writer: pq.ParquetWriter | None = None
    pending: list[pa.RecordBatch] = []
    held = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            conformed = _conformed(batch, schema)
            stats.add(conformed)
            pending.append(conformed)
            held += conformed.num_rows
            if held < row_group_rows:
                continue
            writer = writer or _open_writer(filesystem, base, name, schema)
            writer.write_table(pa.Table.from_batches(pending, schema))
            pending, held = [], 0
        if pending:
            writer = writer or _open_writer(filesystem, base, name, schema)
            writer.write_table(pa.Table.from_batches(pending, schema))
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        return None
    size = filesystem.get_file_info(join_path(base, name)).size
    assert size is not None, "a file just written has a size"
    return WrittenFile(name, int(size), stats.rows, stats.json(), int(time.time() * 1000))


def _open_writer(
    filesystem: pafs.FileSystem, base: str, name: str, schema: pa.Schema
) -> pq.ParquetWriter:
    filesystem.create_dir(base, recursive=True)
    return pq.ParquetWriter(join_path(base, name), schema, filesystem=filesystem)


def _conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch with the table's names (by position) and types."""
    columns = [batch.column(i).cast(field.type) for i, field in enumerate(schema)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class _Stats:
    """Delta's file statistics, accumulated batch by batch: the row count, null counts, and
    min/max of numeric columns (a string's bounds would have to be truncated with care;
    without bounds a reader scans the file, which is always correct)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.rows = 0
        self.nulls = dict.fromkeys(schema.names, 0)
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}
        self.unbounded = {f.name for f in schema if not _bounded(f.type)}
        """Columns without bounds: strings, and floats holding NaN or an infinity (JSON
        has neither)."""

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        for field, column in zip(self.schema, batch.columns, strict=True):
            name = field.name
            self.nulls[name] += column.null_count
            if name in self.unbounded:
                continue
            if pa.types.is_floating(field.type) and pc.all(pc.is_finite(column)).as_py() is False:
                self.unbounded.add(name)
                self.low.pop(name, None)
                self.high.pop(name, None)
                continue
            bounds = pc.min_max(column).as_py()
            if bounds["min"] is None:  # only nulls
                continue
            self.low[name] = min(self.low.get(name, bounds["min"]), bounds["min"])
            self.high[name] = max(self.high.get(name, bounds["max"]), bounds["max"])

    def json(self) -> str:
        return json.dumps(
            {
                "numRecords": self.rows,
                "minValues": self.low,
                "maxValues": self.high,
                "nullCount": self.nulls,
            }
        )


def _bounded(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_integer(data_type) or pa.types.is_floating(data_type))
