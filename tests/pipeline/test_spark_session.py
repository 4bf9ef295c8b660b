"""The SparkSession Fixflow builds (``fixflow.pipeline.spark.make_session``)."""

from __future__ import annotations

from typing import Any

from pyspark.errors.utils import is_debugging_enabled
from pyspark.sql import functions as F

from operators.helpers import py4j_commands


def test_dataframe_debugging_is_off(spark: Any) -> None:
    """PySpark's DataFrame debugging records the call site of every Column function over
    py4j; rounds build many columns, so it must be off (PySpark reads it once per process)."""
    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    spark.range(1).select("id").collect()
    assert is_debugging_enabled() is False


def test_class_and_method_lookups_are_asked_of_the_jvm_once(spark: Any) -> None:
    """``jvm_lookups``: a Column function resolves its class and method over py4j once per
    gateway, not at every call; static fields are still read from the JVM every time."""
    jvm = spark.sparkContext._jvm
    F.coalesce(F.col("a"), F.lit(1))  # the lookups happen here, at most
    assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    with py4j_commands(spark) as commands:
        column = F.coalesce(F.col("a"), F.lit(1))
        maximum = jvm.java.lang.Integer.MAX_VALUE
    sent = [command[:2] for command in commands]
    # coalesce, col, lit and the package `java`: remembered; `lang`, `Integer` (a walk down
    # a package is not remembered) and the static field MAX_VALUE: asked every time.
    assert sent.count("r\n") == 3, sent
    assert maximum == 2**31 - 1
    assert str(column) == "Column<'coalesce(a, 1)'>"
