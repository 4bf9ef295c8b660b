"""Streaming golden cases (tests/streams/<name>/) through the in-memory source: the steps of
inserts and deletes are sent to a ``MemorySource`` (Kafka-shaped records, no broker, no
streaming query) and run by the stream's own ``BatchPipeline`` (the real ingest, the
Maintainer's epoch and every Delta commit) on the shared SparkSession; the Delta result
tables are compared after each step with the expected files (computed independently, see
tests/streams/_tools/make_streams.py), with the reference oracle on the current facts, and
the EDB with the facts. A step with ``expect_strategy`` in its step.toml also asserts
which strategy the recursive strata ran in its epochs; such a case runs with the elastic
switch off, as the Maintainer's tests do, so that a slow update is not abandoned for a
bootstrap. test_stream_golden.py runs a few cases through the real broker."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from fixflow.pipeline.lake.lakehouse import ProgramLake, read_table
from fixflow.pipeline.stream.program import ProgramStream
from streams.harness import (
    ThroughMemory,
    case_names,
    load_case,
    memory_config,
    mismatches_with_expected,
    run_case,
    step_messages,
)


@pytest.mark.parametrize("name", case_names())
def test_stream_golden(name: str, spark: Any, tmp_path: Path) -> None:
    run_case(name, spark, memory_config(tmp_path / "lake"), ThroughMemory())


@pytest.mark.parametrize(("name", "mode"), [("cc", "async")])
def test_stream_golden_on_the_sharded_engines(
    name: str, mode: str, spark: Any, tmp_path: Path
) -> None:
    """``[engine] mode = "async"``/``"hybrid"``: every epoch (inserts and deletes) resumes
    the relation on the sharded engine, with the same results step by step."""
    config = memory_config(tmp_path / "lake")
    config = replace(config, engine=replace(config.engine, mode=mode, shards=2))
    stream = run_case(name, spark, config, ThroughMemory())
    engine = stream.maintainer.engine
    assert engine.choices[name][0] == mode, engine.choices  # type: ignore[attr-defined]


def delta_versions(lake: ProgramLake) -> dict[str, int]:
    """The version of every Delta table of a program's lake, by its path."""
    tables = sorted(p.parent for p in Path(lake.base).rglob("_delta_log"))
    return {str(t): DeltaTable(str(t)).version() for t in tables}


@pytest.mark.parametrize("name", ["tc_cycle_deletion"])
def test_a_batch_replayed_after_a_restart_changes_nothing(
    name: str, spark: Any, tmp_path: Path
) -> None:
    """A restart that runs the last batch again (as Spark does when a crash came after the
    commits but before its checkpoint did): a new ``ProgramStream`` on the same lake, the
    same query id and batch id. Every commit of the batch is already in its table, so no
    table gets a new version and the results stay those of the last step."""
    config = memory_config(tmp_path / "lake")
    memory = ThroughMemory()
    first = run_case(name, spark, config, memory)
    versions = delta_versions(first.lake)
    last = len(memory.source.batches) - 1
    restarted = ProgramStream(spark, config, first.program_file)
    result = memory.source.replay(restarted.batch_pipeline(), last)
    assert result.replayed
    assert delta_versions(first.lake) == versions
    case = load_case(name)
    assert not mismatches_with_expected(first.lake, case.steps[-1].expected, case.tolerance)


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


def test_a_capped_stream_commits_partial_results(spark: Any, tmp_path: Path) -> None:
    """`[engine] max_iterations = 3` stops the counter's bootstrap: `n`'s result commit
    carries `fixflow.partial` (its stratum, cap and rounds); `one`, which reads nothing
    capped, does not."""
    program_file = tmp_path / "counter.dl"
    program_file.write_text(CAPPED_COUNTER)
    config = memory_config(tmp_path / "lake")
    config = replace(config, engine=replace(config.engine, max_iterations=3))
    stream = ProgramStream(spark, config, program_file)
    ThroughMemory()(stream, step_messages({"start": [(0,)]}, {}))
    assert read_table(stream.lake.results("n")).num_rows == 3  # type: ignore[union-attr]
    [last] = DeltaTable(stream.lake.results("n")).history(limit=1)
    [entry] = json.loads(last["fixflow.partial"])
    assert (entry["relations"], entry["cap"], entry["rounds"]) == (["n"], 3, 3)
    [other] = DeltaTable(stream.lake.results("one")).history(limit=1)
    assert "fixflow.partial" not in other


PAGERANK = Path(__file__).resolve().parents[2] / "examples" / "powerlog_p2b_pagerank.dl"


def test_a_sum_commit_records_its_residual(spark: Any, tmp_path: Path) -> None:
    """A `sum` MRA relation's result commit records the termination measure its stratum
    reached and the clause it met (`fixflow.residual`), the `fixflow_residual` gauge holds
    the same measure, and `fixflow show`'s commit lines say it; a min relation's commit has
    no residual."""
    from fixflow.pipeline.lake.results import CommitInfo
    from fixflow.pipeline.stream.metrics import Metrics

    metrics = Metrics()
    stream = ProgramStream(spark, memory_config(tmp_path / "lake"), PAGERANK, metrics)
    edges = [(1, 2), (1, 3), (2, 3), (3, 1), (4, 3)]
    nodes = [(n,) for n in range(1, 5)]
    ThroughMemory()(stream, step_messages({"edge": edges, "node": nodes}, {}))
    [last] = DeltaTable(stream.lake.results("rank")).history(limit=1)
    entry = json.loads(last["fixflow.residual"])
    assert entry["clause"] == "{sum[Δry] < 1e-06}"
    assert 0 <= entry["measure"] < 1e-6
    gauge = metrics.registry.get_sample_value("fixflow_residual", {"relation": "rank"})
    assert gauge == entry["measure"]
    info = CommitInfo(1, None, None, {"residual": last["fixflow.residual"]})
    assert info.describe()[-1] == (
        f"residual: termination measure {entry['measure']:.3g} at this commit "
        "(clause {sum[Δry] < 1e-06})"
    )
