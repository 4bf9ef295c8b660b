"""The rounds of a loop running inside a Spark task, reported to the driver while it runs.

A stratum's loop in one task (``task_stratum``) can run for minutes in one Spark job, and
Spark tells the driver nothing of a task until it ends. So for that job the driver listens
on a socket (``RoundListener``, on ``spark.driver.host``, where executors already reach
the driver), and the task's ``RoundSender`` sends it a round's figures at most every
``SEND_EVERY_S`` seconds; the driver hands them to the stratum's progress callback as the
driver's own loop does, round by round.

This is progress only: nothing a result depends on goes through the socket, and the
driver still reports the loop's last round when the job ends. A task that cannot reach
the driver (a firewall between executors and the driver's ephemeral ports) logs a warning
on its executor and runs on without reporting. A task Spark runs again after a failure
reports again from round 1, which the CLI's progress printer takes as the stratum starting
again.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections.abc import Callable

from fixflow.operators.engines.base import RoundInfo
from fixflow.operators.engines.shard_exchange import (
    accept_each,
    read_message,
    shut,
    write_message,
)

log = logging.getLogger(__name__)

SEND_EVERY_S = 0.25
"""At most one round a task sends in this many seconds (the CLI prints one line every
five): a loop of a thousand rounds a second sends four."""
CONNECT_TIMEOUT_S = 5.0
"""How long a task tries to reach the driver before it gives up reporting."""

Address = tuple[str, int]


class RoundListener:
    """In the driver, for one job: rounds the job's task sends, passed to ``on_round``
    until ``close`` (after it, none is: the stratum may have moved on). Use it as
    ``contextlib.closing(RoundListener(...))``."""

    def __init__(self, host: str, on_round: Callable[[RoundInfo], None]) -> None:
        self.on_round = on_round
        self.server = socket.create_server(("", 0))
        self.address: Address = (host, int(self.server.getsockname()[1]))
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()
        self.open = True
        accept_each(self.server, self._read, "task-rounds")

    def _read(self, connection: socket.socket) -> None:
        with self.lock:
            self.connections.append(connection)
        with connection:
            while (said := read_message(connection)) is not None:
                info = RoundInfo(int(said["round"]), int(said["pending"]), said.get("measure"))
                with self.lock:
                    if not self.open:
                        return
                    try:
                        self.on_round(info)
                    except Exception:  # a progress callback's failure is not the loop's
                        log.warning("the progress callback failed", exc_info=True)

    def close(self) -> None:
        """Stop listening; a round read after this is dropped."""
        with self.lock:
            self.open = False
            connections, self.connections = self.connections, []
        for link in [self.server, *connections]:
            shut(link)


class RoundSender:
    """In the task: a round's figures to the driver's ``RoundListener``, throttled; after
    a failure to reach it, nothing more."""

    def __init__(self, address: Address) -> None:
        self.address = address
        self.link: socket.socket | None = None
        self.failed = False
        self.last = -math.inf

    def __call__(self, info: RoundInfo) -> None:
        now = time.monotonic()
        if self.failed or now - self.last < SEND_EVERY_S:
            return
        self.last = now
        message = {"round": info.round, "pending": info.pending, "measure": info.measure}
        try:
            if self.link is None:
                self.link = socket.create_connection(self.address, timeout=CONNECT_TIMEOUT_S)
            write_message(self.link, message)
        except OSError as error:
            self.failed = True
            log.warning("cannot report rounds to the driver at %s: %s", self.address, error)

    def close(self) -> None:
        if self.link is not None:
            self.link.close()
            self.link = None
