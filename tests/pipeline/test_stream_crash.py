"""Exactly-once through a crash: `fixflow run` is killed with SIGKILL while facts arrive in
many small micro-batches, more facts are published while it is down, and a restart on the
same config (same checkpoint) with `--available-now` must leave the EDB equal to the net
published facts and the results equal to the oracle on them — no fact lost, none applied
twice — with no batch committed twice to any table."""

from __future__ import annotations

import random
import shutil
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from fixflow.checker.parser import parse
from fixflow.pipeline.config import Config
from fixflow.pipeline.lake.lakehouse import ProgramLake, batch_commits
from reference.golden import compare_rows
from streams.cli import STOPPED_LINE, FixflowRun, write_conf
from streams.harness import (
    STREAMS,
    Row,
    edb_mismatches,
    isolated_config,
    oracle,
    publish,
    result_rows,
)

WAVES = 6
OPS_PER_WAVE = 12
BATCHES_BEFORE_KILL = 2


def make_waves(seed: int = 5) -> list[list[tuple[str, Row, str]]]:
    """Undirected edges (both directions) on 20 vertices, inserted and deleted."""
    rng = random.Random(seed)
    present: set[tuple[int, int]] = set()
    waves = []
    for wave in range(WAVES):
        operations: list[tuple[str, Row, str]] = []
        for _ in range(OPS_PER_WAVE // 2):
            if wave and present and rng.random() < 0.3:
                a, b = rng.choice(sorted(present))
                op = "delete"
                present.discard((a, b))
            else:
                a, b = sorted(rng.sample(range(1, 21), 2))
                op = "insert"
                present.add((a, b))
            operations += [("edge", (a, b), op), ("edge", (b, a), op)]
        waves.append(operations)
    return waves


def net_facts(operations: list[tuple[str, Row, str]]) -> set[Row]:
    facts: set[Row] = set()
    for _, row, op in operations:
        (facts.add if op == "insert" else facts.discard)(row)
    return facts


def duplicate_batches(table_path: str) -> list[Any]:
    """(query id, batch id) pairs committed more than once to one table."""
    seen = Counter(
        (h["fixflow.query_id"], h["fixflow.batch_id"]) for h in batch_commits(table_path)
    )
    return [key for key, count in seen.items() if count > 1]


def test_sigkill_mid_stream_then_restart_loses_and_repeats_nothing(
    broker: Config, tmp_path: Path
) -> None:
    config = isolated_config(broker, tmp_path / "lake")
    program_file = Path(shutil.copy(STREAMS / "cc" / "program.dl", tmp_path / "cc.dl"))
    program = parse(program_file.read_text(), str(program_file))
    lake = ProgramLake.for_program(config.lake.path, program_file)
    conf = write_conf(
        tmp_path / "run.toml",
        config,
        trigger_ms=100,
        max_records_per_trigger=OPS_PER_WAVE + 8,
        adaptive=False,
    )
    waves = make_waves()
    published: list[tuple[str, Row, str]] = []

    first = FixflowRun.start(program_file, conf, tmp_path / "first.out")
    try:
        first.wait_until(lambda: "checkpoints" in first.output, "the pipeline to start", 180)
        waves_left = list(waves)
        while waves_left and len(first.batches()) < BATCHES_BEFORE_KILL:
            wave = waves_left.pop(0)
            publish(config, program, wave)
            published += wave
            time.sleep(0.5)
        first.wait_until(
            lambda: len(first.batches()) >= BATCHES_BEFORE_KILL,
            f"{BATCHES_BEFORE_KILL} batches",
            240,
        )
        killed_at = first.stop(signal.SIGKILL)
    finally:
        first.kill_if_running()
    assert killed_at == -signal.SIGKILL
    read_before_kill = sum(records for _, records in first.batches())
    for wave in waves_left:  # published while the pipeline is down
        publish(config, program, wave)
        published += wave
    assert read_before_kill < len(published), "the kill came after everything was processed"

    second = FixflowRun.start(program_file, conf, tmp_path / "second.out", available_now=True)
    try:
        code = second.process.wait(timeout=400)
    finally:
        second.kill_if_running()
    assert code == 0, second.output[-3000:]
    assert STOPPED_LINE.findall(second.output) == [str(len(second.batches()))]

    facts = {"edge": net_facts(published)}
    assert not edb_mismatches(program, lake, facts), "EDB differs from the net published facts"
    fresh = sorted(oracle(program, facts)["cc"])
    assert not compare_rows(result_rows(lake, "cc"), fresh, 0.0)
    for table in (lake.edb("edge"), lake.results("cc")):
        assert not duplicate_batches(table), f"{table}: a batch committed twice"
    # every record was read by the first run or the restart (the replayed batch twice)
    first_ids = {batch for batch, _ in first.batches()}
    replayed = [n for batch, n in second.batches() if batch in first_ids]
    read = read_before_kill + sum(n for _, n in second.batches()) - sum(replayed)
    assert read == len(published), (first.output[-1500:], second.output[-1500:])
