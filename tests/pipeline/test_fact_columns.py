"""The column-at-a-time reader and encoder of `fixflow publish` against the row-at-a-time
reference (fact_rows.read_fact_file + messages.encode_fact/fact_key): the same bytes, the same
errors; and the producer's failure accounting (no broker needed)."""

from __future__ import annotations

import csv
import gc
import io
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixflow.checker.ast import Attribute
from fixflow.pipeline.config import default_config
from fixflow.pipeline.kafka.messages import Fact, Op, encode_fact, fact_key, parse_message
from fixflow.pipeline.publish import fact_columns, producer
from fixflow.pipeline.publish.fact_columns import Messages, check_op, encode_messages, read_columns
from fixflow.pipeline.publish.fact_rows import PublishError, read_fact_file

EDGE = (Attribute("src", "number"), Attribute("dst", "number"), Attribute("w", "float"))
NODE = (Attribute("name", "symbol"),)
MIXED = (Attribute("n", "number"), Attribute("x", "float"), Attribute("s", "symbol"))


def reference(path: Path, attributes: tuple[Attribute, ...] | None, op: Op) -> Messages:
    facts = read_fact_file(path, attributes)
    return Messages(
        [fact_key(v).encode() for v in facts.facts],
        [encode_fact(facts.attributes, v, op).encode() for v in facts.facts],
    )


def columnar(path: Path, attributes: tuple[Attribute, ...] | None, op: Op) -> Messages:
    return encode_messages(read_columns(path, attributes), op)


def no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the reference unavailable to fact_columns: the column path must do it all."""

    def refuse(*_: object) -> None:
        raise AssertionError("fell back to the row-at-a-time reader")

    monkeypatch.setattr(fact_columns, "read_fact_file", refuse)


CASES = [
    # name, content, attributes (None: guessed), column path expected (no fallback)
    ("edges.csv", "dst,src,w\n2,1,0.5\n3,1,2\n\n 4 ,+5, 1e-7 \n6,7,-0.0\n", EDGE, True),
    ("crlf.csv", "src,dst,w\r\n1,2,3.25\r\n1_000,-2,1E20\r\n", EDGE, True),
    ("big.csv", "src,dst,w\n9223372036854775807,-9223372036854775808,1e308\n", EDGE, True),
    (
        "names.csv",
        'name\n"a, b"\n"say ""hi"""\n"two\nlines"\nünï €\n\\back\\\n{x}%s\n""\n\x01ctl\t\n😀\n',
        NODE,
        True,
    ),
    (" head.csv", " src , w ,dst\n1,0.5,2\n", EDGE, True),
    ("mixed.csv", "n,x,s\n1,2,3\n-7,0.1,\n", MIXED, True),
    ("guess.csv", "a,b,c\n1,0.5,x\n2,3,1e400\n3,nan,-0\n4,18446744073709551616,inf\n", None, True),
    ('odd "names".csv', '"{a}","b""c",%d\n1,2,3\n', None, True),
    ("node.facts", "alice\nbob smith\n42\n\n", NODE, True),
    ("blank.facts", "a\n\n  \nb", NODE, True),
    ("edge.tsv", "1\t2\t0.5\n3\t4\t5\n", EDGE, True),
    ("crlf.facts", "1\t2\t0.5\r\n3\t4\t5\r\n", EDGE, False),
    ("cr.facts", "1\t2\t0.5\r3\t4\t5\r", EDGE, False),
    ("empty.csv", "src,dst,w\n", EDGE, True),
]


@pytest.mark.parametrize("op", ["insert", "delete"])
@pytest.mark.parametrize(
    ("name", "content", "attributes", "columnar_only"), CASES, ids=[c[0] for c in CASES]
)
def test_columns_encode_exactly_like_the_reference(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    content: str,
    attributes: tuple[Attribute, ...] | None,
    columnar_only: bool,
    op: Op,
) -> None:
    path = tmp_path / name.strip()
    path.write_bytes(content.encode("utf-8"))
    expected = reference(path, attributes, op)
    if columnar_only:
        no_fallback(monkeypatch)
    assert columnar(path, attributes, op) == expected


def _csv(rows: list[tuple[int, float, str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)  # "\r\n" lines: fields holding "\r" or "\n" get quoted
    writer.writerow(["s", "x", "n"])  # not the declared order
    writer.writerows((s, repr(x), n) for n, x, s in rows)
    return out.getvalue()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.integers(-(2**63), 2**63 - 1),
            st.floats(allow_nan=False, allow_infinity=False),
            st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
        ),
        max_size=30,
    )
)
def test_random_files_give_the_reference_messages_and_decode_to_their_facts(
    tmp_path: Path, rows: list[tuple[int, float, str]]
) -> None:
    path = tmp_path / "random.csv"
    path.write_text(_csv(rows), encoding="utf-8", newline="")
    messages = columnar(path, MIXED, "delete")
    assert messages == reference(path, MIXED, "delete")
    facts = read_fact_file(path, MIXED).facts
    # What the streaming side makes of them (ingest parses every value with parse_message).
    decoded = [parse_message(v, MIXED) for v in messages.values]
    assert decoded == [Fact(f, "delete") for f in facts]
    assert all(math.isfinite(f[1]) for f in facts)  # type: ignore[arg-type]


BAD = [
    # The first bad row wins, even when a later column of an earlier row is fine and an
    # earlier column of a later row is bad.
    ("a.csv", "src,dst,w\n1,2,0.5\n1,2,x\n1,y,0.5\n", EDGE),
    ("b.csv", "src,dst,w\n1,2,0.5\n1,2\n", EDGE),
    ("c.csv", "src,dst,w\n9223372036854775808,2,0.5\n", EDGE),
    ("d.csv", "src,dst,w\n1,2,nan\n", EDGE),
    ("e.csv", "src,dst,w\n1,2,inf\n", EDGE),
    ("g.csv", 'name,w\n"multi\nline",1\nx,1.5\n', (NODE[0], Attribute("w", "number"))),
    ("h.csv", "", EDGE),
    ("i.csv", "src,to,w\n1,2,0.5\n", EDGE),
    ("j.facts", "1\t2\t0.5\n1\t2\t0.5\t9\n", EDGE),
    ("k.facts", "1\t2\t0.5\r\n1\tz\t0.5\r\n", EDGE),
    ("l.tsv", "x\n", None),
    ("m.json", "{}", EDGE),
    ("n.csv", None, EDGE),
]


@pytest.mark.parametrize(("name", "content", "attributes"), BAD, ids=[b[0] for b in BAD])
def test_bad_files_raise_the_reference_error_with_file_and_line(
    tmp_path: Path, name: str, content: str | None, attributes: tuple[Attribute, ...] | None
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8", newline="")
    with pytest.raises(PublishError) as expected:
        read_fact_file(path, attributes)
    with pytest.raises(PublishError) as got:
        read_columns(path, attributes)
    assert str(got.value) == str(expected.value)
    assert str(got.value).startswith(str(path))


def test_a_blank_line_of_one_symbol_column_is_the_empty_symbol(tmp_path: Path) -> None:
    """As Soufflé reads it; the final line break ends the last line, it starts none."""
    path = tmp_path / "node.facts"
    path.write_text("a\n\nb\n")
    assert read_fact_file(path, NODE).facts == [("a",), ("",), ("b",)]
    assert read_columns(path, NODE).columns[0].values == ["a", "", "b"]


def test_reading_pauses_the_cyclic_gc_and_restores_it(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text("src,dst,w\n1,2,0.5\n")
    bad.write_text("src,dst,w\n1,x,0.5\n")
    read_columns(good, EDGE)
    assert gc.isenabled()
    with pytest.raises(PublishError):
        read_columns(bad, EDGE)
    assert gc.isenabled()
    gc.disable()
    try:
        read_columns(good, EDGE)
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def test_the_first_bad_row_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("src,dst,w\n1,2,0.5\n1,2,x\n1,y,0.5\n")
    with pytest.raises(PublishError, match=r"a\.csv:3: value 'x' of attribute 'w' is not a float"):
        read_columns(path, EDGE)


def test_not_utf8_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes(b"name\ncaf\xe9\n")
    with pytest.raises(PublishError, match=r"latin\.csv: not UTF-8 text \(invalid continuation"):
        read_columns(path, NODE)


def test_a_guessed_header_must_name_each_attribute_once(tmp_path: Path) -> None:
    path = tmp_path / "twice.csv"
    path.write_text("a,b,a\n1,2,3\n")
    with pytest.raises(PublishError, match=r"twice\.csv:1: header names attribute 'a' more"):
        read_columns(path, None)


def test_deletes_need_a_relation_without_an_op_attribute() -> None:
    attributes = (Attribute("op", "symbol"),)
    check_op("r", attributes, "insert")
    with pytest.raises(PublishError, match="r has an attribute named 'op'"):
        check_op("r", attributes, "delete")


# ------------------------------------------------------------------ the producer


def _unreachable() -> object:
    config = default_config()
    return replace(config, kafka=replace(config.kafka, bootstrap_servers="127.0.0.1:9"))


def test_unacknowledged_messages_are_counted_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(producer, "SEND_TIMEOUT_S", 1.0)
    messages = Messages([b"[1]", b"[2]", b"[3]"], [b'{"n":1}', b'{"n":2}', b'{"n":3}'])
    with pytest.raises(PublishError) as error:
        producer.send_messages(_unreachable(), "t", messages)  # type: ignore[arg-type]
    text = str(error.value)
    assert text.startswith("3 of 3 facts were not published to t: Local: Message timed out")
    assert "Connection refused" in text
    assert "\n" not in text


def test_a_message_librdkafka_refuses_stops_the_send_and_is_counted() -> None:
    too_big = b"x" * 2_000_000  # over message.max.bytes
    messages = Messages([b"[1]", b"[2]", b"[3]"], [b"{}", too_big, b"{}"])
    with pytest.raises(PublishError) as error:
        producer.send_messages(_unreachable(), "t", messages)  # type: ignore[arg-type]
    assert str(error.value).startswith(
        "3 of 3 facts were not published to t: Unable to produce message: "
        "Broker: Message size too large"
    )


def test_producer_settings_keep_the_old_guarantees_and_partitions() -> None:
    found = producer.producer_settings(default_config())
    assert found["acks"] == "all"
    assert found["enable.idempotence"] is True
    assert found["partitioner"] == "murmur2_random"  # kafka-python's and Java's
