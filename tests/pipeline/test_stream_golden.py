"""Streaming golden cases (tests/streams/<name>/): steps of inserts and deletes published to
the real broker, processed by the real pipeline (ProgramStream on the shared SparkSession,
one ``available_now`` run per step on one checkpoint), and the Delta result tables compared
after each step with the expected files (computed independently, see
tests/streams/_tools/make_streams.py) and with the reference oracle on the current facts.
A step with ``expect_strategy`` in its step.toml also asserts which strategy the recursive
strata ran in its epochs; such a case runs with the elastic switch off, as the Maintainer's
tests do, so that a slow update is not abandoned for a bootstrap."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fixflow.pipeline.config import Config
from fixflow.pipeline.lake.lakehouse import read_table
from fixflow.pipeline.stream.program import ProgramStream
from streams.harness import (
    StreamCase,
    apply_changes,
    case_names,
    edb_mismatches,
    isolated_config,
    load_case,
    mismatches_with_expected,
    mismatches_with_oracle,
    publish,
    run_available_now,
    step_messages,
    strategy_mismatches,
)

NO_SWITCH = 1e6
"""``[elastic] switch_fraction`` of the cases that expect strategies: never abandon."""


def test_every_case_has_the_acceptance_programs() -> None:
    names = case_names()
    assert {"sssp", "cc", "pagerank", "tc", "attend"} <= set(names)
    for name in names:
        case = load_case(name)
        assert case.steps and all(s.expected for s in case.steps), name
        assert any(s.deletes for s in case.steps), f"{name}: no step deletes anything"
        for step in case.steps:
            assert step.expect_strategy in (None, "update", "bootstrap"), (name, step.number)
    for name in ("sssp_chain_deletion", "cc_bridge_deletion", "tc_cycle_deletion"):
        assert any(s.deletes and s.expect_strategy == "update" for s in load_case(name).steps)
    pagerank = load_case("pagerank_hub_deletion")
    assert any("node" in s.deletes and s.expect_strategy == "update" for s in pagerank.steps)


def step_problems(
    stream: ProgramStream,
    case: StreamCase,
    facts: dict[str, set[Any]],
    expected: dict[str, list[Any]],
) -> dict[str, Any]:
    problems: dict[str, Any] = {}
    if bad := mismatches_with_expected(stream.lake, expected, case.tolerance):
        problems["expected"] = bad
    if bad := mismatches_with_oracle(case.program, stream.lake, facts, case.tolerance):
        problems["oracle"] = bad
    if bad := edb_mismatches(case.program, stream.lake, facts):
        problems["edb"] = bad
    for relation in case.program.outputs:
        declared = [a.name for a in case.program.declaration(relation).attributes]
        columns = read_table(stream.lake.results(relation)).schema.names  # type: ignore[union-attr]
        if columns != declared:
            problems[f"{relation} columns"] = f"{columns} != declared {declared}"
    return problems


@pytest.mark.parametrize("name", case_names())
def test_stream_golden(name: str, spark: Any, broker: Config, tmp_path: Path) -> None:
    stream_case(name, spark, isolated_config(broker, tmp_path / "lake"))


@pytest.mark.parametrize(("name", "mode"), [("cc", "async")])
def test_stream_golden_on_the_sharded_engines(
    name: str, mode: str, spark: Any, broker: Config, tmp_path: Path
) -> None:
    """``[engine] mode = "async"``/``"hybrid"``: every epoch (inserts and deletes) resumes
    the relation on the sharded engine, with the same results step by step."""
    config = isolated_config(broker, tmp_path / "lake")
    config = replace(config, engine=replace(config.engine, mode=mode, shards=2))
    stream = stream_case(name, spark, config)
    engine = stream.maintainer.engine
    assert engine.choices[name][0] == mode, engine.choices  # type: ignore[attr-defined]


def stream_case(name: str, spark: Any, config: Config) -> ProgramStream:
    """Publishes a case's steps one by one, each processed by one ``available_now`` run,
    and asserts the results after every step."""
    case = load_case(name)
    if any(step.expect_strategy for step in case.steps):
        config = replace(config, elastic=replace(config.elastic, switch_fraction=NO_SWITCH))
    stream = ProgramStream(spark, config, case.program_file)
    facts: dict[str, set[Any]] = {rel: set() for rel in case.program.inputs}
    failures = []
    for step in case.steps:
        before = len(stream.reports)
        sent = publish(config, case.program, step_messages(step.inserts, step.deletes))
        run_available_now(stream)
        apply_changes(facts, step.inserts, step.deletes)
        processed = sum(r.records for r in stream.reports[before:])
        problems = step_problems(stream, case, facts, step.expected)
        if processed != sent:
            problems["records"] = f"published {sent}, the batches read {processed}"
        if before == 0 and not any(step.deletes.values()):
            # Bootstrap = update from empty: a fresh stream's first batch of insertions is
            # loaded and evaluated once (not an empty load, then an update that outgrows it).
            first = stream.reports[0].epoch
            ran = {s.strategy for s in first.strata} if first is not None else set()
            if ran != {"bootstrap"}:
                problems["first batch"] = f"ran {sorted(ran)}, expected one bootstrap"
        if step.expect_strategy is not None:
            epochs = [r.epoch for r in stream.reports[before:]]
            if bad := strategy_mismatches(stream.report, epochs, step.expect_strategy):
                problems[f"strategy (expected {step.expect_strategy})"] = bad
        if problems:
            failures.append(f"step {step.number:02d} ({step.why}): {problems}")
    assert not failures, f"{name}:\n" + "\n".join(failures)
    return stream


CAPPED_COUNTER = """\
.decl start(x: number)
.input start
.decl n(x: number)
.output n
.decl one(x: number)
.output one
n(x) :- start(x).
n(x + 1) :- n(x), x < 10.
one(1).
"""


def test_a_capped_stream_commits_partial_results(
    spark: Any, broker: Config, tmp_path: Path
) -> None:
    """`[engine] max_iterations = 3` stops the counter's bootstrap: `n`'s result commit
    carries `fixflow.partial` (its stratum, cap and rounds); `one`, which reads nothing
    capped, does not."""
    import json

    from deltalake import DeltaTable

    from fixflow.checker.parser import parse

    program_file = tmp_path / "counter.dl"
    program_file.write_text(CAPPED_COUNTER)
    config = isolated_config(broker, tmp_path / "lake")
    config = replace(config, engine=replace(config.engine, max_iterations=3))
    stream = ProgramStream(spark, config, program_file)
    publish(config, parse(CAPPED_COUNTER, "counter.dl"), step_messages({"start": [(0,)]}, {}))
    run_available_now(stream)
    assert read_table(stream.lake.results("n")).num_rows == 3  # type: ignore[union-attr]
    [last] = DeltaTable(stream.lake.results("n")).history(limit=1)
    [entry] = json.loads(last["fixflow.partial"])
    assert (entry["relations"], entry["cap"], entry["rounds"]) == (["n"], 3, 3)
    [other] = DeltaTable(stream.lake.results("one")).history(limit=1)
    assert "fixflow.partial" not in other
