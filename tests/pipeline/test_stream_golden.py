"""Streaming golden cases end to end through the real broker: a few cases of
tests/streams/<name>/ whose steps are published to the embedded broker and processed by the
real pipeline (ProgramStream on the shared SparkSession, one ``available_now`` run of the
Kafka query per step on one checkpoint), checked after each step as
test_stream_golden_memory.py checks every case through the in-memory source
(``streams.harness.run_case``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fixflow.pipeline.config import Config
from streams.harness import case_names, isolated_config, load_case, run_case, through_broker

THROUGH_THE_BROKER = ["sssp", "cc_bridge_deletion"]
"""The MRA case and a case whose deletions must run as updates: what the Kafka transport
adds (topics, offsets, the query's checkpoint and id) is the same for every case, and each
case costs a streaming query per step here; every case runs through memory."""


def test_every_case_has_the_acceptance_programs() -> None:
    names = case_names()
    assert {"sssp", "cc", "pagerank", "tc", "attend"} <= set(names)
    assert set(THROUGH_THE_BROKER) <= set(names)
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


@pytest.mark.parametrize("name", THROUGH_THE_BROKER)
def test_stream_golden(name: str, spark: Any, broker: Config, tmp_path: Path) -> None:
    run_case(name, spark, isolated_config(broker, tmp_path / "lake"), through_broker)
