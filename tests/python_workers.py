"""Finding and killing a PySpark Python worker of a running process tree, from outside it.

Spark's JVM forks its Python workers from ``pyspark.daemon``; a worker running a task of a
sharded MRA run (``engines/shard_run.py``, a barrier job) listens on a TCP port of every
address for its peers for as long as the task runs (``shard_exchange.BarrierPeers``). So a
forked worker of the tree that holds such a socket is running a shard task *now*: SIGKILLing
it kills a barrier task mid-run, with no hook in the library. Linux ``/proc`` only.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
LISTEN = "0A"
"""The state column of /proc/net/tcp{,6} for a listening socket."""


def _children(pid: int) -> list[int]:
    found = []
    for task in (PROC / str(pid) / "task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def descendants(root: int) -> list[int]:
    """Every process under ``root`` (not ``root`` itself)."""
    found, todo = [], [root]
    while todo:
        for child in _children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def python_workers(root: int) -> list[int]:
    """The Python workers under ``root``: processes forked by a ``pyspark.daemon``."""
    return [
        pid
        for pid in descendants(root)
        if "pyspark.daemon" in _cmdline(pid) and "pyspark.daemon" in _cmdline(_parent(pid))
    ]


def _listening_inodes() -> set[str]:
    """The inodes of the TCP sockets listening on every address (0.0.0.0 or ::), as a
    shard task's does; ``pyspark.daemon`` listens on loopback only, and a worker it has
    just forked holds that socket until it closes it."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == LISTEN and fields[1].split(":")[0].strip("0") == "":
                inodes.add(fields[9])
    return inodes


def listens(pid: int, inodes: set[str] | None = None) -> bool:
    """Whether ``pid`` holds a TCP socket listening on every address."""
    inodes = _listening_inodes() if inodes is None else inodes
    try:
        fds = list((PROC / str(pid) / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def shard_tasks(root: int) -> list[int]:
    """The Python workers under ``root`` running a shard task of a barrier job now."""
    inodes = _listening_inodes()
    return [pid for pid in python_workers(root) if listens(pid, inodes)]


class BusyWorkers:
    """A finder of the Python workers under a root that used CPU since its last call: the
    worker running a long task, where reused idle workers and short tasks are not seen
    twice in a row (``WorkerKiller`` kills what it has seen for ``after_s``)."""

    def __init__(self) -> None:
        self.cpu: dict[int, int] = {}

    def __call__(self, root: int) -> list[int]:
        busy = []
        for pid in python_workers(root):
            ticks = _cpu_ticks(pid)
            if ticks > self.cpu.get(pid, ticks):
                busy.append(pid)
            self.cpu[pid] = ticks
        return busy


def _cpu_ticks(pid: int) -> int:
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


@dataclass
class WorkerKiller:
    """A thread that SIGKILLs the first task under ``root`` (a shard task, or what
    ``finder`` finds) once it has run for ``after_s`` (a task seen for that long is past
    its start, mid-run); ``killed`` holds its pid."""

    root: int
    after_s: float = 1.0
    timeout_s: float = 300.0
    finder: Callable[[int], list[int]] = shard_tasks
    killed: list[int] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._watch, name="worker-killer", daemon=True)

    def start(self) -> WorkerKiller:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)

    def _watch(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        seen: dict[int, float] = {}
        while not self.stopped.is_set() and time.monotonic() < deadline:
            now = time.monotonic()
            tasks = self.finder(self.root)
            seen = {pid: seen.get(pid, now) for pid in tasks}
            ripe = [pid for pid, since in seen.items() if now - since >= self.after_s]
            if ripe:
                os.kill(ripe[0], signal.SIGKILL)
                self.killed.append(ripe[0])
                return
            time.sleep(0.05)


def gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (a zombie counts as gone)."""
    try:
        state = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")
