"""Spark frames made only when Spark first needs them.

The driver path (``operators.driver``) hands Spark a frame of every relation it
changes, for the case that a later stratum, a fallback or a caller reads it there. Making a
local relation from driver rows is a py4j round trip and a copy of the rows into the JVM
(~35 ms for 100k rows), and most of these frames are never read: eight of them were 0.27 s
of the SSSP stream's 0.36 s bootstrap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from py4j.java_gateway import JavaObject
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame
from pyspark.sql.types import StructField, StructType

from fixflow.operators.on_demand import real_session


def renamed(frame: DataFrame, names: Sequence[str]) -> DataFrame:
    """``frame.toDF(*names)``, left unmade while ``frame`` is an unmade ``LazyFrame``."""
    if not isinstance(frame, LazyFrame) or frame.made:
        return frame.toDF(*names)
    schema = StructType(
        [StructField(n, f.dataType, f.nullable) for n, f in zip(names, frame.schema, strict=True)]
    )
    return LazyFrame(frame.sparkSession, lambda: frame.toDF(*names), schema)


def deferred(
    frame: DataFrame, make: Callable[[DataFrame], DataFrame], schema: StructType
) -> DataFrame:
    """``make(frame)`` (of ``schema``), left unmade while ``frame`` is an unmade
    ``LazyFrame``."""
    if not isinstance(frame, LazyFrame) or frame.made:
        return make(frame)
    return LazyFrame(frame.sparkSession, lambda: make(frame), schema)


class LazyFrame(ClassicFrame):
    """A Spark frame made only when Spark first needs it (a job, a plan built on it,
    ``isLocal``): its schema is known without it.

    It is made of driver rows (a local relation) or derived from an unmade one
    (``renamed``, ``deferred``), so its plan holds no checkpoint: the garbage collection's
    walk leaves it unmade (``materialize._checkpoints``). The object is the frame, so
    ``DriverCopies`` (keyed by frame identity) holds it before and after it is made."""

    def __new__(cls, *_args: object) -> LazyFrame:
        return object.__new__(cls)  # the classic frame's __new__ takes a JVM frame

    def __init__(
        self, spark: SparkSession, make: Callable[[], DataFrame], schema: StructType
    ) -> None:
        # DataFrame.__init__ needs the JVM frame; these are the attributes it sets besides.
        self._session = real_session(spark)  # the object itself, not an on-demand stand-in
        self._sc = self._session._sc
        self.is_cached = False
        self._support_repr_html = False
        self._make: Callable[[], DataFrame] | None = make
        self._made: JavaObject | None = None
        self.__dict__["schema"] = schema  # DataFrame.schema is a cached_property

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
