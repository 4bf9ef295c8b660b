"""The streaming lake: one directory per program, Delta tables written with deltalake
(delta-rs, no JVM), and commits made idempotent per (query id, batch id).

Layout under ``<lake root>/<program stem>/``::

    program.dl           the source of the program last run here (its declarations let
                         `fixflow publish` check files without --program)
    edb/<relation>       the current EDB facts of each .input relation
    state/<relation>     engine state (MonoTables, counts) owned by the maintenance engine
    results/<relation>   the .output relations, exactly their .decl schema
    dead_letter          messages that failed validation, with the reason
    _checkpoints/        Spark's streaming checkpoints

Idempotence uses Delta application transactions: every commit of batch ``b`` by streaming
query ``q`` carries ``Transaction(app_id=q, version=b)``; a table whose recorded version for
``q`` is already ``>= b`` has this batch, so a replayed batch is skipped table by table. Each
commit also records the batch id and the Kafka offsets it covers in its commit info
(``fixflow.batch_id``, ``fixflow.offsets``, ``fixflow.query_id``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from deltalake import (
    ColumnProperties,
    CommitProperties,
    DeltaTable,
    Transaction,
    WriterProperties,
    write_deltalake,
)
from deltalake.exceptions import TableNotFoundError

from fixflow.pipeline.config import LakeConfig

log = logging.getLogger(__name__)

OP_COLUMN = "_fixflow_op"
"""Marks each row of a ``merge_changes`` source as an upsert or a delete."""

DEAD_LETTER_SCHEMA = pa.schema(
    [
        ("value", pa.string()),
        ("key", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("reason", pa.string()),
        ("kind", pa.string()),
        ("batch_id", pa.int64()),
        ("ingested_at", pa.timestamp("us", tz="UTC")),
    ]
)


@dataclass(frozen=True, slots=True)
class ProgramLake:
    """Where one program's tables live."""

    root: str
    program: str
    """The program's stem: ``sssp`` for ``examples/sssp.dl``."""
    local_root: str | None = None
    """For a lake in an object store: the local directory under which Spark writes the
    program's streaming checkpoint (``checkpoint_mirror`` copies it into the lake)."""

    @classmethod
    def for_program(cls, root: str | Path, program_file: str | Path) -> ProgramLake:
        return cls(str(root), Path(program_file).stem)

    @classmethod
    def of(cls, lake: LakeConfig, program: str) -> ProgramLake:
        """The directory of ``program`` (a stem) in the configured lake."""
        return cls(lake.path, program, str(lake.local_root()) if lake.remote else None)

    @property
    def base(self) -> str:
        return join_path(self.root, self.program)

    def edb(self, relation: str) -> str:
        return join_path(self.base, "edb", relation)

    def state(self, relation: str) -> str:
        return join_path(self.base, "state", relation)

    def results(self, relation: str) -> str:
        return join_path(self.base, "results", relation)

    @property
    def source(self) -> str:
        return join_path(self.base, "program.dl")

    @property
    def dead_letter(self) -> str:
        return join_path(self.base, "dead_letter")

    @property
    def checkpoints(self) -> str:
        """Where Spark keeps the streaming checkpoints: in the lake, or for an object-store
        lake in a local working copy (Spark's S3 connector is a jar we cannot assume)."""
        if self.local_root is None:
            return self.stored_checkpoints
        return join_path(self.local_root, self.program, "_checkpoints")

    @property
    def stored_checkpoints(self) -> str:
        """The checkpoints' place in the lake itself."""
        return join_path(self.base, "_checkpoints")

    def checkpoint(self, query: str = "stream") -> str:
        return join_path(self.checkpoints, query)


def join_path(*parts: str) -> str:
    # Plain string joins: the root may be a URI (s3a://...), which pathlib would mangle.
    return "/".join(p.rstrip("/") for p in parts)


def filesystem_of(location: str) -> tuple[pafs.FileSystem, str]:
    """The Arrow filesystem of a lake location and the path within it. An object store's
    endpoint and credentials are the process's ``AWS_*`` settings (``object_store``)."""
    # Object stores are written s3a:// for Spark's Hadoop connector; Arrow knows them as s3://.
    uri = "s3://" + location[len("s3a://") :] if location.startswith("s3a://") else location
    if "://" not in uri:
        return pafs.LocalFileSystem(), uri
    if uri.startswith("s3://"):
        virtual_hosted = os.environ.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST") == "true"
        filesystem = pafs.S3FileSystem(
            endpoint_override=os.environ.get("AWS_ENDPOINT_URL"),
            force_virtual_addressing=virtual_hosted,
        )
        return filesystem, uri[5:].rstrip("/")
    return pafs.FileSystem.from_uri(uri)


def write_text(location: str, text: str) -> None:
    """Write a text file of the lake (or of an output directory), local or in an object
    store, creating the directories above it."""
    filesystem, path = filesystem_of(location)
    if "/" in path:
        filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with filesystem.open_output_stream(path) as sink:
        sink.write(text.encode("utf-8"))


def is_directory(location: str) -> bool:
    filesystem, path = filesystem_of(location)
    return bool(filesystem.get_file_info(path).type == pafs.FileType.Directory)


def subdirectories(filesystem: pafs.FileSystem, base: str) -> list[str]:
    """Names of the subdirectories of ``base``, but not ``_``-prefixed ones (``_broker``,
    ``_demo``, ``_checkpoints``): those are Fixflow's own, not programs or tables."""
    selector = pafs.FileSelector(base, allow_not_found=True)
    return sorted(
        info.base_name
        for info in filesystem.get_file_info(selector)
        if info.type == pafs.FileType.Directory and not info.base_name.startswith("_")
    )


def record_program(lake: ProgramLake, text: str) -> None:
    """Keep the program's source in its lake directory (rewritten when it changed)."""
    if read_text(lake.source) != text:
        write_text(lake.source, text)


def read_text(location: str) -> str | None:
    """A text file of the lake, or None when it is not there."""
    filesystem, path = filesystem_of(location)
    if filesystem.get_file_info(path).type != pafs.FileType.File:
        return None
    with filesystem.open_input_stream(path) as source:
        return bytes(source.read()).decode("utf-8")


def program_sources(lake_root: str) -> dict[str, str]:
    """Program stem -> the source kept by ``record_program``, for every program in the lake."""
    filesystem, base = filesystem_of(lake_root)
    found = {}
    for stem in subdirectories(filesystem, base):
        text = read_text(ProgramLake(lake_root, stem).source)
        if text is not None:
            found[stem] = text
    return found


@dataclass(frozen=True, slots=True)
class BatchCommit:
    """The identity of one micro-batch's commits: what makes them idempotent."""

    query_id: str
    batch_id: int
    offsets: Mapping[str, Mapping[str, Sequence[int]]] = field(default_factory=dict)
    """``{topic: {partition: [first offset, last offset]}}`` of the records the batch read."""

    @property
    def app_id(self) -> str:
        return f"fixflow-{self.query_id}"

    def properties(self, extra: Mapping[str, str] | None = None) -> CommitProperties:
        metadata = {
            "fixflow.query_id": self.query_id,
            "fixflow.batch_id": str(self.batch_id),
            "fixflow.offsets": json.dumps(self.offsets, sort_keys=True),
            **(extra or {}),
        }
        return CommitProperties(
            custom_metadata=metadata,
            app_transactions=[Transaction(self.app_id, self.batch_id)],
        )


# ---------------------------------------------------------------- reading


def open_table(table_path: str, version: int | None = None) -> DeltaTable | None:
    try:
        return DeltaTable(table_path, version=version)
    except TableNotFoundError:
        return None


def table_rows(table_path: str) -> int:
    """The rows of the table's latest version (0 if it does not exist), from the row counts
    its log records per file; only files without one are read."""
    table = open_table(table_path)
    if table is None:
        return 0
    counts = pa.table(table.get_add_actions(flatten=True)).column("num_records")
    if counts.null_count:
        rows = read_table(table_path)
        return 0 if rows is None else rows.num_rows
    return int(pc.sum(counts).as_py() or 0)


def read_table(table_path: str, version: int | None = None) -> pa.Table | None:
    """The table's rows (at ``version``, default the latest), or None if it does not exist."""
    from fixflow.pipeline.lake.datafusion_sql import read_delta

    table = open_table(table_path, version)
    # Through DataFusion, not to_pyarrow_dataset(): that path can abort the interpreter at
    # exit (docs/architecture.md, "Reading results and publishing").
    return None if table is None else read_delta(table)


def committed_version(table_path: str, query_id: str) -> int | None:
    """The last batch id query ``query_id`` committed to this table, or None."""
    table = open_table(table_path)
    if table is None:
        return None
    return table.transaction_version(BatchCommit(query_id, 0).app_id)


def already_committed(table_path: str, query_id: str, batch_id: int) -> bool:
    """True when batch ``batch_id`` of query ``query_id`` is already in this table."""
    last = committed_version(table_path, query_id)
    return last is not None and last >= batch_id


def batch_commits(table_path: str) -> list[dict[str, Any]]:
    """Commit infos of the table that carry a Fixflow batch, newest first."""
    table = open_table(table_path)
    if table is None:
        return []
    return [h for h in table.history() if "fixflow.batch_id" in h]


def read_before_batch(table_path: str, query_id: str, batch_id: int) -> pa.Table | None:
    """The table as it was before batch ``batch_id`` of ``query_id`` was committed to it.

    When the batch is not committed yet that is the latest version; when it is (a replay),
    time travel to the version before that commit, so that a replayed batch sees the same
    state as its first run did.
    """
    version = version_before_batch(table_path, query_id, batch_id)
    return None if version is None else read_table(table_path, version)


def version_before_batch(table_path: str, query_id: str, batch_id: int) -> int | None:
    """The version ``read_before_batch`` reads; None when the table did not exist then."""
    table = open_table(table_path)
    if table is None:
        return None
    if not already_committed(table_path, query_id, batch_id):
        return table.version()
    for info in batch_commits(table_path):
        if info.get("fixflow.query_id") == query_id and info.get("fixflow.batch_id") == str(
            batch_id
        ):
            version = int(info["version"])
            return version - 1 if version > 0 else None
    raise LookupError(
        f"{table_path}: batch {batch_id} of query {query_id} is recorded as "
        "committed but no commit carries it (history cleaned up?)"
    )


def read_as_of_batch(table_path: str, query_id: str, batch_id: int) -> pa.Table | None:
    """The table as batch ``batch_id`` of ``query_id`` left it: without the commits of
    later batches of that query (a batch still being committed, read while it runs)."""
    table = open_table(table_path)
    if table is None:
        return None
    for info in table.history():  # newest first
        later = (
            info.get("fixflow.query_id") == query_id
            and int(info.get("fixflow.batch_id", -1)) > batch_id
        )
        if not later:
            return read_table(table_path, int(info["version"]))
    return None


def last_batch(table_paths: Sequence[str]) -> tuple[str, int] | None:
    """(query id, batch id) of the newest batch commit among the tables, if any."""
    found: list[tuple[int, str, int]] = []
    for path in table_paths:
        commits = batch_commits(path)
        if commits:
            newest = commits[0]
            found.append(
                (
                    int(newest["version"]),
                    newest["fixflow.query_id"],
                    int(newest["fixflow.batch_id"]),
                )
            )
    if not found:
        return None
    query = max(found)[1]
    return query, max(batch for _, q, batch in found if q == query)


# ---------------------------------------------------------------- writing


def append_rows(
    table_path: str,
    rows: pa.Table,
    commit: BatchCommit | None = None,
    partition_by: Sequence[str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> bool:
    """Append ``rows``; with ``commit``, skip a batch already in the table. True if written."""
    if commit is not None and already_committed(table_path, commit.query_id, commit.batch_id):
        log.info("%s: batch %d already committed, skipping append", table_path, commit.batch_id)
        return False
    _append(table_path, rows, commit, partition_by, metadata)
    return True


def _append(
    table_path: str,
    rows: pa.Table,
    commit: BatchCommit | None,
    partition_by: Sequence[str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> None:
    write_deltalake(
        table_path,
        rows,
        mode="append",
        partition_by=list(partition_by) if partition_by else None,
        commit_properties=commit_properties(commit, metadata),
        writer_properties=writer_properties(rows.schema),
    )


def overwrite_rows(
    table_path: str,
    rows: pa.Table,
    commit: BatchCommit | None = None,
    metadata: Mapping[str, str] | None = None,
) -> bool:
    """Replace the table's contents with ``rows`` (same idempotence as ``append_rows``)."""
    if commit is not None and already_committed(table_path, commit.query_id, commit.batch_id):
        log.info("%s: batch %d already committed, skipping overwrite", table_path, commit.batch_id)
        return False
    write_deltalake(
        table_path,
        rows,
        mode="overwrite",
        schema_mode="overwrite",
        commit_properties=commit_properties(commit, metadata),
        writer_properties=writer_properties(rows.schema),
    )
    return True


def writer_properties(schema: pa.Schema) -> WriterProperties:
    """Parquet without dictionaries for fixed-width columns: a dictionary hashes every
    value and, over mostly distinct numbers, falls back to plain encoding anyway. Writing
    R-MAT 10M's EDB (two numbers and a float) took 1.5-3 s with them and 0.3-0.9 s
    without (the files are 240 MB, not 72, and read no slower); text keeps its
    dictionary, where repeats are the rule and save most."""
    plain = ColumnProperties(dictionary_enabled=False)
    fixed = [f.name for f in schema if pa.types.is_primitive(f.type)]
    return WriterProperties(column_properties=dict.fromkeys(fixed, plain))


def commit_properties(
    commit: BatchCommit | None, metadata: Mapping[str, str] | None
) -> CommitProperties | None:
    """A batch's commit properties, or plain metadata for a commit between batches."""
    if commit is not None:
        return commit.properties(metadata)
    return CommitProperties(custom_metadata=dict(metadata)) if metadata else None


@dataclass(frozen=True, slots=True)
class Merged:
    """A commit ``merge_changes`` made."""

    rows_gained: int
    """Rows the table has more than before (negative: fewer)."""


def merge_changes(
    table_path: str,
    key_columns: Sequence[str],
    upserts: pa.Table | None = None,
    deletes: pa.Table | None = None,
    commit: BatchCommit | None = None,
    metadata: Mapping[str, str] | None = None,
    *,
    new_rows: bool = False,
) -> Merged | None:
    """Upsert ``upserts`` and delete the rows whose key matches a row of ``deletes``, in one
    commit. Rows are matched on ``key_columns``; ``deletes`` needs only those columns. A key
    both upserted and deleted is an error (normalize first). The commit made, or None.
    ``metadata``: more ``fixflow.*`` commit entries (e.g. ``fixflow.provisional``); without
    ``commit`` the commit is not tied to a batch (work between batches). ``new_rows``: the
    caller knows no upserted key is in the table, so without deletes the commit is an
    append, which does not read the table (a merge scans it to match keys)."""
    upserts = _empty_if_none(upserts)
    deletes = _empty_if_none(deletes)
    if upserts.num_rows == 0 and deletes.num_rows == 0:
        return None
    if commit is not None and already_committed(table_path, commit.query_id, commit.batch_id):
        log.info("%s: batch %d already committed, skipping merge", table_path, commit.batch_id)
        return None
    # (idempotence is checked above: the appends below do not check it again)
    if new_rows and deletes.num_rows == 0:
        _append(table_path, upserts, commit, metadata=metadata)  # no need to open the table
        return Merged(upserts.num_rows)
    table = open_table(table_path)
    if table is None:
        if upserts.num_rows == 0:
            return None  # deleting from a table that does not exist: nothing to do
        _append(table_path, upserts, commit, metadata=metadata)
        return Merged(upserts.num_rows)
    source = _merge_source(pa.schema(table.schema().to_arrow()), key_columns, upserts, deletes)
    merger = table.merge(
        source,
        predicate=_key_predicate(key_columns),
        source_alias="s",
        target_alias="t",
        commit_properties=commit_properties(commit, metadata),
        writer_properties=writer_properties(source.schema),
    )
    is_delete = f"s.{OP_COLUMN} = 'delete'"
    is_upsert = f"s.{OP_COLUMN} = 'upsert'"
    metrics = (
        merger.when_matched_delete(predicate=is_delete)
        .when_matched_update_all(predicate=is_upsert, except_cols=[OP_COLUMN])
        .when_not_matched_insert_all(predicate=is_upsert, except_cols=[OP_COLUMN])
        .execute()
    )
    inserted, deleted = metrics["num_target_rows_inserted"], metrics["num_target_rows_deleted"]
    return Merged(int(inserted) - int(deleted))


def _empty_if_none(rows: pa.Table | None) -> pa.Table:
    return rows if rows is not None else pa.table({})


def _merge_source(
    target: pa.Schema, key_columns: Sequence[str], upserts: pa.Table, deletes: pa.Table
) -> pa.Table:
    """Upserts and deletes as one table in the target's schema plus the op column."""
    parts = []
    if upserts.num_rows:
        parts.append(
            _conform(upserts, target).append_column(
                OP_COLUMN, pa.array(["upsert"] * upserts.num_rows)
            )
        )
    if deletes.num_rows:
        padded = {
            name: (
                deletes.column(name).cast(target.field(name).type)
                if name in key_columns
                else pa.nulls(deletes.num_rows, target.field(name).type)
            )
            for name in target.names
        }
        parts.append(
            pa.table(padded, schema=target).append_column(
                OP_COLUMN, pa.array(["delete"] * deletes.num_rows)
            )
        )
    return pa.concat_tables(parts)


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.table(
        {name: rows.column(name).cast(schema.field(name).type) for name in schema.names},
        schema=schema,
    )


def _key_predicate(key_columns: Sequence[str]) -> str:
    return " AND ".join(f"t.{_quote(c)} = s.{_quote(c)}" for c in key_columns)


def _quote(column: str) -> str:
    # Attribute names may contain a prime (b'): double-quoted SQL identifiers take it as is.
    return '"' + column.replace('"', '""') + '"'
