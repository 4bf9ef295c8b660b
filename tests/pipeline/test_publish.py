"""`fixflow publish`: files to Kafka messages, through the real broker."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from fixflow.pipeline.cli import main
from fixflow.pipeline.config import Config

PROGRAM = """
.decl edge(src: number, dst: number, w: float)
.input edge
.decl node(name: symbol)
.input node
"""


@pytest.fixture()
def conf(broker: Config, tmp_path: Path) -> tuple[Path, str]:
    prefix = f"pub{uuid.uuid4().hex[:8]}."
    path = tmp_path / "conf.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{broker.kafka.bootstrap_servers}"\n'
        f'topic_prefix = "{prefix}"\n[lake]\npath = "{tmp_path / "lake"}"\n'
    )
    (tmp_path / "prog.dl").write_text(PROGRAM)
    return path, prefix


def _consume(broker: Config, topic: str, expected: int) -> list[Any]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.kafka.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    records: list[Any] = []
    deadline = time.monotonic() + 20
    while len(records) < expected and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=300).values():
            records.extend(batch)
    consumer.close()
    return records


def test_publish_csv_typed_by_program(
    broker: Config, conf: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path, prefix = conf
    facts = tmp_path / "edges.csv"
    facts.write_text("dst,src,w\n2,1,0.5\n3,1,2\n3,2,1.25\n")
    args = [
        "publish",
        "edge",
        str(facts),
        "--conf",
        str(config_path),
        "--program",
        str(tmp_path / "prog.dl"),
    ]
    assert main(args) == 0
    assert capsys.readouterr().out.strip() == f"published 3 facts to topic {prefix}edge"
    assert main([*args, "--delete"]) == 0
    records = _consume(broker, f"{prefix}edge", 6)
    values = [(json.loads(r.value), r.key.decode(), r.partition) for r in records]
    assert len(values) == 6
    first = {"src": 1, "dst": 3, "w": 2.0}
    assert (first, "[1,3,2.0]") in [(v, k) for v, k, _ in values]
    assert ({**first, "op": "delete"}, "[1,3,2.0]") in [(v, k) for v, k, _ in values]
    # Insert and delete of one fact share the key, hence the partition.
    partitions = {k: {p for _, key, p in values if key == k} for _, k, _ in values}
    assert all(len(p) == 1 for p in partitions.values())


def test_publish_facts_file_needs_and_uses_the_program(
    broker: Config, conf: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path, prefix = conf
    facts = tmp_path / "node.facts"
    facts.write_text("alice\nbob smith\n42\n")
    assert main(["publish", "node", str(facts), "--conf", str(config_path)]) == 1
    assert "--program" in capsys.readouterr().err
    assert (
        main(
            [
                "publish",
                "node",
                str(facts),
                "--conf",
                str(config_path),
                "--program",
                str(tmp_path / "prog.dl"),
            ]
        )
        == 0
    )
    records = _consume(broker, f"{prefix}node", 3)
    assert sorted(json.loads(r.value)["name"] for r in records) == ["42", "alice", "bob smith"]


def test_publish_csv_without_program_guesses_numbers(
    broker: Config, conf: tuple[Path, str], tmp_path: Path
) -> None:
    config_path, prefix = conf
    facts = tmp_path / "e.csv"
    facts.write_text("src,dst,w\n1,2,0.5\n")
    assert main(["publish", "edge", str(facts), "--conf", str(config_path)]) == 0
    [record] = _consume(broker, f"{prefix}edge", 1)
    assert json.loads(record.value) == {"src": 1, "dst": 2, "w": 0.5}


@pytest.mark.parametrize(
    ("name", "content", "relation", "error"),
    [
        ("missing.csv", None, "edge", "missing.csv: no such file"),
        (
            "bad.facts",
            "1\t2\t0.5\n1\t2\n",
            "edge",
            "bad.facts:2: expected 3 values (src, dst, w), got 2",
        ),
        (
            "bad.csv",
            "src,dst,w\n1,2,0.5\n1,x,0.5\n",
            "edge",
            "bad.csv:3: value 'x' of attribute 'dst' is not a number",
        ),
        (
            "head.csv",
            "src,to,w\n1,2,0.5\n",
            "edge",
            "head.csv:1: header src, to, w does not name the declared attributes src, dst, w",
        ),
        ("e.json", "{}", "edge", "unknown file type '.json'"),
        ("e.csv", "src\n1\n", "path", "relation 'path' is not declared"),
    ],
)
def test_publish_errors_name_file_and_line(
    conf: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: str | None,
    relation: str,
    error: str,
) -> None:
    config_path, _ = conf
    if content is not None:
        (tmp_path / name).write_text(content)
    code = main(
        [
            "publish",
            relation,
            str(tmp_path / name),
            "--conf",
            str(config_path),
            "--program",
            str(tmp_path / "prog.dl"),
        ]
    )
    assert code == 1
    assert error in capsys.readouterr().err


def test_publish_without_broker_says_how_to_start_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "c.toml"
    # Its own empty lake: the default `./lake` may hold programs declaring `edge` (after
    # `make demo`), whose columns would be checked before the broker is tried.
    conf.write_text(
        f'[kafka]\nbootstrap_servers = "127.0.0.1:9"\n[lake]\npath = "{tmp_path / "lake"}"\n'
    )
    facts = tmp_path / "e.csv"
    facts.write_text("src\n1\n")
    assert main(["publish", "edge", str(facts), "--conf", str(conf)]) == 1
    assert "fixflow broker start" in capsys.readouterr().err


def _edges_csv(path: Path, n: int) -> list[tuple[int, int, float]]:
    """N edges (some repeated, weights some integral) written as CSV; returns them typed."""
    edges = [(i % 997, (i * 7919) % 1009, (i % 400) / 8) for i in range(n)]
    path.write_text("src,dst,w\n" + "".join(f"{s},{d},{w}\n" for s, d, w in edges))
    return edges


def _stream_records(broker: Config, topic: str) -> Any:
    """Every record of ``topic`` as the streaming source reads it (end probe, ranges)."""
    import pyarrow as pa

    from fixflow.pipeline.kafka.broker_view import end_offsets
    from fixflow.pipeline.kafka.records import KafkaRange, read_range

    ends = end_offsets(broker.kafka, [topic])[topic]
    batches = [
        batch
        for partition, end in ends.items()
        for batch in read_range(KafkaRange(broker.kafka, topic, int(partition), 0, end, 20))
    ]
    return pa.Table.from_batches(batches)


def test_a_large_file_reaches_the_streaming_side_whole_and_unchanged(
    broker: Config, conf: tuple[Path, str], tmp_path: Path
) -> None:
    from kafka.partitioner.default import murmur2

    from fixflow.checker.ast import Attribute
    from fixflow.pipeline.kafka.messages import fact_key
    from fixflow.pipeline.stream.ingest import validate

    config_path, prefix = conf
    n = 30_000
    edges = _edges_csv(tmp_path / "big.csv", n)
    args = ["publish", "edge", str(tmp_path / "big.csv"), "--conf", str(config_path)]
    assert main([*args, "--program", str(tmp_path / "prog.dl")]) == 0
    records = _stream_records(broker, f"{prefix}edge")
    assert records.num_rows == n
    # Keys as before, and in the partition kafka-python's (Java's) partitioner picks.
    keys = records.column("key").to_pylist()
    assert sorted(keys) == sorted(fact_key(e) for e in edges)
    for key, partition in zip(keys, records.column("partition").to_pylist(), strict=True):
        assert (murmur2(key.encode()) & 0x7FFFFFFF) % broker.kafka.partitions == partition
    # The ingest step decodes every value to the typed fact, no dead letter.
    attributes = (Attribute("src", "number"), Attribute("dst", "number"), Attribute("w", "float"))
    facts, letters = validate(records, {"edge": attributes}, prefix)
    assert letters == []
    rows = facts["edge"].select(["src", "dst", "w"]).to_pylist()
    assert sorted((r["src"], r["dst"], r["w"]) for r in rows) == sorted(edges)


def test_long_publishes_print_progress_on_stderr(
    broker: Config,
    conf: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fixflow.pipeline.publish import producer

    monkeypatch.setattr(producer, "PROGRESS_INTERVAL_S", 0.0)
    monkeypatch.setattr(producer, "SLICE", 1000)
    config_path, prefix = conf
    _edges_csv(tmp_path / "e.csv", 5000)
    assert main(["publish", "edge", str(tmp_path / "e.csv"), "--conf", str(config_path)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"published 5000 facts to topic {prefix}edge"
    lines = [line for line in err.splitlines() if " facts sent (" in line]
    sent = [int(line.split()[2].replace(",", "")) for line in lines]
    assert len(sent) >= 2
    assert sent == sorted(sent)
    assert sent[-1] == 5000
    assert lines[-1].startswith("fixflow publish: 5,000 of 5,000 facts sent (")


def test_a_full_producer_queue_makes_it_wait_and_loses_nothing(
    broker: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fixflow.pipeline.broker.embedded import ensure_topics
    from fixflow.pipeline.publish import producer
    from fixflow.pipeline.publish.fact_columns import Messages

    monkeypatch.setattr(producer, "QUEUE_MESSAGES", 100)
    waits: list[int] = []
    wait_for_room = producer._Sender._wait_for_room

    def counted(self: Any) -> bool:
        waits.append(1)
        return wait_for_room(self)

    monkeypatch.setattr(producer._Sender, "_wait_for_room", counted)
    topic = f"queue{uuid.uuid4().hex[:8]}"
    ensure_topics(broker, [topic])
    values = [f'{{"n":{i}}}'.encode() for i in range(3000)]
    messages = Messages([f"[{i}]".encode() for i in range(3000)], values)
    assert producer.send_messages(broker, topic, messages) == 3000
    assert waits, "the queue never filled up"
    records = _stream_records(broker, topic)
    assert sorted(records.column("value").to_pylist()) == sorted(v.decode() for v in values)


def _run_on_lake(tmp_path: Path, stem: str, program_text: str) -> None:
    """What `fixflow run STEM.dl` leaves for publish: the program's copy in its lake dir."""
    from fixflow.pipeline.lake.lakehouse import ProgramLake, record_program

    record_program(ProgramLake(str(tmp_path / "lake"), stem), program_text)


def test_without_program_the_lake_programs_declarations_check_the_file(
    broker: Config, conf: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path, prefix = conf
    _run_on_lake(tmp_path, "sssp", PROGRAM)
    wrong_header = tmp_path / "wrong.csv"
    wrong_header.write_text("a,b\n1,2\n")
    assert main(["publish", "edge", str(wrong_header), "--conf", str(config_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"fixflow publish: {wrong_header}:1: header a, b does not name the declared attributes "
        "src, dst, w (declaration from the lake's program sssp)"
    )
    not_a_number = tmp_path / "nan.csv"
    not_a_number.write_text("src,dst,w\n1,2,nan\n")
    assert main(["publish", "edge", str(not_a_number), "--conf", str(config_path)]) == 1
    assert f"{not_a_number}:2:" in capsys.readouterr().err
    # A headerless .facts file needs no --program either: the names come from the lake.
    facts = tmp_path / "edge.facts"
    facts.write_text("1\t2\t0.5\n2\t3\t1\n")
    assert main(["publish", "edge", str(facts), "--conf", str(config_path)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"published 2 facts to topic {prefix}edge"
    assert err.strip() == (
        "fixflow publish: values checked against the .decl of edge in the lake's program sssp"
    )
    values = [json.loads(r.value) for r in _consume(broker, f"{prefix}edge", 2)]
    assert sorted(values, key=lambda v: v["src"]) == [
        {"src": 1, "dst": 2, "w": 0.5},
        {"src": 2, "dst": 3, "w": 1.0},
    ]


def test_lake_programs_that_disagree_on_a_declaration_ask_for_program(
    conf: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path, _ = conf
    _run_on_lake(tmp_path, "sssp", PROGRAM)
    _run_on_lake(tmp_path, "cc", ".decl edge(a: number, b: number)\n.input edge\n")
    _run_on_lake(tmp_path, "other", ".decl unrelated(x: number)\n.input unrelated\n")
    facts = tmp_path / "edges.csv"
    facts.write_text("src,dst,w\n1,2,0.5\n")
    assert main(["publish", "edge", str(facts), "--conf", str(config_path)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"fixflow publish: the programs in the lake {tmp_path / 'lake'} declare edge "
        "differently (cc: edge(a: number, b: number); sssp: edge(src: number, dst: number, "
        "w: float)); pass --program PROG.dl to say which one the file is for"
    )


def test_without_program_or_lake_declaration_values_are_guessed_and_it_says_so(
    broker: Config, conf: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path, prefix = conf
    facts = tmp_path / "edges.csv"
    facts.write_text("src,dst,w\n1,2,0.5\n")
    assert main(["publish", "edge", str(facts), "--conf", str(config_path)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"published 1 facts to topic {prefix}edge"
    assert "values not checked: no --program, and no program run on the lake" in err
