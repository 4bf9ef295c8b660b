"""Ports for the servers tests start: brokers, metrics endpoints, Spark masters, proxies.

A port from ``bind(0)`` lies in the kernel's ephemeral range, the range every outgoing
connection's source port and every other process's ``bind(0)`` are drawn from (Spark's JVM
binds several). Between the test releasing such a port and its server binding it, or while
the test holds its server down on purpose, another process may listen there, or a probe's
connect may meet itself (TCP simultaneous open): a broker that is not there looks up. So
ports come from below the ephemeral range, a block of its own per xdist worker, each
checked free by a bind before it is handed out.
"""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

FIRST = 20000
BLOCK = 400
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw") or 0)


def _block() -> range:
    start = FIRST + BLOCK * _worker_index()
    low = int(_EPHEMERAL.read_text().split()[0]) if _EPHEMERAL.exists() else 32768
    if start + BLOCK > low:
        raise RuntimeError(f"worker ports {start}+{BLOCK} reach the ephemeral range ({low})")
    return range(start, start + BLOCK)


_next = itertools.cycle(_block())


def free_port() -> int:
    """A port no other process is given by the kernel, free now, not handed out again by
    this process for the next ``BLOCK - 1`` calls."""
    for _ in range(BLOCK):
        port = next(_next)
        with socket.socket() as probe:
            # As a listener binds: a port in TIME_WAIT from an earlier test is free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_block()}")
