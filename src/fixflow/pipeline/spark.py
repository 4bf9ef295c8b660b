"""Building the SparkSession every Fixflow command and test uses."""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import BinaryIO

from pyspark.sql import SparkSession

from fixflow.pipeline import jvm_lookups
from fixflow.pipeline.errors import UserFacingError

QUIET_LOG4J = Path(__file__).resolve().parent / "log4j2-quiet.properties"
"""The JVM's logging without -v: errors only, no start-up notices."""
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
JVM_NOISE = (b"WARNING: Using incubator modules:",)
"""Lines the JVM prints to stderr at every start that say nothing to a Fixflow user (Spark's
launcher adds jdk.incubator.vector); dropped unless -v. log4j's output is not among them."""

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
    # PySpark's DataFrame debugging records the Python call site of every Column function
    # (F.col, alias, cast, ...): an active-session lookup, a conf read and a stack walk, each
    # over py4j. Rounds build their frames anew, so it was ~30% of a small round's driver
    # time (a 6-row PageRank: 55 s -> 39 s). The call sites it records are Fixflow's own
    # code, never a user's: users write Datalog, not DataFrames.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


TASK_MAX_FAILURES = "spark.task.maxFailures"
DEFAULT_TASK_MAX_FAILURES = "4"
"""Spark's own default for a cluster, which Fixflow gives local masters too."""
LOCAL_MASTER = re.compile(r"local(?:\[(\d+|\*)\])?")


def with_task_retries(master: str, settings: dict[str, str]) -> str:
    """``local`` or ``local[N]`` as ``local[N,F]``: in local mode Spark ignores
    ``spark.task.maxFailures`` and fails a job at its first failed task unless the master
    names F, so a Python worker killed mid-job (the OOM killer, an operator's ``kill -9``)
    would end the command. F = ``spark.task.maxFailures`` (default 4, as on a cluster);
    any other master, or one that names F itself, is left as it is."""
    found = LOCAL_MASTER.fullmatch(master)
    if found is None:
        return master
    threads = found.group(1) or "1"
    return f"local[{threads},{settings.get(TASK_MAX_FAILURES, DEFAULT_TASK_MAX_FAILURES)}]"


def make_session(
    master: str = "local[2]", app_name: str = "fixflow", conf: dict[str, str] | None = None
) -> SparkSession:
    """A SparkSession with Fixflow's defaults; ``conf`` overrides them. A local master
    retries failed tasks as a cluster does (``with_task_retries``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {**DEFAULT_CONF, **(conf or {})}
    builder = SparkSession.builder.master(with_task_retries(master, settings)).appName(app_name)
    settings.update(_quiet_jvm(settings))
    for key, value in settings.items():
        builder = builder.config(key, value)
    _require_java()
    try:
        with nullcontext() if _verbose() else _jvm_stderr_without_noise():
            session = builder.getOrCreate()
    except Exception as error:  # PySparkRuntimeError(JAVA_GATEWAY_EXITED) and the like
        if "JAVA_GATEWAY_EXITED" not in str(error):
            raise
        raise SparkStartError(
            "Spark's JVM did not start (its output is above); check JAVA_HOME "
            "(a JDK 17 or 21) and [spark] settings such as spark.driver.memory"
        ) from error
    session.sparkContext.setLogLevel("ERROR")
    jvm_lookups.install()
    return session


class SparkStartError(UserFacingError):
    """Spark cannot start here (no Java, a JVM that exits at once); the message says why."""


def _require_java() -> None:
    """Fail in one line, before PySpark's long trace, when there is no Java to start."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return
    if home:
        raise SparkStartError(
            f"JAVA_HOME={home} has no bin/java: point it at a JDK 17 or 21 (or unset it to "
            "use the java on PATH)"
        )
    if shutil.which("java") is None:
        raise SparkStartError(
            "no Java found: Spark needs a JDK 17 or 21 on PATH or in JAVA_HOME (Debian: "
            "apt-get install openjdk-17-jre-headless)"
        )


def _quiet_jvm(settings: dict[str, str]) -> dict[str, str]:
    """Hide the JVM's start-up notices and warnings unless Fixflow logs at INFO (``-v``) or
    the caller configures log4j itself."""
    if _verbose():
        return {}
    options = settings.get(JAVA_OPTIONS, "")
    if "log4j2.configurationFile" in options:
        return {}
    return {JAVA_OPTIONS: f"{options} -Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}".strip()}


def _verbose() -> bool:
    return logging.getLogger("fixflow").getEffectiveLevel() <= logging.INFO


@contextmanager
def _jvm_stderr_without_noise() -> Iterator[None]:
    """Start the JVM with its stderr on a pipe that a daemon thread copies to ours, minus
    ``JVM_NOISE``. The JVM (and the Python workers it forks) keep the pipe for their
    lifetime; this process gets its own stderr back once the JVM has started."""
    read_end, write_end = os.pipe()
    ours = os.dup(2)
    threading.Thread(
        target=_copy_lines, args=(read_end, ours), name="jvm-stderr", daemon=True
    ).start()
    sys.stderr.flush()
    os.dup2(write_end, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(ours, 2)
        os.close(write_end)


MISSED_CONNECT_BACK = (b"python_streaming_source_runner", b"CANNOT_OPEN_SOCKET")
"""A traceback holding both is the Kafka source's Python runner that missed Spark's fixed
10 s connect-back window on a loaded machine. ``ProgramStream`` starts the query again and
says so in one warning line (``stream.query.START_AGAIN``), so the runner's own traceback is
dropped unless -v."""


def _copy_lines(source: int, target: int) -> None:
    with open(source, "rb") as lines, open(target, "wb", closefd=False) as sink:
        traceback: list[bytes] = []
        for line in lines:  # until the JVM exits; always drained, or the JVM would block
            if traceback or line.startswith(b"Traceback (most recent call last):"):
                traceback.append(line)
                if line.startswith((b" ", b"\t", b"Traceback")):
                    continue  # the traceback goes on up to its exception line
                text, traceback = b"".join(traceback), []
                if not all(marker in text for marker in MISSED_CONNECT_BACK):
                    _write(sink, text)
            elif not line.startswith(JVM_NOISE):
                _write(sink, line)
        _write(sink, b"".join(traceback))


def _write(sink: BinaryIO, data: bytes) -> None:
    try:
        sink.write(data)
        sink.flush()
    except OSError:  # our stderr is gone (a closed terminal): keep draining
        pass


def cluster_packages() -> str:
    """``spark.jars.packages`` for a cluster, derived from the installed (pinned) pyspark
    and delta-spark: spark-sql-kafka of this Spark, delta-spark's artifact for this Spark,
    and hadoop-aws of the Hadoop that pyspark bundles. The cluster configs in conf/ and
    deploy/ name exactly these (a test keeps them equal), so the pins decide the jars."""
    from importlib.metadata import version

    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    scala = _jar_version(jars, "spark-core_", "-")
    hadoop = _jar_version(jars, "hadoop-client-api-", ".jar")
    spark = version("pyspark")
    spark_minor = ".".join(spark.split(".")[:2])
    return ",".join(
        [
            f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{spark}",
            f"io.delta:delta-spark_{spark_minor}_{scala}:{version('delta-spark')}",
            f"org.apache.hadoop:hadoop-aws:{hadoop}",
        ]
    )


def _jar_version(jars: Path, prefix: str, end: str) -> str:
    """What follows ``prefix`` up to ``end`` in the name of the bundled jar."""
    found = sorted(jars.glob(f"{prefix}*.jar"))
    if not found:
        raise FileNotFoundError(f"no {prefix}*.jar in {jars}")
    rest = found[0].name[len(prefix) :]
    return rest[: rest.index(end)]
