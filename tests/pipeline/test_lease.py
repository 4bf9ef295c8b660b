"""The lake's lease (``lake.lease``): one writer per program's lake, on a real file system,
with real processes for the owner that is gone."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixflow.pipeline.lake.lakehouse import ProgramLake
from fixflow.pipeline.lake.lease import EXPIRES_S, LEASE_FILE, LakeBusy, refuse_if_held, take


def lease_file(lake: ProgramLake, **owner: object) -> Path:
    path = Path(lake.base) / LEASE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    fields = {"id": "other", "host": socket.gethostname(), "pid": os.getpid()}
    fields |= {"started": now, "heartbeat": now} | owner
    path.write_text(json.dumps(fields))
    return path


def test_a_second_writer_is_refused_naming_the_first(tmp_path: Path) -> None:
    lake = ProgramLake(str(tmp_path), "sssp")
    first = take(lake)
    try:
        with pytest.raises(LakeBusy) as refused:
            take(lake)
        message = str(refused.value)
        assert message.startswith(f"{lake.base} is being written by another Fixflow stream: ")
        assert f"pid {os.getpid()} on {socket.gethostname()}" in message
        assert "\n" not in message
        with pytest.raises(LakeBusy):
            refuse_if_held(lake)
    finally:
        first.release()
    assert not (Path(lake.base) / LEASE_FILE).exists()
    take(lake).release()  # free again


def test_a_lease_without_a_heartbeat_is_taken_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lake = ProgramLake(str(tmp_path), "cc")
    old = time.time() - EXPIRES_S - 5
    lease_file(lake, host="elsewhere", pid=1, heartbeat=old)
    refuse_if_held(lake)  # stale: no refusal
    with caplog.at_level(logging.WARNING, logger="fixflow.pipeline.lake.lease"):
        lease = take(lake)
    try:
        assert "taking over the lake's lease (its last heartbeat was 3" in caplog.text
        assert json.loads((Path(lake.base) / LEASE_FILE).read_text())["id"] == lease.owner.id
    finally:
        lease.release()


def test_the_lease_of_a_process_that_is_gone_is_taken_over_at_once(tmp_path: Path) -> None:
    lake = ProgramLake(str(tmp_path), "tc")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    lease_file(lake, pid=int(gone.stdout))  # fresh heartbeat, but its process has exited
    take(lake).release()


def test_a_live_lease_of_another_process_is_respected(tmp_path: Path) -> None:
    lake = ProgramLake(str(tmp_path), "tc")
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as other:
        try:
            lease_file(lake, pid=other.pid)
            with pytest.raises(LakeBusy, match=f"pid {other.pid} on "):
                take(lake)
        finally:
            other.kill()


def test_an_owner_whose_lease_was_taken_over_learns_it_at_its_next_heartbeat(
    tmp_path: Path,
) -> None:
    lake = ProgramLake(str(tmp_path), "pr")
    lost: list[str] = []
    lease = take(lake, on_lost=lost.append)
    assert lease.renew() and not lost
    path = lease_file(lake, host="elsewhere", pid=7)  # another writer, after a stall of ours
    assert not lease.renew()
    assert len(lost) == 1
    assert lost[0].startswith(
        f"{path}: the lake's lease was taken over (now held by pid 7 on elsewhere (since "
    )
    lease.release()
    assert path.exists(), "the other writer's lease stays"


def test_a_lease_file_being_written_counts_as_held(tmp_path: Path) -> None:
    lake = ProgramLake(str(tmp_path), "sg")
    path = Path(lake.base) / LEASE_FILE
    path.parent.mkdir(parents=True)
    path.write_text("")  # created (O_EXCL), its owner not yet written
    with pytest.raises(LakeBusy, match="a writer that is starting"):
        take(lake)
    stale = time.time() - EXPIRES_S - 1
    os.utime(path, (stale, stale))
    take(lake).release()
