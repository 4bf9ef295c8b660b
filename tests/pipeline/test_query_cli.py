"""`fixflow query` and `fixflow show` over real Delta tables, as a user runs them.

The lake holds three programs: ``sssp`` and ``sssp_v2`` both have a relation ``sssp`` (so the
name is ambiguous without --program) and ``cc`` has ``cc``. An ``eval``-style directory holds
``tc`` directly under it. `fixflow query` runs on DataFusion unless told ``--engine spark``;
commands that start Spark are few: each start costs ~10 s.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, write_deltalake

from fixflow.pipeline.cli.commands.query import one_line, spark_error_message
from fixflow.pipeline.lake.datafusion_sql import (
    SqlError,
    new_builder,
    read_delta,
    run_sql,
    sql_error,
)
from fixflow.pipeline.lake.lakehouse import BatchCommit, ProgramLake, append_rows, open_table
from fixflow.pipeline.lake.results import (
    ResultsError,
    ResultSet,
    explain_missing_sql_table,
    find_results,
    format_csv,
    format_json,
    format_table,
    last_commit,
    read_result,
    register_tables,
    register_views,
    results_in_directory,
    results_in_lake,
)

ROOT = Path(__file__).resolve().parents[2]
FIXFLOW = Path(sys.executable).parent / "fixflow"

SSSP = pa.table(
    {
        "node": pa.array([3, 1, 4, 2], pa.int64()),
        "dist": pa.array([2.5, 0.0, 7.0, 1.0], pa.float64()),
    }
)
SSSP_V2 = pa.table(
    {"node": pa.array([1, 2], pa.int64()), "dist": pa.array([0.0, 9.0], pa.float64())}
)
CC = pa.table({"node": pa.array([1, 2, 3], pa.int64()), "label": ["a", "a", "bb"]})
TC = pa.table({"x": pa.array([1, 1, 2], pa.int64()), "y": pa.array([2, 3, 3], pa.int64())})
COUNT_LINE = re.compile(r"^\(?\d+ rows?\b")
OFFSETS = {"edge": {"0": [0, 41], "1": [0, 17]}}


@dataclass(frozen=True)
class Lakes:
    conf: Path
    """A config file whose [lake] path holds the three programs."""
    lake: Path
    out: Path
    """An `eval` OUT_DIR: Delta tables directly under it."""
    empty_conf: Path


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory) -> Lakes:
    base = tmp_path_factory.mktemp("query-cli")
    lake = base / "lake"
    append_rows(
        ProgramLake(str(lake), "sssp").results("sssp"), SSSP, BatchCommit("stream", 7, OFFSETS)
    )
    append_rows(ProgramLake(str(lake), "sssp_v2").results("sssp"), SSSP_V2)
    append_rows(ProgramLake(str(lake), "cc").results("cc"), CC)
    (lake / "_broker").mkdir()  # the embedded broker's files are not a program
    out = base / "out"
    write_deltalake(str(out / "tc"), TC)
    (out / "tc.csv").write_text("x,y\n")  # `eval --csv` leaves CSVs beside the tables
    conf = base / "lake.toml"
    conf.write_text(f'[lake]\npath = "{lake}"\n')
    empty_conf = base / "empty.toml"
    empty_conf.write_text(f'[lake]\npath = "{base / "no-lake"}"\n')
    return Lakes(conf, lake, out, empty_conf)


def fixflow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FIXFLOW), *args], capture_output=True, text=True, timeout=240, cwd=ROOT
    )


def table_rows(stdout: str) -> list[list[str]]:
    """The body rows of an aligned table (after the dashed rule, before the count line)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if set(line.replace(" ", "")) == {"-"})
    body = []
    for line in lines[start + 1 :]:
        if COUNT_LINE.match(line):
            break
        body.append(line.split())
    return body


# ---------------------------------------------------------------- fixflow query, both engines

FILTERED = """\
node  dist
----  ----
   3   2.5
   2   1.0
   1   0.0
(3 rows)
"""


@pytest.mark.parametrize(
    "engine",
    [
        "datafusion",
        # the `fixflow query` subprocess starts Spark of its own
        pytest.param("spark", marks=pytest.mark.spark),
    ],
)
def test_query_filters_one_programs_relation(lakes: Lakes, engine: str) -> None:
    done = fixflow(
        "query",
        "SELECT node, dist FROM sssp WHERE dist < 3 ORDER BY dist DESC",
        "--conf",
        str(lakes.conf),
        "--program",
        "sssp",
        "--engine",
        engine,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == FILTERED  # the same text whichever engine answered
    assert done.stderr == ""  # Spark's start-up chatter stays out of the terminal


@pytest.mark.spark  # the `fixflow query` subprocess starts Spark of its own
def test_spark_sql_error_is_one_line_without_traceback(lakes: Lakes) -> None:
    done = fixflow("query", "SELECT nope FROM tc", "--results", str(lakes.out), "--engine", "spark")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("fixflow query: [UNRESOLVED_COLUMN")
    assert "`nope`" in lines[0]


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command that printed nothing else."""
    assert done.returncode == 1
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_query_with_an_ambiguous_relation_asks_for_program(lakes: Lakes) -> None:
    line = one_error_line(fixflow("query", "SELECT * FROM sssp", "--conf", str(lakes.conf)))
    assert "`sssp` is ambiguous" in line
    assert "sssp, sssp_v2" in line and "--program" in line
    assert line.endswith("or name it as program.relation (sssp.sssp, sssp_v2.sssp)")


def test_query_names_a_programs_relation_as_program_dot_relation(lakes: Lakes) -> None:
    # Unquoted names fold to lower case, as Spark's are case-insensitive.
    sql = "SELECT s.node, s.dist, c.label FROM SSSP_V2.sssp s JOIN CC c ON s.node = c.node"
    done = fixflow("query", sql + " ORDER BY 1", "--conf", str(lakes.conf), "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "node,dist,label\n1,0.0,a\n2,9.0,a\n"


TC_SQL = "SELECT x, y, x * 0.5 AS half, CASE WHEN y = 2 THEN 'two' END AS s FROM tc ORDER BY x, y"


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (
            "table",
            "x  y  half  s\n-  -  ----  ----\n1  2   0.5  two\n1  3   0.5  NULL\n"
            "2  3   1.0  NULL\n(3 rows)\n",
        ),
        ("csv", "x,y,half,s\n1,2,0.5,two\n1,3,0.5,\n2,3,1.0,\n"),
        (
            "json",
            '[{"x": 1, "y": 2, "half": 0.5, "s": "two"}, {"x": 1, "y": 3, "half": 0.5, "s": null}, '
            '{"x": 2, "y": 3, "half": 1.0, "s": null}]\n',
        ),
    ],
)
def test_query_output_formats(lakes: Lakes, output: str, expected: str) -> None:
    done = fixflow("query", TC_SQL, "--results", str(lakes.out), "--format", output)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "SELECT * FROM nope",
            "Error during planning: table 'nope' not found "
            "(result relations under {lake}: cc, sssp)",
        ),
        (
            "SELECT * FROM cc.nope",
            "Error during planning: table 'cc.nope' not found "
            "(result tables under {lake}: cc.cc, sssp.sssp, sssp_v2.sssp)",
        ),
        ("SELEC 1", "SQL error: Expected: an SQL statement, found: SELEC at Line: 1, Column: 1"),
        ("SELECT nope FROM cc", "Schema error: No field named nope. "),
        ("SELECT 1; SELECT 2", "This feature is not implemented: "),
    ],
)
def test_query_errors_are_one_line(lakes: Lakes, sql: str, expected: str) -> None:
    line = one_error_line(fixflow("query", sql, "--conf", str(lakes.conf)))
    assert line.startswith("fixflow query: " + expected.format(lake=lakes.lake))


def test_query_error_traceback_only_with_verbose(lakes: Lakes) -> None:
    done = fixflow("-v", "query", "SELEC 1", "--results", str(lakes.out))
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("fixflow query: SQL error: ")


NOT_ON_THE_QUERY_PATH = ("pyspark", "py4j", "kafka", "z3", "fixflow.operators")
CONSTANTS_ONLY = ("fixflow.operators", "fixflow.operators.thresholds")
"""Modules of the operators the configuration reads its defaults from: constants, no
imports (``operators/thresholds.py``)."""
LOADED_MODULES = (
    "import json, sys\n"
    "from fixflow.pipeline.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print(json.dumps(sorted(sys.modules)))\n"
    "sys.exit(code)\n"
)


@pytest.mark.parametrize("command", [["query", "SELECT count(*) FROM cc"], ["show", "cc"]])
def test_query_and_show_start_no_jvm(lakes: Lakes, command: list[str]) -> None:
    """The commands answer without importing Spark (nor Kafka, Z3, the operators)."""
    argv = [sys.executable, "-c", LOADED_MODULES, *command, "--conf", str(lakes.conf)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    heavy = [
        m
        for m in loaded
        if any(m == p or m.startswith(p + ".") for p in NOT_ON_THE_QUERY_PATH)
        and m not in CONSTANTS_ONLY
    ]
    assert heavy == []


# ---------------------------------------------------------------- no Spark needed


def test_query_on_an_empty_lake_says_what_to_run(lakes: Lakes) -> None:
    done = fixflow("query", "SELECT 1", "--conf", str(lakes.empty_conf))
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"fixflow query: no result tables under {lakes.empty_conf.parent / 'no-lake'}; "
        "run `fixflow run` or `fixflow eval` first"
    )


def test_query_on_a_program_without_results(lakes: Lakes) -> None:
    done = fixflow("query", "SELECT 1", "--conf", str(lakes.conf), "--program", "pagerank")
    assert done.returncode == 1
    assert f"no result tables under {lakes.lake}/pagerank/results;" in done.stderr


def test_show_prints_sorted_rows_count_and_commit_metadata(lakes: Lakes) -> None:
    done = fixflow("show", "sssp", "--conf", str(lakes.conf), "--program", "sssp")
    assert done.returncode == 0, done.stderr
    assert table_rows(done.stdout) == [["1", "0.0"], ["2", "1.0"], ["3", "2.5"], ["4", "7.0"]]
    lines = done.stdout.splitlines()
    assert "4 rows" in lines
    assert any(line.startswith("Delta version 0 (WRITE") for line in lines)
    assert "batch 7 of query stream" in lines
    assert "offsets edge[0]: 0..41, edge[1]: 0..17" in lines


def test_show_limit_and_results_directory(lakes: Lakes) -> None:
    done = fixflow("show", "tc", "--results", str(lakes.out), "--limit", "2")
    assert done.returncode == 0, done.stderr
    assert table_rows(done.stdout) == [["1", "2"], ["1", "3"]]
    assert "3 rows (first 2 shown; --limit 0 for all)" in done.stdout.splitlines()


def test_show_unambiguous_relation_of_a_multi_program_lake(lakes: Lakes) -> None:
    done = fixflow("show", "cc", "--conf", str(lakes.conf))
    assert done.returncode == 0, done.stderr
    assert table_rows(done.stdout) == [["1", "a"], ["2", "a"], ["3", "bb"]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["sssp"],
            "relation `sssp` is ambiguous: it exists in several programs (sssp, sssp_v2); "
            "pass --program STEM to choose one",
        ),
        (["nope"], "no relation `nope` under {lake} (known: cc, sssp)"),
        (
            ["cc", "--program", "sssp_v2"],
            "no relation `cc` under {lake}/sssp_v2/results (known: sssp)",
        ),
    ],
)
def test_show_errors(lakes: Lakes, args: list[str], message: str) -> None:
    done = fixflow("show", *args, "--conf", str(lakes.conf))
    assert done.returncode == 1
    assert done.stderr.strip() == "fixflow show: " + message.format(lake=lakes.lake)


def test_show_on_an_empty_lake(lakes: Lakes) -> None:
    done = fixflow("show", "sssp", "--conf", str(lakes.empty_conf))
    assert done.returncode == 1
    assert "no result tables under" in done.stderr and "fixflow eval" in done.stderr


# ---------------------------------------------------------------- in process


@pytest.fixture()
def session(spark: Any) -> Iterator[Any]:
    """The shared SparkSession without temp views left over from other tests."""

    def drop_views() -> None:
        for view in spark.catalog.listTables():
            if view.isTemporary:
                spark.catalog.dropTempView(view.name)

    drop_views()
    yield spark
    drop_views()


def test_views_register_only_unambiguous_relations(lakes: Lakes, session: Any) -> None:
    results = results_in_lake(str(lakes.lake))
    assert sorted(results.ambiguous) == ["sssp"]
    assert register_views(session, results) == ["cc"]
    rows = session.sql(
        "SELECT label, count(*) AS n FROM cc GROUP BY label ORDER BY label"
    ).collect()
    assert [(r.label, r.n) for r in rows] == [("a", 2), ("bb", 1)]


def test_views_load_only_the_relations_a_query_mentions(lakes: Lakes, session: Any) -> None:
    results = results_in_lake(str(lakes.lake), program="sssp")
    both = ResultSet(
        results.location, (*results.tables, *results_in_directory(str(lakes.out)).tables)
    )
    assert register_views(session, both, "SELECT * FROM TC") == ["tc"]
    assert register_views(session, both, "SELECT * FROM sssp_x") == ["sssp", "tc"]
    assert register_views(session, both, "SELECT * FROM `sssp` JOIN tc") == ["sssp", "tc"]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM nope", "(result relations under {lake}: cc, sssp)"),
        ("SELECT * FROM cc JOIN sssp USING (node)", "relation `sssp` is ambiguous"),
    ],
)
def test_missing_table_messages(lakes: Lakes, session: Any, sql: str, expected: str) -> None:
    from pyspark.errors import PySparkException

    results = results_in_lake(str(lakes.lake))
    register_views(session, results, sql)
    with pytest.raises(PySparkException) as caught:
        session.sql(sql)
    message = spark_error_message(caught.value, results)
    assert "\n" not in message
    assert expected.format(lake=lakes.lake) in message


def test_tables_register_unambiguous_relations_and_qualified_names(lakes: Lakes) -> None:
    builder = new_builder()
    names = register_tables(builder, results_in_lake(str(lakes.lake)))
    assert sorted(names) == ["cc", "cc.cc", "sssp.sssp", "sssp_v2.sssp"]
    rows = run_sql(builder, "SELECT label, count(*) AS n FROM cc GROUP BY label ORDER BY label")
    assert rows.to_pylist() == [{"label": "a", "n": 2}, {"label": "bb", "n": 1}]


def test_tables_load_only_the_relations_a_query_mentions(lakes: Lakes) -> None:
    results = results_in_lake(str(lakes.lake), program="sssp")
    both = ResultSet(
        results.location, (*results.tables, *results_in_directory(str(lakes.out)).tables)
    )
    assert register_tables(new_builder(), both, "SELECT * FROM TC") == ["tc"]
    everything = ["sssp", "sssp.sssp", "tc"]
    assert register_tables(new_builder(), both, "SELECT * FROM sssp_x") == everything


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM nope", "(result relations under {lake}: cc, sssp)"),
        ("SELECT * FROM cc JOIN sssp USING (node)", "relation `sssp` is ambiguous"),
        ("SELECT * FROM Sssp", "or name it as program.relation (sssp.sssp, sssp_v2.sssp)"),
        ("SELECT * FROM pagerank.cc", "(result tables under {lake}: cc.cc, sssp.sssp, "),
    ],
)
def test_missing_sql_table_messages(lakes: Lakes, sql: str, expected: str) -> None:
    results = results_in_lake(str(lakes.lake))
    builder = new_builder()
    register_tables(builder, results, sql)
    with pytest.raises(SqlError) as caught:
        run_sql(builder, sql)
    assert caught.value.missing_table is not None
    message = explain_missing_sql_table(caught.value.missing_table, results, caught.value.message)
    assert "\n" not in message
    assert expected.format(lake=lakes.lake) in message


def test_datafusion_messages_become_one_line() -> None:
    schema = sql_error(Exception("Schema error: No field named a.\nValid fields are t.b."))
    assert schema.message == "Schema error: No field named a. Valid fields are t.b."
    assert schema.missing_table is None
    missing = sql_error(Exception("Error during planning: table 'datafusion.public.x' not found"))
    assert missing.message == "Error during planning: table 'x' not found"
    assert missing.missing_table == "x"
    parse = sql_error(Exception('SQL error: ParserError("Expected: an expression, found: EOF")'))
    assert parse.message == "SQL error: Expected: an expression, found: EOF"


def test_read_result_keeps_the_delta_schema(tmp_path: Path) -> None:
    """DataFusion returns string views; readers get the types to_pyarrow_dataset gave."""
    rows = pa.table(
        {
            "id": pa.array([2, 1], pa.int64()),
            "name": pa.array(["b", None], pa.string()),
            "at": pa.array([0, 1], pa.timestamp("us", tz="UTC")),
            "part": ["x", "y"],
        }
    )
    write_deltalake(str(tmp_path / "t"), rows, partition_by=["part"])
    write_deltalake(str(tmp_path / "empty"), rows.schema.empty_table())
    empty, full = results_in_directory(str(tmp_path)).tables
    assert read_result(full).sort_by("id") == rows.sort_by("id")
    assert read_result(empty) == rows.schema.empty_table()
    delta = open_table(str(tmp_path / "t"))
    assert delta is not None and read_delta(delta).schema == rows.schema


def test_provisional_flag_is_reported(tmp_path: Path) -> None:
    path = str(tmp_path / "rank")
    write_deltalake(
        path,
        SSSP,
        commit_properties=CommitProperties(
            custom_metadata={"fixflow.batch_id": "3", "fixflow.provisional": "true"}
        ),
    )
    [table] = results_in_directory(str(tmp_path)).tables
    info = last_commit(table)
    assert info.provisional and info.fixflow["batch_id"] == "3"
    assert "provisional: async consistency, results may still change" in info.describe()


def test_results_and_program_exclude_each_other(lakes: Lakes) -> None:
    with pytest.raises(ResultsError, match="exclude each other"):
        find_results(str(lakes.lake), program="sssp", results_dir=str(lakes.out))


def test_lake_listing_skips_non_programs_and_non_tables(lakes: Lakes) -> None:
    results = find_results(str(lakes.lake))
    assert sorted(t.qualified_name for t in results.tables) == [
        "cc.cc",
        "sssp.sssp",
        "sssp_v2.sssp",
    ]
    assert [t.relation for t in find_results("", results_dir=str(lakes.out)).tables] == ["tc"]


def test_a_broken_table_is_reported_in_one_line(tmp_path: Path) -> None:
    log_dir = tmp_path / "broken" / "_delta_log"
    log_dir.mkdir(parents=True)
    (log_dir / "00000000000000000000.json").write_text("not json\n")
    done = fixflow("show", "broken", "--results", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.startswith(f"fixflow show: {tmp_path}/broken: cannot open the Delta table")
    assert len(done.stderr.strip().splitlines()) == 1


def test_results_directory_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="no such directory"):
        results_in_directory(str(tmp_path / "missing"))


def test_format_table_aligns_numbers_right_and_text_left() -> None:
    rows = pa.table(
        {"id": pa.array([1, 100], pa.int64()), "name": ["alpha", None], "score": [0.5, math.inf]}
    )
    assert format_table(rows).splitlines() == [
        " id  name   score",
        "---  -----  -----",
        "  1  alpha    0.5",
        "100  NULL     inf",
    ]


def test_format_csv_and_json() -> None:
    rows = pa.table({"a": pa.array([1, 2], pa.int64()), "b": ["x,y", None], "c": [1.5, math.nan]})
    assert format_csv(rows) == 'a,b,c\n1,"x,y",1.5\n2,,nan'
    assert json.loads(format_json(rows)) == [
        {"a": 1, "b": "x,y", "c": 1.5},
        {"a": 2, "b": None, "c": "nan"},
    ]


def test_one_line_drops_the_sql_excerpt_and_plan() -> None:
    parse = (
        "\n[PARSE_SYNTAX_ERROR] Syntax error at or near 'selec'. SQLSTATE: 42601 "
        "(line 1, pos 0)\n\n== SQL ==\nselec 1\n^^^\n"
    )
    assert one_line(parse) == (
        "[PARSE_SYNTAX_ERROR] Syntax error at or near 'selec'. SQLSTATE: 42601 (line 1, pos 0)"
    )
    analysis = (
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nope` cannot be found.\n"
        "Search path: [`system`.`builtin`]. SQLSTATE: 42P01; line 1 pos 14;\n"
        "'Project [*]\n+- 'UnresolvedRelation [nope], [], false\n"
    )
    assert one_line(analysis) == (
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nope` cannot "
        "be found. Search path: [`system`.`builtin`]. SQLSTATE: "
        "42P01; line 1 pos 14;"
    )


def test_the_thresholds_module_imports_nothing() -> None:
    """What keeps ``CONSTANTS_ONLY`` light: the configuration imports it on every command."""
    import ast as python_ast

    source = (ROOT / "src" / "fixflow" / "operators" / "thresholds.py").read_text()
    imports = [
        node
        for node in python_ast.walk(python_ast.parse(source))
        if isinstance(node, python_ast.Import | python_ast.ImportFrom)
    ]
    assert imports == []
