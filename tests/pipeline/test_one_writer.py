"""One writer per program's lake, through `fixflow run`: a second run of the same program on
the same lake refuses in one line, before it starts Spark; after ``kill -9`` of the first, a
new run takes the lease over at once (its owner's process is gone) and completes the
results."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from fixflow.checker.parser import parse
from fixflow.pipeline.config import Config
from fixflow.pipeline.lake.lakehouse import ProgramLake
from streams.cli import BATCH_LINE, FIXFLOW, FixflowRun, write_conf
from streams.harness import STREAMS, isolated_config, oracle, publish, result_rows

PROGRAM = STREAMS / "tc" / "program.dl"


def test_a_second_run_is_refused_and_a_killed_runs_lease_is_taken_over(
    broker: Config, tmp_path: Path
) -> None:
    config = isolated_config(broker, tmp_path / "lake")
    conf = write_conf(tmp_path / "run.toml", config)
    program = parse(PROGRAM.read_text(), str(PROGRAM))
    arcs = {(1, 2), (2, 3), (3, 4)}
    publish(config, program, [("arc", a, "insert") for a in sorted(arcs)])
    first = FixflowRun.start(PROGRAM, conf, tmp_path / "first.out")
    try:
        first.wait_until(lambda: BATCH_LINE.search(first.output), "the first batch")
        started = time.monotonic()
        second = subprocess.run(
            [str(FIXFLOW), "run", str(PROGRAM), "--conf", str(conf)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        refused_s = time.monotonic() - started
        assert second.returncode == 1, second.stdout + second.stderr
        lake = ProgramLake.for_program(config.lake.path, PROGRAM)
        assert second.stderr.splitlines() == [
            f"fixflow run: {lake.base} is being written by another Fixflow stream: pid "
            f"{first.process.pid} on {os.uname().nodename} (since "
            + second.stderr.split("(since ", 1)[1].split(")", 1)[0]
            + "); stop it first (a stale lease is taken over after 30 s without a heartbeat)"
        ]
        assert second.stdout == "" and refused_s < 15, "refused before starting Spark"
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=30)
    finally:
        first.kill_if_running()
    more = {(4, 5)}
    publish(config, program, [("arc", a, "insert") for a in sorted(more)])
    third = FixflowRun.start(PROGRAM, conf, tmp_path / "third.out", available_now=True)
    try:
        assert third.process.wait(timeout=600) == 0, third.output[-3000:]
    finally:
        third.kill_if_running()
    gone = f"{lake.base}: taking over the lake's lease (pid {first.process.pid} is gone)"
    assert gone in third.output, third.output[-3000:]
    assert result_rows(lake, "tc") == oracle(program, {"arc": arcs | more})["tc"]
