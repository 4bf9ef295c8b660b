"""``Relation``: driver rows handed to Spark as a frame that is made only when Spark first
needs it, and that is then the frame it stands for."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

from fixflow.operators.change import Change
from fixflow.operators.core import bounded
from fixflow.operators.driver.copies import DriverCopies
from fixflow.operators.driver.rows import arrow_frame, to_frame
from fixflow.operators.engines.batches import Batch
from fixflow.operators.maintain.publish import RelationChange
from fixflow.operators.materialize import (
    Materializer,
    checkpoint_rdds,
    live_rdds,
    reading_checkpoints_of,
)
from fixflow.operators.relation import Relation, deferred, partition_bound, renamed


def _rows() -> Batch:
    return Batch(
        3,
        {"c0": np.array([1, 2, 3]), "c1": np.array([0.5, 1.5, 2.5])},
        valid={"c1": np.array([True, False, True])},
    )


def test_schema_and_columns_do_not_make_the_frame(spark: Any) -> None:
    frame = to_frame(spark, _rows(), ["number", "float"])
    assert isinstance(frame, Relation) and not frame.made
    assert frame.columns == ["c0", "c1"]
    assert [f.dataType.simpleString() for f in frame.schema] == ["bigint", "double"]
    assert live_rdds([frame]) == set()  # the garbage collection's walk
    assert not frame.made


def test_a_plan_on_it_makes_it_once_with_the_eager_frames_rows(spark: Any) -> None:
    frame = to_frame(spark, _rows(), ["number", "float"])
    eager = spark.createDataFrame([(1, 0.5), (2, None), (3, 2.5)], frame.schema)
    joined = frame.join(eager, ["c0"]).select("c0")
    assert frame.made
    assert sorted(r.c0 for r in joined.collect()) == [1, 2, 3]
    assert sorted(frame.collect()) == sorted(eager.collect())
    assert frame.schema == eager.schema
    assert frame.exceptAll(eager).count() == 0


def test_derived_frames_stay_unmade_until_read(spark: Any) -> None:
    frame = arrow_frame(spark, pa.table({"a": [1, 2, 2], "b": ["x", "y", "z"]}))
    named = renamed(frame, ["k", "v"])
    keys = deferred(named, lambda f: f.select("k").distinct(), StructType([named.schema["k"]]))
    assert not any(isinstance(f, Relation) and f.made for f in (frame, named, keys))
    assert named.columns == ["k", "v"] and keys.columns == ["k"]
    assert sorted(r.k for r in keys.collect()) == [1, 2]
    assert frame.made and named.made  # made on the way
    # Of a frame already made, they are the plain transformations.
    assert not isinstance(renamed(frame, ["p", "q"]), Relation)
    assert renamed(frame, ["p", "q"]).columns == ["p", "q"]


def test_a_failing_make_is_an_error_not_a_column_lookup(spark: Any) -> None:
    def fail() -> Any:
        raise AttributeError("boom")

    frame = Relation.lazy(spark, fail, to_frame(spark, _rows(), ["number", "float"]).schema)
    with pytest.raises(RuntimeError, match="boom"):
        frame.count()
    with pytest.raises(RuntimeError, match="failed to be made before"):
        frame.count()


def test_of_gives_a_plain_frame_the_fields_without_making_or_copying(spark: Any) -> None:
    plain = spark.range(5)
    relation = Relation.of(plain)
    assert relation._jdf is plain._jdf and relation.checkpoints is None
    assert Relation.of(relation) is relation
    lazy = to_frame(spark, _rows(), ["number", "float"])
    assert Relation.of(lazy) is lazy and not lazy.made


def test_a_store_knows_its_checkpoint_and_a_projection_is_told_it(spark: Any) -> None:
    stored = Materializer(spark).keep(spark.range(10).toDF("c0"))
    assert isinstance(stored, Relation) and stored.checkpoints is not None
    (rdd,) = checkpoint_rdds(stored)
    projection = reading_checkpoints_of(stored.select((stored.c0 * 2).alias("c0")), stored)
    assert [r.id() for r in checkpoint_rdds(projection)] == [rdd.id()]
    assert sorted(r.c0 for r in projection.collect()) == list(range(0, 20, 2))


def test_a_bounded_frame_carries_its_bound(spark: Any) -> None:
    wide = spark.range(0, 100, numPartitions=8)
    assert partition_bound(wide) is None
    kept = bounded(wide.union(wide), wide)
    assert partition_bound(kept) == max(8, spark.sparkContext.defaultParallelism)
    assert kept.rdd.getNumPartitions() <= partition_bound(kept)


def test_driver_rows_live_on_the_relation(spark: Any) -> None:
    """``DriverCopies`` keeps the rows it made or collected on the frame: a plain frame
    becomes a ``Relation`` of the same Spark frame, and a frame without them holds none."""
    copies = DriverCopies(limit=10)
    plain = spark.createDataFrame([(1, 0.5), (2, 1.5)], "c0 long, c1 double")
    assert copies.held(plain) is None
    held = copies.hold(plain, _rows())
    assert held._jdf is plain._jdf and copies.held(held) is not None
    assert copies.hold(held, _rows()) is held
    collected = Relation.of(spark.createDataFrame([(7, 0.5)], "c0 long, c1 double"))
    batch = copies.rows(collected, ["number", "float"])
    assert copies.held(collected) is batch and batch.n == 1


def test_a_change_made_of_arrow_tables_hands_them_to_the_commit(spark: Any) -> None:
    upserts, deletes = pa.table({"a": [1, 2]}), pa.table({"a": [3]})
    made = Change(arrow_frame(spark, upserts), arrow_frame(spark, deletes))
    change = RelationChange("r", ("a",), made)
    assert change.tables == (upserts, deletes)
    assert not any(f.made for f in (change.change.added, change.change.removed))  # type: ignore[attr-defined]
    on_spark = RelationChange(
        "r", ("a",), Change(spark.range(1).toDF("a"), spark.range(0).toDF("a"))
    )
    assert on_spark.tables is None
