"""Reading input facts: TSV ``.facts`` and headed ``.csv`` files, with one-line errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixflow.checker.ast import Attribute
from fixflow.pipeline.lake.delta import rows_to_arrow
from fixflow.pipeline.lake.facts import (
    FactsError,
    arrow_table,
    input_path,
    load_inputs,
    read_rows,
    read_table,
)

EDGE = (Attribute("src", "number"), Attribute("dst", "number"), Attribute("w", "float"))
NAME = (Attribute("id", "number"), Attribute("label", "symbol"))


def test_tab_separated_facts_are_typed(tmp_path: Path) -> None:
    path = tmp_path / "edge.facts"
    path.write_text("1\t2\t0.5\n\n2\t3\t1e-3\n")
    assert read_rows(path, EDGE) == [(1, 2, 0.5), (2, 3, 0.001)]


def test_a_blank_line_is_the_empty_symbol_in_a_one_symbol_relation(tmp_path: Path) -> None:
    """Soufflé reads a blank line of a one-column symbol relation as "" (and rejects it in
    others, where Fixflow skips it)."""
    path = tmp_path / "w.facts"
    path.write_text("a\n\n  \nb\n")
    assert read_rows(path, (Attribute("s", "symbol"),)) == [("a",), ("",), ("  ",), ("b",)]
    path.write_text("a\tb\n\n  \nc\td\n")
    pair = (Attribute("s", "symbol"), Attribute("t", "symbol"))
    assert read_rows(path, pair) == [("a", "b"), ("c", "d")]


def test_csv_with_header_in_any_column_order(tmp_path: Path) -> None:
    path = tmp_path / "name.csv"
    path.write_text('label,id\n"a, b",1\nplain,2\n')
    assert read_rows(path, NAME) == [(1, "a, b"), (2, "plain")]


def test_table_has_the_declared_arrow_schema(tmp_path: Path) -> None:
    path = tmp_path / "edge.facts"
    path.write_text("1\t2\t3\n")
    table = read_table(path, EDGE)
    assert table.schema == pa.schema(
        [("src", pa.int64()), ("dst", pa.int64()), ("w", pa.float64())]
    )
    assert table.to_pylist() == [{"src": 1, "dst": 2, "w": 3.0}]


def test_wrong_field_count_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "edge.facts"
    path.write_text("1\t2\t0.5\n3\t4\n")
    with pytest.raises(FactsError) as error:
        read_rows(path, EDGE)
    assert str(error.value) == f"{path}:2: expected 3 fields, found 2"


def test_wrong_typed_value_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "edge.facts"
    path.write_text("1\t2\t0.5\n1\tx\t0.5\n")
    with pytest.raises(FactsError, match=r"edge.facts:2: column `dst` expects a number, found 'x'"):
        read_rows(path, EDGE)


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-Infinity"])
def test_non_finite_floats_are_refused_as_the_stream_refuses_them(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "edge.facts"
    path.write_text(f"1\t2\t0.5\n1\t3\t{text}\n")
    with pytest.raises(FactsError) as error:
        read_rows(path, EDGE)
    assert str(error.value) == f"{path}:2: column `w` expects a finite float, found {text!r}"


def test_csv_header_must_name_the_attributes(tmp_path: Path) -> None:
    path = tmp_path / "name.csv"
    path.write_text("id,title\n1,a\n")
    with pytest.raises(FactsError, match=r"name.csv:1: header id,title"):
        read_rows(path, NAME)


def test_missing_input_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(FactsError, match=r"no input file for relation `edge`"):
        input_path(tmp_path, "edge")
    (tmp_path / "edge.csv").write_text("src,dst,w\n1,2,3.5\n")
    tables = load_inputs(tmp_path, {"edge": EDGE})
    assert tables["edge"].to_pylist() == [{"src": 1, "dst": 2, "w": 3.5}]


def test_gzip_facts_are_found_and_read_like_plain_ones(tmp_path: Path) -> None:
    (tmp_path / "edge.facts.gz").write_bytes(gzip.compress(b"1\t2\t0.5\n2\t3\t1\n"))
    (tmp_path / "name.csv.gz").write_bytes(gzip.compress(b"label,id\nx,1\n"))
    tables = load_inputs(tmp_path, {"edge": EDGE, "name": NAME})
    assert tables["edge"].to_pylist()[1] == {"src": 2, "dst": 3, "w": 1.0}
    assert tables["name"].to_pylist() == [{"id": 1, "label": "x"}]


def test_gzip_content_is_read_whatever_the_name(tmp_path: Path) -> None:
    path = tmp_path / "edge.facts"  # Soufflé reads a compressed edge.facts too
    path.write_bytes(gzip.compress(b"1\t2\t0.5\n"))
    assert read_rows(path, EDGE) == [(1, 2, 0.5)]


def test_a_file_that_is_not_utf8_is_one_error_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "name.facts"
    path.write_bytes("1\tada\n2\tJosé\n".encode("latin-1"))
    with pytest.raises(FactsError) as error:
        read_rows(path, NAME)
    assert str(error.value).startswith(f"{path}:2: not UTF-8 text (byte 0xe9 at column 6)")
    assert "\n" not in str(error.value)


def test_a_broken_gzip_file_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "edge.facts.gz"
    path.write_bytes(gzip.compress(b"1\t2\t0.5\n" * 1000)[:40])  # truncated
    with pytest.raises(FactsError, match=r"edge.facts.gz(:\d+)?: not a readable gzip file"):
        read_rows(path, EDGE)


def test_a_utf8_byte_order_mark_is_not_part_of_the_header(tmp_path: Path) -> None:
    path = tmp_path / "name.csv"
    path.write_bytes(b"\xef\xbb\xbfid,label\n1,a\n")
    assert read_rows(path, NAME) == [(1, "a")]


def test_a_program_without_inputs_needs_no_facts_directory(tmp_path: Path) -> None:
    assert load_inputs(tmp_path / "missing", {}) == {}
    with pytest.raises(FactsError, match="facts directory does not exist"):
        load_inputs(tmp_path / "missing", {"edge": (Attribute("x", "number"),)})


UNSIGNED_EDGE = (Attribute("src", "number", declared="unsigned"), Attribute("w", "float"))
LENIENT = {
    "plain": "1\t2\t0.5\n2\t3\t1e-3\n",
    "blank lines, no final newline": "\n1\t2\t0.5\n\n\n2\t3\t4",
    "spaces around numbers": " 1\t2 \t 0.5 \n",
    "signs and underscores": "+1\t-2\t1_0.5\n1_000\t2\t+.5\n",
    "CRLF line ends": "1\t2\t0.5\r\n2\t3\t1.5\r\n",
    "a bare carriage return": "1\t2\t0.5\r2\t3\t1.5\n",
    "a byte-order mark": "\ufeff1\t2\t0.5\n",
    "a whitespace-only line": "1\t2\t0.5\n \t \n2\t3\t1.5\n",
    "too many fields": "1\t2\t0.5\t9\n",
    "a missing field": "1\t2\n",
    "an empty field": "1\t\t0.5\n",
    "not a number": "1\tx\t0.5\n",
    "infinity": "1\t2\tinf\n",
    "nan": "1\t2\tnan\n",
    "an int64 overflow": "9223372036854775808\t2\t0.5\n",
}


@pytest.mark.parametrize("content", LENIENT.values(), ids=LENIENT.keys())
def test_arrow_reads_numeric_facts_exactly_as_the_row_reader(tmp_path: Path, content: str) -> None:
    """``read_table`` parses a numeric ``.facts`` file with Arrow; whatever the content, it
    gives the row reader's table or the row reader's error."""
    path = tmp_path / "edge.facts"
    path.write_bytes(content.encode("utf-8"))
    assert_read_as_the_row_reader_reads(path, EDGE)


def assert_read_as_the_row_reader_reads(path: Path, attributes: tuple[Attribute, ...]) -> None:
    """``read_table`` gives the row reader's table, or the row reader's error."""
    try:
        expected: pa.Table | str = rows_to_arrow(read_rows(path, attributes), attributes)
    except (FactsError, OverflowError, pa.ArrowInvalid) as exc:
        expected = f"{type(exc).__name__}: {exc}"
    try:
        got: pa.Table | str = read_table(path, attributes)
    except (FactsError, OverflowError, pa.ArrowInvalid) as exc:
        got = f"{type(exc).__name__}: {exc}"
    if isinstance(expected, str):
        assert got == expected
    else:
        assert isinstance(got, pa.Table) and got.equals(expected), (path.read_bytes(), got)


def test_a_plain_numeric_file_is_parsed_by_arrow(tmp_path: Path) -> None:
    path = tmp_path / "edge.facts"
    path.write_text("1\t2\t0.5\n\n2\t3\t1e-3\n")
    table = arrow_table(path, EDGE)
    assert table is not None and table.to_pylist() == [
        {"src": 1, "dst": 2, "w": 0.5},
        {"src": 2, "dst": 3, "w": 0.001},
    ]
    path = tmp_path / "name.csv"
    path.write_text("label,id\nx y,1\n,2\n")  # by header name; an empty symbol
    table = arrow_table(path, NAME)
    assert table is not None and table.to_pylist() == [
        {"id": 1, "label": "x y"},
        {"id": 2, "label": ""},
    ]
    path.write_text('id,label\n1,"a,b"\n')  # quoted: the csv module reads it
    assert arrow_table(path, NAME) is None and read_table(path, NAME).num_rows == 1


def test_a_negative_unsigned_value_is_the_row_readers_error(tmp_path: Path) -> None:
    path = tmp_path / "edge.facts"
    path.write_text("1\t0.5\n-1\t0.5\n")
    assert arrow_table(path, UNSIGNED_EDGE) is None
    with pytest.raises(FactsError, match=r"edge.facts:2: column `src` is unsigned"):
        read_table(path, UNSIGNED_EDGE)


SYMBOLS = (Attribute("a", "symbol"), Attribute("b", "symbol"))
TOKENS = [
    "1",
    "-2",
    "0.5",
    " 3",
    "+1",
    "1_0",
    "inf",
    "x",
    "a b",
    "",
    " ",
    "\t",
    ",",
    '"',
    "\r",
    "\n",
    "\r\n",
    "é",
]


@given(
    tokens=st.lists(st.sampled_from(TOKENS), max_size=14),
    attributes=st.sampled_from([EDGE, NAME, SYMBOLS]),
    suffix=st.sampled_from([".facts", ".csv", ".facts.gz"]),
)
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_arrow_reads_any_file_exactly_as_the_row_reader(
    tmp_path: Path, tokens: list[str], attributes: tuple[Attribute, ...], suffix: str
) -> None:
    """Whatever the bytes, ``read_table`` (Arrow where it can) gives the row reader's table
    or the row reader's error: the row reader is the oracle."""
    body = "".join(tokens).encode("utf-8")
    if suffix == ".csv":
        body = (",".join(a.name for a in attributes) + "\n").encode() + body
    path = tmp_path / f"r{suffix}"
    path.write_bytes(gzip.compress(body) if suffix.endswith(".gz") else body)
    assert_read_as_the_row_reader_reads(path, attributes)
