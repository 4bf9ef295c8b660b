"""Nullary relations under incremental maintenance: a nullary relation that starts and stops
holding, inside recursion (``set`` strata: semi-naive inserts, DRed deletions) and outside
(affected groups), equals the oracle after every epoch. Spark's EXCEPT of frames without
columns keeps the left rows whatever the right holds, and its joins take no empty column
list: both are worked around in ``spark_backend.minus`` / ``spark_backend.join_on``."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from fixflow.operators.spark_backend import cross_join, join_on, minus

from .test_maintain import run_epochs, strategies

RECURSIVE = (
    Path(__file__).resolve().parents[1] / "souffle" / "nullary_recursive" / "program.dl"
).read_text()

FLAG = """
.decl e(x: number, y: number)
.input e
.decl q()
.output q
q() :- e(1, _).
.decl r(y: number)
.output r
r(y) :- q(), e(_, y).
"""


def test_frames_without_columns(spark: SparkSession) -> None:
    one, none = spark.range(2).select(), spark.range(0).select()
    assert one.subtract(one).count() == 1  # Spark's EXCEPT, which ``minus`` avoids
    assert [minus(a, b).count() for a, b in [(one, none), (one, one), (none, one)]] == [1, 0, 0]
    assert join_on(one, none, [], "left_anti").count() == 2
    assert join_on(one, one, [], "left_semi").count() == 2
    edges = spark.range(3)
    assert cross_join(edges, one).count() == 3 and cross_join(none, edges).count() == 0


def test_a_nullary_relation_starts_and_stops_holding(spark: SparkSession) -> None:
    epochs = run_epochs(
        spark,
        FLAG,
        {"e": [(2, 3)]},
        [({"e": [(1, 2)]}, {}), ({}, {"e": [(1, 2)]}), ({"e": [(1, 5)]}, {"e": [(2, 3)]})],
    )
    assert len(epochs) == 3


def test_nullary_relations_in_recursion(spark: SparkSession) -> None:
    """hit() holds once 4 is reached and stops when the path to 4 is cut (DRed)."""
    epochs = run_epochs(
        spark,
        RECURSIVE,
        {"e": [(1, 2), (4, 5), (7, 9)]},
        [({"e": [(2, 4)]}, {}), ({}, {"e": [(2, 4)]}), ({"e": [(1, 4), (5, 6)]}, {})],
    )
    assert strategies(epochs[0])["hit"] == "update:seminaive"
    assert strategies(epochs[1])["hit"] == "update:dred"
