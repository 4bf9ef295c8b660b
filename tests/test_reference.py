"""The reference evaluator reproduces every golden directory's expected output.

The expected files were computed independently (networkx, numpy, by hand: see each
meta.toml), so this tests the oracle against them, and them against the oracle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
