"""Building the SparkSession every Fixflow command and test uses."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

DEFAULT_CONF: dict[str, str] = {
    # Workers must run this interpreter, or they start a system Python without our deps.
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.memory": "4g",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
}


def make_session(
    master: str = "local[2]", app_name: str = "fixflow", conf: dict[str, str] | None = None
) -> SparkSession:
    """A SparkSession with Fixflow's defaults; ``conf`` overrides them."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
