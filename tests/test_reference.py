"""The reference evaluator reproduces every golden directory's expected output.

The expected files were computed independently (networkx, numpy, by hand: see each
meta.toml), so this tests the oracle against them, and them against the oracle.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixflow.checker.ast import Program
from fixflow.checker.parser import parse
from reference.evaluator import evaluate, evaluate_with_stats
from reference.golden import compare_rows, load_golden

PROGRAMS = Path(__file__).resolve().parent / "programs"
CASES = sorted(p.name for p in PROGRAMS.iterdir() if (p / "program.dl").exists())


def test_there_are_goldens() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES)
def test_reference_matches_golden(case: str) -> None:
    golden = load_golden(PROGRAMS / case)
    assert golden.expected, f"{case}: no expected outputs"
    assert set(golden.expected) == set(golden.program.outputs)
    results, stats = evaluate_with_stats(golden.program, golden.facts)
    assert not stats.capped, f"{case}: the iteration cap stopped {stats.strata}"
    for rel, rows in golden.expected.items():
        problems = compare_rows(results[rel], rows, golden.tolerance)
        assert not problems, f"{case}/{rel}: {problems[:5]}"


# ---------------------------------------------------------------- oracle semantics, small


def run(text: str, facts: dict[str, list[tuple]], **kw: int) -> dict[str, set[tuple]]:
    return evaluate(parse(text, "t.dl"), facts, **kw)


def test_aggregates_range_over_distinct_assignments() -> None:
    text = """
    .decl e(a: number, b: number, w: float)
    .input e
    .decl deg(a: number, n: number)
    .decl total(a: number, s: float)
    deg(X, count[Y]) :- e(X, Y, _).
    total(X, sum[w]) :- e(X, _, w).
    """
    out = run(text, {"e": [(1, 2, 1.0), (1, 3, 1.0), (1, 2, 2.0)]})
    # e(1, 2, _) matches twice but gives one assignment of {X, Y}
    assert out["deg"] == {(1, 2)}
    # {X, w} has the assignments (1, 1.0) and (1, 2.0): the two 1.0 edges count once
    assert out["total"] == {(1, 3.0)}


def test_every_rule_of_an_aggregate_relation_contributes() -> None:
    text = """
    .decl e(a: number, b: number)
    .input e
    .decl s(a: number, v: number)
    s(X, v) :- e(X, _), v = 10.
    s(X, sum[v]) :- e(X, Y), v = Y.
    """
    assert run(text, {"e": [(1, 2), (1, 3)]})["s"] == {(1, 15)}


def test_recursive_count_adds_partial_counts() -> None:
    text = """
    .decl e(a: number, b: number)
    .input e
    .decl p(a: number, b: number, c: number)
    p(X, Y, c) :- e(X, Y), c = 1.
    p(X, Y, count[c]) :- p(X, Z, c), e(Z, Y).
    """
    out = run(text, {"e": [(1, 2), (1, 3), (2, 4), (3, 4)]})
    assert (1, 4, 2) in out["p"]


def test_indexed_relation_drops_index_and_keeps_last_iterate() -> None:
    text = """
    .decl n(x: number)
    .input n
    .decl r(i: number, x: number, v: float)
    r(0, X, v) :- n(X), v = 0.0.
    r(i+1, X, sum[w]) :- n(X), w = 1.0 ; r(i, X, v), w = 0.5 * v.
    """
    out = run(text, {"n": [(1,)]}, max_iterations=2000)
    ((x, v),) = out["r"]
    assert x == 1 and abs(v - 2.0) < 1e-12  # v = 1 + v/2 in the limit (exact fixpoint)


def test_termination_clause_stops_early() -> None:
    text = """
    .decl n(x: number)
    .input n
    .decl r(x: number, v: float)
    r(X, sum[w]) :- n(X), w = 1.0 ; r(X, v), w = 0.5 * v ; {sum[Δw] < 0.1}.
    """
    # rounds from empty: 1, 1.5, 1.75, 1.875, 1.9375 (|Δ| = 0.0625 < 0.1 stops)
    assert run(text, {"n": [(1,)]})["r"] == {(1, 1.9375)}


def test_iteration_cap_is_reported() -> None:
    text = """
    .decl r(x: number, v: number)
    r(1, v) :- v = 0.
    r(X, sum[v]) :- r(X, u), v = u + 1.
    """
    _, stats = evaluate_with_stats(parse(text, "t.dl"), {}, max_iterations=5)
    assert stats.capped


def test_stratified_negation() -> None:
    text = """
    .decl e(a: number, b: number)
    .input e
    .decl reach(x: number)
    .decl unreached(x: number)
    reach(X) :- X = 1.
    reach(Y) :- reach(X), e(X, Y).
    unreached(X) :- e(X, _), !reach(X).
    """
    out = run(text, {"e": [(1, 2), (3, 1), (4, 4)]})
    assert out["reach"] == {(1,), (2,)}
    assert out["unreached"] == {(3,), (4,)}


def test_number_division_truncates_toward_zero() -> None:
    text = """
    .decl r(a: number, b: number)
    r(x, y) :- x = 7 / 2, y = -7 / 2.
    """
    assert run(text, {})["r"] == {(3, -3)}


@pytest.mark.parametrize("case", CASES)
def test_golden_comparison_catches_a_wrong_value(case: str) -> None:
    """Changing one expected row beyond the tolerance, or dropping it, is detected: the
    golden comparison can fail."""
    golden = load_golden(PROGRAMS / case)
    rows = next(rows for _, rows in sorted(golden.expected.items()) if rows)
    last = rows[-1]
    bump = 10 * golden.tolerance + 1
    changed = (*last[:-1], last[-1] + bump) if not isinstance(last[-1], str) else last
    assert compare_rows(rows[:-1], rows, golden.tolerance)
    if changed != last:
        assert compare_rows([*rows[:-1], changed], rows, golden.tolerance)


# ---------------------------------------------------------------- oracle vs networkx, random

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NODES = st.integers(min_value=1, max_value=6)


def example(name: str) -> Program:
    return parse((EXAMPLES / f"{name}.dl").read_text(), f"{name}.dl")


@SETTINGS
@given(st.lists(st.tuples(NODES, NODES, st.integers(1, 9)), max_size=14))
def test_sssp_matches_dijkstra(raw: list[tuple[int, int, int]]) -> None:
    edges = {(a, b): w / 2 for a, b, w in raw}  # one weight per edge
    graph = nx.DiGraph()
    graph.add_node(1)
    graph.add_weighted_edges_from((a, b, w) for (a, b), w in edges.items())
    want = nx.single_source_dijkstra_path_length(graph, 1)
    got = evaluate(example("powerlog_p1_sssp"), {"edge": [(*k, w) for k, w in edges.items()]})
    assert {n: float(d) for n, d in got["sssp"]} == pytest.approx(want)


@SETTINGS
@given(st.lists(st.tuples(NODES, NODES), max_size=14))
def test_tc_matches_networkx(arcs: list[tuple[int, int]]) -> None:
    want = set(nx.transitive_closure(nx.DiGraph(arcs)).edges())
    assert evaluate(example("dcd_tc"), {"arc": arcs})["tc"] == want


@SETTINGS
@given(st.lists(st.tuples(NODES, NODES), max_size=10))
def test_cc_matches_networkx(pairs: list[tuple[int, int]]) -> None:
    arcs = [(a, b) for u, v in pairs for a, b in ((u, v), (v, u))]
    want = {(v, min(c)) for c in nx.connected_components(nx.Graph(arcs)) for v in c}
    assert evaluate(example("powerlog_p3_cc"), {"edge": arcs})["cc"] == want


@SETTINGS
@given(st.lists(st.tuples(NODES, NODES), max_size=12))
def test_path_counts_match_networkx_on_dags(pairs: list[tuple[int, int]]) -> None:
    dag = sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b})  # edges point upward
    graph = nx.DiGraph(dag)
    want = {
        (x, y, n)
        for x in graph
        for y in graph
        if x != y and (n := sum(1 for _ in nx.all_simple_paths(graph, x, y)))
    }
    assert evaluate(example("paths_dag"), {"edge": dag})["cpaths"] == want


@SETTINGS
@given(st.lists(st.tuples(NODES, NODES), max_size=12))
def test_pagerank_matches_the_linear_solve(pairs: list[tuple[int, int]]) -> None:
    nodes = list(range(1, 7))
    # a ring keeps every vertex non-dangling
    edges = sorted(set(pairs) | {(v, v % 6 + 1) for v in nodes})
    out = {v: sum(1 for a, _ in edges if a == v) for v in nodes}
    m = np.zeros((6, 6))
    for a, b in edges:
        m[b - 1, a - 1] += 0.85 / out[a]
    want = np.linalg.solve(np.eye(6) - m, np.full(6, 0.15))
    facts = {"edge": edges, "node": [(v,) for v in nodes]}
    got = dict(evaluate(example("powerlog_p2b_pagerank"), facts)["rank"])
    # sum|Δ| < 1e-6 leaves an L1 error below 0.85/0.15 · 1e-6
    assert [got[v] for v in nodes] == pytest.approx(list(want), abs=1e-5)
