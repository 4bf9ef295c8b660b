"""`[stream] consistency = "async"` end to end: the real broker, Spark and Delta.

A 12-node path with heavy arcs (the fresh stream's first batch: its bootstrap, which
converges), then light shortcuts: with one propagation round per batch the shortest
distances need several epochs. Each batch commits after its bounded work with
``fixflow.provisional = true`` and the pending deltas in ``state/sp``; ``settle`` (what
``fixflow run --available-now`` does before exiting, and what the idle loop of ``run``
does between batches) carries them on until the results equal the oracle, and the commit
that completes convergence says ``false``.

Both tests run the sync engine, whose "round" is one propagation step: on the default
``hybrid`` engine a round is a stage, and one stage runs the path's shard to local
quiescence, so nothing is left pending (the batch commits converged results)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from fixflow.checker.parser import parse
from fixflow.pipeline.config import Config
from fixflow.pipeline.lake.lakehouse import ProgramLake, read_table
from fixflow.pipeline.stream.program import ProgramStream
from fixflow.pipeline.stream.session import format_batch
from operators.test_maintain import SSSP as PROGRAM  # the same program as the Maintainer's
from streams.cli import FixflowRun, write_conf
from streams.harness import (
    apply_changes,
    isolated_config,
    mismatches_with_oracle,
    publish,
    run_available_now,
    step_messages,
)

PATH = [(i, i + 1, 10.0) for i in range(1, 12)]


def _newest_flag(path: str) -> str | None:
    return DeltaTable(path).history(1)[0].get("fixflow.provisional")


def test_async_batches_commit_provisional_results_then_converge(
    spark: Any, broker: Config, tmp_path: Path
) -> None:
    program_file = tmp_path / "sp_async.dl"
    program_file.write_text(PROGRAM)
    config = isolated_config(
        broker, tmp_path / "lake", consistency="async", async_rounds_per_batch=1
    )
    # No elastic switch to a (converging) bootstrap, however slow the shared machine is.
    config = replace(config, elastic=replace(config.elastic, switch_fraction=1e6))
    config = replace(config, engine=replace(config.engine, mode="sync"))
    stream = ProgramStream(spark, config, program_file)
    program = stream.program
    facts: dict[str, set[Any]] = {"warc": set()}
    results, state = stream.lake.results("sp"), stream.lake.state("sp")
    # The first batch into the fresh stream is its bootstrap (bootstrap = update from
    # empty), and a bootstrap converges.
    publish(config, program, step_messages({"warc": PATH}, {}))
    run_available_now(stream)
    apply_changes(facts, {"warc": PATH}, {})
    assert not stream.reports[-1].provisional, format_batch(stream.reports[-1])
    assert mismatches_with_oracle(program, stream.lake, facts, 0.0) == {}
    # Then each shortcut is an update of one round per batch: provisional until settled.
    for step in ([(1, 3, 1.0)], [(3, 9, 1.0)]):
        publish(config, program, step_messages({"warc": step}, {}))
        before = len(stream.reports)
        run_available_now(stream)
        apply_changes(facts, {"warc": step}, {})
        batches = stream.reports[before:]
        assert batches and batches[-1].provisional, [format_batch(r) for r in batches]
        assert _newest_flag(results) == "true"
        pending = read_table(state)
        assert pending is not None and pending.num_rows > 0
        assert pending.schema.names == ["node", "c", "pending_delta"]
        assert mismatches_with_oracle(program, stream.lake, facts, 0.0), "converged too early"
        epochs = stream.settle()
        assert epochs >= 2
        assert all(r.between_batches for r in stream.reports[-epochs:])
        assert "carrying pending deltas on" in format_batch(stream.reports[-epochs])
        assert mismatches_with_oracle(program, stream.lake, facts, 0.0) == {}
        assert _newest_flag(results) == "false"
        assert read_table(state).num_rows == 0  # type: ignore[union-attr]


def test_fixflow_run_converges_while_idle(broker: Config, tmp_path: Path) -> None:
    """`fixflow run` (continuous) on an async config: no input arrives after the shortcut,
    yet the run carries the pending deltas on between batches until the results converge."""
    program_file = tmp_path / "sp_idle.dl"
    program_file.write_text(PROGRAM)
    config = isolated_config(broker, tmp_path / "lake")
    conf = write_conf(
        tmp_path / "async.toml",
        config,
        trigger_ms=200,
        stream_keys='consistency = "async"\nasync_rounds_per_batch = 1',
        sections='[elastic]\nswitch_fraction = 1e6\n[engine]\nmode = "sync"',
    )
    lake = ProgramLake.for_program(config.lake.path, program_file)
    parsed = parse(PROGRAM, str(program_file))
    publish(config, parsed, step_messages({"warc": PATH}, {}))
    run = FixflowRun.start(program_file, conf, tmp_path / "run.out")
    try:
        facts: dict[str, set[Any]] = {"warc": set(PATH)}

        def converged() -> bool:
            table = read_table(lake.results("sp"))
            return (
                table is not None
                and table.num_rows > 0
                and mismatches_with_oracle(parsed, lake, facts, 0.0) == {}
                and _newest_flag(lake.results("sp")) in (None, "false")
            )

        # Hang guards: a sync round per epoch is ~10 s beside two other test workers on
        # 2 cores, and the path needs about a dozen epochs.
        run.wait_until(converged, "the path's distances", timeout_s=600)
        shortcut = [(1, 3, 1.0)]
        publish(config, parsed, step_messages({"warc": shortcut}, {}))
        facts["warc"] |= set(shortcut)
        run.wait_until(converged, "the shortcut's distances, converged while idle", 600)
        assert _newest_flag(lake.results("sp")) == "false"
        assert "carrying pending deltas on" in run.output
        assert "(provisional: deltas pending)" in run.output
        assert run.stop() == 0, run.output[-3000:]
    finally:
        run.kill_if_running()
