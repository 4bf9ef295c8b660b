"""``fixflow.Program``: programs checked and evaluated over a user's DataFrames, on the
test process's SparkSession (the CLI's session; test_fresh_process.py uses a user's own)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

import fixflow
from fixflow.pipeline.cli import main

from .roads import distances, road_grid

ROOT = Path(__file__).resolve().parents[2]
SSSP = ROOT / "examples" / "api" / "sssp.dl"
PLACEMENTS = {
    "driver": None,
    "spark-hybrid": {"engine": {"local_rows": 0}},
    "spark-sync": {"engine": {"local_rows": 0, "mode": "sync"}},
}
"""Settings that place the SSSP stratum in the driver, or on Spark on each engine."""


@pytest.fixture(scope="module")
def grid(spark: SparkSession) -> tuple[DataFrame, int, dict[int, float]]:
    src, dst, w = road_grid(12)
    edges = spark.createDataFrame(
        list(zip(src.tolist(), dst.tolist(), w.tolist(), strict=True)),
        "src long, dst long, w double",
    )
    source = int(src[0])
    return edges, source, distances(src, dst, w, source)


def rows(frame: DataFrame) -> dict[int, float]:
    return {int(r[0]): float(r[1]) for r in frame.collect()}


@pytest.mark.parametrize("placement", ["driver", "spark-hybrid"])  # sync: one job a round
def test_sssp_over_dataframes_equals_scipy(spark: SparkSession, grid, placement: str) -> None:
    edges, source, expected = grid
    program = fixflow.Program.from_file(SSSP)
    sources = spark.createDataFrame([(source,)], "node long")
    results = program.evaluate(spark, PLACEMENTS[placement], edge=edges, source=sources)
    assert list(results) == ["sssp"]
    assert results["sssp"].columns == ["node", "dist"]
    assert rows(results["sssp"]) == pytest.approx(expected)
    assert results.partial == {}


def test_columns_by_name_in_any_order_with_more_columns(spark: SparkSession) -> None:
    program = fixflow.Program.from_file(SSSP)
    edges = spark.createDataFrame(
        [(1.0, "a", 2, 1), (2.5, "b", 3, 2)], "w double, label string, dst int, src int"
    )
    sources = spark.createDataFrame([(7, 1)], "other long, node int")
    found = program.evaluate(spark, edge=edges, source=sources)["sssp"]
    assert rows(found) == {1: 0.0, 2: 1.0, 3: 3.5}


def test_columns_by_position_when_the_names_differ(spark: SparkSession) -> None:
    program = fixflow.Program.from_file(SSSP)
    edges = spark.createDataFrame([(1, 2, 1), (2, 3, 2)], "a long, b long, c int")
    sources = spark.createDataFrame([(1,)], "s long")
    found = program.evaluate(spark, edge=edges, source=sources)["sssp"]
    assert rows(found) == {1: 0.0, 2: 1.0, 3: 3.0}


BAD_INPUTS = {
    "a string for a number": (
        [(1, "2", 1.0)],
        "src long, dst string, w double",
        "input `edge`: column `dst` is string, declared `dst: number` (a Spark bigint): "
        "cast it before evaluating",
    ),
    "a float for a number": (
        [(1.5, 2, 1.0)],
        "src double, dst long, w double",
        "input `edge`: column `src` is double, declared `src: number`",
    ),
    "too few columns": (
        [(1, 2)],
        "src long, dst long",
        "input `edge` has columns (src, dst); declared edge(src: number, dst: number, "
        "w: float): name the columns src, dst, w or give exactly 3 columns in that order",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_an_input_that_does_not_match_its_declaration(spark: SparkSession, case: str) -> None:
    data, schema, message = BAD_INPUTS[case]
    program = fixflow.Program.from_file(SSSP)
    sources = spark.createDataFrame([(1,)], "node long")
    with pytest.raises(fixflow.InputError) as raised:
        program.evaluate(spark, edge=spark.createDataFrame(data, schema), source=sources)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize("placement", ["driver", "spark-sync"])
def test_a_null_input_value_is_an_input_error(spark: SparkSession, placement: str) -> None:
    program = fixflow.Program.from_file(SSSP)
    edges = spark.createDataFrame([(1, 2, 1.0), (2, 3, None)], "src long, dst long, w double")
    sources = spark.createDataFrame([(1,)], "node long")
    with pytest.raises(fixflow.InputError) as raised:
        program.evaluate(spark, PLACEMENTS[placement], edge=edges, source=sources)
    assert str(raised.value) == (
        "input `edge` has a null in column `w`: drop or fill the nulls before evaluating"
    )


def test_missing_and_unknown_inputs(spark: SparkSession) -> None:
    program = fixflow.Program.from_file(SSSP)
    edges = spark.createDataFrame([(1, 2, 1.0)], "src long, dst long, w double")
    with pytest.raises(fixflow.InputError) as missing:
        program.evaluate(spark, edge=edges)
    assert str(missing.value) == f"{SSSP} reads .input relation `source`: pass source=<DataFrame>"
    with pytest.raises(fixflow.InputError) as unknown:
        program.evaluate(spark, edge=edges, source=edges, edges=edges)
    assert (
        str(unknown.value)
        == f"`edges` is not an .input relation of {SSSP} (its inputs: edge, source)"
    )
    with pytest.raises(fixflow.InputError, match="input `edge` is a list, not a Spark DataFrame"):
        program.evaluate(spark, edge=[(1, 2, 1.0)], source=edges)  # type: ignore[arg-type]


def test_program_errors_are_one_line_with_file_line_col(tmp_path: Path) -> None:
    text = ".decl e(x: number)\n.input e\n.decl p(x: number)\np(X) :- e(X), q(X).\n"
    with pytest.raises(fixflow.ProgramError) as raised:
        fixflow.Program.from_text(text, name="paths.dl")
    assert str(raised.value) == "paths.dl:4:15: error: undeclared relation `q`"
    assert "\n" not in str(raised.value)
    assert "4 | p(X) :- e(X), q(X)." in raised.value.render()
    missing = tmp_path / "absent.dl"
    with pytest.raises(fixflow.ProgramError, match=f"^{missing}: No such file or directory$"):
        fixflow.Program.from_file(missing)


EXAMPLES = ["sssp_even_odd.dl", "powerlog_p2b_pagerank.dl", "cc_two_rules.dl", "dcd_sg.dl"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_check_is_what_check_json_prints(example: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "examples" / example
    assert main(["check", "--json", str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    report = fixflow.Program.from_file(path).check()
    assert report.to_json() == printed
    assert [s.eval_class for s in report.strata] == [s["class"] for s in printed["strata"]]


def test_check_names_the_class_of_each_stratum_and_the_failing_conditions() -> None:
    program = fixflow.Program.from_file(ROOT / "examples" / "sssp_even_odd.dl")
    report = program.check()
    stratum = report.stratum_of("even")
    assert stratum.eval_class == "mra"
    assert stratum is report.stratum_of("odd")
    assert sorted(next(iter(stratum.tagged.values()))) == ["even", "odd"]
    assert "mra" in str(report)


def test_settings_are_checked_as_a_conf_file_is(spark: SparkSession, tmp_path: Path) -> None:
    program = fixflow.Program.from_file(SSSP)
    edges = spark.createDataFrame([(1, 2, 1.0)], "src long, dst long, w double")
    sources = spark.createDataFrame([(1,)], "node long")
    with pytest.raises(fixflow.FixflowError, match=r"unknown key 'mod'"):
        program.evaluate(spark, {"engine": {"mod": "sync"}}, edge=edges, source=sources)
    conf = tmp_path / "fixflow.toml"
    conf.write_text('[engine]\nmode = "async"\nlocal_rows = 0\n', encoding="utf-8")
    found = program.evaluate(spark, str(conf), edge=edges, source=sources)["sssp"]
    assert rows(found) == {1: 0.0, 2: 1.0}


def test_a_capped_stratum_makes_its_results_partial(spark: SparkSession) -> None:
    program = fixflow.Program.from_file(SSSP)
    chain = spark.createDataFrame(
        [(i, i + 1, 1.0) for i in range(10)], "src long, dst long, w double"
    )
    sources = spark.createDataFrame([(0,)], "node long")
    settings = {"engine": {"max_iterations": 2, "local_rows": 0, "mode": "sync"}}
    results = program.evaluate(spark, settings, edge=chain, source=sources)
    assert set(results.partial) == {"sssp"}
    assert "iteration cap" in results.partial["sssp"]
    assert max(rows(results["sssp"])) < 10


def test_inputs_and_outputs_are_the_declared_relations() -> None:
    program = fixflow.Program.from_file(SSSP)
    assert {r: [(a.name, a.type) for a in attrs] for r, attrs in program.inputs.items()} == {
        "edge": [("src", "number"), ("dst", "number"), ("w", "float")],
        "source": [("node", "number")],
    }
    assert [a.name for a in program.outputs["sssp"]] == ["node", "dist"]
