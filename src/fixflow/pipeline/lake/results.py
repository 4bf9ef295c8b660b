"""Reading the result tables: finding them, resolving a relation name, registering them as
DataFusion tables or Spark views, and formatting rows for the terminal.

Result tables live under ``<lake root>/<program stem>/results/<relation>`` (see
``lakehouse.ProgramLake``); ``fixflow eval`` writes them directly under ``OUT_DIR/<relation>``.
Both are found by listing directories that hold a ``_delta_log`` and read with ``deltalake``
and its bundled DataFusion (no JVM), so ``fixflow show`` and ``fixflow query`` never start
Spark unless ``fixflow query --engine spark`` asks for it.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from fixflow.checker.model import Report
from fixflow.checker.printer import pretty
from fixflow.pipeline.lake.datafusion_sql import create_schema, read_delta, register
from fixflow.pipeline.lake.lakehouse import (
    ProgramLake,
    filesystem_of,
    is_directory,
    join_path,
    open_table,
    subdirectories,
)

if TYPE_CHECKING:
    from deltalake import QueryBuilder
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DELTA_LOG = "_delta_log"
RUN_FIRST = "run `fixflow run` or `fixflow eval` first"


class ResultsError(Exception):
    """A user-facing problem finding or reading result tables; the message says what to do."""


class AmbiguousRelation(ResultsError):
    """The same relation name exists in several programs' results."""

    def __init__(self, relation: str, programs: Sequence[str]) -> None:
        self.relation = relation
        self.programs = tuple(programs)
        super().__init__(
            f"relation `{relation}` is ambiguous: it exists in several programs "
            f"({', '.join(self.programs)}); pass --program STEM to choose one"
        )


@dataclass(frozen=True, slots=True)
class ResultTable:
    """One result relation's Delta table."""

    relation: str
    path: str
    program: str | None = None
    """The program stem for tables found in a lake; None for a plain ``--results`` directory."""

    @property
    def qualified_name(self) -> str:
        return f"{self.program}.{self.relation}" if self.program else self.relation


@dataclass(frozen=True, slots=True)
class ResultSet:
    """The result tables in scope of one command, and where they were looked for."""

    location: str
    tables: tuple[ResultTable, ...]

    @property
    def ambiguous(self) -> dict[str, tuple[str, ...]]:
        """Relation name -> the programs sharing it, for names found in more than one."""
        by_name: dict[str, list[str]] = {}
        for table in self.tables:
            by_name.setdefault(table.relation, []).append(table.program or "?")
        return {name: tuple(progs) for name, progs in by_name.items() if len(progs) > 1}

    @property
    def unambiguous(self) -> tuple[ResultTable, ...]:
        shared = self.ambiguous
        return tuple(t for t in self.tables if t.relation not in shared)

    def require_tables(self) -> None:
        if not self.tables:
            raise ResultsError(f"no result tables under {self.location}; {RUN_FIRST}")

    def resolve(self, relation: str) -> ResultTable:
        """The one table called ``relation``, or a ResultsError saying why there is none."""
        self.require_tables()
        matches = [t for t in self.tables if t.relation == relation]
        if len(matches) > 1:
            raise AmbiguousRelation(relation, [t.program or "?" for t in matches])
        if not matches:
            known = ", ".join(sorted({t.relation for t in self.tables}))
            raise ResultsError(f"no relation `{relation}` under {self.location} (known: {known})")
        return matches[0]


# ---------------------------------------------------------------- finding tables


def results_in_directory(directory: str) -> ResultSet:
    """Delta tables directly under ``directory`` (the OUT_DIR of ``fixflow eval``)."""
    filesystem, base = filesystem_of(directory)
    info = filesystem.get_file_info(base)
    if info.type != pafs.FileType.Directory:
        raise ResultsError(f"{directory}: no such directory")
    tables = tuple(
        ResultTable(name, join_path(directory, name)) for name in _delta_children(filesystem, base)
    )
    return ResultSet(directory, tables)


def results_in_lake(lake_root: str, program: str | None = None) -> ResultSet:
    """Result tables of one program (``program`` = its stem), or of every program in the lake."""
    if program is not None:
        lake = ProgramLake(lake_root, program)
        return ResultSet(_results_dir(lake), _program_tables(lake))
    filesystem, base = filesystem_of(lake_root)
    tables = [
        table
        for stem in subdirectories(filesystem, base)
        for table in _program_tables(ProgramLake(lake_root, stem))
    ]
    return ResultSet(lake_root, tuple(tables))


def _results_dir(lake: ProgramLake) -> str:
    # Derived from ProgramLake.results so the layout stays defined in one place.
    return lake.results("").rstrip("/")


DEAD_LETTER = "dead_letter"
"""The name a stream's dead-letter table goes by in `fixflow show` and `fixflow query`
(beside the result relations, unless one of them has that name)."""


def _program_tables(lake: ProgramLake) -> tuple[ResultTable, ...]:
    filesystem, results_base = filesystem_of(_results_dir(lake))
    names = _delta_children(filesystem, results_base)
    tables = [ResultTable(name, lake.results(name), lake.program) for name in names]
    if DEAD_LETTER not in names and is_directory(join_path(lake.dead_letter, DELTA_LOG)):
        tables.append(ResultTable(DEAD_LETTER, lake.dead_letter, lake.program))
    return tuple(tables)


def find_results(
    lake_root: str, program: str | None = None, results_dir: str | None = None
) -> ResultSet:
    """What the ``--results`` / ``--program`` / ``[lake] path`` options select."""
    if results_dir is not None and program is not None:
        raise ResultsError(
            "--results DIR and --program STEM exclude each other: --results "
            "reads the Delta tables directly under DIR"
        )
    try:
        if results_dir is not None:
            return results_in_directory(results_dir)
        return results_in_lake(lake_root, program)
    except (OSError, pa.ArrowException) as error:  # e.g. object store unreachable
        where = results_dir if results_dir is not None else lake_root
        raise ResultsError(f"{where}: cannot list result tables: {_first_line(error)}") from error


def _delta_children(filesystem: pafs.FileSystem, base: str) -> list[str]:
    """Names of the subdirectories of ``base`` that are Delta tables."""
    names = []
    for name in subdirectories(filesystem, base):
        marker = filesystem.get_file_info(join_path(base, name, DELTA_LOG))
        if marker.type == pafs.FileType.Directory:
            names.append(name)
    return names


# ---------------------------------------------------------------- reading tables


def read_result(table: ResultTable) -> pa.Table:
    # Through DataFusion, not to_pyarrow_dataset(): that one can abort the process at exit
    # (see datafusion_sql), and it would import pandas, a tenth of a second, for nothing.
    try:
        return read_delta(_open(table))
    except (DeltaError, OSError, pa.ArrowException) as error:
        raise ResultsError(
            f"{table.path}: cannot read the Delta table: {_first_line(error)}"
        ) from error


def _open(table: ResultTable) -> DeltaTable:
    try:
        delta = open_table(table.path)
    except (DeltaError, OSError) as error:
        raise ResultsError(
            f"{table.path}: cannot open the Delta table: {_first_line(error)}"
        ) from error
    if delta is None:
        raise ResultsError(f"{table.path}: not a Delta table")
    return delta


def _first_line(error: Exception) -> str:
    # delta-rs appends a native backtrace to its messages; the first line says what happened.
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def sorted_rows(rows: pa.Table) -> pa.Table:
    """Rows ordered by every column left to right, so output is stable across runs."""
    if rows.num_columns == 0 or rows.num_rows == 0:
        return rows
    sortable = [name for name in rows.column_names if _sortable(rows.schema.field(name).type)]
    return rows.sort_by([(name, "ascending") for name in sortable]) if sortable else rows


def _sortable(data_type: pa.DataType) -> bool:
    nested = pa.types.is_nested(data_type) or pa.types.is_dictionary(data_type)
    return not nested and not pa.types.is_null(data_type)


PARTIAL = "fixflow.partial"
"""The commit entry of a table whose rows are partial: a round cap stopped a stratum they
depend on before it converged. A JSON list, one object per such stratum: ``stratum``
(its index), ``relations``, ``cap`` and ``rounds``. A complete result has no entry."""


def partial_metadata(
    strata: Iterable[tuple[int, Sequence[str], int | None, int]],
) -> dict[str, str]:
    """The ``PARTIAL`` entry for capped strata (index, relations, cap, rounds); none when
    there are none."""
    entries = [
        {"stratum": index, "relations": list(relations), "cap": cap, "rounds": rounds}
        for index, relations, cap, rounds in strata
    ]
    return {PARTIAL: json.dumps(entries)} if entries else {}


RESIDUAL = "fixflow.residual"
"""A ``sum`` MRA relation's accuracy at the commit: the termination measure over its last
round's deltas and the clause it was checked against (JSON)."""


def residual_metadata(measure: float | None, clause: str | None) -> dict[str, str]:
    """The ``RESIDUAL`` entry; none when a clause's measure was not taken (a relation
    without a clause runs to its float fixpoint, where no pending delta changes a value:
    its entry needs no measure)."""
    if measure is None and clause is not None:
        return {}
    return {RESIDUAL: json.dumps({"measure": measure, "clause": clause})}


def residual_entry(
    report: Report, relation: str, measure: float | None, converged: bool = True
) -> dict[str, str]:
    """The ``RESIDUAL`` commit entry of a ``sum`` MRA relation; none for any other, nor
    for one an iteration cap stopped (not ``converged``) without a measure."""
    spec = report.mra.get(relation)
    if spec is None or spec.aggregate != "sum" or (measure is None and not converged):
        return {}
    clause = None if spec.termination is None else pretty(spec.termination)
    return residual_metadata(measure, clause)


def describe_residual(raw: str) -> str:
    try:
        entry = json.loads(raw)
        measure, clause = entry["measure"], entry["clause"]
        if measure is None:
            return "residual: no termination clause: it ran to its float fixpoint"
        clause = clause or "none"
        return f"residual: termination measure {measure:.3g} at this commit (clause {clause})"
    except (ValueError, TypeError, KeyError):
        return f"residual: {raw}"


def describe_partial(raw: str) -> list[str]:
    """One line per capped stratum of a ``PARTIAL`` entry (anything else as it is)."""
    try:
        return [
            f"partial: stratum {e['stratum']} ({', '.join(e['relations'])}) stopped at its "
            f"iteration cap ({e['cap']} rounds) before converging"
            for e in json.loads(raw)
        ]
    except (ValueError, TypeError, KeyError):
        return [f"partial: {raw}"]


@dataclass(frozen=True, slots=True)
class CommitInfo:
    """The latest commit of a table: its version and the Fixflow metadata it carries."""

    version: int
    timestamp: datetime | None
    operation: str | None
    fixflow: dict[str, str]
    """The commit's ``fixflow.*`` entries without the prefix (batch_id, offsets, ...)."""

    def describe(self) -> list[str]:
        lines = [f"Delta version {self.version}" + self._when()]
        batch = self.fixflow.get("batch_id")
        if batch is not None:
            query = self.fixflow.get("query_id")
            lines.append(f"batch {batch}" + (f" of query {query}" if query else ""))
        if "offsets" in self.fixflow:
            lines.append(f"offsets {_offsets_text(self.fixflow['offsets'])}")
        if self.provisional:
            lines.append("provisional: async consistency, results may still change")
        if self.partial:
            lines.extend(describe_partial(self.fixflow["partial"]))
        if "residual" in self.fixflow:
            lines.append(describe_residual(self.fixflow["residual"]))
        shown = {"batch_id", "query_id", "offsets", "provisional", "partial", "residual"}
        lines.extend(
            f"{key} {value}" for key, value in sorted(self.fixflow.items()) if key not in shown
        )
        return lines

    @property
    def provisional(self) -> bool:
        return self.fixflow.get("provisional", "").lower() in ("true", "1", "yes")

    @property
    def partial(self) -> bool:
        """A round cap cut a stratum the rows depend on short (``PARTIAL``)."""
        return self.fixflow.get("partial", "[]") not in ("", "[]")

    def _when(self) -> str:
        parts = []
        if self.operation:
            parts.append(self.operation)
        if self.timestamp is not None:
            parts.append(self.timestamp.strftime("%Y-%m-%d %H:%M:%S UTC"))
        return f" ({', '.join(parts)})" if parts else ""


def last_commit(table: ResultTable) -> CommitInfo:
    delta = _open(table)
    history = delta.history(limit=1)
    entry: dict[str, Any] = history[0] if history else {}
    stamp = entry.get("timestamp")
    when = datetime.fromtimestamp(stamp / 1000, tz=UTC) if isinstance(stamp, int) else None
    fixflow = {
        key.removeprefix("fixflow."): str(value)
        for key, value in entry.items()
        if key.startswith("fixflow.")
    }
    return CommitInfo(delta.version(), when, entry.get("operation"), fixflow)


def _offsets_text(raw: str) -> str:
    """``{"edge": {"0": [5, 9]}}`` as ``edge[0]: 5..9``; anything else as it is."""
    try:
        offsets = json.loads(raw)
        return (
            ", ".join(
                f"{topic}[{partition}]: {span[0]}..{span[1]}"
                for topic, partitions in sorted(offsets.items())
                for partition, span in sorted(partitions.items())
            )
            or "none"
        )
    except (ValueError, AttributeError, TypeError, IndexError, KeyError):
        return raw


# ---------------------------------------------------------------- DataFusion tables


def register_tables(builder: QueryBuilder, results: ResultSet, sql: str | None = None) -> list[str]:
    """Register result tables with DataFusion; returns their SQL names.

    The rules are register_views's: an unambiguous relation is the table ``relation``, an
    ambiguous one is left out (so the query fails with "table not found" and the caller
    explains), and with ``sql`` only the relations it mentions are opened. DataFusion also
    has schemas, so every table of a lake is ``program.relation`` too, which names an
    ambiguous relation without --program. Names are registered in lower case because the
    query's unquoted names fold to it (Spark's names are case-insensitive as well).
    """
    taken: dict[tuple[str, str], str] = {}  # (DataFusion schema, name) -> table path
    names: list[str] = []
    for table in _mentioned(results.tables, sql):
        delta = _open(table)
        for schema, name in _sql_names(table, results):
            # Unqualified names live in DataFusion's schema "public" (a program may be called so).
            where = (schema or "public", name)
            sql_name = name if schema is None else f"{schema}.{name}"
            if where in taken:  # relations `A` and `a`, or `r` and `public.r` of program public
                if taken[where] != table.path:
                    log.warning("%s: the name %s is taken already; skipped", table.path, sql_name)
            elif _register(builder, delta, name, schema):
                taken[where] = table.path
                names.append(sql_name)
        log.debug("registered %s (%s)", table.path, table.qualified_name)
    return names


def _register(builder: QueryBuilder, delta: DeltaTable, name: str, schema: str | None) -> bool:
    try:
        if schema is not None:
            create_schema(builder, schema)
        register(builder, delta, name, schema)
    except DeltaError as error:  # e.g. a program called information_schema
        log.warning("cannot register %s.%s: %s", schema, name, _first_line(error))
        return False
    return True


def _sql_names(table: ResultTable, results: ResultSet) -> list[tuple[str | None, str]]:
    """(schema, name) pairs under which DataFusion knows ``table``: folded to lower case."""
    names: list[tuple[str | None, str]] = []
    folded = [t.relation.lower() for t in results.tables]
    if folded.count(table.relation.lower()) == 1:
        names.append((None, table.relation.lower()))
    if table.program is not None:
        names.append((table.program.lower(), table.relation.lower()))
    return names


def _mentioned(tables: Sequence[ResultTable], sql: str | None) -> tuple[ResultTable, ...]:
    """The tables ``sql`` names as a word, or all of them when it names none (SHOW TABLES)."""
    if sql is None:
        return tuple(tables)
    return tuple(t for t in tables if mentions(sql, t.relation)) or tuple(tables)


# ---------------------------------------------------------------- Spark views


def register_views(spark: SparkSession, results: ResultSet, sql: str | None = None) -> list[str]:
    """Register unambiguous relations as temp views named after them; returns the names.

    With ``sql``, only the relations whose name occurs in it as a word are loaded (every
    table passes through the driver, so a lake of many programs would cost seconds for
    nothing); when none occurs (``SHOW VIEWS``), all are. Ambiguous names are left out, so
    a query that uses one fails with "table not found", which the caller turns into the
    ambiguity message (see ``explain_missing_table``).
    """
    registered = []
    for table in _mentioned(results.unambiguous, sql):
        rows = read_result(table)
        spark.createDataFrame(rows).createOrReplaceTempView(table.relation)
        registered.append(table.relation)
        log.debug("registered %s as view %s (%d rows)", table.path, table.relation, rows.num_rows)
    return registered


def mentions(sql: str, name: str) -> bool:
    """True when ``name`` occurs in ``sql`` as a whole identifier (Spark: case-insensitive)."""
    return re.search(rf"(?<![\w$]){re.escape(name)}(?![\w$])", sql, re.IGNORECASE) is not None


def explain_missing_table(missing: str, results: ResultSet, spark_message: str) -> str:
    """What to say when a query names a table that is not registered: the ambiguity message
    for an ambiguous relation, else Spark's message with the relations there are."""
    name = missing.strip("`").split(".")[-1].strip("`")
    for relation, programs in results.ambiguous.items():
        if relation.lower() == name.lower():
            return str(AmbiguousRelation(relation, programs))
    known = ", ".join(sorted({t.relation for t in results.tables}))
    return f"{spark_message} (result relations under {results.location}: {known})"


def explain_missing_sql_table(missing: str, results: ResultSet, message: str) -> str:
    """explain_missing_table for DataFusion, which also knows ``program.relation`` names:
    an ambiguous relation's message lists them, and a wrong qualified name gets them all."""
    qualified = sorted(f"{t.program}.{t.relation}".lower() for t in results.tables if t.program)
    program, _, relation = missing.rpartition(".")
    if program and qualified:
        return f"{message} (result tables under {results.location}: {', '.join(qualified)})"
    explained = explain_missing_table(relation, results, message)
    choices = [name for name in qualified if name.endswith("." + relation.lower())]
    if relation.lower() in {r.lower() for r in results.ambiguous} and choices:
        explained += f", or name it as program.relation ({', '.join(choices)})"
    return explained


# ---------------------------------------------------------------- formatting


def format_table(rows: pa.Table) -> str:
    """An aligned text table: numbers right-aligned, text left-aligned, NULL for nulls."""
    names = rows.column_names
    columns = [[_cell(v) for v in rows.column(name).to_pylist()] for name in names]
    numeric = [_is_numeric(rows.schema.field(name).type) for name in names]
    widths = [
        max([len(name), *map(len, cells)]) for name, cells in zip(names, columns, strict=True)
    ]
    header = "  ".join(
        _pad(n, w, right) for n, w, right in zip(names, widths, numeric, strict=True)
    )
    rule = "  ".join("-" * w for w in widths)
    body = [
        "  ".join(
            _pad(cells[i], w, right)
            for cells, w, right in zip(columns, widths, numeric, strict=True)
        )
        for i in range(rows.num_rows)
    ]
    return "\n".join(line.rstrip() for line in [header, rule, *body])


def format_csv(rows: pa.Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(rows.column_names)
    for record in _records(rows):
        writer.writerow(["" if v is None else _cell(v) for v in record])
    return buffer.getvalue().rstrip("\n")


def format_json(rows: pa.Table) -> str:
    """A JSON array of one object per row (non-finite floats as strings: JSON has none)."""
    names = rows.column_names
    objects = [dict(zip(names, map(_json_value, record), strict=True)) for record in _records(rows)]
    return json.dumps(objects, indent=None, ensure_ascii=False)


FORMATTERS = {"table": format_table, "csv": format_csv, "json": format_json}


def _records(rows: pa.Table) -> Iterable[tuple[Any, ...]]:
    columns = [rows.column(i).to_pylist() for i in range(rows.num_columns)]
    return zip(*columns, strict=True) if columns else iter(())


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):  # a nullary relation's ``holds``: SQL's spelling, not Python's
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return value


def _is_numeric(data_type: pa.DataType) -> bool:
    return (
        pa.types.is_integer(data_type)
        or pa.types.is_floating(data_type)
        or pa.types.is_decimal(data_type)
    )


def _pad(text: str, width: int, right: bool) -> str:
    return text.rjust(width) if right else text.ljust(width)
