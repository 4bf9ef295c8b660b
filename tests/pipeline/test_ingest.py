"""The foreachBatch ingest seam: validation, dead letters, normalization, idempotent EDB
commits, end to end through the real broker, Spark and Delta."""

from __future__ import annotations

import contextlib
import json
import math
import random
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from fixflow.checker.ast import Attribute
from fixflow.checker.parser import parse
from fixflow.pipeline.broker.embedded import ensure_topics
from fixflow.pipeline.config import Config
from fixflow.pipeline.kafka.messages import Fact, encode_fact, fact_key
from fixflow.pipeline.kafka.source import read_stream
from fixflow.pipeline.lake.delta import arrow_schema
from fixflow.pipeline.lake.lakehouse import ProgramLake, read_table
from fixflow.pipeline.stream.ingest import (
    IngestResult,
    _last_operations,
    _sorted_records,
    ensure_edb_tables,
    facts_table,
    ingest_batch,
    normalize,
)
from fixflow.pipeline.stream.metrics import Metrics

PROGRAM = parse(
    """
.decl edge(src: number, dst: number, w: float)
.input edge
.decl node(name: symbol)
.input node
.decl reach(x: number)
.output reach
reach(Y) :- edge(1, Y, _).
""",
    "ingest.dl",
)
EDGE = PROGRAM.declaration("edge").attributes  # type: ignore[union-attr]
NODE = PROGRAM.declaration("node").attributes  # type: ignore[union-attr]


def _rows(table: pa.Table | None) -> set[tuple[Any, ...]]:
    assert table is not None
    return {tuple(r.values()) for r in table.to_pylist()}


# ---------------------------------------------------------------- normalization alone


def test_last_operation_wins_and_noops_are_counted() -> None:
    before = pa.table({"name": ["a", "b"]})
    facts = [
        Fact(("a",), "insert"),
        Fact(("c",), "insert"),
        Fact(("c",), "delete"),
        Fact(("b",), "delete"),
        Fact(("b",), "insert"),
        Fact(("d",), "delete"),
        Fact(("e",), "delete"),
        Fact(("e",), "insert"),
        Fact(("a",), "delete"),
    ]
    node = (Attribute("name", "symbol"),)
    change = normalize("node", node, facts_table(facts, arrow_schema(node)), before)
    assert _rows(change.inserts) == {("e",)}
    assert _rows(change.deletes) == {("a",)}
    # b: net insert of a present fact; c, d: net delete of an absent fact.
    assert (change.noop_inserts, change.noop_deletes) == (1, 2)


def test_normalize_against_a_missing_table_types_per_declaration() -> None:
    facts = [Fact((1, 2, 0.5)), Fact((1, 2, 0.5), "delete"), Fact((2, 3, 1.0))]
    change = normalize("edge", EDGE, facts_table(facts, arrow_schema(EDGE)), None)
    assert change.inserts.schema == pa.schema(
        [("src", pa.int64()), ("dst", pa.int64()), ("w", pa.float64())]
    )
    assert _rows(change.inserts) == {(2, 3, 1.0)}
    assert change.noop_deletes == 1


def test_normalize_against_a_large_edb_equals_a_set_oracle() -> None:
    # More EDB rows than facts: normalization narrows the EDB by the facts' first exact
    # column before joining, so rows that share ``src`` but differ elsewhere must survive it.
    generator = random.Random(7)

    def row() -> tuple[int, int, float]:
        return (
            generator.randrange(25),
            100 + generator.randrange(25),
            generator.choice([0.5, 1.0]),
        )

    before_rows = {row() for _ in range(300)}
    ordered = sorted(before_rows)
    before = pa.table([pa.array(c) for c in zip(*ordered, strict=True)], names=["src", "dst", "w"])
    facts = [
        Fact(
            generator.choice([row(), generator.choice(ordered)]),
            generator.choice(["insert", "delete"]),
        )
        for _ in range(40)
    ]
    change = normalize("edge", EDGE, facts_table(facts, arrow_schema(EDGE)), before)
    last = {fact.values: fact.op for fact in facts}
    assert _rows(change.inserts) == {v for v, op in last.items() if op == "insert"} - before_rows
    assert _rows(change.deletes) == {v for v, op in last.items() if op == "delete"} & before_rows
    # What the EDB commit writes when the batch deletes (``RelationChanges.rows_after``).
    after = change.rows_after()
    assert after is not None and after.num_rows == len(_rows(after))
    assert _rows(after) == (before_rows - _rows(change.deletes)) | _rows(change.inserts)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(-2, 2),
            st.sampled_from([0.0, -0.0, 1.5]),
            st.sampled_from(["insert", "delete"]),
        ),
        max_size=25,
    )
)
def test_the_last_operation_per_fact_with_or_without_the_distinctness_shortcut(
    rows: list[tuple[int, int, float, str]],
) -> None:
    """Numeric facts skip the grouping when a hash tells them apart; either way every fact
    keeps its last operation, in the order of the last ones. Facts are told apart as
    Arrow's grouping does (0.0 and -0.0 are two facts): the hash puts them together, so the
    grouping decides."""
    facts = facts_table([Fact(r[:3], r[3]) for r in rows], arrow_schema(EDGE))
    last: dict[tuple[int, int, float, float], tuple[int, str]] = {}
    for position, (src, dst, w, op) in enumerate(rows):
        last[(src, dst, w, math.copysign(1.0, w))] = (position, op)
    ordered = sorted(last.items(), key=lambda item: item[1][0])
    expected = [(src, dst, w, sign, op) for (src, dst, w, sign), (_, op) in ordered]
    got = _last_operations(facts, arrow_schema(EDGE)).to_pylist()
    signs = [math.copysign(1.0, r["w"]) for r in got]
    assert [
        (r["src"], r["dst"], r["w"], sign, r["op"]) for r, sign in zip(got, signs, strict=True)
    ] == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2)), unique=True, max_size=5),
    st.lists(st.integers(0, 2), min_size=1, max_size=6),
    st.booleans(),
)
def test_records_read_in_order_are_kept_others_sorted(
    keys: list[tuple[str, int]], runs: list[int], shuffle: bool
) -> None:
    """``_sorted_records`` gives (topic, partition, offset) order whatever the input's, and
    an input in that order already is returned as it is."""
    rows = [
        {"topic": t, "partition": p, "offset": o}
        for t, p in keys
        for o in sorted(random.Random(len(runs)).sample(range(10), runs[0] + 1))
    ]
    if shuffle:
        random.Random(sum(runs)).shuffle(rows)
    table = pa.Table.from_pylist(
        rows, pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())])
    )
    expected = table.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )
    result = _sorted_records(table)
    assert result.to_pylist() == expected.to_pylist()
    if table.to_pylist() == expected.to_pylist():
        assert result is table


# ---------------------------------------------------------------- end to end


BAD_KINDS = (
    "malformed_json",
    "not_an_object",
    "unknown_attribute",
    "missing_attribute",
    "wrong_type",
    "unknown_op",
    "unknown_relation",
)


def _bad_message(i: int, rng: random.Random) -> tuple[str, str]:
    """(relation, value) of a bad message of kind BAD_KINDS[i % 7]."""
    kind = BAD_KINDS[i % len(BAD_KINDS)]
    edge = {"src": rng.randrange(9), "dst": rng.randrange(9), "w": 1.0}
    if kind == "malformed_json":
        return "edge", '{"src": 1, "dst":'
    if kind == "not_an_object":
        return "node", json.dumps(["n", i])
    if kind == "unknown_attribute":
        return "edge", json.dumps({**edge, "colour": "red"})
    if kind == "missing_attribute":
        return "edge", json.dumps({"src": 1, "w": 2.0})
    if kind == "wrong_type":
        variants = [{**edge, "src": "1"}, {**edge, "w": "heavy"}, {"name": 7}, {**edge, "dst": 2.5}]
        value = variants[i % len(variants)]
        return ("node" if "name" in value else "edge"), json.dumps(value)
    if kind == "unknown_op":
        return "node", json.dumps({"name": "x", "op": "upsert"})
    return "bogus", json.dumps({"name": "x"})


def _messages(
    n_valid: int, n_bad: int, seed: int = 7
) -> list[tuple[str, str | None, str, str | None]]:
    """(relation, key, value, expected dead-letter kind or None), interleaved at random."""
    rng = random.Random(seed)
    messages: list[tuple[str, str | None, str, str | None]] = []
    for _ in range(n_valid):
        op = "insert" if rng.random() < 0.7 else "delete"
        if rng.random() < 0.7:
            values: tuple[Any, ...] = (rng.randrange(8), rng.randrange(8), rng.choice([0.5, 2.0]))
            messages.append(("edge", fact_key(values), encode_fact(EDGE, values, op), None))
        else:
            values = (rng.choice("abcdefghij") * 2,)
            messages.append(("node", fact_key(values), encode_fact(NODE, values, op), None))
    for i in range(n_bad):
        relation, value = _bad_message(i, rng)
        key = None if i % 3 == 0 else f"bad-{i}"
        messages.append((relation, key, value, BAD_KINDS[i % len(BAD_KINDS)]))
    rng.shuffle(messages)
    return messages


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


def _expected_edb(messages: list[Any], relation: str) -> set[tuple[Any, ...]]:
    """Per fact, the last operation decides (all operations on a fact share a partition)."""
    last: dict[str, tuple[tuple[Any, ...], str]] = {}
    for rel, key, value, bad in messages:
        if rel == relation and bad is None:
            document = json.loads(value)
            last[key] = (tuple(json.loads(key)), document.get("op", "insert"))
    return {values for values, op in last.values() if op == "insert"}


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
    messages = _messages(n_valid=1500, n_bad=1000)
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
        assert _rows(replay.changes[relation].inserts) == _rows(first[1].changes[relation].inserts)
        assert _rows(replay.changes[relation].deletes) == _rows(first[1].changes[relation].deletes)
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
        assert _rows(read_table(lake.edb(relation))) == _expected_edb(messages, relation)
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
    from fixflow.pipeline.stream.ingest import start_ingest_query, topics_for

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
        inserts = result.changes["edge"].inserts
        reach = pa.table(
            {"x": [r["dst"] for r in inserts.to_pylist() if r["src"] == 1]},
            schema=pa.schema([("x", pa.int64())]),
        )
        merge_changes(lake.results("reach"), ["x"], upserts=reach, commit=result.commit)

    config = replace(config, stream=replace(config.stream, max_records_per_trigger=2))
    query = start_ingest_query(spark, config, PROGRAM, lake, metrics, maintain, available_now=True)
    query.awaitTermination(120)
    assert query.exception() is None
    assert _rows(read_table(lake.results("reach"))) == {(2,), (3,), (4,)}
    assert _rows(read_table(lake.edb("edge"))) == set(edges)
    assert len(seen) >= 2, "4 facts at 2 per trigger"
    assert not any(committed for _, committed in seen), "EDB commit came first"
    assert metrics.registry.get_sample_value("fixflow_batches_committed_total") == len(seen)
    assert metrics.registry.get_sample_value("fixflow_batch_duration_seconds_count") == len(seen)
