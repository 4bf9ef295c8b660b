"""`fixflow run` when the broker fails, with real broker stops and restarts: a Tansu broker
of the test's own on a free port (the session's broker must stay up for other tests).

The embedded broker keeps topics in memory, so a restart resets every log and gives the
broker a new cluster id. `[kafka] on_data_loss` decides what the stream then does: "fail"
stops it with one line, "resume" goes on from the start of the new logs (the EDB already
ingested stays: it lives in Delta)."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from fixflow.checker.parser import parse
from fixflow.pipeline.broker.embedded import start_broker, stop_broker
from fixflow.pipeline.config import Config, default_config
from fixflow.pipeline.lake.lakehouse import ProgramLake
from ports import free_port
from streams.cli import FixflowRun, probe, scrape, total, write_conf
from streams.harness import oracle, publish, result_rows

PROGRAM_FILE = Path(__file__).resolve().parent.parent / "streams" / "sssp" / "program.dl"
WAITING = "kafka: no broker answers at"
BACK = re.compile(r"^kafka: broker at \S+ answers again", re.MULTILINE)

Edge = tuple[int, int, float]
FIRST: list[Edge] = [(1, 2, 1.0), (2, 3, 1.0), (3, 4, 1.0), (1, 5, 4.0)]
SECOND: list[Edge] = [(4, 5, 0.5), (5, 6, 2.0), (6, 7, 1.0)]
"""Published after the broker restarted empty: the shortest paths need both waves."""


def _config(base: Path) -> Config:
    defaults = default_config()
    return replace(
        defaults,
        kafka=replace(defaults.kafka, bootstrap_servers=f"127.0.0.1:{free_port()}", embedded=False),
        lake=replace(defaults.lake, path=str(base / "lake")),
    )


def _publish(config: Config, edges: list[Edge]) -> None:
    program = parse(PROGRAM_FILE.read_text(), str(PROGRAM_FILE))
    publish(config, program, [("edge", edge, "insert") for edge in edges])


def _expected(edges: list[Edge]) -> set[tuple[object, ...]]:
    program = parse(PROGRAM_FILE.read_text(), str(PROGRAM_FILE))
    return oracle(program, {"edge": set(edges)})["sssp"]


def _program(base: Path) -> tuple[Path, ProgramLake]:
    program_file = Path(shutil.copy(PROGRAM_FILE, base / "sssp.dl"))
    return program_file, ProgramLake.for_program(str(base / "lake"), program_file)


def _results_are(lake: ProgramLake, expected: set[tuple[object, ...]]) -> bool:
    try:
        return result_rows(lake, "sssp") == expected
    except Exception:  # the table may be mid-commit or not there yet
        return False


def test_run_waits_for_the_broker_survives_a_restart_and_resumes_after_a_reset(
    tmp_path: Path,
) -> None:
    """Down at start: one line, not ready, fixflow_up 0. Up: facts flow. Restarted (memory:
    its logs are reset): one line each way, and with on_data_loss = "resume" the new log is
    read from its start, the skipped offsets named."""
    config = _config(tmp_path)
    program_file, lake = _program(tmp_path)
    port = free_port()
    conf = write_conf(
        tmp_path / "run.toml",
        config,
        metrics_port=port,
        kafka_keys='on_data_loss = "resume"\nbackoff_max_s = 1.0',
    )
    run = FixflowRun.start(program_file, conf, tmp_path / "run.out")
    try:
        run.wait_until(lambda: WAITING in run.output, "the line saying it waits", 120)
        assert probe(port, "/ready") == (503, {"state": "waiting", "detail": _detail(config)})
        assert probe(port, "/healthz")[0] == 200
        assert total(scrape(port), "fixflow_up") == 0
        start_broker(config)
        run.wait_until(lambda: BACK.search(run.output), "the line saying it resumes")
        _publish(config, FIRST)
        first = _expected(FIRST)
        # The first batch starts the JVM's work (bootstrap): slow on a loaded machine.
        run.wait_until(lambda: _results_are(lake, first), "the first wave's results", 900)
        assert probe(port, "/ready")[0] == 200
        stop_broker(config)
        run.wait_until(lambda: run.output.count(WAITING) == 2, "the second outage said")
        assert probe(port, "/ready")[0] == 503
        start_broker(config)
        run.wait_until(lambda: len(BACK.findall(run.output)) == 2, "the second return said")
        _publish(config, SECOND)
        both = _expected(FIRST + SECOND)
        run.wait_until(lambda: _results_are(lake, both), "results over both waves", 600)
        assert run.stop() == 0, run.output[-3000:]
    finally:
        run.kill_if_running()
        stop_broker(config)
    assert "the broker's log was reset" in run.output and "resuming at" in run.output
    assert "Traceback" not in run.output


def test_a_durable_broker_restarted_mid_stream_loses_and_repeats_nothing(tmp_path: Path) -> None:
    """[kafka] storage = "durable": the broker keeps its logs and cluster id over a restart,
    so the stream (on_data_loss = "fail") waits, goes on where it was, and reads every
    record exactly once."""
    durable = _config(tmp_path)
    config = replace(durable, kafka=replace(durable.kafka, storage="durable"))
    program_file, lake = _program(tmp_path)
    conf = write_conf(tmp_path / "run.toml", config, kafka_keys="backoff_max_s = 1.0")
    start_broker(config)
    run = FixflowRun.start(program_file, conf, tmp_path / "run.out")
    try:
        _publish(config, FIRST)
        first = _expected(FIRST)
        run.wait_until(lambda: _results_are(lake, first), "the first wave's results", 900)
        for restart in range(1, 3):
            stop_broker(config)
            run.wait_until(lambda n=restart: run.output.count(WAITING) == n, "the outage said")
            start_broker(config)
            run.wait_until(lambda n=restart: len(BACK.findall(run.output)) == n, "the return")
        _publish(config, SECOND)
        both = _expected(FIRST + SECOND)
        run.wait_until(lambda: _results_are(lake, both), "results over both waves", 600)
        assert run.stop() == 0, run.output[-3000:]
    finally:
        run.kill_if_running()
        stop_broker(config)
    assert sum(records for _, records in run.batches()) == len(FIRST) + len(SECOND)
    assert "lost" not in run.output and "Traceback" not in run.output


def _detail(config: Config) -> str:
    return f"Kafka broker {config.kafka.bootstrap_servers} unreachable"


@pytest.mark.parametrize("second", [SECOND[:1], SECOND + FIRST])
def test_a_reset_broker_stops_the_stream_in_one_line_by_default(
    tmp_path: Path, second: list[Edge]
) -> None:
    """on_data_loss = "fail": whether the new log is shorter than the checkpoint (its ends
    show the loss) or longer (only the new cluster id does), the run exits 1 with one line
    that names the partition and what to do; `--on-data-loss resume`, the flag it offers,
    then goes on from the new log without a config edit."""
    config = _config(tmp_path)
    program_file, lake = _program(tmp_path)
    conf = write_conf(tmp_path / "run.toml", config)
    start_broker(config)
    try:
        _publish(config, FIRST)
        first = FixflowRun.start(program_file, conf, tmp_path / "first.out", available_now=True)
        assert first.process.wait(timeout=300) == 0, first.output[-3000:]
        assert result_rows(lake, "sssp") == _expected(FIRST)
        stop_broker(config)
        start_broker(config)
        _publish(config, second)
        again = FixflowRun.start(program_file, conf, tmp_path / "again.out", available_now=True)
        assert again.process.wait(timeout=300) == 1, again.output[-3000:]
        assert result_rows(lake, "sssp") == _expected(FIRST), "nothing of the new log taken"
        if len(second) == 1:  # the flag's run once: a JVM start is dear
            resumed = FixflowRun.start(
                program_file, conf, tmp_path / "resumed.out", True, ["--on-data-loss", "resume"]
            )
            assert resumed.process.wait(timeout=300) == 0, resumed.output[-3000:]
            assert "resuming at" in resumed.output
            assert result_rows(lake, "sssp") == _expected(FIRST + second)
    finally:
        stop_broker(config)
    errors = [line for line in again.output.splitlines() if line.startswith("fixflow run:")]
    assert len(errors) == 1, again.output[-3000:]
    assert errors[0].startswith(
        "fixflow run: the stream stopped: records were lost before the stream read them: "
    )
    assert "`fixflow run --on-data-loss resume`" in errors[0]
    assert "Traceback" not in again.output
