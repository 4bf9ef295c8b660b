"""Every tests/souffle/<case>/ through `fixflow eval` as a user runs it (in this process,
on the session's SparkSession), on every placement its program admits
(``placement.admitted_settings``, chosen by eval's flags): the Delta tables hold
expected/*.csv, and the reference evaluator agrees. Cases with ``error`` in meta.toml must
fail with that one-line error (once: they fail before any stratum is placed)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from _pytest.mark import ParameterSet
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from fixflow.checker import load
from fixflow.operators.core import EvalOptions
from fixflow.operators.placement import SETTINGS, admitted_settings
from fixflow.pipeline.cli import main as fixflow
from fixflow.pipeline.lake.datafusion_sql import read_delta
from reference.evaluator import evaluate as reference_evaluate
from reference.golden import GOLDEN_PLACEMENT, compare_rows, load_golden

CASES_DIR = Path(__file__).resolve().parent.parent / "souffle"
CASES = sorted(p.name for p in CASES_DIR.iterdir() if (p / "meta.toml").is_file())
DEFAULT = "default"
"""The setting of a case that must fail: eval's own defaults."""


def _pairs() -> list[ParameterSet]:
    """(case, setting) for every setting the case's program admits."""
    pairs = []
    for name in CASES:
        directory = CASES_DIR / name
        meta = tomllib.loads((directory / "meta.toml").read_text())
        if "error" in meta:
            pairs.append(pytest.param(name, DEFAULT, id=f"{name}@{DEFAULT}"))
            continue
        source = (directory / "program.dl").read_text()
        report = load(source, str(directory / "program.dl"))
        pairs += [
            pytest.param(name, s.name, id=f"{name}@{s.name}")
            for s in admitted_settings(report, EvalOptions())
        ]
    return pairs


PAIRS = _pairs()
SETTING = {s.name: s for s in SETTINGS}


def test_there_are_souffle_cases() -> None:
    assert CASES


def _eval(case: Path, out: Path, setting: str) -> int:
    args = ["eval", str(case / "program.dl"), "-F", str(case / "facts"), "-D", str(out)]
    if setting != DEFAULT:
        chosen = SETTING[setting]
        args += ["--local-rows", str(chosen.local_rows), "--engine", chosen.mode]
        args += ["--shards", str(chosen.shards)]
    return fixflow(args)


def _table_rows(path: Path, names: list[str]) -> list[tuple]:
    table = read_delta(DeltaTable(str(path)))
    return [tuple(row[n] for n in names) for row in table.to_pylist()]


@pytest.mark.parametrize(("name", "setting"), PAIRS)
def test_souffle_case(
    spark: SparkSession,
    name: str,
    setting: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: pytest.RecordProperty,
) -> None:
    record_property(GOLDEN_PLACEMENT, f"{name}@{setting}")
    directory = CASES_DIR / name
    meta = tomllib.loads((directory / "meta.toml").read_text())
    code = _eval(directory, tmp_path / "out", setting)
    captured = capsys.readouterr()
    if "error" in meta:
        lines = captured.err.strip().splitlines()
        assert code == 1 and len(lines) == 1, captured.err
        assert meta["error"] in lines[0] and "Traceback" not in captured.err
        return
    assert code == 0, captured.err
    case = load_golden(directory)
    report = load(case.source, str(directory / "program.dl"))
    # The oracle caps no stratum that ends (as Fixflow and Soufflé): a bound no case reaches.
    oracle = (
        reference_evaluate(case.program, case.facts, max_iterations=100_000)
        if meta.get("oracle", True)
        else None
    )
    assert set(case.expected) == set(report.analysis.program.outputs), "expected/ vs .output"
    for relation, expected in case.expected.items():
        names = [a.name for a in report.catalog[relation].result]
        actual = _table_rows(tmp_path / "out" / relation, names)
        assert compare_rows(actual, expected, case.tolerance) == [], f"{relation} vs expected"
        if oracle is not None:
            reference = [tuple(r) for r in oracle[relation]]
            assert compare_rows(reference, expected, case.tolerance) == [], f"{relation} oracle"
    _check_files_and_stdout(meta, directory, tmp_path / "out", captured.out)


def _check_files_and_stdout(meta: dict, directory: Path, out: Path, stdout: str) -> None:
    """``output_files``: files an ``.output r(IO=file, ...)`` wrote into ``-D``, compared
    with ``expected/files/``; ``stdout``: lines (``.printsize``) that must be printed."""
    for name in meta.get("output_files", []):
        expected = (directory / "expected" / "files" / name).read_text()
        assert (out / name).read_text() == expected, f"file {name}"
    for line in meta.get("stdout", []):
        assert line in stdout.splitlines(), f"{line!r} not in stdout:\n{stdout}"


def test_facts_and_output_directories_default_to_the_current_one(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in Soufflé, `fixflow eval prog.dl` reads facts from and writes results to `.`."""
    (tmp_path / "prog.dl").write_text(".decl n(x: number)\n.output n\nn(1).\nn(2).\n")
    monkeypatch.chdir(tmp_path)
    assert fixflow(["eval", "prog.dl"]) == 0
    assert sorted(_table_rows(tmp_path / "n", ["x"])) == [(1,), (2,)]


def test_overflow_wraps_on_spark_as_in_the_driver(spark: SparkSession, tmp_path: Path) -> None:
    """souffle_int_wrap with every stratum on Spark (`--local-rows 0`): Spark's ANSI mode
    would fail the job on overflow; the rows are the driver's and Soufflé's."""
    directory = CASES_DIR / "souffle_int_wrap"
    args = ["eval", str(directory / "program.dl"), "-F", str(directory / "facts")]
    assert fixflow([*args, "-D", str(tmp_path / "out"), "--local-rows", "0"]) == 0
    case = load_golden(directory)
    names = ["x", "sum", "product", "below", "negated", "absolute"]
    actual = _table_rows(tmp_path / "out" / "wrap", names)
    assert compare_rows(actual, case.expected["wrap"], 0.0) == []


NO_VALUE_PROGRAM = """
.decl w(s: symbol)
.decl one(x: number)
.decl out(kind: symbol, x: float)
.output out
w("a"). w("42"). one(1). one(2).
out("to_number", itof(to_number(s))) :- w(s).
out("mod", itof(7 % (n - 1))) :- one(n).
out("div", 1.0 / (itof(n) - 1.0)) :- one(n).
out("log", y) :- one(n), y = log(itof(n) - 1.0).
out("assigned", y) :- one(n), y = 2.0 / (itof(n) - 1.0).
"""


@pytest.mark.parametrize("local_rows", ["100000", "0"])
def test_a_head_value_without_a_value_drops_the_binding(
    spark: SparkSession, tmp_path: Path, local_rows: str
) -> None:
    """`r(x % 0)`, `r(1.0 / 0.0)`, `y = log(0.0)`: no row, in the driver and on Spark (they
    stored a null row; Soufflé fails or writes inf, Fixflow's floats are finite)."""
    (tmp_path / "p.dl").write_text(NO_VALUE_PROGRAM)
    args = ["eval", str(tmp_path / "p.dl"), "-D", str(tmp_path / "out")]
    assert fixflow([*args, "--local-rows", local_rows]) == 0
    rows = sorted(_table_rows(tmp_path / "out" / "out", ["kind", "x"]))
    assert rows == [
        ("assigned", 2.0),
        ("div", 1.0),
        ("log", 0.0),
        ("mod", 0.0),
        ("to_number", 42.0),
    ]
