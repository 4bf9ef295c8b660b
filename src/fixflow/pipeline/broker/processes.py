"""Background processes Fixflow starts and stops by pid file: the embedded broker (Tansu)
and its durable store (SeaweedFS). A process outlives the command that spawned it (its own
session), writes to a log file, and is recognised by a marker in its command line, so a
recycled pid is never taken for it. Both keep their pid, log and settings files in
``broker_dir``, and both fail with ``BrokerError``: they live here, below the two, so that
the broker (which starts the store) and the store share them without importing each other."""

from __future__ import annotations

import logging
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fixflow.pipeline.config import Config

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 20

# Children this process started: reaped on stop so they do not linger as zombies.
_children: dict[int, subprocess.Popen[bytes]] = {}
# Their log files, for the tail shown when one fails to come up.
_child_logs: dict[int, Path] = {}


class BrokerError(RuntimeError):
    """The broker could not be started, reached or stopped; the message says why."""


def broker_dir(config: Config) -> Path:
    return config.lake.local_root() / "_broker"


def spawn(
    command: Sequence[str],
    log_path: Path,
    pid_path: Path,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` in a session of its own, output appended to ``log_path``, its pid
    written to ``pid_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        process = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=None if env is None else {**os.environ, **env},
        )
    _child_logs[process.pid] = log_path
    _children[process.pid] = process
    pid_path.write_text(f"{process.pid}\n", encoding="utf-8")
    return process


def log_of(process: subprocess.Popen[bytes] | None) -> Path | None:
    return _child_logs.get(process.pid) if process is not None else None


def live_pid(pid_path: Path, marker: bytes) -> int | None:
    """The pid in ``pid_path`` if that process is alive and runs ``marker``; else None."""
    try:
        pid = int(pid_path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    return pid if is_live(pid, marker) else None


def is_live(pid: int, marker: bytes) -> bool:
    proc = Path(f"/proc/{pid}")
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        command = (proc / "cmdline").read_bytes()
    except (OSError, IndexError):
        return _signal_alive(pid)
    return state != "Z" and marker in command


def _signal_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def terminate(pid: int, marker: bytes, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it is still alive after ``timeout`` seconds."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and is_live(pid, marker):
        _reap(pid)
        time.sleep(0.05)
    if is_live(pid, marker):
        log.warning("pid %d (%s) ignored SIGTERM; killing it", pid, marker.decode())
        os.kill(pid, signal.SIGKILL)
    _reap(pid)


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        _children.pop(pid, None)
        _child_logs.pop(pid, None)


def port_open(address: str) -> bool:
    """Whether ``host:port`` accepts a TCP connection within half a second."""
    try:
        with _connect(address):
            return True
    except OSError:
        return False


API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 0x0F1F, 7) + b"fixflow"
"""A Kafka ApiVersions request, version 0: api key 18, version 0, correlation id 0x0F1F,
client id "fixflow". Every broker answers it, before any authentication."""


def answers_kafka(address: str) -> bool:
    """Whether ``host:port`` answers a Kafka ApiVersions request within half a second.

    A TCP connect alone is not enough: while a broker is down its port may be taken by
    another listener, or a connect to a port in the ephemeral range may meet itself (TCP
    simultaneous open) and read back its own bytes, which carry api key 18 where the
    answer carries the correlation id."""
    try:
        with _connect(address) as connection:
            connection.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
            head = _receive(connection, 8)
    except OSError:
        return False
    return head is not None and struct.unpack(">ii", head)[1] == 0x0F1F


def _connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=0.5)


def _receive(connection: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
