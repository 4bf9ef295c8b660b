"""The SparkSession Fixflow builds (``fixflow.pipeline.spark.make_session``)."""

from __future__ import annotations

import os
from typing import Any

from pyspark.errors.utils import is_debugging_enabled
from pyspark.sql import functions as F

from fixflow.pipeline import spark as spark_module
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


RUNNER_TRACEBACK = b"""Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File ".../pyspark/sql/streaming/python_streaming_source_runner.py", line 313, in <module>
    return next(self.gen)
pyspark.errors.exceptions.base.PySparkRuntimeError: [CANNOT_OPEN_SOCKET] Can not open socket
"""
OTHER_TRACEBACK = b"""Traceback (most recent call last):
  File "worker.py", line 1, in <module>
ValueError: a real failure
"""


def test_jvm_stderr_drops_the_runner_that_missed_connect_back_and_keeps_the_rest() -> None:
    """The copy of the JVM's stderr drops the start-up notice and the Kafka source runner's
    connect-back traceback (the stream starts the query again and says so), and keeps
    every other line and traceback, in order, a traceback cut short at the end included."""
    read_end, write_end = os.pipe()
    out_read, out_write = os.pipe()
    with os.fdopen(write_end, "wb") as jvm:
        jvm.write(b"WARNING: Using incubator modules: jdk.incubator.vector\nfirst\n")
        jvm.write(RUNNER_TRACEBACK + b"second\n" + OTHER_TRACEBACK + b"third\n")
        jvm.write(b"Traceback (most recent call last):\n  cut short\n")
    spark_module._copy_lines(read_end, out_write)
    os.close(out_write)
    with os.fdopen(out_read, "rb") as copied:
        text = copied.read()
    tail = b"Traceback (most recent call last):\n  cut short\n"
    assert text == b"first\nsecond\n" + OTHER_TRACEBACK + b"third\n" + tail


def test_a_local_checkpoint_is_written_by_renaming_and_others_by_sparks_default(
    spark: Any,
) -> None:
    """``choose_checkpoint_files``: the rename-based writer for a checkpoint on the local
    file system, Spark's default elsewhere; a class the user configured stays."""
    from fixflow.pipeline.stream.query import (
        CHECKPOINT_FILES,
        RENAMING_FILES,
        choose_checkpoint_files,
    )

    try:
        spark.conf.unset(CHECKPOINT_FILES)
        choose_checkpoint_files(spark, local=True)
        assert spark.conf.get(CHECKPOINT_FILES, None) == RENAMING_FILES
        choose_checkpoint_files(spark, local=False)
        assert spark.conf.get(CHECKPOINT_FILES, None) is None
        spark.conf.set(CHECKPOINT_FILES, "com.example.TheUsersManager")
        for local in (True, False):
            choose_checkpoint_files(spark, local=local)
            assert spark.conf.get(CHECKPOINT_FILES, None) == "com.example.TheUsersManager"
    finally:
        spark.conf.unset(CHECKPOINT_FILES)


def test_a_local_master_retries_failed_tasks_as_a_cluster_does(spark: Any) -> None:
    """Local mode fails a job at its first failed task unless the master names how many
    failures a task may have; Fixflow's sessions name ``spark.task.maxFailures`` (4)."""
    retries = spark_module.with_task_retries
    assert retries("local[2]", {}) == "local[2,4]"
    assert retries("local", {}) == "local[1,4]"
    assert retries("local[*]", {"spark.task.maxFailures": "2"}) == "local[*,2]"
    assert retries("local[2,1]", {}) == "local[2,1]"
    assert retries("spark://host:7077", {}) == "spark://host:7077"
    assert spark.sparkContext.master == "local[2,4]"
