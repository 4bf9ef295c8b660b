"""`fixflow eval` as a user runs it (a subprocess): Delta tables with the exact declared
schema, CSV files with a header, and one-line errors without tracebacks."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from fixflow.operators.memory_model import auto_local_rows

PROGRAM = """\
.decl edge(src: number, dst: number, w: float)
.input edge
.decl label(node: number, name: symbol)
.input label
.decl sssp(node: number, dist: float)
.output sssp
.decl named(name: symbol, dist: float)
.output named
.decl K(i: number, node: number, k: float)
.output K
sssp(X, d) :- X = 1, d = 0.0.
sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
named(N, d) :- sssp(X, d), label(X, N).
K(0, X, k) :- label(X, _), k = 0.0.
K(i+1, Y, sum[k]) :- label(Y, _), k = 1.0
                   ; K(i, X, kx), edge(X, Y, _), k = 0.5 * kx
                   ; {sum[Δkx] < 0.01}.
"""


JVM_MODULE_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"


def test_jvm_noise_is_filtered_from_what_a_child_started_then_writes_to_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The JVM is a child of the process: what it writes to stderr passes a filter that
    drops only its known notices, for as long as it runs; our own stderr is restored."""
    from fixflow.pipeline.spark import _jvm_stderr_without_noise

    script = f"sleep 0.3; echo '{JVM_MODULE_NOTICE}' >&2; echo 'log4j: ERROR kept' >&2"
    with _jvm_stderr_without_noise():
        child = subprocess.Popen(["sh", "-c", script])
    print("ours, after the JVM started", file=sys.stderr, flush=True)
    assert child.wait(timeout=10) == 0
    err = ""
    deadline = time.monotonic() + 30
    while "log4j: ERROR kept" not in err and time.monotonic() < deadline:
        time.sleep(0.1)  # the copying thread passes the child's lines on in its own time
        err += capfd.readouterr().err
    assert err.splitlines() == ["ours, after the JVM started", "log4j: ERROR kept"]


def fixflow(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fixflow.pipeline.cli", "eval", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "prog.dl").write_text(PROGRAM)
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "edge.facts").write_text("1\t2\t1.5\n2\t3\t2.0\n1\t3\t4.0\n")
    (facts / "label.csv").write_text("node,name\n1,one\n2,two\n3,three\n")
    return tmp_path


@pytest.mark.spark  # the `fixflow eval` subprocess starts Spark of its own
@pytest.mark.parametrize("engine", [None, "sync"])
def test_eval_writes_delta_tables_and_csv(project: Path, engine: str | None) -> None:
    """The default MRA engine (hybrid: one stage per stratum here) and `--engine sync`
    (rounds) write the same tables."""
    out = project / "out"
    choice = [] if engine is None else ["--engine", engine]
    result = fixflow(project / "prog.dl", "-F", project / "facts", "-D", out, "--csv", *choice)
    assert result.returncode == 0, result.stderr
    assert "sssp: 3 rows" in result.stdout
    # a small MRA stratum runs on the hybrid engine's loop in the driver: no Spark job
    in_driver = "(sssp): hybrid engine in the driver, 1 stages, 0 Spark jobs"
    assert (in_driver in result.stderr) == (engine is None), result.stderr
    # Without -v the JVM's start-up notices and warnings are hidden (pipeline/spark.py), the
    # JVM's own line about Spark's incubator module too (test_jvm_noise_is_filtered...).
    # Fixflow's own progress lines ("  stratum 0 (sssp, mra): round 2, ...") and the
    # engine's summary line ("stratum 0 (sssp): hybrid engine, ...") stay.
    noise = [
        line for line in result.stderr.splitlines() if not line.lstrip().startswith("stratum ")
    ]
    assert noise == [], result.stderr
    sssp = DeltaTable(str(out / "sssp")).to_pyarrow_table()
    assert sssp.schema == pa.schema([("node", pa.int64()), ("dist", pa.float64())])
    assert sorted(sssp.to_pylist(), key=lambda r: r["node"]) == [
        {"node": 1, "dist": 0.0},
        {"node": 2, "dist": 1.5},
        {"node": 3, "dist": 3.5},
    ]
    named = DeltaTable(str(out / "named")).to_pyarrow_table()
    assert named.schema == pa.schema([("name", pa.string()), ("dist", pa.float64())])
    # the iteration index is dropped from the result table
    katz = DeltaTable(str(out / "K")).to_pyarrow_table()
    assert katz.schema == pa.schema([("node", pa.int64()), ("k", pa.float64())])
    values = {r["node"]: r["k"] for r in katz.to_pylist()}
    assert values[1] == pytest.approx(1.0) and values[3] == pytest.approx(2.25, abs=0.02)
    with (out / "sssp.csv").open() as handle:
        assert list(csv.reader(handle)) == [
            ["node", "dist"],
            ["1", "0.0"],
            ["2", "1.5"],
            ["3", "3.5"],
        ]
    assert (out / "K.csv").read_text().splitlines()[0] == "node,k"


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["async", "hybrid"])
def test_eval_on_the_sharded_engines(project: Path, engine: str) -> None:
    """`--engine async|hybrid --shards 2` gives sync's results (the indexed Katz within its
    clause) and says how the engine ran: stages, local iterations, messages, beta, cut."""
    out = project / engine
    result = fixflow(
        project / "prog.dl",
        "-F",
        project / "facts",
        "-D",
        out,
        "--csv",
        "--engine",
        engine,
        "--shards",
        "2",
    )
    assert result.returncode == 0, result.stderr
    assert (out / "sssp.csv").read_text().splitlines() == ["node,dist", "1,0.0", "2,1.5", "3,3.5"]
    katz = {r["node"]: r["k"] for r in DeltaTable(str(out / "K")).to_pyarrow_table().to_pylist()}
    assert katz[1] == pytest.approx(1.0) and katz[3] == pytest.approx(2.25, abs=0.02)
    assert f"(sssp): {engine} engine" in result.stderr
    assert "local iterations" in result.stderr and "cut " in result.stderr


def test_missing_input_file_is_one_line_error(project: Path) -> None:
    (project / "facts" / "label.csv").unlink()
    result = fixflow(project / "prog.dl", "-F", project / "facts", "-D", project / "out")
    assert result.returncode == 1
    assert "no input file for relation `label`" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_malformed_line_reports_file_and_line(project: Path) -> None:
    (project / "facts" / "edge.facts").write_text("1\t2\t1.5\n2\t3\n")
    result = fixflow(project / "prog.dl", "-F", project / "facts", "-D", project / "out")
    assert result.returncode == 1
    assert f"{project / 'facts' / 'edge.facts'}:2: expected 3 fields, found 2" in result.stderr
    assert "Traceback" not in result.stderr


def test_wrong_typed_value_is_reported(project: Path) -> None:
    (project / "facts" / "edge.facts").write_text("1\ttwo\t1.5\n")
    result = fixflow(project / "prog.dl", "-F", project / "facts", "-D", project / "out")
    assert result.returncode == 1
    assert "edge.facts:1: column `dst` expects a number, found 'two'" in result.stderr
    assert "Traceback" not in result.stderr


def test_program_errors_print_the_checker_diagnostics(project: Path) -> None:
    (project / "bad.dl").write_text(".decl p(x: number)\n.output p\np(X) :- q(X).\n")
    result = fixflow(project / "bad.dl", "-F", project / "facts", "-D", project / "out")
    assert result.returncode == 1
    assert "error:" in result.stderr and "bad.dl:3:" in result.stderr
    assert "Traceback" not in result.stderr


def test_explain_says_where_each_stratum_ran_and_why(project: Path) -> None:
    """``--explain`` evaluates, writes nothing, and prints each stratum's placement (the
    reason included), its cost and its plan."""
    out = project / "out"
    result = fixflow(project / "prog.dl", "-F", project / "facts", "-D", out, "--explain")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(
        line.startswith("stratum 0 (sssp, mra): driver, hybrid engine, 1 shard — inputs ")
        and line.endswith(f"<= local_rows {auto_local_rows()}")
        for line in lines
    ), result.stdout
    assert "Fixpoint mra (sssp)" in result.stdout and "Scan sssp[delta]" in result.stdout
    assert not out.exists()
    on_spark = fixflow(
        project / "prog.dl", "-F", project / "facts", "--explain", "--engine", "sync"
    )
    assert "stratum 0 (sssp, mra): spark, sync engine — the sync engine runs" in on_spark.stdout


def test_task_rows_decides_whether_a_loop_off_the_driver_runs_in_one_task() -> None:
    """Off the driver (``--local-rows 0``) a ``set`` loop runs in one Spark task (the
    default: tests/operators/test_task_stratum.py); ``--task-rows 0`` puts it back on
    Spark, a job a round; a negative count is refused."""
    golden = Path(__file__).resolve().parent.parent / "souffle" / "transitive_closure"
    args = (golden / "program.dl", "-F", golden / "facts", "--explain", "--local-rows", "0")
    on_spark = fixflow(*args, "--task-rows", "0")
    assert "stratum 0 (path, set): spark — local_rows is 0" in on_spark.stdout, on_spark.stderr
    refused = fixflow(*args, "--task-rows", "-1")
    assert refused.returncode == 2 and "must be 0 (never in one task) or more" in refused.stderr


@pytest.mark.parametrize("java_home", [None, "/nonexistent/jdk"])
def test_no_java_is_one_line_saying_what_to_install(project: Path, java_home: str | None) -> None:
    """Without Java, PySpark fails after a while with a long trace; Fixflow says it first,
    in one line."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(project)  # no java there
    if java_home:
        env["JAVA_HOME"] = java_home
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fixflow.pipeline.cli",
            "eval",
            "prog.dl",
            "-F",
            "facts",
            "-D",
            "out",
            "--local-rows",
            "0",  # every stratum on Spark: it must start
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=project,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    expected = "has no bin/java" if java_home else "no Java found: Spark needs a JDK 17 or 21"
    assert done.stderr.startswith("fixflow eval: ") and expected in done.stderr


DRIVER_PROGRAM = """\
.decl edge(src: number, dst: number, w: float)
.input edge
.decl sssp(node: number, dist: float)
.output sssp
.decl far(node: number)
.output far
sssp(X, d) :- X = 1, d = 0.0.
sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
far(X) :- sssp(X, d), d > 2.0.
"""


DRIVER_ARGS = ("-F", "facts", "-D", "out", "--csv")


@pytest.mark.parametrize("csv", [True, False], ids=["csv", "delta-only"])
def test_a_program_whose_strata_all_run_in_the_driver_needs_no_java(
    project: Path, csv: bool
) -> None:
    """Spark starts when the first stratum placed on it runs: with every stratum in the
    driver, `fixflow eval` reads, evaluates and writes Delta without a JVM, with CSV files
    beside the tables or not (asking whether Spark tasks should write a result once started
    Spark for it). With no Java on PATH, starting Spark would fail
    (test_no_java_is_one_line_saying_what_to_install)."""
    import os

    (project / "driver.dl").write_text(DRIVER_PROGRAM)
    args = DRIVER_ARGS if csv else tuple(a for a in DRIVER_ARGS if a != "--csv")
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(project)  # no java there
    done = subprocess.run(
        [sys.executable, "-m", "fixflow.pipeline.cli", "-v", "eval", "driver.dl", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=project,
    )
    assert done.returncode == 0, done.stderr
    assert "Spark not started" in done.stderr
    sssp = DeltaTable(str(project / "out" / "sssp")).to_pyarrow_table().to_pylist()
    assert sorted((r["node"], r["dist"]) for r in sssp) == [(1, 0.0), (2, 1.5), (3, 3.5)]
    if csv:
        assert (project / "out" / "far.csv").read_text().splitlines() == ["node", "3"]


COUNTER = """\
.decl n(x: number)
.output n
.decl big(x: number)
.output big
.decl one(x: number)
.output one
n(0).
n(x + 1) :- n(x), x < 20.
big(x) :- n(x), x > 2.
one(1).
"""


def _partial(table: Path) -> list[dict] | None:
    """The ``fixflow.partial`` entry of the table's last commit (None without one)."""
    [last] = DeltaTable(str(table)).history(limit=1)
    raw = last.get("fixflow.partial")
    return None if raw is None else json.loads(raw)


def _show(relation: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fixflow.pipeline.cli", "show", relation, "--results", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.spark
def test_a_capped_stratum_makes_a_partial_result(tmp_path: Path) -> None:
    """`--max-iterations` cuts the counter's stratum short: the tables are written, those
    reading it marked partial in their commit and by `fixflow show`, one warning line,
    exit status 3. The same program without a cap converges (21 rounds): exit 0, no mark,
    where the partial tables were."""
    (tmp_path / "prog.dl").write_text(COUNTER)
    out = tmp_path / "out"
    result = fixflow(tmp_path / "prog.dl", "-D", out, "--max-iterations", "5")
    assert result.returncode == 3, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "(n) stopped at its iteration cap (5 rounds)" in warnings[0]
    assert warnings[0].endswith("partial (1 pending)"), warnings[0]  # round 5 derived n(5)
    assert result.stderr.count("iteration cap") == 1, result.stderr  # one line, no log too
    assert "n: 5 rows (partial)" in result.stdout and "one: 1 rows ->" in result.stdout
    [entry] = _partial(out / "n") or [None]
    assert entry is not None and (entry["relations"], entry["cap"], entry["rounds"]) == (
        ["n"],
        5,
        5,
    )
    assert _partial(out / "big") == [entry]  # reads n: partial too
    assert _partial(out / "one") is None  # reads nothing capped
    shown = _show("big", out)
    assert shown.returncode == 0, shown.stderr
    expected = f"partial: stratum {entry['stratum']} (n) stopped at its iteration cap (5 rounds)"
    assert any(line.startswith(expected) for line in shown.stdout.splitlines()), shown.stdout

    result = fixflow(tmp_path / "prog.dl", "-D", out)
    assert result.returncode == 0, result.stderr
    assert "warning:" not in result.stderr and "n: 21 rows ->" in result.stdout
    assert _partial(out / "n") is None and _partial(out / "big") is None
    shown = _show("n", out)
    assert shown.returncode == 0 and "partial" not in shown.stdout, shown.stdout


@pytest.mark.spark
def test_the_async_engine_reports_its_stage_cap(tmp_path: Path) -> None:
    """A sum approaching its limit (no clause) on the async engine, two shards: the cap
    counts stages, and the stratum it stops is reported capped, its table partial."""
    (tmp_path / "rank.dl").write_text(
        ".decl edge(x: number, y: number)\n.input edge\n"
        ".decl rank(x: number, r: float)\n.output rank\n"
        "rank(Y, sum[r]) :- edge(_, Y), r = 0.15 ; rank(X, rx), edge(X, Y), r = 0.85 * rx.\n"
    )
    (tmp_path / "edge.facts").write_text("1\t2\n2\t3\n3\t1\n")
    out = tmp_path / "out"
    engine = ["--engine", "async", "--shards", "2", "--max-iterations", "2"]
    result = fixflow(tmp_path / "rank.dl", "-F", tmp_path, "-D", out, *engine)
    assert result.returncode == 3, result.stderr
    assert "(rank) stopped at its iteration cap (2 rounds)" in result.stderr
    assert "async engine, 2 stages" in result.stderr
    [entry] = _partial(out / "rank") or [None]
    assert entry is not None and (entry["cap"], entry["rounds"]) == (2, 2)


def test_explain_names_the_relations_a_tagged_stratum_holds() -> None:
    """Mutual recursion runs as one tagged relation (checker.mutual): ``--explain`` says
    which of the user's relations it holds, by tag (in the driver: no JVM)."""
    golden = Path(__file__).resolve().parent.parent / "programs" / "sssp_even_odd"
    done = fixflow(golden / "program.dl", "-F", golden / "facts", "--explain")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("stratum 0 (_mutual_even_odd, mra): driver")
    assert (
        lines[1] == "  even, odd — one relation `_mutual_even_odd`, rows tagged 0 = even, 1 = odd"
    )


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("program", "clause", "line"),
    [
        (
            "powerlog_p2b_pagerank.dl",
            "{sum[Δry] < 1e-06}",
            r"residual: termination measure [\d.e-]+ at this commit \(clause \{sum",
        ),
        ("pagerank_float_fixpoint.dl", None, "residual: no termination clause: it ran to its"),
    ],
)
def test_a_sum_result_commit_records_its_residual(
    tmp_path: Path, program: str, clause: str | None, line: str
) -> None:
    """`fixflow eval` of PageRank (in the driver: no JVM) records the termination measure
    of the last round and the clause in the `rank` table's commit; `fixflow show` says it.
    Without a clause the entry says the stratum ran to its float fixpoint."""
    out = tmp_path / "out"
    done = fixflow(EXAMPLES / program, "-F", EXAMPLES / "facts" / "web", "-D", out)
    assert done.returncode == 0, done.stderr
    [last] = DeltaTable(str(out / "rank")).history(limit=1)
    entry = json.loads(last["fixflow.residual"])
    assert entry["clause"] == clause
    if clause is None:
        assert entry["measure"] is None
    else:
        assert 0 <= entry["measure"] < 1e-6
    shown = _show("rank", out)
    assert re.search(line, shown.stdout), shown.stdout


def test_an_explainable_eval_is_explained_from_its_output(tmp_path: Path) -> None:
    """`fixflow eval --explainable` keeps the program and its inputs beside the results;
    `fixflow explain --results` then prints the witness chain of a row from them (both
    without a JVM: the SSSP runs in the driver)."""
    out = tmp_path / "out"
    program = EXAMPLES / "a3_sssp.dl"
    done = fixflow(program, "-F", EXAMPLES / "facts" / "graph", "-D", out, "--explainable")
    assert done.returncode == 0, done.stderr
    assert (out / "program.dl").read_text() == program.read_text()
    command = [sys.executable, "-m", "fixflow.pipeline.cli", "explain", "sssp", "5"]
    explained = subprocess.run(
        [*command, "--results", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.splitlines() == [
        "sssp(5, 7.0)  <-  sssp(4, 4.5), edge(4, 5, 2.5)",
        "sssp(4, 4.5)  <-  sssp(3, 3.5), edge(3, 4, 1.0)",
        "sssp(3, 3.5)  <-  sssp(2, 2.0), edge(2, 3, 1.5)",
        "sssp(2, 2.0)  <-  sssp(1, 0.0), edge(1, 2, 2.0)",
        "sssp(1, 0.0)  <-  true",
    ]
