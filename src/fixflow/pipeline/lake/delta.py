"""Delta Lake I/O of relation tables with ``deltalake`` (delta-rs: no JVM jars needed).

A relation table has exactly its ``.decl`` schema: ``number`` → int64, ``float`` →
float64, ``symbol`` → string, with the declared attribute names (an iteration-indexed
relation's result drops its index column before it gets here). The streaming pipeline
reuses these helpers for its EDB, state and result tables.

A nullary relation (``.decl q()``) holds or not: its rows are empty tuples, at most one.
Delta has no table without columns (nor Arrow or Spark a reliable count of rows without
any), so its *table* has one column instead, ``holds`` (boolean, never null), and a row
(``holds = true``) when the relation holds; no row when it does not. This module is the
one place that maps between the two: ``table_schema``, ``to_arrow``/``write_table`` on the
way out, ``declared_rows`` on the way back, ``write_csv`` for the CSV form (an empty
header line, then one empty line when it holds).
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake

from fixflow.checker.ast import Attribute, TypeName
from fixflow.pipeline.lake.datafusion_sql import read_delta
from fixflow.pipeline.lake.lakehouse import write_text

if TYPE_CHECKING:  # pyspark is imported where used: the Arrow paths run without it
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

ARROW_TYPES: dict[str, pa.DataType] = {
    "number": pa.int64(),
    "float": pa.float64(),
    "symbol": pa.string(),
}


def arrow_type(type_name: TypeName) -> pa.DataType:
    return ARROW_TYPES[type_name]


def arrow_schema(attributes: Sequence[Attribute]) -> pa.Schema:
    """The pyarrow schema of a relation: declared names and types, in declared order."""
    return pa.schema([pa.field(a.name, arrow_type(a.type)) for a in attributes])


HOLDS = "holds"
"""The one column of a nullary relation's table (module docstring)."""


def table_schema(attributes: Sequence[Attribute]) -> pa.Schema:
    """The Delta table schema of a relation: its ``arrow_schema``, or for a nullary
    relation the one non-null boolean column ``holds``."""
    if attributes:
        return arrow_schema(attributes)
    return pa.schema([pa.field(HOLDS, pa.bool_(), nullable=False)])


def with_table_columns(frame: DataFrame, attributes: Sequence[Attribute]) -> DataFrame:
    """A Spark frame of a relation's rows with its table's columns: a nullary relation's
    empty tuples, which ``toArrow`` would not count, become ``holds = true`` rows."""
    from pyspark.sql import functions as F

    return frame if attributes else frame.withColumn(HOLDS, F.lit(True))


def table_keys(keys: Sequence[str], attributes: Sequence[Attribute]) -> tuple[str, ...]:
    """The columns a relation's table rows are matched on (merges): its key columns, or
    ``holds`` for a nullary relation (whose key is the empty tuple)."""
    return tuple(keys) if attributes else (HOLDS,)


def nullary_table(holds: bool) -> pa.Table:
    """A nullary relation's table: one ``holds`` row if it holds, none otherwise."""
    return pa.table({HOLDS: pa.array([True] if holds else [], pa.bool_())}, table_schema(()))


def declared_rows(table: pa.Table, attributes: Sequence[Attribute]) -> pa.Table:
    """A relation's table back as its declared rows: for a nullary relation a table of no
    columns and one row (``spark.createDataFrame`` makes it one empty tuple) if it holds."""
    if attributes:
        return table
    holds = table.num_rows > 0 and bool(pc.any(table.column(HOLDS)).as_py())
    return nullary_table(holds).select([])


def in_table_schema(table: pa.Table, attributes: Sequence[Attribute]) -> pa.Table:
    """``table`` (declared rows, or rows in the table's schema already) in the table's
    schema."""
    if not attributes and HOLDS not in table.column_names:
        table = nullary_table(table.num_rows > 0)
    return table.cast(table_schema(attributes))


def to_arrow(frame: DataFrame, attributes: Sequence[Attribute]) -> pa.Table:
    """A Spark DataFrame with the relation's columns (by position) as a pyarrow table,
    in its table's schema (``table_schema``). A local relation (evaluated in the driver) is
    collected without a Spark job."""
    if not attributes:
        return nullary_table(not frame.isEmpty())
    schema = arrow_schema(attributes)
    if frame.isLocal():  # rows the driver holds: collect runs no Spark job, toArrow one
        return rows_to_arrow(frame.collect(), attributes)
    table = frame.toArrow()
    if table.num_columns != len(schema):
        raise ValueError(f"expected {len(schema)} columns, got {table.num_columns}")
    return positional_to_arrow(table, attributes)


def positional_to_arrow(table: pa.Table, attributes: Sequence[Attribute]) -> pa.Table:
    """An Arrow table with the relation's columns by position, in its table's schema."""
    if not attributes:
        return nullary_table(table.num_rows > 0)
    schema = arrow_schema(attributes)
    return table.rename_columns(schema.names).cast(schema)


def rows_to_arrow(rows: Iterable[Sequence[object]], attributes: Sequence[Attribute]) -> pa.Table:
    schema = arrow_schema(attributes)
    columns = list(zip(*rows, strict=True)) if rows else []
    if not columns:
        return schema.empty_table()
    return pa.table(
        [pa.array(col, type=field.type) for col, field in zip(columns, schema, strict=True)],
        schema=schema,
    )


def write_table(
    path: str | Path,
    table: pa.Table,
    attributes: Sequence[Attribute],
    mode: Literal["overwrite", "append"] = "overwrite",
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``table`` (declared rows or already in the table's schema) as a Delta table
    with exactly the table's schema (``table_schema``); ``metadata``: ``fixflow.*``
    entries of the commit (e.g. ``fixflow.partial``)."""
    data = in_table_schema(table, attributes)
    properties = CommitProperties(custom_metadata=dict(metadata)) if metadata else None
    if mode == "overwrite":
        write_deltalake(
            str(path),
            data,
            mode="overwrite",
            schema_mode="overwrite",
            commit_properties=properties,
        )
    else:
        write_deltalake(str(path), data, mode="append", commit_properties=properties)
    log.info("wrote %d rows to %s", table.num_rows, path)


def read_table(path: str | Path) -> pa.Table:
    # Not to_pyarrow_table(): it can abort the process at exit (see datafusion_sql).
    return read_delta(DeltaTable(str(path)))


def text_value(value: object) -> str:
    """A value as result files write it: repr() keeps every float digit."""
    return repr(value) if isinstance(value, float) else str(value)


def sorted_rows(table: pa.Table, attributes: Sequence[Attribute]) -> list[tuple[object, ...]]:
    """``table``'s rows as declared tuples, sorted (a nullary relation: one empty tuple if
    it holds)."""
    if not attributes:
        return [()] * in_table_schema(table, attributes).num_rows  # only `holds = true` rows
    columns = (table.column(i).to_pylist() for i in range(table.num_columns))
    return sorted(zip(*columns, strict=True))


def write_csv(path: str | Path, table: pa.Table, attributes: Sequence[Attribute]) -> None:
    """``<relation>.csv``: a header of the declared attribute names, rows sorted. A nullary
    relation's file is an empty header line, then one empty line if it holds."""
    rows = sorted_rows(table, attributes) if table.num_columns or not attributes else []
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow([a.name for a in attributes])
    for row in rows:
        writer.writerow([text_value(v) for v in row])
    write_text(str(path), text.getvalue())
