"""A Spark standalone cluster on loopback: one master and two workers (1 core, 1 GiB each).

Started with pyspark's bundled ``bin/spark-class`` (the pip package ships ``bin/`` but not
the ``sbin/start-*.sh`` scripts), on free ports of 127.0.0.1, each daemon in a process group
of its own (killed at the end) with its output in a log file under the fixture's temporary
directory. Apps reach it as a subprocess (a second SparkContext cannot live in the test
process) with ``Cluster.env`` (a ``SPARK_CONF_DIR`` whose spark-defaults.conf sets
``spark.pyspark.python`` to this interpreter, ``SPARK_LOCAL_IP``) and ``--master
Cluster.master``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

WORKERS = 2
WORKER_CORES = 1
WORKER_MEMORY = "1g"
DAEMON_MEMORY = "384m"
"""Heap of the master and worker daemons themselves (executors get WORKER_MEMORY)."""
START_TIMEOUT = 120.0


def spark_home() -> Path:
    try:
        from pyspark.find_spark_home import _find_spark_home

        return Path(_find_spark_home())
    except Exception:  # pragma: no cover - an unusual pyspark install
        import pyspark

        return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
            {p.name for p in (self.directory / f"work{i}").glob("app-*")} for i in range(WORKERS)
        ]

    def tail_logs(self, lines: int = 15) -> str:
        out = []
        for log in self.logs:
            text = log.read_text(errors="replace").splitlines() if log.exists() else []
            out.append(f"--- {log} (last {lines} lines)\n" + "\n".join(text[-lines:]))
        return "\n".join(out)


def _conf_dir(directory: Path) -> Path:
    conf = directory / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        f"spark.pyspark.python {sys.executable}\n"
        f"spark.pyspark.driver.python {sys.executable}\n"
        "spark.driver.host 127.0.0.1\n"
        "spark.driver.bindAddress 127.0.0.1\n"
        f"spark.executor.memory {WORKER_MEMORY}\n"
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


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and two workers on 127.0.0.1, all registered; torn down after the module."""
    directory = tmp_path_factory.mktemp("standalone")
    home = spark_home()
    spark_class = home / "bin" / "spark-class"
    if not spark_class.is_file():
        pytest.fail(f"{spark_class} not found: pyspark's bundled Spark is needed")
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_CONF_DIR": str(_conf_dir(directory)),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(directory / "logs"),
        "SPARK_WORKER_DIR": str(directory / "work"),
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    port, web_port = free_port(), free_port()
    cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", env, directory)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        log = directory / "master.log"
        cluster.logs.append(log)
        master_class = "org.apache.spark.deploy.master.Master"
        processes.append(
            _start(
                [
                    str(spark_class),
                    master_class,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(web_port),
                ],
                log,
                env,
            )
        )
        for i in range(WORKERS):
            log = directory / f"worker{i}.log"
            cluster.logs.append(log)
            work = directory / f"work{i}"
            work.mkdir()
            processes.append(
                _start(
                    [
                        str(spark_class),
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(free_port()),
                        "--webui-port",
                        str(free_port()),
                        "--cores",
                        str(WORKER_CORES),
                        "--memory",
                        WORKER_MEMORY,
                        "--work-dir",
                        str(work),
                        cluster.master,
                    ],
                    log,
                    env,
                )
            )
        _wait_for_workers(cluster, processes)
        yield cluster
    finally:
        for process in reversed(processes):
            _stop(process)


def _wait_for_workers(cluster: Cluster, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    alive, error = 0, ""
    while time.monotonic() < deadline:
        for process, log in zip(processes, cluster.logs, strict=True):
            if process.poll() is not None:
                pytest.fail(
                    f"a Spark daemon exited with code {process.returncode} while the cluster "
                    f"started; see {log}\n{cluster.tail_logs()}"
                )
        try:
            alive = cluster.alive_workers()
            if alive >= WORKERS:
                return
        except (urllib.error.URLError, OSError, ValueError) as exc:
            error = f" (last error: {exc})"
        time.sleep(0.5)
    pytest.fail(
        f"Spark standalone cluster: {alive} of {WORKERS} workers registered with "
        f"{cluster.master} within {START_TIMEOUT:.0f} s{error}; see {cluster.logs[0]} "
        f"(master) and {', '.join(map(str, cluster.logs[1:]))}\n{cluster.tail_logs()}"
    )
