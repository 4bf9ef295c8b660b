"""Every tests/souffle/<case>/ through `fixflow eval` as a user runs it (in this process,
on the session's SparkSession): the Delta tables hold expected/*.csv, and the reference
evaluator agrees. Cases with ``error`` in meta.toml must fail with that one-line error."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from fixflow.checker import load
from fixflow.pipeline.cli import main as fixflow
from fixflow.pipeline.datafusion_sql import read_delta
from reference.evaluator import evaluate as reference_evaluate
from reference.golden import compare_rows, load_golden

CASES_DIR = Path(__file__).resolve().parent.parent / "souffle"
CASES = sorted(p.name for p in CASES_DIR.iterdir() if (p / "meta.toml").is_file())


def test_there_are_souffle_cases() -> None:
    assert CASES


def _eval(case: Path, out: Path) -> int:
    args = ["eval", str(case / "program.dl"), "-F", str(case / "facts"), "-D", str(out)]
    return fixflow(args)


def _table_rows(path: Path, names: list[str]) -> list[tuple]:
    table = read_delta(DeltaTable(str(path)))
    return [tuple(row[n] for n in names) for row in table.to_pylist()]


@pytest.mark.parametrize("name", CASES)
def test_souffle_case(
    spark: SparkSession, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = CASES_DIR / name
    meta = tomllib.loads((directory / "meta.toml").read_text())
    code = _eval(directory, tmp_path / "out")
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
