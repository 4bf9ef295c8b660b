"""One writer per program's lake: a lease, ``<lake>/<program>/_writer.json``.

Two streams of one program on one lake would write the same tables and checkpoints. The
stream that starts takes the lease: a file created only if none exists (``O_EXCL``) that
names its owner (a random id, host, pid, when it started) and a heartbeat the owner renews
every ``HEARTBEAT_S``. Another writer that finds a live lease refuses in one line naming the
owner. A lease is stale when its heartbeat is older than ``EXPIRES_S`` or its process is gone
(same host): it is taken over, and the takeover logged. An owner that finds its lease taken
(it stalled for longer than ``EXPIRES_S``) learns it at its next heartbeat and stops writing
(``on_lost``).

In an object store (``s3://``), conditional writes play the part of ``O_EXCL`` and of the
rename (``ObjectLeaseFile``): S3, MinIO and SeaweedFS honour ``If-None-Match`` and
``If-Match``.
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
from typing import Protocol

from fixflow.pipeline.config import is_object_store
from fixflow.pipeline.errors import UserFacingError
from fixflow.pipeline.lake.lakehouse import ProgramLake, join_path
from fixflow.pipeline.object_store import split_location

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
        # The process first: the more precise reason when both hold.
        if self.host == socket.gethostname() and not _alive(self.pid):
            return f"pid {self.pid} is gone"
        if now - self.heartbeat > expires_s:
            return f"its last heartbeat was {now - self.heartbeat:.0f} s ago"
        return None


class LeaseFile(Protocol):
    """Where a lease is kept, with the atomic writes it needs."""

    where: str

    def create(self, owner: Owner) -> bool:
        """Write ``owner`` if there is no lease; False if there is one."""

    def read(self) -> Owner | None:
        """The lease's owner; None when there is none or it cannot be read."""

    def modified(self, default: float) -> float:
        """When the lease was last written (``default`` if it is gone)."""

    def take_over(self, stale: Owner | None, owner: Owner) -> bool:
        """Replace the lease ``read`` found stale by ``owner``; False when it changed in
        between (another writer took it first)."""

    def renew(self, owner: Owner) -> bool:
        """Write ``owner`` (a fresh heartbeat) if the lease is still ours; else False."""

    def remove(self, owner: Owner) -> None:
        """Remove the lease if it is still ``owner``'s."""


class Lease:
    """A lease taken on a program's lake (``take``); renewed by a thread until ``release``."""

    def __init__(
        self, file: LeaseFile, owner: Owner, on_lost: Callable[[str], None] | None
    ) -> None:
        self.file = file
        self.owner = owner
        self.on_lost = on_lost
        self.lost = False
        self._released = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="fixflow-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and remove the lease, if it is still ours."""
        self._released.set()
        self._thread.join()
        self.file.remove(self.owner)

    def renew(self) -> bool:
        """Write a fresh heartbeat; False (and ``on_lost``) when another writer took the
        lease."""
        fresh = replace(self.owner, heartbeat=time.time())
        if self.file.renew(fresh):
            self.owner = fresh
            return True
        found = self.file.read()
        holder = found.describe() if found is not None else "nobody"
        why = f"{self.file.where}: the lake's lease was taken over (now held by {holder})"
        log.error("%s: stopping this writer", why)
        self.lost = True
        if self.on_lost is not None:
            self.on_lost(why)
        return False

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
    file = lease_file(lake)
    now = time.time()
    owner = Owner(uuid.uuid4().hex, socket.gethostname(), os.getpid(), now, now)
    if file.create(owner):
        return Lease(file, owner, on_lost)
    found = file.read()
    if found is None:  # being written by a writer that is starting, or left broken
        found = Owner("?", "?", 0, now, file.modified(now))
        why = found.stale(now, expires_s) and "its file was left unreadable"
    else:
        why = found.stale(now, expires_s)
    if why is None:
        raise _busy(lake, found)
    if not file.take_over(found, owner):  # another writer took it over first
        raise _busy(lake, file.read() or owner)
    log.warning("%s: taking over the lake's lease (%s)", lake.base, why)
    return Lease(file, owner, on_lost)


def refuse_if_held(lake: ProgramLake, expires_s: float = EXPIRES_S) -> None:
    """``LakeBusy`` if a live writer holds ``lake``'s lease: a check before starting
    anything (``take`` decides)."""
    found = lease_file(lake).read()
    if found is not None and found.stale(time.time(), expires_s) is None:
        raise _busy(lake, found)


def lease_file(lake: ProgramLake) -> LeaseFile:
    location = join_path(lake.base, LEASE_FILE)
    if is_object_store(location):
        return ObjectLeaseFile(location)
    return LocalLeaseFile(Path(location))


def _busy(lake: ProgramLake, owner: Owner) -> LakeBusy:
    return LakeBusy(
        f"{lake.base} is being written by another Fixflow stream: {owner.describe()}; stop "
        f"it first (a stale lease is taken over after {EXPIRES_S:g} s without a heartbeat)"
    )


class LocalLeaseFile:
    """A lease on a local disk: ``O_EXCL`` creates it, a rename replaces it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)

    def create(self, owner: Owner) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return _create(self.path, owner)

    def read(self) -> Owner | None:
        return _read(self.path)

    def modified(self, default: float) -> float:
        return _modified(self.path, default)

    def take_over(self, stale: Owner | None, owner: Owner) -> bool:
        return _set_aside(self.path, stale) and _create(self.path, owner)

    def renew(self, owner: Owner) -> bool:
        found = _read(self.path)
        if found is None or found.id != owner.id:
            return False
        _write_replacing(self.path, owner)
        return True

    def remove(self, owner: Owner) -> None:
        found = _read(self.path)
        if found is not None and found.id == owner.id:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


class ObjectLeaseFile:
    """A lease in an object store: conditional writes in place of ``O_EXCL`` and rename —
    created only if absent (``If-None-Match: *``), replaced only if unchanged since it was
    read or last written (``If-Match: <etag>``)."""

    def __init__(self, location: str) -> None:
        from obstore.store import from_url

        bucket_url, self.key = split_location(location)
        self.where = location
        self.store = from_url(bucket_url)
        self._seen: str | None = None
        """The etag of what ``read`` found (what ``take_over`` replaces)."""
        self._written: str | None = None
        """The etag of our own last write (what ``renew`` replaces)."""

    def create(self, owner: Owner) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError

        try:
            self._written = obstore.put(self.store, self.key, _json(owner), mode="create")["e_tag"]
        except AlreadyExistsError:
            return False
        return True

    def read(self) -> Owner | None:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            got = obstore.get(self.store, self.key)
        except (NotFoundError, FileNotFoundError):
            self._seen = None
            return None
        self._seen = got.meta["e_tag"]
        return _owner(bytes(got.bytes()).decode("utf-8", "replace"))

    def modified(self, default: float) -> float:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            return obstore.head(self.store, self.key)["last_modified"].timestamp()
        except (NotFoundError, FileNotFoundError):
            return default

    def take_over(self, stale: Owner | None, owner: Owner) -> bool:
        if self._seen is None:  # gone since: whoever creates it first has it
            return self.create(owner)
        return self._replace(self._seen, owner)

    def renew(self, owner: Owner) -> bool:
        return self._written is not None and self._replace(self._written, owner)

    def remove(self, owner: Owner) -> None:
        import obstore

        found = self.read()
        if found is not None and found.id == owner.id:
            obstore.delete(self.store, self.key)

    def _replace(self, etag: str, owner: Owner) -> bool:
        import obstore
        from obstore.exceptions import NotFoundError, PreconditionError

        try:
            result = obstore.put(self.store, self.key, _json(owner), mode={"e_tag": etag})
        except (PreconditionError, NotFoundError, FileNotFoundError):
            return False
        self._written = result["e_tag"]
        return True


def _json(owner: Owner) -> bytes:
    return json.dumps(asdict(owner)).encode("utf-8")


def _owner(text: str) -> Owner | None:
    try:
        return Owner(**json.loads(text))
    except (ValueError, TypeError):
        return None


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
        return _owner(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
