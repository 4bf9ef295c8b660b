"""`fixflow check` as a user runs it: a subprocess, its output and exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXFLOW = Path(sys.executable).parent / "fixflow"

SSSP = """
.decl edge(src: number, dst: number, w: float)
.input edge
.decl sssp(node: number, dist: float)
.output sssp
sssp(X, d) :- X = 1, d = 0.
sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
.decl tc(x: number, y: number)
tc(X, Y) :- edge(X, Y, _).
tc(X, Y) :- tc(X, Z), edge(Z, Y, _).
.decl sq(x: number, v: float)
sq(X, v) :- edge(X, _, v).
sq(Y, sum[v]) :- sq(X, u), edge(X, Y, _), v = 0.5 * u * u.
"""


def fixflow_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FIXFLOW), "check", *args], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prog.dl"
    path.write_text(text)
    return path


def test_json_lists_every_recursive_rule(tmp_path: Path) -> None:
    result = fixflow_check(str(write(tmp_path, SSSP)), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["errors"] == []
    rules = {r["relation"]: r for r in report["rules"]}
    assert [r["line"] for r in report["rules"]] == [7, 10, 13]
    assert rules["sssp"]["class"] == "mra" and rules["sssp"]["aggregate"] == "min"
    assert rules["sssp"]["properties"]["property2"] == "holds"
    assert rules["sssp"]["counterexample"] is None
    assert rules["tc"]["class"] == "set"
    assert set(rules["tc"]["properties"].values()) == {"n/a"}
    assert rules["sq"]["class"] == "naive"
    assert rules["sq"]["properties"]["property2"] == "fails"
    assert "but" in rules["sq"]["counterexample"]
    assert rules["sssp"]["f_prime"] == "dy = dx + w"
    assert {s["class"] for s in report["strata"]} == {"mra", "set", "naive"}


def test_human_report_names_g_f_c_and_class(tmp_path: Path) -> None:
    result = fixflow_check(str(write(tmp_path, SSSP)))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "F′: dy = dx + w" in out and "G:  min" in out
    assert "class: mra" in out and "class: naive" in out and "counterexample:" in out


def test_indexed_program_prints_its_mra_form(tmp_path: Path) -> None:
    text = """
.decl edge(x: number, y: number)
.input edge
.decl k(i: number, x: number, v: float)
k(0, X, v) :- edge(X, _), v = 0.
k(i+1, Y, sum[v]) :- edge(Y, _), v = 1.0 ; k(i, X, u), edge(X, Y), v = 0.1 * u {sum[Δv] < 0.01}.
"""
    result = fixflow_check(str(write(tmp_path, text)))
    assert result.returncode == 0, result.stderr
    assert "MRA form" in result.stdout
    assert "k(Y, sum[v]) :-" in result.stdout and "k(X, u)" in result.stdout


def test_errors_go_to_stderr_compiler_style_with_exit_1(tmp_path: Path) -> None:
    path = write(tmp_path, SSSP.replace("edge(X, Y, w), dy", "edge(X, Y), dy"))
    result = fixflow_check(str(path))
    assert result.returncode == 1
    assert "error: arity mismatch: `edge` has 3 attributes but is used with 2 arguments" in (
        result.stderr
    )
    assert f"--> {path}:7:" in result.stderr and "^" in result.stderr
    as_json = fixflow_check(str(path), "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["errors"][0]["line"] == 7


def test_missing_file_exit_2(tmp_path: Path) -> None:
    result = fixflow_check(str(tmp_path / "nope.dl"))
    assert result.returncode == 2
    assert "cannot read" in result.stderr and "nope.dl" in result.stderr


def test_checking_starts_no_jvm(tmp_path: Path) -> None:
    # `check` stays light (~0.2 s of solving) because it never imports Spark, so no JVM
    # starts; asserted directly, since a timed test would fail on a loaded machine.
    script = (
        "import sys\n"
        "from fixflow.pipeline.cli import main\n"
        f"code = main(['check', {str(write(tmp_path, SSSP))!r}, '--json'])\n"
        "print(code, sorted(m for m in ('pyspark', 'py4j') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.stdout.strip().splitlines()[-1] == "0 []", result.stdout + result.stderr


def test_json_shows_body_aggregates_by_position_not_hidden_names(tmp_path: Path) -> None:
    program = """
.decl e(a: number, b: number)
.input e
.decl p(a: number, c: number)
.output p
p(x, c) :- e(x, _), c = count : { e(y, z), z > x ; e(z, y), z < x }.
"""
    result = fixflow_check("--json", str(write(tmp_path, program)))
    assert result.returncode == 0, result.stderr
    strata = json.loads(result.stdout)["strata"]
    relations = [r for s in strata for r in s["relations"]]
    assert relations == ["p"]
    assert {a for s in strata for a in s["body_aggregates"]} == {"6:25"}
    assert '"_agg' not in result.stdout
