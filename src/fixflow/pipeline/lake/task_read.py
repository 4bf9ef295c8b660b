"""Reading a Delta table into a Spark frame without its rows passing through the driver.

The driver reads only the table's log: which Parquet files make up the version asked for
(``DeltaTable.file_uris``) and its schema. Spark tasks, one per file, read the files with
pyarrow and hand Spark their batches (``mapInArrow``). A table whose files alone do not
say its rows (deletion vectors, column mapping: reader features past protocol 1, or
partition columns, whose values live in the log) is refused: ``readable_by_tasks`` says so
first, and the caller reads it in the driver.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from fixflow.pipeline.lake.lakehouse import filesystem_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def readable_by_tasks(table: DeltaTable) -> bool:
    """Whether the table's current files, read as they are, hold exactly its rows."""
    plain_protocol = table.protocol().min_reader_version <= 1
    return plain_protocol and not table.metadata().partition_columns


def version_rows(table: DeltaTable) -> int | None:
    """The rows of the table's version from the row counts its log records per file
    (None when a file has none)."""
    counts = pa.table(table.get_add_actions(flatten=True)).column("num_records")
    if counts.null_count:
        return None
    return int(pc.sum(counts).as_py() or 0)


def read_frame(spark: SparkSession, table: DeltaTable) -> DataFrame:
    """The rows of ``table`` (at the version it was opened at) as a Spark frame read by
    tasks, one a file, in the table's schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if not readable_by_tasks(table):
        raise ValueError(f"{table.table_uri}: its files alone do not hold its rows")
    schema = pa.schema(table.schema().to_arrow())
    files = table.file_uris()
    log.info("tasks read %d files of %s (version %d)", len(files), table.table_uri, table.version())
    if not files:
        return spark.createDataFrame(schema.empty_table())
    paths = spark.sparkContext.parallelize([(f,) for f in files], len(files)).toDF("path string")
    return paths.mapInArrow(file_reader(schema), from_arrow_schema(schema))


def file_reader(
    schema: pa.Schema,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function each task runs over its batches of file paths (``mapInArrow``)."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for location in batch.column(0).to_pylist():
                yield from _file_batches(location, schema)

    return read


def _file_batches(location: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    filesystem, path = filesystem_of(location)
    with filesystem.open_input_file(path) as source:
        for batch in pq.ParquetFile(source).iter_batches():
            columns = [batch.column(field.name).cast(field.type) for field in schema]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)
