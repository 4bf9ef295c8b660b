"""Verdicts of the condition checker on small programs, decided by real Z3 from structure."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fixflow.checker import load
from fixflow.checker.ast import NumberLit
from fixflow.checker.model import Report, RuleVerdict

EDGES = """
.decl e(x: number, y: number, w: float)
.input e
"""


def report_of(rules: str) -> Report:
    report = load(EDGES + rules, "t.dl")
    assert isinstance(report, Report)
    return report


def only_verdict(rules: str) -> RuleVerdict:
    (verdict,) = report_of(rules).verdicts
    return verdict


def linear(decl: str, agg: str, step: str) -> str:
    """One relation `v` with a base rule and a linear recursive rule `v(Y, agg[b]) :- v(X, a),
    e(X, Y, w), step`."""
    return f"""
.decl v(x: number, val: {decl})
v(X, a) :- e(X, _, a).
v(Y, {agg}[b]) :- v(X, a), e(X, Y, w), {step}.
"""


def test_min_of_a_bound_under_max_holds() -> None:
    verdict = only_verdict(linear("float", "max", "b = min(a, w)"))
    assert verdict.properties["property2"] == "holds"
    assert verdict.eval_class == "mra"
    assert verdict.counterexample is None


def test_square_under_sum_fails_property2_with_counterexample() -> None:
    verdict = only_verdict(linear("float", "sum", "b = 0.5 * a * a"))
    assert verdict.properties["property2"] == "fails"
    assert verdict.eval_class == "naive"
    assert verdict.counterexample is not None
    assert "but" in verdict.counterexample and "a = " in verdict.counterexample


def test_ten_minus_under_min_fails() -> None:
    verdict = only_verdict(linear("float", "min", "b = 10 - a"))
    assert verdict.properties["property2"] == "fails"
    assert verdict.eval_class == "naive"
    assert "10 - " in (verdict.counterexample or "")


def test_shortest_path_step_under_min_holds() -> None:
    verdict = only_verdict(linear("float", "min", "b = a + w"))
    assert [verdict.properties[p] for p in ("commutativity", "associativity", "property2")] == [
        "holds"
    ] * 3
    assert verdict.properties["convergence"] == "n/a"
    assert verdict.eval_class == "mra"


PAGERANK = """
.decl node(x: number)
.input node
.decl degree(x: number, d: number)
degree(X, count[Y]) :- e(X, Y, _).
.decl rank(x: number, r: float)
rank(Y, sum[r]) :- node(Y), r = 0.15 ; rank(X, rx), e(X, Y, _), degree(X, d), r = 0.85 * rx / d.
"""


def test_pagerank_step_holds_and_converges_using_degree_at_least_one() -> None:
    verdict = only_verdict(PAGERANK)
    assert verdict.properties["property2"] == "holds"
    assert verdict.properties["convergence"] == "holds"
    assert verdict.eval_class == "mra"
    assert verdict.constant == "node(Y), r = 0.15"


def test_without_the_count_fact_the_degree_may_be_small_and_convergence_is_unknown() -> None:
    # Same step, but the degree is a float input: nothing says d >= 1, so 0.85/d may
    # exceed 1 (an integer d != 0 would still be at least 1 in magnitude).
    rules = PAGERANK.replace("degree(X, count[Y]) :- e(X, Y, _).", ".input degree").replace(
        "degree(x: number, d: number)", "degree(x: number, d: float)"
    )
    verdict = only_verdict(rules)
    assert verdict.properties["property2"] == "holds"
    assert verdict.properties["convergence"] == "unknown"
    assert verdict.eval_class == "mra"
    assert "convergence not proven" in verdict.reason


def test_relu_under_sum_fails_like_gcn() -> None:
    rules = """
.decl para(p: float)
.input para
.decl g(x: number, v: float)
g(X, v) :- e(X, _, v).
g(Y, sum[g1]) :- g(X, v), e(X, Y, w), para(p), g1 = relu(v * p) * w.
"""
    verdict = only_verdict(rules)
    assert verdict.properties["property2"] == "fails"
    assert verdict.eval_class == "naive"
    text = verdict.counterexample or ""
    assert "relu(" in text and "v = " in text and "p = " in text and "w = " in text


def test_mean_fails_associativity_with_counterexample() -> None:
    verdict = only_verdict(linear("float", "mean", "b = a + w"))
    assert verdict.properties["commutativity"] == "holds"
    assert verdict.properties["associativity"] == "fails"
    assert verdict.eval_class == "naive"
    assert (verdict.counterexample or "").startswith("mean(mean(")


def test_counting_derivations_with_count_star_is_not_mra() -> None:
    # count[*] adds 1 per derivation: pre-aggregating two values changes the count.
    verdict = only_verdict(
        """
.decl c(x: number, n: number)
c(X, 1) :- e(X, _, _).
c(Y, count[*]) :- c(X, n), e(X, Y, _).
"""
    )
    assert verdict.properties["property2"] == "fails"
    assert verdict.eval_class == "naive"


def test_count_of_path_counts_adds_them_and_is_mra() -> None:
    verdict = only_verdict(
        """
.decl cp(x: number, y: number, c: number)
cp(X, Y, 1) :- e(X, Y, _).
cp(X, Y, count[c]) :- cp(X, Z, c), e(Z, Y, _).
"""
    )
    assert verdict.properties["property2"] == "holds"
    assert verdict.properties["convergence"] == "n/a"
    assert verdict.eval_class == "mra"


def test_exp_is_never_claimed_to_fail_only_unknown() -> None:
    verdict = only_verdict(linear("float", "sum", "b = exp(a)"))
    assert verdict.properties["property2"] == "unknown"
    assert verdict.eval_class == "naive"


def test_exp_monotonicity_proves_property2_under_max() -> None:
    verdict = only_verdict(linear("float", "max", "b = exp(a) + w"))
    assert verdict.properties["property2"] == "holds"
    assert verdict.eval_class == "mra"


@pytest.mark.parametrize(
    ("combine", "expected"),
    [("d = d1 + d2", "aggregate-seminaive"), ("d = d1 - d2", "naive")],
)
def test_non_linear_min_needs_a_monotone_combination(combine: str, expected: str) -> None:
    report = report_of(
        f"""
.decl path(x: number, y: number, d: float)
path(X, Y, d) :- e(X, Y, d).
path(X, Y, min[d]) :- path(X, Z, d1), path(Z, Y, d2), {combine}.
"""
    )
    (stratum,) = [s for s in report.strata if s.recursive]
    assert stratum.eval_class == expected
    assert report.verdicts[0].properties["property2"] == "n/a"


def test_max_probability_path_is_monotone_once_probabilities_are_non_negative() -> None:
    body = "reach(X, Z, P1), reach(Z, Y, P2), P = P1 * P2"
    program = """
.decl reach(x: number, y: number, p: float)
reach(X, Y, P) :- e(X, Y, P).
reach(X, Y, max[P]) :- {body}.
"""
    unguarded = report_of(program.format(body=body))
    guarded = report_of(program.format(body=body + ", P1 >= 0, P2 >= 0"))
    assert unguarded.strata[0].eval_class == "naive"
    assert "P1 = " in (unguarded.verdicts[0].counterexample or "")
    assert guarded.strata[0].eval_class == "aggregate-seminaive"


PARTY = """
.decl friend(x: number, y: number)
.input friend
.decl sure(x: number)
.input sure
.decl coming(x: number)
.decl cnt(x: number, n: number)
coming(X) :- sure(X).
coming(X) :- cnt(X, N), N {test} 3.
cnt(Y, count[*]) :- friend(Y, X), coming(X).
"""


@pytest.mark.parametrize(("test", "expected"), [(">=", "aggregate-seminaive"), ("<", "naive")])
def test_party_is_monotone_only_through_an_upward_test(test: str, expected: str) -> None:
    report = load(PARTY.format(test=test), "party.dl")
    assert isinstance(report, Report)
    (stratum,) = [s for s in report.strata if s.recursive]
    assert set(stratum.relations) == {"coming", "cnt"}
    assert stratum.eval_class == expected
    assert [v.relation for v in report.verdicts] == ["coming", "cnt"]


def test_transitive_closure_is_set_with_na_properties() -> None:
    report = report_of(
        """
.decl tc(x: number, y: number)
tc(X, Y) :- e(X, Y, _).
tc(X, Y) :- tc(X, Z), e(Z, Y, _).
"""
    )
    (verdict,) = report.verdicts
    assert verdict.eval_class == "set"
    assert set(verdict.properties.values()) == {"n/a"}


INDEXED = """
.decl node(x: number)
.input node
.decl degree(x: number, d: number)
degree(X, count[Y]) :- e(X, Y, _).
.decl rank(i: number, x: number, r: float)
rank(0, X, r) :- node(X), r = 0.
rank(i+1, Y, sum[r]) :- node(Y), r = 0.15 ; rank(i, X, rx), e(X, Y, _), degree(X, d),
    r = 0.85 * rx / d {sum[Δr] < 0.001}.
"""


def test_indexed_pagerank_gets_an_mra_spec_and_a_rewritten_form() -> None:
    from fixflow.checker.parser import parse
    from fixflow.checker.printer import pretty

    report = report_of(INDEXED)
    spec = report.mra["rank"]
    assert (spec.index_pos, spec.value_pos, spec.key_positions) == (0, 2, (1,))
    assert spec.aggregate == "sum" and spec.converges_to_limit
    assert len(spec.constant_bodies) == 1 and len(spec.recursive_bodies) == 1
    atom = spec.recursive_bodies[0].literals[spec.recursive_atom_index[0]]
    assert atom.relation == "rank"  # type: ignore[union-attr]
    assert [r.head.args[0] for r in spec.init_rules] == [NumberLit(0)]
    assert spec.rewritten is not None
    text = pretty(spec.rewritten)
    assert ".decl rank(x: number, r: float)" in text
    assert "rank(X, rx)" in text and "rank(0," not in text
    rewritten = load(text, "rewritten.dl")
    assert isinstance(rewritten, Report)
    assert rewritten.mra["rank"].index_pos is None
    assert parse(text, "r.dl") == spec.rewritten


def test_min_spec_for_sssp() -> None:
    report = report_of(
        """
.decl sssp(x: number, d: float)
sssp(X, d) :- X = 1, d = 0.
sssp(Y, min[dy]) :- sssp(X, dx), e(X, Y, w), dy = dx + w.
"""
    )
    spec = report.mra["sssp"]
    assert (spec.key_positions, spec.value_pos, spec.index_pos) == ((0,), 1, None)
    assert len(spec.init_rules) == 1 and not spec.constant_bodies
    assert spec.recursive_atom_index == (0,)
    assert not spec.converges_to_limit
    assert report.verdicts[0].initial_delta.startswith("ΔX¹ = min(X⁰ ∪ C)")


def test_a_recursive_value_joined_with_another_atom_is_a_filter() -> None:
    # e(X, Y, d) keeps only paths whose length equals the edge weight: min does not
    # commute with that filter.
    verdict = only_verdict(
        """
.decl r(x: number, d: float)
r(X, d) :- e(X, _, d).
r(Y, min[d]) :- r(X, d), e(X, Y, d).
"""
    )
    assert verdict.properties["property2"] == "fails"
    assert "d_e1 = " in (verdict.counterexample or "")


def test_a_recursive_value_used_as_a_key_is_not_read_as_f_prime() -> None:
    verdict = only_verdict(
        """
.decl r(x: number, d: number)
r(X, 0) :- e(X, _, _).
r(d, min[d]) :- r(X, d), e(X, _, _).
"""
    )
    assert verdict.properties["property2"] == "unknown"
    assert verdict.eval_class == "naive"
    assert "group-by key" in verdict.reason


# ---------------------------------------------------------------- the corpus

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

POWERLOG_TABLE_1 = {
    # PowerLog (SIGMOD'20) Table 1, "MRA sat.": yes → mra, no → naive.
    "powerlog_p1_sssp.dl": ("sssp", "mra"),
    "powerlog_p2_pagerank_indexed.dl": ("rank", "mra"),
    "powerlog_p3_cc.dl": ("cc", "mra"),
    "powerlog_p4_adsorption.dl": ("L", "mra"),
    "powerlog_p5_katz.dl": ("K", "mra"),
    "powerlog_p6_belief_propagation.dl": ("B", "mra"),
    "paths_dag.dl": ("cpaths", "mra"),
    "cost.dl": ("cost", "mra"),
    "simrank.dl": ("S", "mra"),
    "lca.dl": ("anc", "mra"),
    "apsp.dl": ("path", "mra"),
    "viterbi.dl": ("calcV", "mra"),
    "commnet.dl": ("comm", "naive"),
    "powerlog_p7_gcn_forward.dl": ("GCN", "naive"),
}


def classes_of(path: Path) -> dict[str, str]:
    report = load(path.read_text(), path.name)
    assert isinstance(report, Report)
    return {v.relation: v.eval_class for v in report.verdicts}


@pytest.mark.parametrize("name", sorted(POWERLOG_TABLE_1))
def test_powerlog_table_1(name: str) -> None:
    path = EXAMPLES / name
    assert path.exists(), f"{name} is missing from the corpus"
    relation, expected = POWERLOG_TABLE_1[name]
    assert classes_of(path)[relation] == expected


def test_every_example_is_accepted_and_decided_within_its_budget() -> None:
    # Z3's budget is counted in solver steps, not seconds (a timed test would fail on a
    # loaded machine): no corpus verdict may be left unknown for want of budget.
    paths = sorted(EXAMPLES.glob("*.dl"))
    assert paths, "the corpus examples/*.dl is empty"
    for path in paths:
        report = load(path.read_text(), path.name)
        assert isinstance(report, Report), path.name
        for verdict in report.verdicts:
            assert "budget" not in verdict.reason, (path.name, verdict.relation, verdict.reason)


def expected_classes() -> dict[str, dict[str, str]]:
    table = EXAMPLES / "expected_classes.toml"
    if not table.exists():
        return {}
    with table.open("rb") as handle:
        return tomllib.load(handle)


@pytest.mark.parametrize("name", sorted(expected_classes()))
def test_corpus_classes_match_the_expected_table(name: str) -> None:
    """Every recursive relation of every example gets the class examples/README.md argues
    for (examples/expected_classes.toml); and no relation is left unlisted. Relations the
    checker tags as one (``checker.mutual``) get that one's class."""
    expected = expected_classes()[name]
    report = load((EXAMPLES / name).read_text(), name)
    assert isinstance(report, Report)
    tagged = report.analysis.tagged
    found = {
        member: stratum.eval_class
        for stratum in report.strata
        if stratum.recursive
        for relation in stratum.relations
        for member in tagged.get(relation, (relation,))
    }
    assert found == expected


def test_every_example_is_in_the_expected_table() -> None:
    listed = set(expected_classes())
    assert listed, "examples/expected_classes.toml is missing or empty"
    assert {p.name for p in EXAMPLES.glob("*.dl")} <= listed


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ("d = d1 + 2 * w", "mra"),
        ("d = 10 - d1", "naive"),
        # two atoms of the tagged relation: not linear, monotone
        ("a(Y, d2), d = d1 + d2 + w", "aggregate-seminaive"),
    ],
)
def test_mutual_min_recursion_is_classified_on_the_tagged_union(step: str, expected: str) -> None:
    report = report_of(
        f"""
.decl a(x: number, d: float)
.decl b(x: number, d: float)
a(X, d) :- e(X, _, d).
a(Y, min[d]) :- b(X, d1), e(X, Y, w), d = d1 + w.
b(Y, min[d]) :- a(X, d1), e(X, Y, w), {step}.
"""
    )
    (stratum,) = [s for s in report.strata if s.recursive]
    assert stratum.relations == ("_mutual_a_b",)
    assert report.analysis.tagged == {"_mutual_a_b": ("a", "b")}
    assert stratum.eval_class == expected


@pytest.mark.parametrize(("agg", "expected"), [("min", "holds"), ("sum", "fails")])
def test_a_filter_on_the_recursive_value_is_a_partial_f_prime(agg: str, expected: str) -> None:
    # Keeping only b < 100 commutes with min (the filter is downward closed) but not with
    # sum (the sum of two kept values may exceed the bound).
    verdict = only_verdict(linear("float", agg, "b = a + w, b < 100"))
    assert verdict.properties["property2"] == expected


def test_indexed_min_rewrite_keeps_the_base_rule() -> None:
    from fixflow.checker.printer import pretty

    report = report_of(
        """
.decl d(i: number, x: number, v: float)
d(0, X, v) :- e(X, _, _), X = 1, v = 0.
d(i+1, Y, min[v]) :- d(i, X, u), e(X, Y, w), v = u + w.
"""
    )
    spec = report.mra["d"]
    assert spec.index_pos == 0 and not spec.converges_to_limit
    assert spec.rewritten is not None
    text = pretty(spec.rewritten)
    assert "d(X, v) :- e(X, _, _), X = 1, v = 0." in text
    assert "d(Y, min[v]) :- d(X, u), e(X, Y, w), v = u + w." in text
    assert report.verdicts[0].initial_delta.startswith("ΔX¹ = min(X¹, X⁰)")


def test_number_text_prefers_exact_decimals() -> None:
    from fractions import Fraction

    from fixflow.checker.check import number_text

    assert [number_text(Fraction(n, d)) for n, d in [(3, 1), (-7, 4), (1, 3)]] == [
        "3",
        "-1.75",
        "1/3",
    ]


def test_a_recursive_rule_without_aggregate_feeds_its_relations_aggregate() -> None:
    # docs/language.md: all rules of a relation contribute to its one aggregate.
    report = report_of(
        """
.decl s(x: number, d: float)
s(X, min[d]) :- e(X, _, d).
s(Y, d) :- s(X, dx), e(X, Y, w), d = dx + w.
"""
    )
    (verdict,) = report.verdicts
    assert (verdict.aggregate, verdict.eval_class, verdict.line) == ("min", "mra", 7)
    spec = report.mra["s"]
    assert spec.head.head.aggregate is not None and len(spec.init_rules) == 1
