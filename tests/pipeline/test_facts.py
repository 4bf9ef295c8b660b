"""Reading input facts: TSV ``.facts`` and headed ``.csv`` files, with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from fixflow.checker.ast import Attribute
from fixflow.pipeline.facts import FactsError, input_path, load_inputs, read_rows, read_table

EDGE = (Attribute("src", "number"), Attribute("dst", "number"), Attribute("w", "float"))
NAME = (Attribute("id", "number"), Attribute("label", "symbol"))


def test_tab_separated_facts_are_typed(tmp_path: Path) -> None:
    path = tmp_path / "edge.facts"
    path.write_text("1\t2\t0.5\n\n2\t3\t1e-3\n")
    assert read_rows(path, EDGE) == [(1, 2, 0.5), (2, 3, 0.001)]


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
