"""The default iteration cap by stratum class (``core.round_cap``): none where a stratum
reaches a fixpoint (as every Soufflé stratum does), ``LIMIT_CAP`` where it may only approach
a limit; a cap the user sets applies to every stratum. Checker only: no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixflow.checker import load
from fixflow.operators.core import LIMIT_CAP, round_cap
from fixflow.operators.evaluate import partial_relations, program_plans
from fixflow.operators.plan import Fixpoint, explain

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

COUNTER = """\
.decl n(x: number)
.decl big(x: number)
.decl other(x: number)
.decl none(x: number)
n(0).
n(x + 1) :- n(x), x < 1500.
big(x) :- n(x), x > 1000.
other(1).
none(x) :- other(x), !big(x).
"""


@pytest.mark.parametrize(
    ("example", "cap"),
    [
        ("nexus_tc", None),  # set: recursion without aggregates
        ("powerlog_p1_sssp", None),  # min MRA: values only improve, to a fixpoint
        ("widest_path", None),  # max MRA
        ("a3_party", None),  # monotone count, semi-naive
        ("powerlog_p2b_pagerank", LIMIT_CAP),  # sum converging to a limit
        ("paths_dag", LIMIT_CAP),  # count recursion: ends only on an acyclic graph
        ("powerlog_p7_gcn_forward", LIMIT_CAP),  # naive (iteration-indexed)
    ],
)
def test_default_cap_by_class(example: str, cap: int | None) -> None:
    path = EXAMPLES / f"{example}.dl"
    report = load(path.read_text(), str(path))
    (stratum,) = [s for s in report.strata if s.recursive]
    assert round_cap(report, stratum, None) == cap, stratum.reason
    assert round_cap(report, stratum, 7) == 7  # the user's cap: every stratum


def test_explain_shows_each_stratum_cap() -> None:
    report = load(COUNTER, "counter.dl")
    (default,) = [p for p in program_plans(report) if isinstance(p, Fixpoint)]
    assert default.max_iterations is None and "Fixpoint set (n) no cap" in explain(default)
    (capped,) = [p for p in program_plans(report, 5) if isinstance(p, Fixpoint)]
    assert "Fixpoint set (n) cap 5" in explain(capped)


def test_partial_rows_reach_every_reader_negation_included() -> None:
    report = load(COUNTER, "counter.dl")
    (counter,) = [s.index for s in report.strata if s.relations == ("n",)]
    reached = partial_relations(report, [counter])
    assert reached == {r: frozenset({counter}) for r in ("n", "big", "none")}
    assert partial_relations(report, []) == {}
