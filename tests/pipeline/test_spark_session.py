"""The SparkSession Fixflow builds (``fixflow.pipeline.spark.make_session``)."""

from __future__ import annotations

from typing import Any

from pyspark.errors.utils import is_debugging_enabled


def test_dataframe_debugging_is_off(spark: Any) -> None:
    """PySpark's DataFrame debugging records the call site of every Column function over
    py4j; rounds build many columns, so it must be off (PySpark reads it once per process)."""
    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    spark.range(1).select("id").collect()
    assert is_debugging_enabled() is False
