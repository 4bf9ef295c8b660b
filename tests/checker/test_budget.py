"""Z3's budget is a per-query resource limit, not a clock: the same program gets the same
verdicts whatever the machine is doing and whatever was checked before it."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fixflow.checker import load
from fixflow.checker.model import Report
from fixflow.checker.smt import DEFAULT_BUDGET, Budget

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SMT = ROOT / "src" / "fixflow" / "checker" / "smt.py"
CUT_SHORT = Budget(rlimit=50_000)
"""Enough for viterbi's Properties 1 but not its Property 2: a query stopped mid-search,
where a wall-clock limit would make the answer depend on load."""


def outcome(report: Report) -> list[tuple[object, ...]]:
    """Everything the checker decided, in a comparable form."""
    return [
        (v.relation, v.eval_class, tuple(v.properties.items()), v.counterexample, v.reason)
        for v in report.verdicts
    ]


def check(name: str, budget: Budget = DEFAULT_BUDGET) -> Report:
    return load((EXAMPLES / name).read_text(), name, budget)


@contextmanager
def cpu_load(processes: int = 2) -> Iterator[None]:
    """Busy processes on every core for the duration of the block."""
    spin = [sys.executable, "-c", "while True: pass"]
    spinners = [subprocess.Popen(spin) for _ in range(processes)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_the_budget_has_no_time_component() -> None:
    assert [f.name for f in dataclasses.fields(Budget)] == ["rlimit"]
    assert DEFAULT_BUDGET.rlimit > 0
    with pytest.raises(ValueError):
        Budget(rlimit=0)


def test_smt_keeps_no_clock_and_no_global_budget() -> None:
    tree = ast.parse(SMT.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "time" not in imported
    assert not any(isinstance(n, ast.Global) for n in ast.walk(tree))
    assert '"timeout"' not in SMT.read_text()


@pytest.mark.parametrize("name", ["powerlog_p1_sssp.dl", "powerlog_p3_cc.dl", "viterbi.dl"])
def test_a_tiny_budget_gives_unknown_never_holds(name: str) -> None:
    report = check(name, Budget(rlimit=1))
    for verdict in report.verdicts:
        assert "holds" not in verdict.properties.values(), verdict.properties
        assert verdict.eval_class == "naive"
        assert "budget" in verdict.reason


def test_a_query_cut_short_gets_the_same_answer_under_load_and_after_other_checks() -> None:
    alone = outcome(check("viterbi.dl", CUT_SHORT))
    assert dict(alone[0][2])["property2"] == "unknown"  # the budget really cut it short
    for other in ("commnet.dl", "simrank.dl", "powerlog_p2_pagerank_indexed.dl"):
        check(other)
    assert outcome(check("viterbi.dl", CUT_SHORT)) == alone
    with cpu_load():
        assert outcome(check("viterbi.dl", CUT_SHORT)) == alone


def test_the_default_budget_decides_the_same_under_load() -> None:
    names = ["viterbi.dl", "commnet.dl", "powerlog_p2_pagerank_indexed.dl"]
    calm = [outcome(check(n)) for n in names]
    with cpu_load():
        assert [outcome(check(n)) for n in names] == calm
