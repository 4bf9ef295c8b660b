"""Stored frames and segmented relations (``fixflow.operators.materialize``)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from fixflow.operators.core import extended
from fixflow.operators.materialize import Materializer, checkpoint_rdds, live_rdds
from fixflow.operators.relation import Relation

from .helpers import py4j_commands


def test_a_segmented_relation_is_never_walked(spark: SparkSession) -> None:
    """The checkpoints under a segmented relation are known from its segments (walking its
    plan costs py4j calls that grow with the segments), and the garbage collection of every
    epoch asks for them: it must cost no call, and name what a walk of the plan finds."""
    materializer = Materializer(spark)
    rows = materializer.keep(spark.range(3).toDF("c0"))
    for start in (10, 20, 30):
        rows = extended(materializer, rows, spark.range(start, start + 2).toDF("c0"))
    with py4j_commands(spark) as sent:
        live = live_rdds([rows])
    assert sent == []
    walked = Relation.of(DataFrame(rows._jdf, spark))  # the same plan, nothing known of it
    assert live == live_rdds([walked]) and len(checkpoint_rdds(walked)) == 4
    with py4j_commands(spark) as sent:
        assert live_rdds([walked]) == live  # walked once, then kept on the relation
    assert sent == []
    assert sorted(r[0] for r in rows.collect()) == [0, 1, 2, 10, 11, 20, 21, 30, 31]
