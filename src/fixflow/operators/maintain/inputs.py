"""The EDB side of maintenance: loading the input relations, turning an epoch's
change (``Change``: facts inserted and deleted) into a net one, and the input relations' rows
after them, made in the driver, lazily, or on Spark, whichever costs fewest jobs."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from fixflow.checker.ast import TypeName
from fixflow.operators.change import Change
from fixflow.operators.core import (
    appended,
    compacted,
    extended,
    segments_full,
)
from fixflow.operators.driver.copies import ChangedSince
from fixflow.operators.driver.rows import empty_rows, to_frame
from fixflow.operators.engines.batches import Batch, table_rows
from fixflow.operators.engines.kernels import distinct_rows
from fixflow.operators.epoch import stored_delta
from fixflow.operators.evaluate import Input
from fixflow.operators.maintain.elastic import EdbChange
from fixflow.operators.maintain.setting import Setting
from fixflow.operators.materialize import checkpoint_rdds, reading_checkpoints_of
from fixflow.operators.placement import Outgrown
from fixflow.operators.relation import Relation, partition_bound, with_partition_bound
from fixflow.operators.spark_backend import join_on, positional, relation_struct, spark_type
from fixflow.operators.thresholds import CHAIN_ROWS, HANDOVER_ROWS

log = logging.getLogger(__name__)


class Inputs:
    """The input relations' sizes and how their rows changed since Spark last stored them;
    the rows themselves are the Maintainer's (``frames``), passed in."""

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        self.spark, self.catalog = setting.spark, setting.catalog
        self.materializer, self.copies = setting.materializer, setting.copies
        self.facts: dict[str, int] = {}
        """Per EDB relation, its number of facts."""
        self._changed_since: dict[str, ChangedSince] = {}
        """Per input relation stored lazily (``_changed_later``), its changes since the
        last rows Spark stored."""

    def load(self, edb: Mapping[str, Input]) -> dict[str, DataFrame]:
        """Every EDB relation's loaded rows, from ``edb`` by ``.input`` name (missing ones
        are empty)."""
        frames = {}
        for user, rel in self.setting.loaded().items():
            frames[rel], self.facts[rel] = self._loaded_input(rel, edb.get(user))
        return frames

    def change(
        self,
        relation: str,
        rows: DataFrame,
        change: Change[Input | None],
    ) -> tuple[DataFrame, Change[DataFrame]] | None:
        """The relation's rows (now ``rows``) after an epoch's ``change`` (facts inserted
        and deleted), and its net change as the strata read it; None when nothing
        changed."""
        delta = self._edb_delta(relation, rows, change)
        if delta.empty:
            return None
        self.facts[relation] += delta.n_added - delta.n_removed
        return self._changed(relation, rows, delta)

    def changes_of(self, changed: Mapping[str, Change[DataFrame]]) -> list[EdbChange]:
        """(relation, facts changed, facts before the epoch) of each changed EDB input
        (a lower stratum's change is not counted: its size before is not known)."""
        return [
            EdbChange(rel, d.n_added + d.n_removed, self.facts[rel] - d.n_added + d.n_removed)
            for rel, d in changed.items()
            if rel in self.facts
        ]

    def _loaded_input(self, relation: str, given: Input | None) -> tuple[DataFrame, int]:
        """An input relation's loaded rows (a set) and their number. When the driver keeps
        copies, an Arrow table of up to ``HANDOVER_ROWS`` rows, or a missing input (no
        rows), becomes a local relation (no job) whose rows it holds; anything else is
        stored on Spark (one job)."""
        copies, types = self.copies, self.catalog[relation].types
        small = given is None or (isinstance(given, pa.Table) and given.num_rows <= HANDOVER_ROWS)
        if small and copies is not None and types:
            rows = (
                distinct_rows(self._arrow_rows(relation, given))
                if isinstance(given, pa.Table)
                else empty_rows(types)
            )
            return copies.hold(to_frame(self.spark, rows, types), rows), rows.n
        positional_rows = self._positional_input(relation, given)
        frame, n = self.materializer.keep_counted(positional_rows.distinct())
        copy = None if copies is None else copies.held(positional_rows)
        if copy is not None and copies is not None:  # an Arrow input's rows
            frame = copies.hold(frame, distinct_rows(copy))
        return frame, n

    def _edb_delta(
        self,
        relation: str,
        current: DataFrame,
        change: Change[Input | None],
    ) -> Change[DataFrame]:
        added = self._positional_input(relation, change.added)
        removed = self._positional_input(relation, change.removed)
        if change.counted:  # net already: no job (the caller's rows are local)
            return Change(added, removed, change.counts, stored=False)
        columns = current.columns
        # A batch is small beside the relation: it is broadcast, so finding which of its
        # facts are present streams the relation once and shuffles nothing.
        if change.added is not None:  # no join with the whole relation for an absent side
            present = join_on(current, F.broadcast(added.distinct()), columns, "left_semi")
            added = join_on(added.distinct(), present, columns, "left_anti")
        if change.removed is not None:
            removed = join_on(current, F.broadcast(removed.distinct()), columns, "left_semi")
        return stored_delta(self.materializer, added, removed)

    def _changed(
        self, relation: str, rows: DataFrame, delta: Change[DataFrame]
    ) -> tuple[DataFrame, Change[DataFrame]]:
        """An input relation's rows after ``delta``, and the delta as the strata read it.
        When the driver holds a copy of the rows (a driver update read them), the change is
        applied to it too, and a small result is handed to Spark as a local relation (no
        job; ``thresholds.HANDOVER_ROWS``), a larger one stored by the first job that
        reads it (``_changed_later``); otherwise it is made on Spark. So are more than
        ``CHAIN_ROWS`` insertions alone: the lazy rows would store the whole relation
        again, where Spark appends the added rows as a segment, stored once (500k facts
        into a 500k-row EDB: 2.7 s of a backlog batch's 5.8 s ``maintain``)."""
        copy = self._copy_after(relation, rows, delta)
        many_insertions = not delta.n_removed and delta.n_added > CHAIN_ROWS
        if copy is not None and copy.n <= HANDOVER_ROWS:
            frame = to_frame(self.spark, copy, self.catalog[relation].types)
        elif copy is not None and not many_insertions:
            frame = self._changed_later(relation, rows, delta, copy.n)
        else:
            frame, delta = self._changed_on_spark(rows, delta)
        if copy is not None and self.copies is not None:
            frame = self.copies.hold(frame, copy)
        return frame, delta

    def _changed_on_spark(
        self, rows: DataFrame, delta: Change[DataFrame]
    ) -> tuple[DataFrame, Change[DataFrame]]:
        """Under insertions only, the added rows become a new segment (``core.extended``),
        and the delta's added rows are that segment: stored once, so a rule that only copies
        them needs no job of its own; the caller's net rows are stored by the first job that
        reads them (``keep_later``), so that an epoch that only copies them runs no job at
        all. Removed rows are left out by a broadcast anti join (no shuffle of the
        relation) and the result stored whole."""
        if not delta.n_removed:
            if not delta.stored and not segments_full(rows):
                segment = self.materializer.keep_later(compacted(delta.added), delta.n_added)
                delta = replace(delta, added=segment, stored=True)
            return extended(self.materializer, rows, delta.added, stored=delta.stored), delta
        return self.materializer.keep(_with_removals(rows, delta)), delta

    def _changed_later(
        self, relation: str, rows: DataFrame, delta: Change[DataFrame], n: int
    ) -> DataFrame:
        """The new rows (``n`` of them) stored by the first job that reads them: the driver
        holds their copy, so a stratum updated there needs no job for them (storing a 1M-row
        relation after a deletion took 1 s of a 2 s epoch), and one on Spark computes them
        from the last rows Spark stored and the changes since, broadcast (``ChangedSince``:
        one step deep, whatever the number of epochs). When those changes outgrow
        ``CHAIN_ROWS`` the rows are stored now (one job) and become the next base."""
        assert self.copies is not None
        types = self.catalog[relation].types
        since = self._changed_since.pop(relation, None)
        if since is None or since.latest is not rows:
            since = ChangedSince(rows, types)
        since.apply(self.copies.side(delta, True, types), self.copies.side(delta, False, types))
        spark = self.spark
        net = Change(
            to_frame(spark, since.added, types),
            to_frame(spark, since.removed, types),
            counts=(since.added.n, since.removed.n),
            stored=True,
        )
        if since.rows > CHAIN_ROWS:
            log.info("%s: %d changed rows since it was stored: stored again", relation, since.rows)
            return self.materializer.keep(_with_removals(since.base, net))
        since.latest = self._planned_when_read(since, net, n, types)
        self._changed_since[relation] = since
        return since.latest

    def _planned_when_read(
        self, since: ChangedSince, net: Change[DataFrame], n: int, types: Sequence[TypeName]
    ) -> DataFrame:
        """``since.base`` after ``net`` (``n`` rows), stored by the first job that reads it
        and planned only when Spark first needs it (a ``Relation``): when every stratum
        runs in the driver nothing reads it, and planning the anti join and its checkpoint
        was ~40 py4j calls, 0.3-0.8 s of an R-MAT 10M epoch. Until then it declares the
        base's blocks as the ones it reads, so the garbage collection keeps them; once
        made, the checkpoint it adds too. A base of segments is stored as one then
        (``_one_store``), not before: the first driver epoch after a bootstrap appended on
        Spark stored 10M rows for nothing (4 of its 4.8 s)."""
        materializer, base = self.materializer, since.base

        def make() -> DataFrame:
            since.base = self._one_store(since.base)
            later = materializer.keep_later(_with_removals(since.base, net), n)
            made = reading_checkpoints_of(later, later, since.base)
            frame.checkpoints = made.checkpoints
            return made

        frame = Relation.lazy(self.spark, make, relation_struct(types))
        return reading_checkpoints_of(frame, base)

    def _one_store(self, rows: DataFrame) -> DataFrame:
        """``rows`` stored as one, if they are segments (insertions appended on Spark,
        ``core.extended``): every read of the lazy rows is planned over their base, and
        over eight segments that planning took ~1.2 s of a 1M-edge deletion epoch (one job
        at the first read, once)."""
        return self.materializer.keep(rows) if len(checkpoint_rdds(rows)) > 1 else rows

    def _copy_after(self, relation: str, rows: DataFrame, delta: Change[DataFrame]) -> Batch | None:
        """The driver's copy of ``rows`` with ``delta`` applied, when it holds one."""
        copies = self.copies
        held = None if copies is None else copies.held(rows)
        if copies is None or held is None or held.n + delta.n_added > copies.limit:
            return None
        try:
            return copies.after(held, delta, self.catalog[relation].types)
        except Outgrown:  # a side of the change is larger than the copies' limit
            return None

    def _positional_input(self, relation: str, frame: Input | None) -> DataFrame:
        """``frame`` with exactly the relation's declared columns and types (empty if None),
        in positional columns."""
        attributes = self.catalog[relation].attributes
        if isinstance(frame, pa.Table):
            return self._arrow_input(relation, frame)
        if frame is None:
            fields = [
                StructField(positional(i), spark_type(a.type)) for i, a in enumerate(attributes)
            ]
            return self.spark.createDataFrame([], StructType(fields))
        return frame.select(
            *(
                F.col(a.name).cast(spark_type(a.type)).alias(positional(i))
                for i, a in enumerate(attributes)
            )
        )

    def _arrow_input(self, relation: str, table: pa.Table) -> DataFrame:
        """An Arrow table's rows (declared columns) as a local relation in positional
        columns; the driver keeps their copy (``DriverCopies``), so a driver update reads
        the epoch's changes without collecting them."""
        batch = self._arrow_rows(relation, table)
        frame = to_frame(self.spark, batch, self.catalog[relation].types)
        return frame if self.copies is None else self.copies.hold(frame, batch)

    def _arrow_rows(self, relation: str, table: pa.Table) -> Batch:
        """An Arrow table's declared columns as driver rows (positional, declared types)."""
        attributes = self.catalog[relation].attributes
        return table_rows(table.select([a.name for a in attributes]), [a.type for a in attributes])


def _with_removals(rows: DataFrame, delta: Change[DataFrame]) -> DataFrame:
    """``rows`` after ``delta`` (not stored): the removed rows left out by a broadcast anti
    join (no shuffle of the relation), the added ones appended."""
    kept = join_on(rows, F.broadcast(delta.removed), rows.columns, "left_anti")
    kept = kept.select(*rows.columns)
    # A broadcast anti join keeps the partitions of ``rows``: said, ``appended`` need not
    # plan the join to count them (0.57 s of a 1M-edge deletion epoch).
    return appended(with_partition_bound(kept, partition_bound(rows)), delta.added)
