"""SIGTERM while records are queued: the batch in flight finishes and commits, and no batch
starts after it (``RunningStream.close``: a batch Spark starts later raises
``StopRequested`` before reading anything and is run by the next start)."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

from fixflow.checker.parser import parse
from fixflow.pipeline.config import Config
from fixflow.pipeline.lake.lakehouse import ProgramLake, batch_commits
from streams.cli import BATCH_LINE, STOPPED_LINE, FixflowRun, write_conf
from streams.harness import STREAMS, isolated_config, oracle, publish, result_rows

PROGRAM = STREAMS / "tc" / "program.dl"
PER_BATCH = 100
BATCHES = 15
SIGNALLED = re.compile(r"signal 15: stopping \((?:batch (\d+) in flight|no batch in flight);")


def committed_batches(lake: ProgramLake) -> list[int]:
    return sorted(int(info["fixflow.batch_id"]) for info in batch_commits(lake.edb("arc")))


def test_sigterm_with_a_backlog_commits_the_batch_in_flight_and_starts_no_other(
    broker: Config, tmp_path: Path
) -> None:
    config = isolated_config(broker, tmp_path / "lake")
    conf = write_conf(
        tmp_path / "run.toml",
        config,
        trigger_ms=100,
        max_records_per_trigger=PER_BATCH,
        adaptive=False,
    )
    program = parse(PROGRAM.read_text(), str(PROGRAM))
    arcs = {(2 * i, 2 * i + 1) for i in range(PER_BATCH * BATCHES)}  # tc = arc: quick batches
    publish(config, program, [("arc", a, "insert") for a in sorted(arcs)])
    lake = ProgramLake.for_program(config.lake.path, PROGRAM)

    run = FixflowRun.start(PROGRAM, conf, tmp_path / "first.out")
    try:
        run.wait_until(lambda: BATCH_LINE.search(run.output), "the first batch")
        signalled = time.monotonic()
        code = run.stop(signal.SIGTERM)
        exited_s = time.monotonic() - signalled
    finally:
        run.kill_if_running()
    output = run.output
    assert code == 0, output[-3000:]
    said = SIGNALLED.search(output)
    assert said, output[-3000:]
    printed = [int(b) for b, _ in BATCH_LINE.findall(output)]
    last = printed[-1]
    if said.group(1) is not None:
        assert int(said.group(1)) == last, "the batch in flight must be the last one to run"
    assert committed_batches(lake) == printed == list(range(last + 1))
    assert STOPPED_LINE.findall(output) == [str(len(printed))]
    assert len(printed) < BATCHES, "the backlog was meant to outlast the signal"
    assert exited_s < 60, f"exited {exited_s:.1f} s after SIGTERM"

    # Nothing was lost: the batch refused at the stop is the next run's first (which may
    # read the rest of the backlog at once).
    write_conf(conf, config, trigger_ms=100, adaptive=False)
    rest = FixflowRun.start(PROGRAM, conf, tmp_path / "second.out", available_now=True)
    try:
        assert rest.process.wait(timeout=600) == 0, rest.output[-3000:]
    finally:
        rest.kill_if_running()
    resumed = [int(b) for b, _ in BATCH_LINE.findall(rest.output)]
    assert resumed[0] == last + 1, rest.output[-3000:]
    assert committed_batches(lake) == list(range(resumed[-1] + 1))
    assert result_rows(lake, "tc") == oracle(program, {"arc": arcs})["tc"]
