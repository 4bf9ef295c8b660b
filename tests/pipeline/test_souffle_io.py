"""Soufflé's I/O options in ``fixflow eval``: ``.input r(filename=..., delimiter=...)``
files, ``unsigned`` columns, and the files and stdout of ``.output r(IO=...)``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from fixflow.checker.ast import Attribute
from fixflow.pipeline.cli import main as fixflow
from fixflow.pipeline.cli.commands.eval import _write_souffle_output
from fixflow.pipeline.lake.delta import nullary_table
from fixflow.pipeline.lake.facts import FactsError, input_file, load_inputs

EDGE = (Attribute("src", "number"), Attribute("dst", "number"))
STOCK = (Attribute("item", "symbol"), Attribute("n", "number", declared="unsigned"))


def test_filename_is_relative_to_the_facts_directory_and_split_at_the_delimiter(
    tmp_path: Path,
) -> None:
    (tmp_path / "graph").mkdir()
    (tmp_path / "graph" / "e.csv").write_text("1,2\n2,3\n")  # no header, whatever the suffix
    options = {"edge": [{"IO": "file", "filename": "graph/e.csv", "delimiter": ","}]}
    tables = load_inputs(tmp_path, {"edge": EDGE}, options)
    assert tables["edge"].to_pylist() == [{"src": 1, "dst": 2}, {"src": 2, "dst": 3}]


def test_several_input_directives_load_the_union_of_their_files(tmp_path: Path) -> None:
    """Soufflé loads every `.input` of a relation: `.input edge` then
    `.input edge(filename="more.tsv")` reads both files; a row in both is one fact."""
    (tmp_path / "edge.facts").write_text("1\t2\n2\t3\n")
    (tmp_path / "more.tsv").write_text("2\t3\n5\t6\n")
    options = {"edge": [{}, {"filename": "more.tsv"}]}
    rows = load_inputs(tmp_path, {"edge": EDGE}, options)["edge"].to_pylist()
    assert sorted((r["src"], r["dst"]) for r in rows) == [(1, 2), (2, 3), (5, 6)]


def test_options_without_filename_read_a_tab_separated_relation_facts(tmp_path: Path) -> None:
    (tmp_path / "edge.facts").write_text("1\t2\n")
    (tmp_path / "edge.csv").write_text("src,dst\n7,8\n")
    assert input_file(tmp_path, "edge", {"IO": "file"}) == (tmp_path / "edge.facts", "\t")
    assert input_file(tmp_path, "edge", {}) == (tmp_path / "edge.facts", None)


def test_a_missing_named_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(FactsError, match=r"nope\.tsv: no input file for relation `edge`"):
        load_inputs(tmp_path, {"edge": EDGE}, {"edge": [{"filename": "nope.tsv"}]})


def test_unsigned_columns_reject_negative_facts(tmp_path: Path) -> None:
    (tmp_path / "stock.facts").write_text("apple\t0\npear\t-1\n")
    with pytest.raises(FactsError, match=r"stock\.facts:2: column `n` is unsigned"):
        load_inputs(tmp_path, {"stock": STOCK})


def test_unsigned_columns_accept_zero_and_int64_max(tmp_path: Path) -> None:
    (tmp_path / "stock.facts").write_text(f"apple\t0\npear\t{2**63 - 1}\n")
    rows = load_inputs(tmp_path, {"stock": STOCK})["stock"].to_pylist()
    assert [r["n"] for r in rows] == [0, 2**63 - 1]


def _attributes(table: pa.Table) -> tuple[Attribute, ...]:
    kinds = {pa.int64(): "number", pa.float64(): "float", pa.string(): "symbol"}
    return tuple(Attribute(f.name, kinds[f.type]) for f in table.schema)


def test_output_file_is_sorted_headerless_and_delimited(tmp_path: Path) -> None:
    table = pa.table({"a": [3, 1], "b": ["x", "y"], "w": [0.5, 1e-3]})
    options = {"IO": "file", "filename": "sub/r.txt", "delimiter": "|"}
    _write_souffle_output(str(tmp_path), "r", table, _attributes(table), options)
    assert (tmp_path / "sub" / "r.txt").read_text() == "1|y|0.001\n3|x|0.5\n"


def test_output_file_defaults_to_relation_csv_with_tabs(tmp_path: Path) -> None:
    table = pa.table({"a": [2, 1]})
    _write_souffle_output(str(tmp_path), "r", table, _attributes(table), {"IO": "file"})
    assert (tmp_path / "r.csv").read_text() == "1\n2\n"


def test_stdout_output_prints_souffle_banners(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = pa.table({"a": [2, 1], "b": ["q", "p"]})
    options = {"IO": "stdout", "delimiter": ","}
    _write_souffle_output(str(tmp_path), "r", table, _attributes(table), options)
    assert capsys.readouterr().out == (
        "---------------\nr\n===============\n1,p\n2,q\n===============\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_nullary_fact_prints_as_parentheses(capsys: pytest.CaptureFixture[str]) -> None:
    holds = nullary_table(True)  # a nullary relation's table, as `to_arrow` makes it
    _write_souffle_output(".", "done", holds, (), {"IO": "stdout"})
    assert "===============\n()\n===============" in capsys.readouterr().out


def test_the_stream_names_the_directives_only_eval_honours() -> None:
    from fixflow.checker.parser import parse
    from fixflow.pipeline.stream.session import eval_only_directives

    program = parse(
        '.decl e(x: number)\n.input e(IO=file, filename="e.tsv")\n.decl o(x: number)\n'
        ".output o\n.decl p(x: number)\n.output p(IO=stdout)\n.printsize o\n"
        "o(x) :- e(x).\np(x) :- e(x).\n",
        "prog.dl",
    )
    assert eval_only_directives(program) == [".input e(...)", ".output p(...)", ".printsize o"]
    assert eval_only_directives(parse(".decl e(x: number)\n.input e\n", "p.dl")) == []


@pytest.mark.parametrize(
    ("name", "text", "holds"),
    [
        ("flag.facts", "()\n", True),  # what Soufflé writes for a nullary fact
        ("flag.facts", "\n", True),  # any line: Soufflé reads no field when the arity is 0
        ("flag.facts", "", False),
        ("flag.csv", "\n\n", True),  # `fixflow eval --csv`: an empty header, an empty line
        ("flag.csv", "\n", False),
    ],
)
def test_a_nullary_input_holds_when_its_file_has_a_line(
    tmp_path: Path, name: str, text: str, holds: bool
) -> None:
    (tmp_path / name).write_text(text)
    table = load_inputs(tmp_path, {"flag": ()})["flag"]
    assert (table.num_columns, table.num_rows) == (0, int(holds))


def test_the_stream_refuses_a_nullary_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "p.dl"
    program.write_text(
        ".decl r(x: number)\n.output r\n.decl flag()\n.input flag\nr(1) :- flag().\n"
    )
    assert fixflow(["run", str(program)]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"{program}:4:1: nullary input relation `flag` is not supported by the stream" in line
