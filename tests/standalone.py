"""A Spark standalone cluster on loopback: one master and ``workers`` workers.

Started with pyspark's bundled ``bin/spark-class`` (the pip package ships ``bin/`` but not
the ``sbin/start-*.sh`` scripts), on free ports of 127.0.0.1, each daemon in a process group
of its own (killed at the end) with its output in a log file under ``directory``. Apps reach
it as a subprocess (a second SparkContext cannot live in a process that has one) with
``Cluster.env`` (a ``SPARK_CONF_DIR`` whose spark-defaults.conf sets ``spark.pyspark.python``
to this interpreter, ``SPARK_LOCAL_IP``) and ``--master Cluster.master``. Used by the
cluster tests (``tests/cluster/conftest.py``) and ``bench/bench_cluster.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ports import free_port

DAEMON_MEMORY = "384m"
"""Heap of the master and worker daemons themselves (executors get ``Shape.memory``)."""
START_TIMEOUT = 120.0


class ClusterError(Exception):
    """The cluster did not start; the message says where its logs are."""


@dataclass(frozen=True)
class Shape:
    """How many workers, and each one's cores and executor memory."""

    workers: int = 2
    cores: int = 1
    memory: str = "1g"


def spark_home() -> Path:
    try:
        from pyspark.find_spark_home import _find_spark_home

        return Path(_find_spark_home())
    except Exception:  # pragma: no cover - an unusual pyspark install
        import pyspark

        return Path(pyspark.__file__).resolve().parent


@dataclass
class Cluster:
    master: str
    """``spark://127.0.0.1:PORT``"""
    web_ui: str
    """The master's web UI (``/json/`` gives its state)."""
    env: dict[str, str]
    """Environment for apps (and the daemons): SPARK_HOME, SPARK_CONF_DIR, SPARK_LOCAL_IP,
    PYSPARK_PYTHON."""
    directory: Path
    shape: Shape = field(default_factory=Shape)
    logs: list[Path] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        """The master's state (its web UI's JSON)."""
        with urllib.request.urlopen(f"{self.web_ui}/json/", timeout=5) as response:
            state: dict[str, Any] = json.loads(response.read().decode())
            return state

    def alive_workers(self) -> int:
        return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")

    def executors(self) -> list[set[str]]:
        """Per worker, the ids of the apps it has run an executor for (from its work dir)."""
        return [
            {p.name for p in (self.directory / f"work{i}").glob("app-*")}
            for i in range(self.shape.workers)
        ]

    def tail_logs(self, lines: int = 15) -> str:
        out = []
        for log in self.logs:
            text = log.read_text(errors="replace").splitlines() if log.exists() else []
            out.append(f"--- {log} (last {lines} lines)\n" + "\n".join(text[-lines:]))
        return "\n".join(out)


def _conf_dir(directory: Path, shape: Shape) -> Path:
    conf = directory / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        f"spark.pyspark.python {sys.executable}\n"
        f"spark.pyspark.driver.python {sys.executable}\n"
        "spark.driver.host 127.0.0.1\n"
        "spark.driver.bindAddress 127.0.0.1\n"
        f"spark.executor.memory {shape.memory}\n"
    )
    (conf / "log4j2.properties").write_text(
        "rootLogger.level = warn\n"
        "rootLogger.appenderRef.stdout.ref = console\n"
        "appender.console.type = Console\n"
        "appender.console.name = console\n"
        "appender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n"
    )
    return conf


def _start(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: killed as one at teardown
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def standalone(directory: Path, shape: Shape | None = None) -> Iterator[Cluster]:
    """A master and ``shape.workers`` workers on 127.0.0.1, all registered; stopped on
    exit. ``ClusterError`` when they do not start."""
    shape = shape or Shape()
    home = spark_home()
    spark_class = home / "bin" / "spark-class"
    if not spark_class.is_file():
        raise ClusterError(f"{spark_class} not found: pyspark's bundled Spark is needed")
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_CONF_DIR": str(_conf_dir(directory, shape)),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(directory / "logs"),
        "SPARK_WORKER_DIR": str(directory / "work"),
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    port, web_port = free_port(), free_port()
    cluster = Cluster(
        f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", env, directory, shape
    )
    processes: list[subprocess.Popen[bytes]] = []
    try:
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        master += ["--port", str(port), "--webui-port", str(web_port)]
        processes.append(_daemon(cluster, spark_class, master, "master"))
        for i in range(shape.workers):
            work = directory / f"work{i}"
            work.mkdir()
            worker = ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
            worker += ["--port", str(free_port()), "--webui-port", str(free_port())]
            worker += ["--cores", str(shape.cores), "--memory", shape.memory]
            worker += ["--work-dir", str(work), cluster.master]
            processes.append(_daemon(cluster, spark_class, worker, f"worker{i}"))
        _wait_for_workers(cluster, processes)
        yield cluster
    finally:
        for process in reversed(processes):
            _stop(process)


def _daemon(
    cluster: Cluster, spark_class: Path, arguments: list[str], name: str
) -> subprocess.Popen[bytes]:
    log = cluster.directory / f"{name}.log"
    cluster.logs.append(log)
    return _start([str(spark_class), *arguments], log, cluster.env)


def _wait_for_workers(cluster: Cluster, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    alive, error, wanted = 0, "", cluster.shape.workers
    while time.monotonic() < deadline:
        for process, log in zip(processes, cluster.logs, strict=True):
            if process.poll() is not None:
                raise ClusterError(
                    f"a Spark daemon exited with code {process.returncode} while the cluster "
                    f"started; see {log}\n{cluster.tail_logs()}"
                )
        try:
            alive = cluster.alive_workers()
            if alive >= wanted:
                return
        except (urllib.error.URLError, OSError, ValueError) as exc:
            error = f" (last error: {exc})"
        time.sleep(0.5)
    raise ClusterError(
        f"Spark standalone cluster: {alive} of {wanted} workers registered with "
        f"{cluster.master} within {START_TIMEOUT:.0f} s{error}; see {cluster.logs[0]} "
        f"(master) and {', '.join(map(str, cluster.logs[1:]))}\n{cluster.tail_logs()}"
    )
