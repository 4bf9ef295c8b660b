"""Mutually recursive aggregated relations are one relation tagged by which of them a row
is (checker/mutual.py): the stratum is checked and run as one relation, and the encoding is
exact — the reference evaluator gives the same rows for the program as written and as
rewritten."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixflow.checker import load
from fixflow.checker.ast import Program
from fixflow.checker.model import Report
from fixflow.checker.parser import parse
from fixflow.checker.report import human, to_json
from reference.evaluator import evaluate as oracle

EDGES = """\
.decl edge(src: number, dst: number, w: float)
.input edge
"""
EVEN_ODD = (
    EDGES
    + """\
.decl even(node: number, dist: float)
.decl odd(node: number, dist: float)
.output even
.output odd
even(X, d) :- X = 1, d = 0.0.
odd(Y, {g}[d]) :- even(X, dx), edge(X, Y, w), d = dx + w{guard}.
even(Y, {g}[d]) :- odd(X, dx), edge(X, Y, w), d = dx + w{guard}.
"""
)
MIN = EVEN_ODD.format(g="min", guard="")
MAX_BOUNDED = EVEN_ODD.format(g="max", guard=", d < 8.0")
"""Longest even/odd walks up to a bound: ``max`` recursion that terminates on cycles."""


def report_of(text: str) -> Report:
    return load(text, "m.dl")


@cache
def rewritten(text: str) -> Program:
    return report_of(text).analysis.program


def test_even_and_odd_are_one_tagged_relation_checked_as_linear_mra() -> None:
    report = report_of(MIN)
    assert report.analysis.tagged == {"_mutual_even_odd": ("even", "odd")}
    recursive = [s for s in report.strata if s.recursive]
    assert [(s.relations, s.eval_class) for s in recursive] == [(("_mutual_even_odd",), "mra")]
    spec = report.mra["_mutual_even_odd"]
    assert spec.aggregate == "min"
    # even and odd keep their declared schema and aggregate: read from their tags
    assert report.catalog["even"].aggregate == "min"
    assert report.catalog["odd"].key_names == ("node",)
    text = human(report)
    assert "even, odd — one relation `_mutual_even_odd`, rows tagged 0 = even, 1 = odd" in text
    assert "rule `_mutual_even_odd` at m.dl:8" in text  # the user's own lines
    assert "with the rules at m.dl:9 as alternatives" in text
    (first,) = [s for s in to_json(report, [])["strata"] if s["tagged"]]  # type: ignore[index]
    assert first["tagged"] == {"_mutual_even_odd": ["even", "odd"]}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("odd(Y, min[d])", "odd(Y, max[d])"), "different aggregates"),
        (("d = dx + w.\neven", "d = dx + w {max[Δd] < 1.0}.\neven"), "a termination clause"),
        (("odd(Y, min[d])", "odd(Y, d)"), "odd has no aggregate of its own"),
    ],
)
def test_components_that_are_not_alike_are_left_as_written(
    change: tuple[str, str], why: str
) -> None:
    text = MIN.replace(*change)
    assert text != MIN
    report = report_of(text)
    assert report.analysis.tagged == {}, why
    assert {r for s in report.strata if s.recursive for r in s.relations} == {"even", "odd"}


def test_relations_with_other_column_types_are_not_tagged() -> None:
    text = """
    .decl e(x: number, y: number)
    .input e
    .decl a(x: number, d: number)
    .output a
    .decl b(x: symbol, d: number)
    .output b
    a(X, d) :- X = 1, d = 0.
    b(S, min[d]) :- a(X, dx), e(X, Y), S = to_string(Y), d = dx + 1.
    a(Y, min[d]) :- b(S, dx), X = to_number(S), e(X, Y), d = dx + 1.
    """
    report = report_of(text)
    assert report.analysis.tagged == {}
    assert [s.relations for s in report.strata if s.recursive] == [("a", "b")]


def test_count_and_input_relations_are_not_tagged() -> None:
    counted = MIN.replace("min[d]", "count[*]").replace(", d = dx + w", "")
    counted = counted.replace("dist: float", "dist: number").replace("d = 0.0", "d = 0")
    assert report_of(counted).analysis.tagged == {}
    loaded = MIN + ".input odd\n"
    assert report_of(loaded).analysis.tagged == {}


def test_set_relations_through_each_other_are_not_tagged() -> None:
    text = """
    .decl arc(x: number, y: number)
    .input arc
    .decl odd(x: number, y: number)
    .output odd
    .decl even(x: number, y: number)
    .output even
    odd(X, Y) :- arc(X, Y).
    even(X, Y) :- odd(X, Z), arc(Z, Y).
    odd(X, Y) :- even(X, Z), arc(Z, Y).
    """
    report = report_of(text)
    assert report.analysis.tagged == {}
    assert [s.eval_class for s in report.strata if s.recursive] == ["set"]


weighted_edges = st.lists(
    st.tuples(st.integers(1, 6), st.integers(1, 6), st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])),
    max_size=14,
    unique_by=lambda e: (e[0], e[1]),
)


@settings(max_examples=40, deadline=None)
@given(edges=weighted_edges, text=st.sampled_from([MIN, MAX_BOUNDED]))
def test_the_tagged_program_has_the_rows_of_the_program_as_written(
    edges: list[tuple[int, int, float]], text: str
) -> None:
    written = oracle(parse(text, "m.dl"), {"edge": edges})
    tagged = oracle(rewritten(text), {"edge": edges})
    assert {r: written[r] for r in ("even", "odd")} == {r: tagged[r] for r in ("even", "odd")}
