"""Building the SparkSession every Fixflow command and test uses."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

QUIET_LOG4J = Path(__file__).resolve().parent / "log4j2-quiet.properties"
"""The JVM's logging without -v: errors only, no start-up notices."""
JAVA_OPTIONS = "spark.driver.extraJavaOptions"

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
    settings = {**DEFAULT_CONF, **(conf or {})}
    settings.update(_quiet_jvm(settings))
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _quiet_jvm(settings: dict[str, str]) -> dict[str, str]:
    """Hide the JVM's start-up notices and warnings unless Fixflow logs at INFO (``-v``) or
    the caller configures log4j itself."""
    if logging.getLogger("fixflow").getEffectiveLevel() <= logging.INFO:
        return {}
    options = settings.get(JAVA_OPTIONS, "")
    if "log4j2.configurationFile" in options:
        return {}
    return {JAVA_OPTIONS: f"{options} -Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}".strip()}
