"""Soufflé's treatment of input and output relations: an input relation that rules or facts
also define holds both (loaded into a hidden EDB relation that one more rule unions in),
and an output relation with no definition is an empty derived relation, with a warning."""

from __future__ import annotations

from fixflow.checker import diagnose, load
from fixflow.checker.ast import Atom
from fixflow.checker.declarations import loaded_relation

UNION = """
.decl edge(src: number, dst: number)
.input edge
.decl tc(x: number, y: number)
.output tc
edge(1, 2).
tc(X, Y) :- edge(X, Y).
tc(X, Y) :- tc(X, Z), edge(Z, Y).
"""


def test_an_input_relation_with_facts_is_split_into_loaded_and_derived() -> None:
    analysis = load(UNION, "p.dl").analysis
    hidden = loaded_relation("edge")
    assert analysis.loaded == {"edge": hidden}
    assert analysis.edb == {hidden} and {"edge", "tc"} <= analysis.idb
    assert analysis.edb_relation("edge") == hidden and analysis.input_relation(hidden) == "edge"
    assert analysis.schemas[hidden] == analysis.schemas["edge"]
    (stratum,) = [s for s in analysis.strata if s.relations == ("edge",)]
    bodies = [rule.bodies[0].literals for rule in stratum.rules]
    assert [] in [list(b) for b in bodies], "the program's fact stays a rule"
    bridge = [b for b in bodies if b and isinstance(b[0], Atom) and b[0].relation == hidden]
    assert len(bridge) == 1, bodies
    # The user's program, with its directives, is what the pipeline reads.
    assert analysis.program.inputs == ("edge",) and analysis.diagnostics == ()


def test_the_hidden_relation_cannot_collide_with_a_declared_one() -> None:
    assert loaded_relation("edge").startswith("_")  # identifiers cannot start with `_`


def test_a_plain_input_relation_is_its_own_edb_relation() -> None:
    analysis = load(UNION.replace("edge(1, 2).", ""), "p.dl").analysis
    assert analysis.loaded == {"edge": "edge"} and analysis.edb == {"edge"}
    assert "edge" not in analysis.idb


def test_an_input_aggregate_relation_gets_its_loaded_values_as_candidates() -> None:
    text = """
    .decl edge(src: number, dst: number, w: number)
    .input edge
    .decl dist(x: number, d: number)
    .input dist
    .output dist
    dist(X, min[d]) :- dist(Y, dy), edge(Y, X, w), d = dy + w.
    """
    report = load(text, "p.dl")
    assert report.analysis.loaded["dist"] == loaded_relation("dist")
    (stratum,) = [s for s in report.strata if s.relations == ("dist",)]
    assert stratum.eval_class == "mra" and len(report.mra["dist"].init_rules) == 1


def test_an_iteration_indexed_input_relation_is_an_error() -> None:
    text = """
    .decl node(x: number)
    .input node
    .decl rank(i: number, x: number, r: float)
    .input rank
    rank(0, X, r) :- node(X), r = 1.0.
    rank(i+1, X, sum[r]) :- rank(i, X, rx), r = 0.5 * rx.
    """
    errors = [d for d in diagnose(text, "p.dl") if d.severity == "error"]
    assert [e.message for e in errors] == [
        "iteration-indexed `rank` cannot also be an input relation"
    ]
    assert errors[0].span.line == 5


def test_an_output_relation_without_rules_is_an_empty_derived_relation() -> None:
    text = UNION + ".decl nothing(x: number)\n.output nothing\nr(X) :- nothing(X).\n"
    text = text.replace("r(X)", "tc(X, X)")
    report = load(text, "p.dl")
    assert "nothing" in report.analysis.idb and "nothing" not in report.analysis.edb
    (stratum,) = [s for s in report.strata if s.relations == ("nothing",)]
    assert stratum.rules == () and not stratum.recursive
    assert report.strata.index(stratum) < next(
        i for i, s in enumerate(report.strata) if "tc" in s.relations
    ), "read by tc, so evaluated before it"
    (warning,) = report.diagnostics
    assert warning.severity == "warning" and warning.span.line == 10
    assert warning.message == (
        "no rules or facts defined for output relation `nothing`: it is always empty"
    )
