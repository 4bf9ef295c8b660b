"""Extraction of G, F′ and C from rules as written (Z3-free)."""

from __future__ import annotations

from fixflow.checker.analysis import analyze
from fixflow.checker.conditions import Alternative, alternatives, count_columns
from fixflow.checker.parser import parse
from fixflow.checker.printer import pretty

HEADER = """
.decl e(x: number, y: number, w: float)
.input e
.decl deg(x: number, n: number)
deg(X, count[Y]) :- e(X, Y, _).
"""


def extract(rules: str) -> tuple[Alternative, ...]:
    text = HEADER + rules
    analysis = analyze(parse(text, "t.dl"), text)
    assert not analysis.errors, analysis.errors
    (stratum,) = [s for s in analysis.strata if s.recursive]
    rule = next(r for r in stratum.rules if r.head.aggregate is not None and r.bodies[-1].literals)
    counts = count_columns(analysis.program)
    return alternatives(rule, frozenset(stratum.relations), analysis.schemas, counts)


def test_f_prime_follows_assignment_chains_to_the_recursive_value() -> None:
    (alt,) = extract(
        """
.decl r(x: number, v: float)
r(Y, sum[out]) :- r(X, v), e(X, Y, w), deg(X, n), a = v * w, out = a / n.
"""
    )
    value_map = alt.value_map
    assert value_map is not None
    assert value_map.input.name == "v" and value_map.input.sort == "real"
    assert pretty(value_map.output) == "v * w / n"
    assert [(s.name, s.sort) for s in value_map.aux] == [("n", "int"), ("w", "real")]
    assert value_map.text() == "out = v * w / n"
    # deg's second column is only produced by count: known to be at least 1.
    assert [pretty(c) for c in value_map.constraints] == ["n >= 1"]


def test_constant_alternatives_have_no_f_prime() -> None:
    constant, recursive = extract(
        """
.decl r(x: number, v: float)
r(Y, sum[o]) :- e(Y, _, _), o = 0.15 ; r(X, v), e(X, Y, _), o = 0.85 * v.
"""
    )
    assert constant.recursive_atoms == () and constant.value_map is None
    assert recursive.recursive_atoms == (0,)
    assert recursive.value_map is not None and pretty(recursive.value_map.output) == "0.85 * v"


def test_body_comparisons_become_constraints_in_substituted_form() -> None:
    (alt,) = extract(
        """
.decl r(x: number, v: float)
r(Y, min[d]) :- r(X, v), e(X, Y, w), d = v + w, d < 100, w > 0.
"""
    )
    assert alt.value_map is not None
    assert [pretty(c) for c in alt.value_map.constraints] == ["v + w < 100", "w > 0"]


def test_count_star_maps_every_derivation_to_one() -> None:
    (alt,) = extract(
        """
.decl r(x: number, n: number)
r(Y, count[*]) :- r(X, _), e(X, Y, _).
"""
    )
    assert alt.value_map is not None
    assert pretty(alt.value_map.output) == "1" and alt.value_map.input.name == "_1"


def test_non_linear_alternative_has_one_input_per_recursive_atom() -> None:
    (alt,) = extract(
        """
.decl p(x: number, y: number, d: float)
p(X, Y, min[d]) :- p(X, Z, d1), p(Z, Y, d2), d = d1 + d2.
"""
    )
    assert alt.recursive_atoms == (0, 1)
    assert alt.value_map is not None
    assert [s.name for s in alt.value_map.inputs] == ["d1", "d2"]
    assert alt.value_map.aux == ()
