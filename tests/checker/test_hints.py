"""`fixflow check`'s hints (checker/hints.py): a closure written non-linearly is named, with
its linear spelling; nothing is said where the linear spelling would not be the same."""

from __future__ import annotations

import pytest

from fixflow.checker import load
from fixflow.checker.hints import stratum_hints
from fixflow.checker.report import human, to_json

WEIGHTED = """\
.decl edge(x: number, y: number, w: float)
.input edge
.decl path(x: number, y: number, d: float)
.output path
path(X, Y, d) :- edge(X, Y, d).
"""
PAIRS = """\
.decl edge(x: number, y: number)
.input edge
.decl tc(x: number, y: number)
.output tc
tc(X, Y) :- edge(X, Y).
"""


def hints(text: str) -> list[str]:
    report = load(text, "h.dl")
    return [h for s in report.strata for h in stratum_hints(s)]


def test_a_min_plus_closure_joined_with_itself_gets_the_linear_hint() -> None:
    text = WEIGHTED + "path(X, Z, min[d]) :- path(X, Y, d1), path(Y, Z, d2), d = d1 + d2.\n"
    (hint,) = hints(text)
    assert "`path` starts as a copy of `edge`" in hint and "line 6" in hint
    report = load(text, "h.dl")
    assert hint in human(report)
    assert to_json(report, [])["strata"][0]["hints"] == [hint]  # type: ignore[index]


def test_a_set_closure_joined_with_itself_gets_the_hint() -> None:
    assert len(hints(PAIRS + "tc(X, Z) :- tc(X, Y), tc(Y, Z).\n")) == 1


@pytest.mark.parametrize(
    "rule",
    [
        "path(X, Z, min[d]) :- path(X, Y, d1), edge(Y, Z, d2), d = d1 + d2.",  # linear already
        "path(X, Z, min[d]) :- path(X, Y, d1), path(Y, Z, d2), d = d1 * d2.",  # not min-plus
        "path(X, Z, min[d]) :- path(X, Y, d1), path(Z, Y, d2), d = d1 + d2.",  # not chained
    ],
)
def test_no_hint_where_the_linear_spelling_is_not_the_same_program(rule: str) -> None:
    assert hints(WEIGHTED + rule + "\n") == []


def test_a_max_times_closure_gets_the_hint() -> None:
    rule = "path(X, Z, max[d]) :- path(X, Y, d1), path(Y, Z, d2), d = d1 * d2.\n"
    assert len(hints(WEIGHTED + rule)) == 1
