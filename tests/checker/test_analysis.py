"""The semantic analysis: strata order, SCCs, structural classes, diagnostics."""

from __future__ import annotations

from fixflow.checker.analysis import analyze
from fixflow.checker.ast import Program
from fixflow.checker.model import Analysis
from fixflow.checker.parser import parse
from fixflow.checker.stratification import strongly_connected
from fixflow.checker.types import bindings


def analysis_of(text: str) -> Analysis:
    return analyze(parse(text, "t.dl"), text)


def messages(analysis: Analysis) -> list[str]:
    return [d.message for d in analysis.diagnostics]


LAYERED = """
.decl edge(x: number, y: number)
.input edge
.decl out(x: number, n: number)
.decl tc(x: number, y: number)
.decl deg(x: number, n: number)
.decl coming(x: number)
.decl cnt(x: number, n: number)
out(X, n) :- deg(X, n), !tc(X, X).
tc(X, Y) :- edge(X, Y).
tc(X, Y) :- tc(X, Z), edge(Z, Y).
deg(X, count[Y]) :- tc(X, Y).
coming(X) :- cnt(X, N), N >= 2.
coming(X) :- edge(X, X).
cnt(Y, count[*]) :- edge(Y, X), coming(X).
"""


def test_strata_come_in_evaluation_order_with_sccs_grouped() -> None:
    analysis = analysis_of(LAYERED)
    assert not analysis.errors
    order = [s.relations for s in analysis.strata]
    position = {rel: i for i, rels in enumerate(order) for rel in rels}
    assert position["tc"] < position["deg"] < position["out"]
    assert ("coming", "cnt") in order
    for stratum in analysis.strata:
        for rule in stratum.rules:
            for body in rule.bodies:
                for literal in body.literals:
                    relation = getattr(literal, "relation", None) or getattr(
                        getattr(literal, "atom", None), "relation", None
                    )
                    if relation in position and relation not in stratum.relations:
                        assert position[relation] < stratum.index


def test_structural_classes() -> None:
    by_relation = {s.relations: s for s in analysis_of(LAYERED).strata}
    assert by_relation[("tc",)].eval_class == "set"
    assert by_relation[("deg",)].eval_class is None and not by_relation[("deg",)].recursive
    assert by_relation[("coming", "cnt")].eval_class == "aggregate-seminaive"
    assert by_relation[("coming", "cnt")].recursive


def test_linear_single_relation_aggregate_is_an_mra_candidate() -> None:
    analysis = analysis_of(
        """
.decl e(x: number, y: number, w: float)
.input e
.decl s(x: number, d: float)
s(X, d) :- X = 1, d = 0.
s(Y, min[d]) :- s(X, dx), e(X, Y, w), d = dx + w.
"""
    )
    (stratum,) = analysis.strata
    assert stratum.eval_class == "mra" and "pending" in stratum.reason


def test_tarjan_on_a_graph_with_two_cycles() -> None:
    from fixflow.checker.ast import NO_SPAN
    from fixflow.checker.stratification import Edge

    pairs = [("a", "b"), ("b", "a"), ("b", "c"), ("c", "d"), ("d", "c"), ("e", "e")]
    edges = [Edge(h, b, False, NO_SPAN) for h, b in pairs]
    components = strongly_connected(["a", "b", "c", "d", "e"], edges)
    assert components.index(["c", "d"]) < components.index(["a", "b"])
    assert ["e"] in components and len(components) == 3


def test_negation_through_recursion_names_the_cycle() -> None:
    analysis = analysis_of(
        """
.decl n(x: number)
.input n
.decl p(x: number)
.decl q(x: number)
.decl r(x: number)
p(X) :- n(X), !r(X).
q(X) :- p(X).
r(X) :- q(X).
"""
    )
    assert messages(analysis) == ["negation of `r` inside its own recursion: r -> p -> q -> r"]


def test_many_errors_in_one_pass() -> None:
    analysis = analysis_of(
        """
.decl e(x: number, y: number)
.input e
.decl t(x: number, y: symbol)
t(X, Y) :- e(X, Y), f(X).
t(X, Z) :- e(X, _).
t(X, Y, Z) :- e(X, Y), e(Y, Z).
"""
    )
    found = messages(analysis)
    assert len(analysis.errors) == 4
    assert "undeclared relation `f`" in found
    assert "unsafe variable `Z` in the head of `t`" in found
    assert any(m.startswith("arity mismatch: `t`") for m in found)
    assert "type mismatch: column `y` of `t` is symbol but this value is number" in found


def test_int_literal_widens_to_float_but_float_does_not_narrow() -> None:
    ok = analysis_of(".decl s(x: number, d: float)\ns(X, d) :- X = 1, d = 0.\n")
    bad = analysis_of(".decl s(x: number, d: number)\ns(X, d) :- X = 1, d = 0.5.\n")
    assert not ok.errors
    assert [e.message for e in bad.errors] == [
        "type mismatch: column `d` of `s` is number but this value is float"
    ]


def test_bindings_follow_assignment_chains_in_any_order() -> None:
    program = parse(
        ".decl e(x: number, y: number)\n.input e\n.decl r(x: number, v: number)\n"
        "r(X, c) :- c = b + 1, b = a * 2, e(X, a).\n",
        "t.dl",
    )
    (rule,) = program.rules
    bound, assignments = bindings(rule.bodies[0])
    assert {"X", "a", "b", "c"} <= bound
    assert [a.left.name for a in assignments] == ["b", "c"]  # type: ignore[union-attr]


def test_unused_declared_relation_warns() -> None:
    analysis = analysis_of(".decl e(x: number)\n.decl r(x: number)\nr(X) :- e(X).\n")
    assert not analysis.errors
    assert [d.severity for d in analysis.diagnostics] == ["warning"]


def test_empty_program_has_no_strata() -> None:
    analysis = analyze(Program(()))
    assert analysis.strata == () and analysis.diagnostics == ()
