"""The SparkSession Fixflow builds (``fixflow.pipeline.spark.make_session``)."""

from __future__ import annotations

from typing import Any

from pyspark.errors.utils import is_debugging_enabled
from pyspark.sql import functions as F


def test_dataframe_debugging_is_off(spark: Any) -> None:
    """PySpark's DataFrame debugging records the call site of every Column function over
    py4j; rounds build many columns, so it must be off (PySpark reads it once per process)."""
    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    spark.range(1).select("id").collect()
    assert is_debugging_enabled() is False


def test_class_and_method_lookups_are_asked_of_the_jvm_once(spark: Any) -> None:
    """``jvm_lookups``: a Column function resolves its class and method over py4j once per
    gateway, not at every call; static fields are still read from the JVM every time."""
    connection = spark.sparkContext._gateway._gateway_client
    sent: list[str] = []
    original = type(connection).send_command

    def counting(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(command[:2])
        return original(self, command, *args, **kwargs)

    jvm = spark.sparkContext._jvm
    F.coalesce(F.col("a"), F.lit(1))  # the lookups happen here, at most
    assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    type(connection).send_command = counting
    try:
        column = F.coalesce(F.col("a"), F.lit(1))
        maximum = jvm.java.lang.Integer.MAX_VALUE
    finally:
        type(connection).send_command = original
    # coalesce, col, lit and the package `java`: remembered; `lang`, `Integer` (a walk down
    # a package is not remembered) and the static field MAX_VALUE: asked every time.
    assert sent.count("r\n") == 3, sent
    assert maximum == 2**31 - 1
    assert str(column) == "Column<'coalesce(a, 1)'>"
