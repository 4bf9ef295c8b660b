"""SQL over Delta tables without a JVM: DataFusion as deltalake bundles it (``QueryBuilder``).

``fixflow query`` answers with it by default and ``fixflow show`` reads its rows through it;
Spark SQL stays behind ``fixflow query --engine spark``. Nothing here knows about the lake
layout: ``results.register_tables`` decides which tables get which names.

Reading through DataFusion rather than ``DeltaTable.to_pyarrow_dataset()`` (which
``to_pyarrow_table()`` and ``to_pandas()`` use) also decides whether a short-lived process
exits cleanly. That dataset reads through a Python object (deltalake's
``DeltaStorageHandler`` in a ``pyarrow.fs.PyFileSystem``); an Arrow I/O thread that drops the
last reference to it after the interpreter began finalizing must take the GIL, and CPython
3.11-3.13 ends such a thread with ``pthread_exit`` inside a ``noexcept`` C++ destructor:
``terminate called without an active exception``, exit 134, at random. DataFusion reads in
Rust and hands back plain Arrow buffers, so no Python object is left for a native thread.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

log = logging.getLogger(__name__)

SESSION_CONFIG = {
    # Unquoted names fold to lower case, so `SELECT * FROM TC` finds tc as it does in Spark
    # (deltalake turns folding off by default and would only find a name as written).
    "datafusion.sql_parser.enable_ident_normalization": "true",
    # SHOW TABLES and information_schema.columns: how to see what a query can use.
    "datafusion.catalog.information_schema": "true",
}

_MISSING_TABLE = re.compile(r"table '([^']*)' not found")
_DEFAULT_SCHEMA = re.compile(r"^datafusion\.(?:public\.)?")
_PARSER_ERROR = re.compile(r'ParserError\("(.*)"\)', re.DOTALL)


class SqlError(Exception):
    """A query DataFusion refused or failed, as one line.

    ``missing_table`` is the name as the query wrote it (folded), when the failure is an
    unknown table: the caller knows which tables exist and can say so."""

    def __init__(self, message: str, missing_table: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.missing_table = missing_table


def new_builder() -> QueryBuilder:
    return QueryBuilder(dict(SESSION_CONFIG))


def quote(identifier: str) -> str:
    """A SQL identifier that keeps any characters (a program stem may hold ``-`` or ``.``)."""
    return '"' + identifier.replace('"', '""') + '"'


def create_schema(builder: QueryBuilder, schema: str) -> None:
    # Only names from the lake's directory listing get here, always quoted: no user text.
    builder.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")


def register(builder: QueryBuilder, delta: DeltaTable, name: str, schema: str | None) -> None:
    """Make ``delta`` the table ``[schema.]name``; opening it read only its log, and the
    query reads only the files it needs."""
    qualified = quote(name) if schema is None else f"{quote(schema)}.{quote(name)}"
    builder.register(qualified, delta)


def run_sql(builder: QueryBuilder, sql: str) -> pa.Table:
    """The rows of ``sql``; every failure becomes a SqlError (traceback logged at INFO)."""
    try:
        return _collect(builder.execute(sql))
    # User SQL can fail in planning (DeltaError), while reading (ArrowException) or in
    # whatever else the native engine raises; to the CLI each is one line about the query.
    except Exception as error:
        log.info("DataFusion could not answer %r", sql, exc_info=True)
        raise sql_error(error) from error


def read_delta(delta: DeltaTable) -> pa.Table:
    """Every row of ``delta`` with exactly the Arrow schema of its Delta schema (the types
    ``to_pyarrow_dataset`` gave: DataFusion itself would return string views)."""
    builder = new_builder()
    builder.register("t", delta)
    schema = pa.schema(delta.schema().to_arrow())
    rows = _collect(builder.execute("SELECT * FROM t"))
    return rows.select(schema.names).cast(schema)


def sql_error(error: Exception) -> SqlError:
    text = str(error).strip() or type(error).__name__
    text = _PARSER_ERROR.sub(r"\1", text)  # SQL error: ParserError("Expected ...") -> the text
    found = _MISSING_TABLE.search(text)
    missing = _DEFAULT_SCHEMA.sub("", found.group(1)) if found else None
    if found is not None:
        text = text.replace(found.group(0), f"table '{missing}' not found")
    return SqlError(one_line(text), missing)


def one_line(text: str) -> str:
    """DataFusion's multi-line messages ("Did you mean ...", "caused by") joined."""
    lines = [line.strip() for line in text.splitlines()]
    return " ".join(line for line in lines if line)


def _collect(stream: Any) -> pa.Table:
    # Any Arrow C stream (DataFusion's is arro3's reader). Not pa.table(stream): it asks
    # whether the argument is a pandas DataFrame, which imports pandas (~0.15 s).
    return pa.RecordBatchReader.from_stream(stream).read_all()
