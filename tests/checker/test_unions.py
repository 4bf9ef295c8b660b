"""Rules with the same aggregated head are one union (checker/unions.py): merged into one
rule before the stratum is classified, so two one-direction rules are one linear MRA
recursion, as the `;` spelling is."""

from __future__ import annotations

from fixflow.checker import load
from fixflow.checker.model import Report
from fixflow.checker.printer import pretty
from fixflow.checker.report import human

DECLS = """\
.decl edge(x: number, y: number, w: float)
.input edge
.decl p(x: number, d: float)
.output p
p(X, d) :- X = 1, d = 0.0.
"""


def report_of(rules: str) -> Report:
    return load(DECLS + rules, "u.dl")


def recursive_rules(report: Report) -> list[str]:
    (stratum,) = [s for s in report.strata if s.recursive]
    return [pretty(r) for r in stratum.rules if r.head.aggregate is not None]


def test_two_one_direction_rules_are_one_linear_mra_union_like_the_semicolon_form() -> None:
    two = report_of(
        "p(Y, min[d]) :- p(X, dx), edge(X, Y, w), d = dx + w.\n"
        "p(X, min[d]) :- p(Y, dy), edge(X, Y, w), d = dy + w.\n"
    )
    semicolon = report_of(
        "p(Y, min[d]) :- p(X, dx), edge(X, Y, w), d = dx + w ;"
        " p(Y2, dy), edge(Y, Y2, w2), d = dy + w2.\n"
    )
    assert [s.eval_class for s in two.strata] == ["mra"]
    assert recursive_rules(two) == recursive_rules(semicolon)
    (rule,) = [r for r in two.strata[0].rules if r.head.aggregate is not None]
    assert [b.span.line for b in rule.bodies] == [6, 7]  # each body keeps its own line
    assert "with the rules at u.dl:7 as alternatives" in human(two)


def test_a_head_expression_and_an_aggregated_expression_become_equalities() -> None:
    report = report_of(
        "p(Y, min[d]) :- p(X, dx), edge(X, Y, w), d = dx + w.\n"
        "p(X + 0, min[dy + w]) :- p(Y, dy), edge(X, Y, w).\n"
    )
    assert [s.eval_class for s in report.strata] == ["mra"]
    (text,) = recursive_rules(report)
    assert "p(Y2, dy), edge(X2, Y2, w2), Y = X2 + 0, d = dy + w2" in " ".join(text.split())


def test_a_seed_rule_without_aggregate_stays_an_initial_rule() -> None:
    report = report_of("p(Y, min[d]) :- p(X, dx), edge(X, Y, w), d = dx + w.\n")
    stratum = report.strata[0]
    assert len(stratum.rules) == 2 and report.mra["p"].init_rules == (stratum.rules[0],)


def test_iteration_indexed_rules_and_two_termination_clauses_are_not_merged() -> None:
    two_clauses = report_of(
        "p(Y, min[d]) :- p(X, dx), edge(X, Y, w), d = dx + w {min[Δd] < 0.1}.\n"
        "p(X, min[d]) :- p(Y, dy), edge(X, Y, w), d = dy + w {min[Δd] < 0.1}.\n"
    )
    assert len(two_clauses.strata[0].rules) == 3
    indexed = load(
        ".decl e(x: number, y: number)\n.input e\n.decl r(i: number, x: number, v: float)\n"
        "r(0, X, v) :- e(X, _), v = 1.0.\n"
        "r(i + 1, Y, sum[v]) :- r(i, X, vx), e(X, Y), v = 0.5 * vx.\n"
        "r(i + 1, X, sum[v]) :- r(i, Y, vy), e(X, Y), v = 0.5 * vy.\n",
        "i.dl",
    )
    assert len(indexed.strata[0].rules) == 3


def test_a_union_that_breaks_a_property_is_not_mra_and_names_both_lines() -> None:
    report = report_of(
        "p(Y, min[d]) :- p(X, dx), edge(X, Y, w), d = dx + w.\n"
        "p(X, min[d]) :- p(Y, dy), edge(X, Y, w), d = 0.0 - dy.\n"
    )
    assert report.strata[0].eval_class != "mra"
    text = human(report)
    assert "rule `p` at u.dl:6" in text and "rules at u.dl:7" in text
