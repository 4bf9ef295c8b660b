"""The driver's copies of Spark frames (``DriverCopies``): the rows of every frame a driver
stratum or update made or read, kept on the frame (``Relation.batch``), so that the next
epoch finds them without a Spark job and they go when the frame goes; the net change of an
input since Spark last stored it (``ChangedSince``); witnessed rows handed to Spark
(``hand_over``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructField, StructType

from fixflow.checker.ast import TypeName
from fixflow.operators.change import Change
from fixflow.operators.driver.rows import empty_rows, local_rows, to_frame, to_table
from fixflow.operators.engines.batches import Batch, concat, table_rows
from fixflow.operators.engines.joins import JoinIndex, anti_join
from fixflow.operators.materialize import Materializer
from fixflow.operators.placement import Outgrown
from fixflow.operators.relation import Relation, deferred
from fixflow.operators.spark_backend import relation_struct, spark_type
from fixflow.operators.thresholds import COLLECT_AS_ROWS, HANDOVER_ROWS

# ---------------------------------------------------------------- the driver's copies


class DriverCopies:
    """Rows of Spark frames held in the driver, on the frames (``Relation.batch``): the
    frames a driver update made (local relations) and the inputs it read. ``rows``
    collects a frame that holds none (one job) when it has at most ``limit`` rows."""

    def __init__(self, limit: int, materializer: Materializer | None = None) -> None:
        self.limit = limit
        self.materializer = materializer
        """Counts the collects that may run a Spark job (``Materializer.jobs``)."""

    @staticmethod
    def held(frame: DataFrame) -> Batch | None:
        return frame.batch if isinstance(frame, Relation) else None

    @staticmethod
    def hold(frame: DataFrame, batch: Batch) -> Relation:
        """``frame`` holding ``batch`` as its driver rows: ``frame`` itself when it is a
        ``Relation``, else the same Spark frame as one (which the caller keeps)."""
        relation = Relation.of(frame)
        relation.batch = batch
        return relation

    @staticmethod
    def keep_on(frame: DataFrame, batch: Batch) -> None:
        """``batch`` kept as ``frame``'s driver rows when ``frame`` is a ``Relation`` (a
        plain frame cannot keep them: its rows are collected again when asked for)."""
        if isinstance(frame, Relation):
            frame.batch = batch

    def rows(self, frame: DataFrame, types: Sequence[TypeName], count: int | None = None) -> Batch:
        """``frame``'s rows (columns ``c0..`` cast to ``types``); ``Outgrown`` when it has
        more than ``limit``. ``count``: its rows when known (few are collected as
        rows, which needs no job for a local relation; Arrow always runs one). A
        ``Relation`` keeps them."""
        found = self.held(frame)
        if found is not None:
            return found
        if self.materializer is not None and not frame.isLocal():
            self.materializer.jobs += 1
        if count is not None and count <= COLLECT_AS_ROWS:
            batch = local_rows(frame, COLLECT_AS_ROWS)
            assert batch is not None
        else:
            table = frame.limit(self.limit + 1).toArrow()
            if table.num_rows > self.limit:
                raise Outgrown(f"a frame it reads holds more than {self.limit} rows")
            batch = table_rows(table, types)
        self.keep_on(frame, batch)
        return batch

    def after(self, rows: Batch, delta: Change[DataFrame], types: Sequence[TypeName]) -> Batch:
        """``rows`` with ``delta`` (net: added rows absent, removed ones present) applied."""
        return _applied(rows, self.side(delta, True, types), self.side(delta, False, types))

    def before(self, rows: Batch, delta: Change[DataFrame], types: Sequence[TypeName]) -> Batch:
        """``rows`` with ``delta`` undone."""
        return _applied(rows, self.side(delta, False, types), self.side(delta, True, types))

    def side(self, delta: Change[DataFrame], added: bool, types: Sequence[TypeName]) -> Batch:
        """``delta``'s added (or removed) rows."""
        frame, n = (delta.added, delta.n_added) if added else (delta.removed, delta.n_removed)
        if n == 0:  # nothing to collect
            return empty_rows(types)
        return self.rows(frame, types, n)

    def delta(
        self, spark: SparkSession, before: Batch, after: Batch, types: Sequence[TypeName]
    ) -> Change[DataFrame]:
        """The change from ``before`` to ``after`` (two sets of rows) as local relations,
        held: no job, and the result commit reads it as Arrow (``_change_tables``)."""
        columns = tuple(before.cols)
        added, removed = anti_join(after, before, columns), anti_join(before, after, columns)
        return Change(
            self.hold(to_frame(spark, added, types), added),
            self.hold(to_frame(spark, removed, types), removed),
            counts=(added.n, removed.n),
            stored=True,
        )


class ChangedSince:
    """The net change of a relation since ``base`` (rows Spark stored), held in the driver:
    ``base`` minus ``removed`` plus ``added`` is the relation now. ``latest`` is the frame
    made from them last (``Maintainer._changed_later``): the next epoch continues the
    chain only from it."""

    def __init__(self, base: DataFrame, types: Sequence[TypeName]) -> None:
        self.base = self.latest = base
        self.added = self.removed = empty_rows(types)

    def apply(self, added: Batch, removed: Batch) -> None:
        """One more net change (its added rows absent, its removed ones present). A base
        row removed and added again stays in both, which still counts it once."""
        columns = tuple(self.added.cols)
        self.added = concat([anti_join(self.added, removed, columns), added])
        self.removed = concat([self.removed, removed])

    @property
    def rows(self) -> int:
        return self.added.n + self.removed.n


def hand_over(
    spark: SparkSession,
    types: Sequence[TypeName],
    key_types: Sequence[TypeName],
    witnessed: Batch,
    copies: DriverCopies,
    materializer: Materializer | None = None,
) -> tuple[DataFrame, DataFrame]:
    """Witnessed rows made in the driver (``stratum.witnessed_rows``) as Spark frames: the
    rows with their witness ``w0..`` and the rows alone (a projection of them), both held by
    ``copies``. A local relation up to ``HANDOVER_ROWS``; a larger one is stored through
    ``materializer`` (one job) when one is given."""
    columns = [f"c{i}" for i in range(len(types))]
    names = [*columns, *(f"w{j}" for j in range(len(key_types)))]
    struct = _witnessed_struct(types, key_types)
    frame: DataFrame = Relation.lazy(
        spark,
        lambda: spark.createDataFrame(
            to_table(witnessed, [*types, *key_types]).rename_columns(names), struct
        ),
        struct,
    )
    if materializer is not None and witnessed.n > HANDOVER_ROWS:
        frame = materializer.keep(frame)
    frame = copies.hold(frame, witnessed)
    rows = deferred(frame, lambda f: f.select(*columns), relation_struct(types))
    # A later stratum reads the rows alone.
    return frame, copies.hold(rows, plain_rows(witnessed, columns))


def _applied(rows: Batch, added: Batch, removed: Batch) -> Batch:
    columns = tuple(rows.cols)
    if not columns:
        return added
    if removed.n == 0 or rows.n == 0:
        return concat([rows, added])
    nullable = {*rows.valid, *removed.valid}
    gone_rows = _identity(removed, nullable)
    on = tuple(gone_rows.cols)
    gone = JoinIndex.build(gone_rows, on).matches(_identity(rows, nullable), on)
    return concat([rows.take(np.flatnonzero(~gone)), added])


def _identity(rows: Batch, nullable: set[str]) -> Batch:
    """``rows`` as values that compare equal when the rows are the same row: a null is a
    filler plus a flag (a row with a null is removed by that same row, as Spark's EXCEPT
    does; a join key never matches a null)."""
    out = Batch(rows.n)
    for name, values in rows.cols.items():
        if name not in nullable:
            out.cols[name] = values
            continue
        valid = rows.valid.get(name, np.ones(rows.n, dtype=bool))
        filler = "" if values.dtype == object else values.dtype.type(0)
        out.cols[name] = np.where(valid, values, filler).astype(values.dtype)
        out.cols[f"{name}#null"] = ~valid
    return out


def plain_rows(rows: Batch, columns: Sequence[str]) -> Batch:
    return Batch(
        rows.n,
        {c: rows.cols[c] for c in columns},
        {c: v for c, v in rows.valid.items() if c in columns},
    )


def _witnessed_struct(types: Sequence[TypeName], key_types: Sequence[TypeName]) -> StructType:
    fields = list(relation_struct(types).fields)
    fields += [StructField(f"w{j}", spark_type(t)) for j, t in enumerate(key_types)]
    return StructType(fields)
