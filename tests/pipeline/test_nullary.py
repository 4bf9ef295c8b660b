"""Nullary relations (``.decl q()``) end to end: the lake representation of their tables (one
``holds`` column, one row when the relation holds), ``fixflow show``/``query`` on them, the
async engine with a nullary atom in a recursive body, and a stream whose nullary output
starts and stops holding. The batch cases are golden programs: tests/souffle/nullary_*."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fixflow.pipeline.cli import main as fixflow_main
from fixflow.pipeline.config import Config
from fixflow.pipeline.lake.delta import (
    HOLDS,
    declared_rows,
    nullary_table,
    read_table,
    table_schema,
    to_arrow,
    write_csv,
    write_table,
)
from fixflow.pipeline.lake.lakehouse import read_table as read_lake_table
from fixflow.pipeline.stream.program import ProgramStream
from streams.harness import isolated_config, publish, run_available_now

FIXFLOW = Path(sys.executable).parent / "fixflow"
HOLDS_SCHEMA = pa.schema([pa.field(HOLDS, pa.bool_(), nullable=False)])


# ---------------------------------------------------------------- the lake representation


@pytest.mark.parametrize("holds", [True, False])
def test_a_nullary_table_round_trips(tmp_path: Path, holds: bool) -> None:
    """Declared rows (no columns; one row if it holds) → a Delta table of one ``holds``
    column → declared rows again, and the CSV form: an empty header, an empty line."""
    declared = nullary_table(holds).select([])
    assert declared.num_columns == 0 and declared.num_rows == int(holds)
    write_table(tmp_path / "q", declared, ())
    table = read_table(tmp_path / "q")
    assert table.schema == HOLDS_SCHEMA == table_schema(())
    assert table.to_pylist() == ([{HOLDS: True}] if holds else [])
    back = declared_rows(table, ())
    assert (back.num_columns, back.num_rows) == (0, int(holds))
    write_csv(tmp_path / "q.csv", table, ())
    assert (tmp_path / "q.csv").read_text() == ("\n\n" if holds else "\n")


def test_spark_rows_of_a_nullary_relation_are_counted(spark: Any) -> None:
    """Spark's ``toArrow`` drops the rows of a frame without columns; ``to_arrow`` keeps
    whether there is one, and Spark reads the declared rows back as one empty tuple."""
    holding = spark.range(3).select()  # three empty tuples: the relation holds
    assert holding.toArrow().num_rows == 0  # what the representation works around
    assert to_arrow(holding, ()).to_pylist() == [{HOLDS: True}]
    assert to_arrow(spark.range(0).select(), ()).num_rows == 0
    frame = spark.createDataFrame(declared_rows(nullary_table(True), ()))
    assert frame.columns == [] and frame.count() == 1


# ---------------------------------------------------------------- show and query

NULLARY_PROGRAM = """\
.decl e(x: number, y: number)
.input e
.decl q()
.output q
q() :- e(1, _).
.decl never()
.output never
never() :- e(9, _).
"""


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``fixflow eval --csv`` of a program with a nullary output that holds and one that
    does not (a subprocess: ``show`` and ``query`` below read its tables)."""
    base = tmp_path_factory.mktemp("nullary")
    (base / "p.dl").write_text(NULLARY_PROGRAM)
    (base / "facts").mkdir()
    (base / "facts" / "e.facts").write_text("1\t2\n")
    done = run("eval", str(base / "p.dl"), "-F", str(base / "facts"), "-D", str(base / "out"))
    assert done.returncode == 0, done.stderr
    assert "q: 1 rows" in done.stdout and "never: 0 rows" in done.stdout
    return base / "out"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FIXFLOW), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.spark  # the `fixflow eval` subprocess starts Spark of its own
def test_show_a_nullary_relation(evaluated: Path) -> None:
    done = run("show", "q", "--results", str(evaluated))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:5] == ["holds", "-----", "true", "1 row"]
    done = run("show", "never", "--results", str(evaluated))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:4] == ["holds", "-----", "0 rows"]


@pytest.mark.spark
def test_query_nullary_relations(evaluated: Path) -> None:
    sql = "SELECT (SELECT count(*) FROM q) AS q, (SELECT count(*) FROM never) AS never"
    done = run("query", sql, "--results", str(evaluated), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"q": 1, "never": 0}]
    done = run("query", "SELECT * FROM q", "--results", str(evaluated), "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["holds", "true"]


# ---------------------------------------------------------------- the async engine

ASYNC_PROGRAM = """\
.decl e(x: number, y: number, w: float)
.input e
.decl go()
go() :- e(1, _, _).
.decl sssp(x: number, d: float)
.output sssp
sssp(x, min[d]) :- x = 1, d = 0.0, go().
sssp(y, min[dy]) :- sssp(x, dx), e(x, y, w), go(), dy = dx + w.
.decl s(x: number, d: float)
.output s
s(y, min[d]) :- e(_, y, d).
s(x, min[d]) :- s(x, d0), go(), d = d0 + 1.0.
"""


def test_async_engine_with_nullary_atoms(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``go()`` joins the auxiliary side of sssp's recursive body (the async engine runs
    it); in ``s`` the auxiliary side is ``go()`` alone, which joins on no key: ``s`` falls
    back to the sync engine instead of failing."""
    (tmp_path / "p.dl").write_text(ASYNC_PROGRAM)
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "e.facts").write_text("1\t2\t1.5\n2\t3\t2.0\n1\t3\t5.0\n")
    out = tmp_path / "out"
    args = ["eval", str(tmp_path / "p.dl"), "-F", str(tmp_path / "facts"), "-D", str(out)]
    code = fixflow_main([*args, "--engine", "async", "--csv"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "(sssp): async engine" in captured.err
    assert (out / "sssp.csv").read_text().splitlines() == ["x,d", "1,0.0", "2,1.5", "3,3.5"]
    assert (out / "s.csv").read_text().splitlines() == ["x,d", "2,1.5", "3,2.0"]


# ---------------------------------------------------------------- a stream

STREAM_PROGRAM = """\
.decl e(x: number, y: number)
.input e
.decl q()
.output q
q() :- e(1, _).
.decl r(y: number)
.output r
r(y) :- q(), e(_, y).
"""


def test_a_stream_commits_a_nullary_output(spark: Any, broker: Config, tmp_path: Path) -> None:
    """q() starts holding (a row is appended), stops (the row is deleted by a merge on
    ``holds``), and after a restart, which reads the tables back, holds again."""
    program = tmp_path / "nullary.dl"
    program.write_text(STREAM_PROGRAM)
    config = isolated_config(broker, tmp_path / "lake")
    stream = ProgramStream(spark, config, program)
    steps: list[tuple[list[tuple[str, tuple[int, int], str]], list[Any], set[int]]] = [
        ([("e", (1, 2), "insert"), ("e", (2, 3), "insert")], [{HOLDS: True}], {2, 3}),
        ([("e", (1, 2), "delete")], [], set()),
        ([("e", (1, 4), "insert")], [{HOLDS: True}], {3, 4}),
    ]
    for number, (messages, q_rows, r_values) in enumerate(steps):
        if number == 2:  # a restart: the stream loads its result tables back
            stream = ProgramStream(spark, config, program)
        publish(config, stream.program, messages)
        run_available_now(stream)
        q = read_lake_table(stream.lake.results("q"))
        r = read_lake_table(stream.lake.results("r"))
        assert q is not None and r is not None
        assert q.schema == HOLDS_SCHEMA, number
        assert q.to_pylist() == q_rows, number
        assert {row["y"] for row in r.to_pylist()} == r_values, number
