"""Spark's streaming checkpoint for a lake in an object store: Spark writes a local working
copy (``ProgramLake.checkpoints``), and this copies it into the lake
(``ProgramLake.stored_checkpoints``).

Spark reaches object stores through Hadoop's S3A connector (hadoop-aws), a Maven jar this
project cannot assume; delta-rs and Arrow reach them natively. So Spark keeps its offset and
commit logs on a local disk, and the lake holds the durable copy:

- ``restore`` (before the query starts, under the lake's lease) makes the local copy equal to
  the lake's: a new machine, or one whose copy is older than another writer's, starts where
  the lake says.
- ``push`` (at the start of each batch, before any of its Delta commits) uploads what Spark
  wrote since: the batch's ``offsets/<N>`` and the previous batch's ``commits/<N-1>``, and
  removes from the lake what Spark purged.

Why that order is enough: a batch's Delta commits happen only after its offsets are in the
lake, so a restart on any machine replays the same batch over the same offsets and the
idempotent commits (``lakehouse.BatchCommit``) skip what it had already committed. The last
batch's commit log reaches the lake with the next batch or at ``push`` when the stream stops;
without it, the restart replays that batch once, committing nothing twice.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pyarrow.fs as pafs

from fixflow.pipeline.lake.lakehouse import ProgramLake, filesystem_of

log = logging.getLogger(__name__)

_TEMPORARY = (".tmp",)
"""Files Spark is still writing (it renames them into place)."""


class CheckpointMirror:
    """The durable copy, in the lake, of one program's local streaming checkpoints."""

    def __init__(self, local: str, stored: str) -> None:
        self.local = Path(local)
        self.filesystem, self.stored = filesystem_of(stored)
        self._pushed: dict[str, tuple[int, int]] = {}
        """Relative path → (size, mtime_ns) of each local file as last pushed."""

    @classmethod
    def of(cls, lake: ProgramLake) -> CheckpointMirror | None:
        """The mirror of ``lake``'s checkpoints, or None when Spark writes them in place."""
        if lake.local_root is None:
            return None
        return cls(lake.checkpoints, lake.stored_checkpoints)

    def restore(self) -> None:
        """Make the local copy the lake's (the local one is replaced)."""
        shutil.rmtree(self.local, ignore_errors=True)
        self.local.mkdir(parents=True, exist_ok=True)
        self._pushed.clear()
        for relative in self._stored_files():
            target = self.local / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with self.filesystem.open_input_stream(f"{self.stored}/{relative}") as source:
                target.write_bytes(bytes(source.read()))
            self._pushed[relative] = _signature(target)
        log.info("restored %d checkpoint files from %s", len(self._pushed), self.stored)

    def push(self) -> None:
        """Upload the local files that are new or changed since the last push; remove from
        the lake those Spark removed."""
        present: dict[str, tuple[int, int]] = {}
        for path in self.local.rglob("*"):
            if path.is_file() and not path.name.endswith(_TEMPORARY):
                present[path.relative_to(self.local).as_posix()] = _signature(path)
        for relative, signature in present.items():
            if self._pushed.get(relative) != signature:
                self._upload(relative)
        for relative in set(self._pushed) - set(present):
            self.filesystem.delete_file(f"{self.stored}/{relative}")
        self._pushed = present

    def _upload(self, relative: str) -> None:
        target = f"{self.stored}/{relative}"
        self.filesystem.create_dir(target.rsplit("/", 1)[0], recursive=True)
        with self.filesystem.open_output_stream(target) as sink:
            sink.write((self.local / relative).read_bytes())

    def _stored_files(self) -> list[str]:
        selector = pafs.FileSelector(self.stored, recursive=True, allow_not_found=True)
        prefix = len(self.stored) + 1
        return [
            info.path[prefix:]
            for info in self.filesystem.get_file_info(selector)
            if info.type == pafs.FileType.File
        ]


def _signature(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns
