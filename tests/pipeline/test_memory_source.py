"""The in-memory source: Kafka-shaped records, offsets per topic-partition, and batches
through the real ingest (validation, dead letters, normalization, the idempotent EDB
commits on Delta), without a broker or Spark. The engine's half runs in
test_stream_golden_memory.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from fixflow.checker.parser import parse
from fixflow.pipeline.kafka.messages import encode_fact, fact_key
from fixflow.pipeline.kafka.records import ARROW_SCHEMA
from fixflow.pipeline.lake.lakehouse import ProgramLake, read_table
from fixflow.pipeline.stream.ingest import IngestResult, ensure_edb_tables
from fixflow.pipeline.stream.memory_source import MemorySource, Sent
from fixflow.pipeline.stream.query import BatchPipeline

PROGRAM = parse(
    """
.decl edge(src: number, dst: number)
.input edge
.decl reach(x: number)
.output reach
reach(Y) :- edge(1, Y).
""",
    "memory.dl",
)
EDGE = PROGRAM.declaration("edge").attributes  # type: ignore[union-attr]


def edge(source: MemorySource, values: tuple[int, int], op: str = "insert") -> Sent:
    return source.send("edge", fact_key(values), encode_fact(EDGE, values, op))  # type: ignore[arg-type]


def pipeline(tmp_path: Path) -> BatchPipeline:
    lake = ProgramLake(str(tmp_path / "lake"), "memory")
    ensure_edb_tables(PROGRAM, lake)
    return BatchPipeline(PROGRAM, lake)


def rows(path: str) -> set[tuple[Any, ...]]:
    table = read_table(path)
    assert table is not None, path
    return {tuple(r.values()) for r in table.to_pylist()}


def test_offsets_count_per_topic_partition_and_a_key_keeps_its_partition() -> None:
    source = MemorySource(partitions=3)
    sent = [edge(source, (1, n % 4)) for n in range(12)]
    sent.append(source.send("other", None, "x"))
    for partition in {s.partition for s in sent if s.topic == "edge"}:
        offsets = [s.offset for s in sent if s.topic == "edge" and s.partition == partition]
        assert offsets == list(range(len(offsets)))
    by_key: dict[int, set[int]] = {}
    for n, s in enumerate(sent[:12]):
        by_key.setdefault(n % 4, set()).add(s.partition)
    assert all(len(partitions) == 1 for partitions in by_key.values())
    assert sent[-1] == Sent("other", sent[-1].partition, 0)
    assert source.pending == 13


def test_a_batch_is_read_as_the_kafka_source_reads_it(tmp_path: Path) -> None:
    source = MemorySource(partitions=2)
    edge(source, (1, 2))
    edge(source, (1, 3))
    result = source.run_batch(pipeline(tmp_path))
    assert result is not None
    [records] = source.batches
    assert records.schema == ARROW_SCHEMA
    assert records.column("timestamp").null_count == 0
    assert (result.batch_id, result.commit.query_id) == (0, source.query_id)
    covered = {t: {p: r for p, r in ps.items()} for t, ps in result.offsets.items()}
    assert sum(last - first + 1 for first, last in covered["edge"].values()) == 2
    assert source.run_batch(pipeline(tmp_path)) is None  # nothing pending: no batch


def test_batches_run_the_real_ingest(tmp_path: Path) -> None:
    work = pipeline(tmp_path)
    source = MemorySource()
    edge(source, (1, 2))
    edge(source, (1, 3))
    source.send("edge", None, "not json")
    source.send("nobody", None, "{}")
    first = source.run_batch(work)
    edge(source, (1, 2), "delete")
    edge(source, (1, 4))
    edge(source, (1, 4), "delete")  # the last operation on a fact wins
    second = source.run_batch(work)
    assert first is not None and second is not None
    assert (first.records, first.dead_letters, second.batch_id) == (4, 2, 1)
    assert rows(work.lake.edb("edge")) == {(1, 3)}
    letters = read_table(work.lake.dead_letter)
    assert letters is not None
    assert sorted(letters.column("kind").to_pylist()) == ["malformed_json", "unknown_relation"]


def test_max_records_splits_the_pending_records_into_batches(tmp_path: Path) -> None:
    work = pipeline(tmp_path)
    source = MemorySource()
    for n in range(5):
        edge(source, (1, n))
    results = source.run_available_now(work, max_records=2)
    assert [(r.batch_id, r.records) for r in results] == [(0, 2), (1, 2), (2, 1)]
    assert rows(work.lake.edb("edge")) == {(1, n) for n in range(5)}


def versions(lake: ProgramLake) -> dict[str, int]:
    paths = {"edge": lake.edb("edge"), "dead_letter": lake.dead_letter}
    return {name: DeltaTable(path).version() for name, path in paths.items()}


@pytest.mark.parametrize("batch", [0, 1])
def test_a_replayed_batch_changes_nothing(tmp_path: Path, batch: int) -> None:
    """The (query id, batch id) of every commit makes a replay (a restart running a batch
    again) a no-op, also when later batches were committed after it."""
    work = pipeline(tmp_path)
    source = MemorySource()
    edge(source, (1, 2))
    source.send("edge", None, "not json")
    source.run_batch(work)
    edge(source, (1, 2), "delete")
    edge(source, (1, 3))
    source.run_batch(work)
    before, edb = versions(work.lake), rows(work.lake.edb("edge"))
    replayed: IngestResult = source.replay(work, batch)
    assert replayed.replayed
    assert replayed.edb_committed == []
    assert versions(work.lake) == before
    assert rows(work.lake.edb("edge")) == edb == {(1, 3)}


def test_a_failed_batch_stays_in_the_log_to_be_replayed(tmp_path: Path) -> None:
    def fail(result: IngestResult) -> None:
        raise RuntimeError("the engine failed")

    work = pipeline(tmp_path)
    source = MemorySource()
    edge(source, (1, 2))
    failing = BatchPipeline(PROGRAM, work.lake, maintain=fail)
    with pytest.raises(RuntimeError, match="the engine failed"):
        source.run_batch(failing)
    assert source.pending == 0 and len(source.batches) == 1
    assert rows(work.lake.edb("edge")) == set()  # the EDB commit comes last: not made
    result = source.replay(work, 0)
    assert not result.replayed
    assert rows(work.lake.edb("edge")) == {(1, 2)}
