"""The ingest seam without Spark: validation, dead letters, normalization and idempotent EDB
commits over Arrow tables of Kafka records and real Delta tables (``stream.ingest``). The
same through the real broker and a streaming query: test_ingest_query.py."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from fixflow.checker.ast import Attribute
from fixflow.checker.parser import parse
from fixflow.pipeline.kafka.messages import Fact, encode_fact, fact_key
from fixflow.pipeline.lake.delta import arrow_schema
from fixflow.pipeline.lake.lakehouse import ProgramLake, append_rows, read_table
from fixflow.pipeline.stream.ingest import (
    HeldEdb,
    _last_operations,
    _sorted_records,
    ensure_edb_tables,
    facts_table,
    ingest_records,
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


def rows(table: pa.Table | None) -> set[tuple[Any, ...]]:
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
    assert rows(change.change.added) == {("e",)}
    assert rows(change.change.removed) == {("a",)}
    # b: net insert of a present fact; c, d: net delete of an absent fact.
    assert (change.noop_inserts, change.noop_deletes) == (1, 2)


def test_normalize_against_a_missing_table_types_per_declaration() -> None:
    facts = [Fact((1, 2, 0.5)), Fact((1, 2, 0.5), "delete"), Fact((2, 3, 1.0))]
    change = normalize("edge", EDGE, facts_table(facts, arrow_schema(EDGE)), None)
    assert change.change.added.schema == pa.schema(
        [("src", pa.int64()), ("dst", pa.int64()), ("w", pa.float64())]
    )
    assert rows(change.change.added) == {(2, 3, 1.0)}
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
    assert (
        rows(change.change.added) == {v for v, op in last.items() if op == "insert"} - before_rows
    )
    assert (
        rows(change.change.removed) == {v for v, op in last.items() if op == "delete"} & before_rows
    )
    # What the EDB commit writes when the batch deletes (``EdbBatch.rows_after``).
    after = change.rows_after()
    assert after is not None and after.num_rows == len(rows(after))
    assert rows(after) == (before_rows - rows(change.change.removed)) | rows(change.change.added)


EDGE_ROW = st.tuples(st.integers(0, 4), st.integers(0, 3), st.sampled_from([0.5, 1.0]))


@settings(max_examples=200, deadline=None)
@given(
    st.sets(EDGE_ROW, max_size=40),
    st.lists(st.tuples(EDGE_ROW, st.sampled_from(["insert", "delete"])), max_size=30),
)
def test_rows_after_leave_out_exactly_the_deleted_rows_where_normalization_found_them(
    before_rows: set[tuple[int, int, float]], operations: list[tuple[tuple, str]]
) -> None:
    """The EDB commit of a deleting batch writes ``rows_after``: ``before`` without the
    rows at ``deleted_at`` (row numbers found by normalization's membership filter, whose
    candidates share a ``src`` with a fact but may differ elsewhere) plus the inserts."""
    ordered = sorted(before_rows)
    columns = [list(c) for c in zip(*ordered, strict=True)] or [[], [], []]
    before = pa.table(columns, schema=arrow_schema(EDGE))
    facts = [Fact(values, op) for values, op in operations]
    change = normalize("edge", EDGE, facts_table(facts, arrow_schema(EDGE)), before)
    assert change.deleted_at is not None
    assert {ordered[i] for i in change.deleted_at} == rows(change.change.removed)
    after = change.rows_after()
    last = {values: op for values, op in operations}
    expected = {v for v in before_rows if last.get(v) != "delete"}
    expected |= {v for v, op in last.items() if op == "insert"}
    assert after is not None and after.num_rows == len(expected)
    assert rows(after) == expected


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


# ---------------------------------------------------------------- a batch of records

BAD_KINDS = (
    "malformed_json",
    "not_an_object",
    "unknown_attribute",
    "missing_attribute",
    "wrong_type",
    "unknown_op",
    "unknown_relation",
)


def bad_message(i: int, rng: random.Random) -> tuple[str, str]:
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


def random_messages(
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
        relation, value = bad_message(i, rng)
        key = None if i % 3 == 0 else f"bad-{i}"
        messages.append((relation, key, value, BAD_KINDS[i % len(BAD_KINDS)]))
    rng.shuffle(messages)
    return messages


def expected_edb(messages: list[Any], relation: str) -> set[tuple[Any, ...]]:
    """Per fact, the last operation decides (all operations on a fact share a partition)."""
    last: dict[str, tuple[tuple[Any, ...], str]] = {}
    for rel, key, value, bad in messages:
        if rel == relation and bad is None:
            document = json.loads(value)
            last[key] = (tuple(json.loads(key)), document.get("op", "insert"))
    return {values for values, op in last.values() if op == "insert"}


RECORDS = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.string()),
        ("value", pa.string()),
    ]
)
"""The columns of a batch's Kafka records that ingestion reads (``ingest.RECORD_COLUMNS``)."""


def as_records(batch: list[Any], prefix: str) -> pa.Table:
    """``messages`` as Kafka records: one partition per topic, offsets in list order (so
    every operation on one fact is in one partition, in order, as Kafka keys keep them)."""
    next_offset: dict[str, int] = {}
    rows = []
    for relation, key, value, _ in batch:
        topic = prefix + relation
        offset = next_offset.get(topic, 0)
        next_offset[topic] = offset + 1
        rows.append({"topic": topic, "partition": 0, "offset": offset, "key": key, "value": value})
    return pa.Table.from_pylist(rows, schema=RECORDS)


def _version(path: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(path).version()


def test_ingest_records_dead_letters_bad_ones_commits_the_rest_and_a_replay_changes_nothing(
    tmp_path: Path,
) -> None:
    lake = ProgramLake(str(tmp_path / "lake"), "ingest")
    assert ensure_edb_tables(PROGRAM, lake) == ["edge", "node"]
    batch = random_messages(n_valid=600, n_bad=300)
    records = as_records(batch, "ing.")
    slices = [records.slice(start, 250) for start in range(0, records.num_rows, 250)]
    metrics = Metrics()
    results = []
    for batch_id, records_of_batch in enumerate(slices):
        result = ingest_records(
            records_of_batch, batch_id, PROGRAM, lake, metrics, query_id="q", topic_prefix="ing."
        )
        assert not result.replayed
        result.commit_edb()
        results.append(result)
    versions = {relation: _version(lake.edb(relation)) for relation in ("edge", "node")}

    replay = ingest_records(slices[1], 1, PROGRAM, lake, metrics, query_id="q", topic_prefix="ing.")
    assert replay.replayed and replay.offsets == results[1].offsets
    assert replay.commit_edb() == []
    for relation in ("edge", "node"):
        assert rows(replay.changes[relation].change.added) == rows(
            results[1].changes[relation].change.added
        )
        assert rows(replay.changes[relation].change.removed) == rows(
            results[1].changes[relation].change.removed
        )
        assert _version(lake.edb(relation)) == versions[relation]
        assert rows(read_table(lake.edb(relation))) == expected_edb(batch, relation)

    letters = read_table(lake.dead_letter)
    assert letters is not None and letters.num_rows == 300, "each bad record once, replay included"
    expected_kinds = {
        (r["topic"], r["partition"], r["offset"]): kind
        for r, (*_, kind) in zip(records.to_pylist(), batch, strict=True)
        if kind is not None
    }
    found = {(r["topic"], r["partition"], r["offset"]): r["kind"] for r in letters.to_pylist()}
    assert found == expected_kinds
    dead = metrics.registry.get_sample_value
    assert (
        sum(
            dead("fixflow_dead_letters_total", {"relation": relation, "reason": kind}) or 0
            for relation in ("edge", "node", "bogus")
            for kind in BAD_KINDS
        )
        == 300
    )
    assert (
        sum(
            dead("fixflow_input_facts_total", {"relation": relation, "op": op}) or 0
            for relation in ("edge", "node")
            for op in ("insert", "delete")
        )
        == 600
    )


def test_ingestion_imports_no_spark() -> None:
    """The Arrow half of ingestion runs (and is tested) without pyspark."""
    probe = (
        "import sys\n"
        "import fixflow.pipeline.stream.ingest\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_held_edb_rows_stand_for_the_table_until_another_writer_or_a_replay(
    tmp_path: Path,
) -> None:
    """``HeldEdb``: after each commit it holds exactly the table's rows; a batch normalizes
    against them only while the table is at the version the last commit left. A row
    appended by another writer in between, and a replay of a committed batch, are read from
    Delta (a replay sees the table before its first run, as without ``held``)."""
    lake = ProgramLake(str(tmp_path / "lake"), "held")
    ensure_edb_tables(PROGRAM, lake)
    batch = random_messages(n_valid=600, n_bad=0, seed=11)
    records = as_records(batch, "h.")
    slices = [records.slice(start, 150) for start in range(0, records.num_rows, 150)]
    held = HeldEdb()
    edge = lake.edb("edge")
    for batch_id, records_of_batch in enumerate(slices[:2]):
        result = ingest_records(
            records_of_batch, batch_id, PROGRAM, lake, query_id="q", topic_prefix="h.", held=held
        )
        result.commit_edb()
        version, _, kept = held.rows[edge]
        assert version == _version(edge)
        assert rows(kept) == rows(read_table(edge))

    stranger = pa.table({"src": [10**9], "dst": [10**9], "w": [1.0]}, schema=arrow_schema(EDGE))
    assert append_rows(edge, stranger)  # another writer: the table moves past the held version
    assert rows(held.before_batch(edge, "q", 2)) == rows(read_table(edge))
    assert (10**9, 10**9, 1.0) in rows(held.before_batch(edge, "q", 2))

    for batch_id, records_of_batch in enumerate(slices[2:], start=2):
        result = ingest_records(
            records_of_batch, batch_id, PROGRAM, lake, query_id="q", topic_prefix="h.", held=held
        )
        result.commit_edb()
    expected = expected_edb(batch, "edge") | {(10**9, 10**9, 1.0)}
    assert rows(read_table(edge)) == expected
    assert rows(held.rows[edge][2]) == expected

    last = len(slices) - 1
    without_held = ingest_records(
        slices[last], last, PROGRAM, lake, query_id="q", topic_prefix="h."
    )
    replay = ingest_records(
        slices[last], last, PROGRAM, lake, query_id="q", topic_prefix="h.", held=held
    )
    assert replay.replayed and without_held.replayed
    assert rows(replay.changes["edge"].before) == rows(without_held.changes["edge"].before)
    assert rows(replay.changes["edge"].before) != expected, "a replay normalizes as it first ran"
