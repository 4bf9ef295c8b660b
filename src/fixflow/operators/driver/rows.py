"""The driver backend's rows: Spark frames ⇄ numpy batches in positional columns (``c0..``)
and Arrow tables. A batch handed to Spark is a local relation made when Spark first reads it
(``Relation``); a frame is collected as rows when it is a local relation (no job), else through
Arrow."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from fixflow.checker.ast import TypeName
from fixflow.operators.engines.batches import ARROW_TYPES, NUMPY_TYPES, Batch, table_rows
from fixflow.operators.relation import Relation
from fixflow.operators.spark_backend import relation_struct

# ---------------------------------------------------------------- conversions


def local_rows(frame: DataFrame, limit: int) -> Batch | None:
    """``frame``'s rows as a batch in positional columns when they are at most ``limit``;
    else None. A local relation is collected as rows, without a job; any other frame costs
    one, which reads at most ``limit + 1`` rows through Arrow (``toArrow``: a million rows
    in ~0.5 s, where ``collect()`` made Python rows of them in ~4 s)."""
    if limit <= 0:
        return None
    if frame.isLocal() or not frame.columns:  # a nullary relation: nothing for Arrow
        return _collected_rows(frame, limit)
    table = frame.limit(limit + 1).toArrow()
    if table.num_rows > limit:
        return None
    return table_rows(table, [_type_of(f.dataType.simpleString()) for f in frame.schema.fields])


def _collected_rows(frame: DataFrame, limit: int) -> Batch | None:
    rows = frame.limit(limit + 1).collect()
    if len(rows) > limit:
        return None
    batch = Batch(len(rows))
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(frame.columns)
    for i, (values, field) in enumerate(zip(columns, frame.schema.fields, strict=True)):
        type_ = _type_of(field.dataType.simpleString())
        present = np.fromiter((v is not None for v in values), dtype=bool, count=len(rows))
        filler = "" if type_ == "symbol" else 0
        filled = [v if v is not None else filler for v in values]
        batch.cols[f"c{i}"] = np.array(filled, dtype=NUMPY_TYPES[type_])
        if not present.all():
            batch.valid[f"c{i}"] = present
    return batch


SPARK_TYPES: dict[str, TypeName] = {"bigint": "number", "double": "float", "string": "symbol"}


def _type_of(spark_type: str) -> TypeName:
    return SPARK_TYPES[spark_type]


def to_table(batch: Batch, types: Sequence[TypeName]) -> pa.Table:
    """A batch in positional columns as an Arrow table (``c0..``; no columns for a nullary
    relation, whose rows are empty tuples: then ``num_rows`` is 0 or 1)."""
    arrays = []
    for i, type_ in enumerate(types):
        valid = batch.valid.get(f"c{i}")
        mask = None if valid is None else ~valid
        arrays.append(pa.array(batch.cols[f"c{i}"], type=ARROW_TYPES[type_], mask=mask))
    if not types:
        return pa.table({"#": pa.nulls(batch.n)}).select([])
    return pa.table(arrays, names=[f"c{i}" for i in range(len(types))])


def to_frame(spark: SparkSession, batch: Batch, types: Sequence[TypeName]) -> DataFrame:
    """A batch in positional columns as a Spark local relation (no job), made when Spark
    first reads it (``Relation``)."""
    if not types:  # a nullary relation: its rows are empty tuples
        return spark.range(batch.n).select()
    struct = relation_struct(types)
    return Relation.lazy(
        spark, lambda: spark.createDataFrame(to_table(batch, types), struct), struct
    )


def arrow_frame(spark: SparkSession, table: pa.Table) -> DataFrame:
    """An Arrow table as a Spark local relation, made when Spark first reads it; the
    relation keeps the table (``relation.arrow_table``)."""
    relation = Relation.lazy(
        spark, lambda: spark.createDataFrame(table), from_arrow_schema(table.schema)
    )
    relation.table = table
    return relation


def empty_rows(types: Sequence[TypeName]) -> Batch:
    """No rows, in positional columns of ``types``."""
    return Batch(0, {f"c{i}": np.zeros(0, NUMPY_TYPES[t]) for i, t in enumerate(types)})
