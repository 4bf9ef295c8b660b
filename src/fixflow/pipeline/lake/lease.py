"""One writer per program's lake: a lease, ``<lake>/<program>/_writer.json``.

Two streams of one program on one lake would write the same tables and checkpoints. The
stream that starts takes the lease: a file created only if none exists (``O_EXCL``) that
names its owner (a random id, host, pid, when it started) and a heartbeat the owner renews
every ``HEARTBEAT_S``. Another writer that finds a live lease refuses in one line naming the
owner. A lease is stale when its heartbeat is older than ``EXPIRES_S`` or its process is gone
(same host): it is taken over, and the takeover logged. An owner that finds its lease taken
(it stalled for longer than ``EXPIRES_S``) learns it at its next heartbeat and stops writing
(``on_lost``).

Local file systems only, for now: the object-store lakes of issue #37 need a conditional
write (``If-None-Match``) in place of ``O_EXCL``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from fixflow.pipeline.errors import UserFacingError
from fixflow.pipeline.lake.lakehouse import ProgramLake

log = logging.getLogger(__name__)

LEASE_FILE = "_writer.json"
HEARTBEAT_S = 5.0
"""How often the owner renews its lease."""
EXPIRES_S = 30.0
"""A lease whose heartbeat is older than this is stale (six missed heartbeats)."""


class LakeBusy(UserFacingError):
    """Another live writer holds the program's lake."""


@dataclass(frozen=True)
class Owner:
    """Who holds a lease, as its file says."""

    id: str
    host: str
    pid: int
    started: float
    heartbeat: float

    def describe(self) -> str:
        if self.id == "?":
            return "a writer that is starting"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"pid {self.pid} on {self.host} (since {since})"

    def stale(self, now: float, expires_s: float) -> str | None:
        """Why the lease no longer holds, or None while it does."""
        if now - self.heartbeat > expires_s:
            return f"its last heartbeat was {now - self.heartbeat:.0f} s ago"
        if self.host == socket.gethostname() and not _alive(self.pid):
            return f"pid {self.pid} is gone"
        return None


class Lease:
    """A lease taken on a program's lake (``take``); renewed by a thread until ``release``."""

    def __init__(self, path: Path, owner: Owner, on_lost: Callable[[str], None] | None) -> None:
        self.path = path
        self.owner = owner
        self.on_lost = on_lost
        self._released = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="fixflow-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and remove the file, if it is still ours."""
        self._released.set()
        self._thread.join()
        if _read(self.path) == self.owner:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def renew(self) -> bool:
        """Write a fresh heartbeat; False (and ``on_lost``) when another writer took the
        lease."""
        found = _read(self.path)
        if found is None or found.id != self.owner.id:
            holder = found.describe() if found is not None else "nobody"
            why = f"{self.path}: the lake's lease was taken over (now held by {holder})"
            log.error("%s: stopping this writer", why)
            if self.on_lost is not None:
                self.on_lost(why)
            return False
        self.owner = replace(self.owner, heartbeat=time.time())
        _write_replacing(self.path, self.owner)
        return True

    def _beat(self) -> None:
        while not self._released.wait(HEARTBEAT_S):
            if not self.renew():
                return


def take(
    lake: ProgramLake,
    on_lost: Callable[[str], None] | None = None,
    expires_s: float = EXPIRES_S,
) -> Lease:
    """The lease of ``lake`` for this process; ``LakeBusy`` if a live writer holds it. A
    stale lease is taken over (logged)."""
    path = Path(lake.base) / LEASE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    owner = Owner(uuid.uuid4().hex, socket.gethostname(), os.getpid(), now, now)
    if _create(path, owner):
        return Lease(path, owner, on_lost)
    found = _read(path)
    if found is None:  # being written by a writer that is starting, or left broken
        found = Owner("?", "?", 0, now, _modified(path, now))
        why = found.stale(now, expires_s) and "its file was left unreadable"
    else:
        why = found.stale(now, expires_s)
    if why is None:
        raise _busy(lake, found)
    if not _set_aside(path, found):
        raise _busy(lake, _read(path) or found)
    log.warning("%s: taking over the lake's lease (%s)", lake.base, why)
    if not _create(path, owner):  # another writer took it over first
        raise _busy(lake, _read(path) or owner)
    return Lease(path, owner, on_lost)


def refuse_if_held(lake: ProgramLake, expires_s: float = EXPIRES_S) -> None:
    """``LakeBusy`` if a live writer holds ``lake``'s lease: a check before starting
    anything (``take`` decides)."""
    found = _read(Path(lake.base) / LEASE_FILE)
    if found is not None and found.stale(time.time(), expires_s) is None:
        raise _busy(lake, found)


def _busy(lake: ProgramLake, owner: Owner) -> LakeBusy:
    return LakeBusy(
        f"{lake.base} is being written by another Fixflow stream: {owner.describe()}; stop "
        f"it first (a stale lease is taken over after {EXPIRES_S:g} s without a heartbeat)"
    )


def _create(path: Path, owner: Owner) -> bool:
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump(asdict(owner), file)
    return True


def _set_aside(path: Path, stale: Owner | None) -> bool:
    """Move the stale lease out of the way; False when what was moved is not the stale
    lease any more (another writer took over between the read and the move)."""
    aside = path.with_name(f"{path.name}.{uuid.uuid4().hex}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return True  # already moved by another taker: the create decides
    moved = _read(aside)
    if stale is not None and moved is not None and moved.id != stale.id:
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)  # put the other writer's fresh lease back
        aside.unlink()
        return False
    aside.unlink()
    return True


def _write_replacing(path: Path, owner: Owner) -> None:
    temporary = path.with_name(f"{path.name}.{owner.id}.tmp")
    temporary.write_text(json.dumps(asdict(owner)), encoding="utf-8")
    os.replace(temporary, path)


def _modified(path: Path, now: float) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return now


def _read(path: Path) -> Owner | None:
    try:
        return Owner(**json.loads(path.read_text(encoding="utf-8")))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
