"""An epoch's result changes committed to the program's lake.

Per changed output relation one idempotent Delta commit (``lakehouse.merge_changes`` with the
batch's (query id, batch id)), made from the change the ``Maintainer`` hands out: rows made in
the driver are committed as they are, a Spark change is collected in one job. The one
exception: a Spark change of more than ``[lake] task_io_rows`` rows into an empty result
table (a fresh stream's first batch: every row new) is appended by Spark tasks
(``lake.task_write``) with the same batch commit; merges of later changes pass through the
driver (delta-rs merges there). Under async consistency every commit says whether its rows
are provisional, and ``state/<relation>`` holds the pending deltas of each MRA relation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fixflow.checker.model import Report
from fixflow.operators.evaluate import partial_relations
from fixflow.operators.maintain import Epoch, Maintainer, RelationChange
from fixflow.operators.thresholds import TASK_IO_ROWS
from fixflow.pipeline.lake.delta import arrow_schema, table_keys, table_schema, with_table_columns
from fixflow.pipeline.lake.lakehouse import (
    BatchCommit,
    ProgramLake,
    append_rows,
    merge_changes,
    open_table,
    overwrite_rows,
    table_rows,
)
from fixflow.pipeline.lake.results import PARTIAL, partial_metadata, residual_entry
from fixflow.pipeline.lake.task_write import by_tasks, write_frame


class ResultCommits:
    """Commits what epochs change to the result tables (and, async, the state tables) of
    one program's lake, and keeps the result tables' row counts."""

    def __init__(
        self,
        report: Report,
        lake: ProgramLake,
        maintainer: Maintainer,
        async_mode: bool,
        task_io_rows: int = TASK_IO_ROWS,
    ) -> None:
        self.report = report
        self.task_io_rows = task_io_rows
        """``[lake] task_io_rows``: a larger change into an empty result table is
        appended by Spark tasks."""
        self.program = report.analysis.program
        self.lake = lake
        self.maintainer = maintainer
        """Asked for one unchanged row (a commit that only changes the provisional flag)
        and for the pending deltas it carries (async)."""
        self.async_mode = async_mode
        self._flagged: dict[str, bool] = {}
        """Per output relation, the ``provisional`` flag of its last result commit."""
        self._state_rows: dict[str, int] = {}
        """Per MRA relation, the rows of ``state/<relation>`` this process last committed."""
        self.result_rows: dict[str, int] = {}
        """Per output relation, the rows of its result table: counted once from the table's
        log, then kept up to date from what every commit added and removed (no Spark job)."""

    def ensure_result_tables(self) -> None:
        """Empty result tables with exactly the output relations' schemas, so analysts can
        query every output before the first batch."""
        for relation in self.program.outputs:
            if open_table(self.lake.results(relation)) is None:
                append_rows(self.lake.results(relation), self.result_schema(relation).empty_table())
            self.result_rows[relation] = table_rows(self.lake.results(relation))

    def result_schema(self, relation: str) -> pa.Schema:
        """A result table's schema: the declared attributes, minus any iteration index
        (a nullary relation's: ``delta.table_schema``)."""
        return table_schema(self.report.catalog[relation].result)

    def commit_epoch(
        self,
        epoch: Epoch,
        commit: BatchCommit | None,
        residuals: Mapping[str, float] | None = None,
    ) -> dict[str, int]:
        """Commit an epoch's changed result rows (and, async, the pending deltas);
        ``residuals``: the termination measure each relation's stratum reached in the epoch
        (a ``sum`` MRA relation's commit records it, ``results.RESIDUAL``)."""
        changed = {}
        metadata = self._metadata(epoch)
        partial = partial_relations(self.report, (s.stratum for s in epoch.partial))
        for relation, change in epoch.changes.items():
            entries = self._with_residual(
                self._with_partial(metadata, epoch, partial.get(relation, frozenset())),
                relation,
                residuals or {},
            )
            if self._append_by_tasks(relation, change, commit, entries, epoch.provisional):
                changed[relation] = self.result_rows[relation]
                continue
            upserts, deletes = self._arrow_change(relation, change)
            new_rows = change.new_rows  # appended: no scan of the result table
            if not (upserts.num_rows or deletes.num_rows) and self._flag_unchanged(relation, epoch):
                continue
            if not (upserts.num_rows or deletes.num_rows):
                # Only the flag changes (e.g. the last pending delta changed no row): commit
                # one unchanged row again so the newest commit tells the truth.
                one = self.maintainer.relation(relation).limit(1)
                upserts = _to_arrow(
                    self._table_columns(relation, one), self.result_schema(relation)
                )
                new_rows = False
            merged = merge_changes(
                self.lake.results(relation),
                self._table_keys(relation, change),
                upserts,
                deletes,
                commit,
                entries,
                new_rows=new_rows,
            )
            if merged is not None:
                changed[relation] = upserts.num_rows + deletes.num_rows
                self.result_rows[relation] += merged.rows_gained
            if self.async_mode:
                self._flagged[relation] = epoch.provisional
        if self.async_mode:
            self._commit_state(commit, metadata)
        return changed

    def _append_by_tasks(
        self,
        relation: str,
        change: RelationChange,
        commit: BatchCommit | None,
        entries: dict[str, str] | None,
        provisional: bool,
    ) -> bool:
        """Append a Spark change's upserts to an EMPTY result table by Spark tasks when
        they hold more than ``task_io_rows`` rows: into an empty table, a merge of
        upserts (one per key) inserts them, and a delete matches nothing. The table's row
        count (kept without a job) says it is empty, so later epochs pay no check."""
        empty = self.result_rows.get(relation) == 0
        spark_change = change.tables is None and not change.unchanged
        if not (empty and spark_change and self.report.catalog[relation].result):
            return False
        upserts = self._table_columns(relation, change.change.added)
        if not by_tasks(upserts, self.task_io_rows):
            return False
        path, schema = self.lake.results(relation), self.result_schema(relation)
        written = write_frame(path, upserts, schema, "append", commit, entries)
        self.result_rows[relation] = table_rows(path) if written is None else written.rows
        if self.async_mode:
            self._flagged[relation] = provisional
        return True

    def _arrow_change(self, relation: str, change: RelationChange) -> tuple[pa.Table, pa.Table]:
        schema = self.result_schema(relation)
        keys = self._table_keys(relation, change)
        key_schema = pa.schema([schema.field(c) for c in keys])
        if change.unchanged:
            return schema.empty_table(), key_schema.empty_table()  # no job to collect nothing
        if change.tables is not None:  # made in the driver: nothing to collect
            upserts, deletes = change.tables
            return _conformed(upserts, schema), _conformed(deletes.select(keys), key_schema)
        tagged = self._table_columns(relation, _tagged_union(change))
        both = _to_arrow(tagged, schema.append(pa.field(UPSERT, pa.bool_())))
        is_upsert = both.column(UPSERT)
        upserts = both.filter(is_upsert).drop_columns([UPSERT])
        deletes = both.filter(pc.invert(is_upsert)).select(keys)
        return upserts, deletes

    def _table_columns(self, relation: str, frame: DataFrame) -> DataFrame:
        return with_table_columns(frame, self.report.catalog[relation].result)

    def _table_keys(self, relation: str, change: RelationChange) -> list[str]:
        return list(table_keys(change.key_columns, self.report.catalog[relation].result))

    def _metadata(self, epoch: Epoch) -> dict[str, str] | None:
        if not self.async_mode:
            return None
        return {"fixflow.provisional": "true" if epoch.provisional else "false"}

    @staticmethod
    def _with_partial(
        metadata: dict[str, str] | None, epoch: Epoch, capped: frozenset[int]
    ) -> dict[str, str] | None:
        """A result commit's entries, with ``fixflow.partial`` when the relation depends
        on a stratum an iteration cap stopped (``Maintainer.partial``)."""
        entries = partial_metadata(
            (s.stratum, s.relations, s.cap, s.rounds) for s in epoch.partial if s.stratum in capped
        )
        return {**(metadata or {}), **entries} or None

    def _with_residual(
        self, metadata: dict[str, str] | None, relation: str, residuals: Mapping[str, float]
    ) -> dict[str, str] | None:
        converged = metadata is None or PARTIAL not in metadata
        entries = residual_entry(self.report, relation, residuals.get(relation), converged)
        return {**(metadata or {}), **entries} or None

    def _flag_unchanged(self, relation: str, epoch: Epoch) -> bool:
        return not self.async_mode or self._flagged.get(relation, False) == epoch.provisional

    def _commit_state(self, commit: BatchCommit | None, metadata: dict[str, str] | None) -> None:
        """``state/<relation>``: the pending deltas of every MRA relation (async)."""
        for relation in self.report.mra:
            rows = self._pending_rows(relation)
            if rows.num_rows == 0 and self._state_rows.get(relation) == 0:
                continue  # already committed empty: nothing to rewrite
            overwrite_rows(self.lake.state(relation), rows, commit, metadata)
            self._state_rows[relation] = rows.num_rows

    def _pending_rows(self, relation: str) -> pa.Table:
        entry = self.report.catalog[relation]
        keys = [entry.attributes[p] for p in entry.key_positions]
        assert entry.value_pos is not None, "MRA relations have an aggregated value"
        value = entry.attributes[entry.value_pos]
        schema = arrow_schema((*keys, value, replace(value, name="pending_delta")))
        state = self.maintainer.carried.pending.get(relation)
        if state is None:
            return schema.empty_table()
        rows = state.pending_rows().toDF(*entry.names, "pending_delta")
        frame = rows.select(*(a.name for a in keys), value.name, "pending_delta")
        return _to_arrow(frame, schema)


UPSERT = "#upsert"


def _tagged_union(change: RelationChange) -> DataFrame:
    """A change's upserts and deleted keys in one frame, to be collected in ONE job: deleted
    keys padded with nulls, every row tagged by ``UPSERT``."""
    upserts, deletes = change.change.frames
    types = dict(upserts.dtypes)
    padded = [
        F.col(c) if c in change.key_columns else F.lit(None).cast(types[c]).alias(c)
        for c in upserts.columns
    ]
    return upserts.withColumn(UPSERT, F.lit(True)).unionByName(
        deletes.select(*padded, F.lit(False).alias(UPSERT))
    )


def _to_arrow(frame: DataFrame, schema: pa.Schema) -> pa.Table:
    return _conformed(frame.toArrow(), schema)


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.table(
        {name: table.column(name).cast(schema.field(name).type) for name in schema.names},
        schema=schema,
    )
