"""The ingest seam in a streaming query, end to end through the real broker, Spark and
Delta: bad records dead-lettered once across a crash and its replay, and the engine hook
run before the EDB commit (``stream.query``)."""

from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from fixflow.pipeline.broker.embedded import ensure_topics
from fixflow.pipeline.config import Config
from fixflow.pipeline.kafka.messages import encode_fact, fact_key
from fixflow.pipeline.kafka.source import read_stream
from fixflow.pipeline.lake.lakehouse import ProgramLake, read_table
from fixflow.pipeline.stream.ingest import IngestResult, ensure_edb_tables
from fixflow.pipeline.stream.metrics import Metrics
from fixflow.pipeline.stream.query import ingest_batch
from pipeline.test_ingest import BAD_KINDS, EDGE, PROGRAM, expected_edb, random_messages, rows


def _publish(config: Config, prefix: str, messages: list[Any]) -> list[tuple[str, int, int]]:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=config.kafka.bootstrap_servers, acks="all", linger_ms=10
    )
    futures = [
        producer.send(prefix + relation, key=key.encode() if key else None, value=value.encode())
        for relation, key, value, _ in messages
    ]
    producer.flush()
    producer.close()
    return [(m.topic, m.partition, m.offset) for m in (f.get(timeout=10) for f in futures)]


class CrashAfterCommit(RuntimeError):
    pass


def _run(
    spark: Any,
    config: Config,
    prefix: str,
    lake: ProgramLake,
    metrics: Metrics,
    results: list[IngestResult],
    crash_batch: int | None,
) -> Any:
    topics = [prefix + r for r in ("edge", "node", "bogus")]

    def handle(batch_df: Any, batch_id: int) -> None:
        result = ingest_batch(batch_df, batch_id, PROGRAM, lake, metrics, topic_prefix=prefix)
        result.commit_edb()
        results.append(result)
        if batch_id == crash_batch:
            raise CrashAfterCommit(f"simulated crash after committing batch {batch_id}")

    query = (
        read_stream(spark, config, topics, max_records_per_trigger=700)
        .writeStream.foreachBatch(handle)
        .option("checkpointLocation", lake.checkpoint())
        .trigger(availableNow=True)
        .start()
    )
    # The simulated crash surfaces from awaitTermination; query.exception() reports it.
    with contextlib.suppress(Exception):
        query.awaitTermination(180)
    return query.exception()


def test_bad_messages_dead_lettered_valid_facts_in_edb_and_replay_changes_nothing(
    spark: Any, broker: Config, tmp_path: Path
) -> None:
    prefix = f"ing{uuid.uuid4().hex[:6]}."
    config = replace(broker, kafka=replace(broker.kafka, topic_prefix=prefix))
    ensure_topics(config, [prefix + r for r in ("edge", "node", "bogus")])
    lake = ProgramLake(str(tmp_path / "lake"), "ingest")
    assert ensure_edb_tables(PROGRAM, lake) == ["edge", "node"]
    messages = random_messages(n_valid=1500, n_bad=1000)
    positions = _publish(config, prefix, messages)
    metrics = Metrics()

    # First run: the handler crashes right after committing batch 1.
    first: list[IngestResult] = []
    error = _run(spark, config, prefix, lake, metrics, first, crash_batch=1)
    assert error is not None and "simulated crash" in str(error)
    assert [r.batch_id for r in first] == [0, 1]
    versions = {rel: _version(lake.edb(rel)) for rel in ("edge", "node")}

    # Restart on the same checkpoint: Spark replays batch 1, then reads the rest.
    second: list[IngestResult] = []
    assert _run(spark, config, prefix, lake, metrics, second, crash_batch=None) is None
    replay = second[0]
    assert replay.batch_id == 1 and replay.replayed and not first[1].replayed
    assert replay.offsets == first[1].offsets
    for relation in ("edge", "node"):
        assert rows(replay.changes[relation].change.added) == rows(
            first[1].changes[relation].change.added
        )
        assert rows(replay.changes[relation].change.removed) == rows(
            first[1].changes[relation].change.removed
        )
    assert replay.edb_committed == [] and first[1].edb_committed
    assert len(second) >= 2, "2,500 records at 700 per trigger need more batches"

    # Every bad message is in the dead-letter table exactly once, with its reason.
    expected_bad = {pos: m[3] for pos, m in zip(positions, messages, strict=True) if m[3]}
    letters = read_table(lake.dead_letter)
    assert letters is not None
    found = [
        ((r["topic"], r["partition"], r["offset"]), r["kind"], r["reason"], r["value"])
        for r in letters.to_pylist()
    ]
    assert len(found) == 1000 == len({pos for pos, *_ in found})
    assert {pos: kind for pos, kind, _, _ in found} == expected_bad
    by_position = dict(zip(positions, messages, strict=True))
    assert all(value == by_position[pos][2] for pos, _, _, value in found)
    reasons = {kind: reason for _, kind, reason, _ in found}
    assert reasons["malformed_json"].startswith("malformed JSON")
    assert reasons["unknown_op"].startswith('unknown op "upsert"')
    assert reasons["unknown_relation"].startswith(f"topic '{prefix}bogus' is not an .input")

    # Every valid fact reached the EDB: nothing lost, nothing extra.
    for relation in ("edge", "node"):
        assert rows(read_table(lake.edb(relation))) == expected_edb(messages, relation)
    assert all(_version(lake.edb(rel)) >= versions[rel] for rel in versions)

    # Each batch commit records its batch id and the offsets it covers.
    infos = [h for h in _history(lake.dead_letter) if "fixflow.batch_id" in h]
    assert sorted(int(h["fixflow.batch_id"]) for h in infos) == sorted(
        {r.batch_id for r in first + second if r.dead_letters}
    )
    assert all(json.loads(h["fixflow.offsets"]) for h in infos)

    # Metrics count each message once, replay included.
    dead_total = sum(
        metrics.registry.get_sample_value(
            "fixflow_dead_letters_total", {"relation": rel, "reason": kind}
        )
        or 0
        for rel in ("edge", "node", "bogus")
        for kind in BAD_KINDS
    )
    assert dead_total == 1000
    valid_total = sum(
        metrics.registry.get_sample_value("fixflow_input_facts_total", {"relation": rel, "op": op})
        or 0
        for rel in ("edge", "node")
        for op in ("insert", "delete")
    )
    assert valid_total == 1500


def _version(path: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(path).version()


def _history(path: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    return DeltaTable(path).history()


def test_ingest_query_runs_the_engine_hook_before_the_edb_commit(
    spark: Any, broker: Config, tmp_path: Path
) -> None:
    from fixflow.pipeline.lake.lakehouse import already_committed, merge_changes
    from fixflow.pipeline.stream.ingest import topics_for
    from fixflow.pipeline.stream.query import start_ingest_query

    prefix = f"hdl{uuid.uuid4().hex[:6]}."
    config = replace(broker, kafka=replace(broker.kafka, topic_prefix=prefix))
    topics = topics_for(PROGRAM, prefix)
    assert topics == [f"{prefix}edge", f"{prefix}node"]
    ensure_topics(config, topics)
    edges = [(1, 2, 0.5), (1, 3, 1.0), (2, 3, 1.0), (1, 4, 2.0)]
    _publish(config, prefix, [("edge", fact_key(e), encode_fact(EDGE, e), None) for e in edges])
    lake = ProgramLake(str(tmp_path / "lake"), "ingest")
    metrics = Metrics()
    seen: list[tuple[int, bool]] = []

    def maintain(result: IngestResult) -> None:
        # A stand-in engine: reach(Y) :- edge(1, Y, _), insert-only.
        edb_path = lake.edb("edge")
        seen.append(
            (result.batch_id, already_committed(edb_path, result.commit.query_id, result.batch_id))
        )
        inserts = result.changes["edge"].change.added
        reach = pa.table(
            {"x": [r["dst"] for r in inserts.to_pylist() if r["src"] == 1]},
            schema=pa.schema([("x", pa.int64())]),
        )
        merge_changes(lake.results("reach"), ["x"], upserts=reach, commit=result.commit)

    config = replace(config, stream=replace(config.stream, max_records_per_trigger=2))
    query = start_ingest_query(spark, config, PROGRAM, lake, metrics, maintain, available_now=True)
    query.awaitTermination(120)
    assert query.exception() is None
    assert rows(read_table(lake.results("reach"))) == {(2,), (3,), (4,)}
    assert rows(read_table(lake.edb("edge"))) == set(edges)
    assert len(seen) >= 2, "4 facts at 2 per trigger"
    assert not any(committed for _, committed in seen), "EDB commit came first"
    assert metrics.registry.get_sample_value("fixflow_batches_committed_total") == len(seen)
    assert metrics.registry.get_sample_value("fixflow_batch_duration_seconds_count") == len(seen)
