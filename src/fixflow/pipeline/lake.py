"""Delta Lake I/O of relation tables with ``deltalake`` (delta-rs: no JVM jars needed).

A relation table has exactly its ``.decl`` schema: ``number`` → int64, ``float`` →
float64, ``symbol`` → string, with the declared attribute names (an iteration-indexed
relation's result drops its index column before it gets here). The streaming pipeline
reuses these helpers for its EDB, state and result tables.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame

from fixflow.checker.ast import Attribute, TypeName
from fixflow.pipeline.datafusion_sql import read_delta

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


def to_arrow(frame: DataFrame, attributes: Sequence[Attribute]) -> pa.Table:
    """A Spark DataFrame with the relation's columns (by position) as a pyarrow table."""
    schema = arrow_schema(attributes)
    table = frame.toArrow()
    if table.num_columns != len(schema):
        raise ValueError(f"expected {len(schema)} columns, got {table.num_columns}")
    table = table.rename_columns(schema.names)
    return table.cast(schema)


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
) -> None:
    """Write ``table`` as a Delta table with the exact declared schema."""
    data = table.cast(arrow_schema(attributes))
    if mode == "overwrite":
        write_deltalake(str(path), data, mode="overwrite", schema_mode="overwrite")
    else:
        write_deltalake(str(path), data, mode="append")
    log.info("wrote %d rows to %s", table.num_rows, path)


def read_table(path: str | Path) -> pa.Table:
    # Not to_pyarrow_table(): it can abort the process at exit (see datafusion_sql).
    return read_delta(DeltaTable(str(path)))


def table_exists(path: str | Path) -> bool:
    return (Path(path) / "_delta_log").is_dir()


def _csv_value(value: object) -> object:
    # repr() keeps every float digit (str() would too in Python 3, but be explicit).
    return repr(value) if isinstance(value, float) else value


def write_csv(path: str | Path, table: pa.Table, attributes: Sequence[Attribute]) -> None:
    """``<relation>.csv``: a header of the declared attribute names, rows sorted."""
    rows = (
        sorted(zip(*(table.column(i).to_pylist() for i in range(table.num_columns)), strict=True))
        if table.num_columns
        else []
    )
    with Path(path).open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow([a.name for a in attributes])
        for row in rows:
            writer.writerow([_csv_value(v) for v in row])
