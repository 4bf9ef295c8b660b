"""A relation's rows as Spark sees them, with what Fixflow knows of them that Spark keeps
nowhere: ``Relation``, a Spark DataFrame (every Spark-side strategy takes it as one) that

- **may be made only when Spark first needs it** (``Relation.lazy``): the driver path
  (``operators.driver``) hands Spark a frame of every relation it changes, for the case that
  a later stratum, a fallback or a caller reads it there. Making a local relation from
  driver rows is a py4j round trip and a copy of the rows into the JVM (~35 ms for 100k
  rows), and most of these frames are never read: eight of them were 0.27 s of the SSSP
  stream's 0.36 s bootstrap;
- **carries the checkpoints its plan reads** (``checkpoints``, kept by ``materialize``): a
  segmented relation's plan is walked for them at every epoch by the garbage collection,
  three or four py4j calls a plan node, so the answer is kept once found or declared;
- **carries its partition bound** (``partition_bound``, kept by ``core.bounded``): a
  relation extended every epoch is bounded without planning it again (two planning round
  trips, ~0.1 s, per relation and epoch);
- **carries its driver rows** when the driver made or read them (``batch``, kept by
  ``driver.copies.DriverCopies``; ``table`` for rows given as Arrow): a driver stratum or
  update, or the result commit, reads them instead of collecting the frame (a job).

A DataFrame's plan never changes, so neither do these facts; they are fields of the frame,
not entries of a cache beside it. ``Relation.of`` gives a plain frame the fields (the same
JVM frame, no py4j call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from py4j.java_gateway import JavaObject
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame
from pyspark.sql.types import StructField, StructType

from fixflow.operators.on_demand import real_session

if TYPE_CHECKING:
    from fixflow.operators.engines.batches import Batch

Checkpoint = tuple[int, JavaObject]
"""A stored RDD under a plan: its id and the RDD."""


def renamed(frame: DataFrame, names: Sequence[str]) -> DataFrame:
    """``frame.toDF(*names)``, left unmade while ``frame`` is an unmade ``Relation``."""
    if not isinstance(frame, Relation) or frame.made:
        return frame.toDF(*names)
    schema = StructType(
        [StructField(n, f.dataType, f.nullable) for n, f in zip(names, frame.schema, strict=True)]
    )
    return Relation.lazy(frame.sparkSession, lambda: frame.toDF(*names), schema)


def deferred(
    frame: DataFrame, make: Callable[[DataFrame], DataFrame], schema: StructType
) -> DataFrame:
    """``make(frame)`` (of ``schema``), left unmade while ``frame`` is an unmade
    ``Relation``."""
    if not isinstance(frame, Relation) or frame.made:
        return make(frame)
    return Relation.lazy(frame.sparkSession, lambda: make(frame), schema)


class Relation(ClassicFrame):
    """A Spark frame with the facts Fixflow keeps of it (see the module).

    An unmade one (``lazy``) is made of driver rows or derived from an unmade one
    (``renamed``, ``deferred``), so its plan holds no checkpoint: the garbage collection's
    walk leaves it unmade (``materialize._checkpoints``). Made, it is the frame it stood
    for, and keeps its driver rows."""

    def __new__(cls, *_args: object, **_kwargs: object) -> Relation:
        return object.__new__(cls)  # the classic frame's __new__ takes a JVM frame

    def __init__(
        self,
        spark: SparkSession,
        *,
        make: Callable[[], DataFrame] | None = None,
        made: JavaObject | None = None,
        schema: StructType | None = None,
    ) -> None:
        # DataFrame.__init__ sets _jdf, a property here; these are the attributes it sets
        # besides.
        self._session = real_session(spark)  # the object itself, not an on-demand stand-in
        self._sc = self._session._sc
        self.is_cached = False
        self._support_repr_html = False
        self._make = make
        self._made = made
        if schema is not None:
            self.__dict__["schema"] = schema  # DataFrame.schema is a cached_property
        self.checkpoints: tuple[Checkpoint, ...] | None = None
        """The stored RDDs its plan reads, once walked or declared; of an unmade relation,
        the ones it will read (``materialize.reading_checkpoints_of``)."""
        self.partition_bound: int | None = None
        """No more partitions than this (``core.bounded``), when known."""
        self.batch: Batch | None = None
        """Its rows in the driver (positional columns), when the driver made or read them."""
        self.table: pa.Table | None = None
        """Its rows as the Arrow table it was made of (``driver.rows.arrow_frame``)."""

    @classmethod
    def lazy(
        cls, spark: SparkSession, make: Callable[[], DataFrame], schema: StructType
    ) -> Relation:
        """The frame ``make`` returns, of ``schema``, made when Spark first needs it."""
        return cls(spark, make=make, schema=schema)

    @classmethod
    def of(cls, frame: DataFrame) -> Relation:
        """``frame`` with the fields: itself if it is a ``Relation``, else the same JVM
        frame (an unmade relation is not made)."""
        if isinstance(frame, Relation):
            return frame
        relation = cls(frame.sparkSession, made=frame._jdf)
        relation.is_cached = frame.is_cached
        return relation

    @property
    def made(self) -> bool:
        return self._made is not None

    @property
    def _jdf(self) -> JavaObject:
        if self._made is None:
            make, self._make = self._make, None  # the rows are the JVM's from now on
            if make is None:
                raise RuntimeError("a lazy frame failed to be made before")
            try:
                self._made = make()._jdf
            except AttributeError as error:
                # DataFrame.__getattr__ would take it for a column name and recurse here.
                raise RuntimeError(f"making a lazy frame failed: {error}") from error
        return self._made


def partition_bound(frame: DataFrame) -> int | None:
    """``frame``'s partition bound, when it is known (``core.bounded``)."""
    return frame.partition_bound if isinstance(frame, Relation) else None


def with_partition_bound(frame: DataFrame, bound: int | None) -> DataFrame:
    """``frame``, known to have at most ``bound`` partitions (unchanged when None)."""
    if bound is None:
        return frame
    relation = Relation.of(frame)
    relation.partition_bound = bound
    return relation


def arrow_table(frame: DataFrame) -> pa.Table | None:
    """The Arrow table ``frame`` was made of, when it was (``driver.rows.arrow_frame``)."""
    return frame.table if isinstance(frame, Relation) else None
