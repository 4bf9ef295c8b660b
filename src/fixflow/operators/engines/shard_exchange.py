"""How the tasks of a sharded run's barrier job talk to one another (``engines.shard_run``).

Each task's listening port goes, once, to a ``Rendezvous`` the driver opens for the run:
a socket that answers every task of a stage attempt with every task's port as soon as
the last one has said its own. (``BarrierTaskContext.allGather`` did that before: the
JVM side of a task polls for its answer once a second, so it never answered sooner than a
second, as much as a Spark job.) Everything else
goes straight from task to task over TCP (``exchange``): per superstep, every task sends
every other one exactly one frame holding its small fact (pending counts, the clause's
partial measure, statistics; JSON) and its buffer for that task (Arrow IPC, empty when it
has nothing for it), so each task ends a superstep with every task's fact and knows when it
holds everything the superstep sent it.

Each task listens on a port of its own host (``getTaskInfos`` names the hosts) and connects
once to every other task; a reader thread per connection drains it, so two tasks sending to
each other never block on full socket buffers. A peer that dies closes its connections: a
task waiting for its frame fails at once (and Spark retries the barrier stage as a whole)
instead of waiting for ever.

A run of one shard has no peers (``Alone``) and runs in an ordinary task.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, Protocol

import pyarrow as pa
from pyspark import BarrierTaskContext

from fixflow.operators.engines.blocks import decode, encode

Fact = dict[str, Any]
"""What a task tells every other one about a superstep (JSON-able)."""

FRAME = struct.Struct("!qqq")
"""A frame's header: the superstep, the bytes of the fact (JSON) and of the Arrow IPC rows
that follow it (0: no rows)."""
HELLO = struct.Struct("!q")
"""What a connecting task says first: its index."""
CONNECT_TIMEOUT_S = 60.0
"""How long a task tries to reach another's port (they open theirs at about the same time)."""
RENDEZVOUS_TIMEOUT_S = 600.0
"""How long a task waits for the other tasks' ports (a barrier stage starts its tasks
together; a task that fails meanwhile makes Spark kill the others)."""
SIZE = struct.Struct("!q")
"""The length of a JSON message to or from the rendezvous."""


class PeerLost(RuntimeError):
    """A task's connection closed before it sent the frame another task waits for."""


class Peers(Protocol):
    """The other tasks of the run, as one task sees them."""

    @property
    def index(self) -> int:
        """This task's place among the run's tasks (its partition)."""
        ...

    @property
    def count(self) -> int: ...

    def exchange(
        self, superstep: int, fact: Fact, tables: dict[int, pa.Table]
    ) -> tuple[list[Fact], list[pa.Table]]:
        """Send ``fact`` to every task and ``tables`` (by task index) to theirs; every
        task's fact of ``superstep`` in task order, and the tables sent to this one."""
        ...

    def close(self) -> None: ...


class Alone:
    """The only task of a one-shard run."""

    index = 0
    count = 1

    def exchange(
        self, superstep: int, fact: Fact, tables: dict[int, pa.Table]
    ) -> tuple[list[Fact], list[pa.Table]]:
        if tables:
            raise RuntimeError(f"one shard has no peer to send to: {sorted(tables)}")
        return [fact], []

    def close(self) -> None:
        """Nothing to close."""


def joined(tasks: int, rendezvous: tuple[str, int] | None) -> Peers:
    """This task's peers: none for one task, else the barrier job's other tasks, met
    through the driver's ``Rendezvous`` at ``rendezvous`` (host, port)."""
    if tasks == 1:
        return Alone()
    if rendezvous is None:
        raise RuntimeError(f"a run of {tasks} tasks needs the driver's rendezvous")
    return BarrierPeers(BarrierTaskContext.get(), rendezvous)


class Rendezvous:
    """In the driver, for one run: where its tasks trade their listening ports.

    A task sends ``{"index", "tasks", "port"}`` (length-prefixed JSON); once a task of
    every index has, each gets the list of ports by task index. A retried stage's tasks
    meet afresh: a task of an index already waiting replaces it (the waiting one belongs
    to the failed attempt, and its connection is closed). Closed when the run's job ends."""

    def __init__(self, host: str) -> None:
        self.server = socket.create_server(("", 0))
        self.address = (host, int(self.server.getsockname()[1]))
        self.waiting: dict[int, tuple[socket.socket, int]] = {}
        self.lock = threading.Lock()
        accept_each(self.server, self._met, "shard-meet")

    def _met(self, connection: socket.socket) -> None:
        said = read_message(connection)
        if said is None:
            connection.close()
            return
        tasks, group = int(said["tasks"]), self.waiting
        with self.lock:
            stale = [group.pop(int(said["index"]), None)]
            # A waiting task whose connection closed was killed with a failed attempt.
            stale += [group.pop(i) for i, (link, _) in list(group.items()) if _closed(link)]
            group[int(said["index"])] = (connection, int(said["port"]))
            complete = len(group) == tasks
            if complete:
                self.waiting = {}
        for gone in stale:
            if gone is not None:
                gone[0].close()
        if complete:
            ports = [group[i][1] for i in range(tasks)]
            for link, _ in group.values():
                # A task gone meanwhile: its peers find out when they connect to it.
                with link, contextlib.suppress(OSError):
                    write_message(link, ports)

    def close(self) -> None:
        shut(self.server)
        with self.lock:
            for link, _ in self.waiting.values():
                link.close()
            self.waiting = {}


def _met_at(rendezvous: tuple[str, int], index: int, tasks: int, port: int) -> list[int]:
    """Every task's port, by index, from the driver's ``Rendezvous``."""
    with socket.create_connection(rendezvous, timeout=CONNECT_TIMEOUT_S) as link:
        link.settimeout(RENDEZVOUS_TIMEOUT_S)
        write_message(link, {"index": index, "tasks": tasks, "port": port})
        ports = read_message(link)
    if not isinstance(ports, list) or len(ports) != tasks:
        raise PeerLost(f"task {index}: the rendezvous closed before every task came")
    return [int(p) for p in ports]


def _closed(connection: socket.socket) -> bool:
    """Whether the other end closed ``connection`` (a waiting task says nothing more)."""
    try:
        return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def accept_each(server: socket.socket, handle: Callable[[socket.socket], None], name: str) -> None:
    """Accept connections on ``server`` until it is ``shut``, each handled by ``handle`` on a
    thread of its own (named ``name``)."""

    def accept() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return  # shut: the run is over
            threading.Thread(target=handle, args=(connection,), name=name, daemon=True).start()

    threading.Thread(target=accept, name=f"{name}-accept", daemon=True).start()


def shut(link: socket.socket) -> None:
    """Close ``link`` so that a thread blocked in its ``accept`` or ``recv`` returns: a plain
    close leaves a listening socket accepting until its blocked ``accept`` returns."""
    with contextlib.suppress(OSError):
        link.shutdown(socket.SHUT_RDWR)
    link.close()


def write_message(link: socket.socket, message: object) -> None:
    """``message`` as one length-prefixed JSON message."""
    body = json.dumps(message).encode("utf-8")
    link.sendall(SIZE.pack(len(body)) + body)


def read_message(connection: socket.socket) -> Any:
    """One length-prefixed JSON message, or None when the connection closes first."""
    size = _read(connection, SIZE.size)
    if size is None:
        return None
    body = _read(connection, SIZE.unpack(size)[0])
    return None if body is None else json.loads(body)


class BarrierPeers:
    """The tasks of a barrier stage, connected to one another."""

    def __init__(self, context: BarrierTaskContext, rendezvous: tuple[str, int]) -> None:
        self.context = context
        self.index = context.partitionId()
        hosts = [info.address.rsplit(":", 1)[0] for info in context.getTaskInfos()]
        self.count = len(hosts)
        self.server = socket.create_server(("", 0), backlog=self.count)
        self.inbox = Inbox(self.count - 1)
        threading.Thread(target=self._accept, name="shard-accept", daemon=True).start()
        port = self.server.getsockname()[1]
        ports = _met_at(rendezvous, self.index, self.count, port)
        self.links: dict[int, socket.socket] = {}
        for peer, (host, peer_port) in enumerate(zip(hosts, ports, strict=True)):
            if peer != self.index:
                self.links[peer] = _connected(host, peer_port, self.index)

    def _accept(self) -> None:
        for _ in range(self.count - 1):
            try:
                connection, _ = self.server.accept()
            except OSError:
                return  # closed: this task ended before every peer connected
            threading.Thread(
                target=self.inbox.drain, args=(connection,), name="shard-read", daemon=True
            ).start()

    def exchange(
        self, superstep: int, fact: Fact, tables: dict[int, pa.Table]
    ) -> tuple[list[Fact], list[pa.Table]]:
        said = json.dumps(fact).encode("utf-8")
        for peer, link in self.links.items():
            table = tables.get(peer)
            payload = encode(table) if table is not None and len(table) else b""
            link.sendall(FRAME.pack(superstep, len(said), len(payload)) + said + payload)
        frames = self.inbox.take(superstep)
        frames[self.index] = (said, b"")
        facts = [json.loads(frames[task][0]) for task in range(self.count)]
        rows = [frames[task][1] for task in range(self.count)]
        return facts, [decode(payload) for payload in rows if payload]

    def close(self) -> None:
        for link in self.links.values():
            link.close()
        self.server.close()


def _connected(host: str, port: int, index: int) -> socket.socket:
    link = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    link.settimeout(None)
    link.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small frames go at once
    link.sendall(HELLO.pack(index))
    return link


class Inbox:
    """Frames from the other tasks, by superstep and sender, filled by reader threads."""

    def __init__(self, senders: int) -> None:
        self.senders = senders
        self.frames: dict[int, dict[int, tuple[bytes, bytes]]] = {}
        self.closed: set[int] = set()
        self.changed = threading.Condition()

    def drain(self, connection: socket.socket) -> None:
        """Read one connection's frames until the peer closes it (or it breaks)."""
        with connection:
            hello = _read(connection, HELLO.size)
            if hello is None:
                return  # a peer that died before it said who it is: its frames never come
            (sender,) = HELLO.unpack(hello)
            try:
                self._frames(connection, sender)
            finally:
                with self.changed:
                    self.closed.add(sender)
                    self.changed.notify_all()

    def _frames(self, connection: socket.socket, sender: int) -> None:
        while (header := _read(connection, FRAME.size)) is not None:
            superstep, said, size = FRAME.unpack(header)
            body = _read(connection, said + size)
            if body is None:
                return
            with self.changed:
                self.frames.setdefault(superstep, {})[sender] = (body[:said], body[said:])
                self.changed.notify_all()

    def take(self, superstep: int) -> dict[int, tuple[bytes, bytes]]:
        """Every sender's (fact, rows) of ``superstep`` by sender, once all have come."""
        with self.changed:
            while len(got := self.frames.get(superstep, {})) < self.senders:
                if self.closed - set(got):
                    lost = sorted(self.closed - set(got))
                    raise PeerLost(f"superstep {superstep}: task(s) {lost} closed their link")
                self.changed.wait()
            # By sender: a sum merges its messages in the same order on every run.
            return dict(sorted(self.frames.pop(superstep).items()))


def _read(connection: socket.socket, size: int) -> bytes | None:
    """Exactly ``size`` bytes, or None when the connection closes (or breaks: a peer
    killed mid-frame resets it) first."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        try:
            n = connection.recv_into(view[got:])
        except OSError:
            return None
        if n == 0:
            return None
        got += n
    return bytes(buffer)
