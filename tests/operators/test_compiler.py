"""The rule compiler on small hand cases: plans, then the DataFrames they run as."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from fixflow.checker import ast
from fixflow.checker.parser import parse
from fixflow.operators.compiler import CompileError, RuleCompiler
from fixflow.operators.plan import AntiJoin, Filter, Join, Project, Scan, explain
from fixflow.operators.spark_backend import column_name

from .helpers import run

SCHEMAS = {
    "edge": ("number", "number", "float"),
    "node": ("number",),
    "bad": ("number",),
}


def _body(text: str) -> ast.Rule:
    program = parse(
        ".decl edge(s: number, d: number, w: float)\n.decl node(n: number)\n"
        ".decl bad(n: number)\n.decl out(a: number, b: float)\n" + text,
        "t.dl",
    )
    return program.rules[0]


def _nodes(plan: object, kind: type) -> list[object]:
    from fixflow.operators.plan import children

    found = [plan] if isinstance(plan, kind) else []
    for child in children(plan):  # type: ignore[arg-type]
        found += _nodes(child, kind)
    return found


def test_join_on_shared_variable_with_filters_and_assignment() -> None:
    rule = _body("out(X, d) :- edge(X, Y, w), edge(Y, 3, v), X != Y, d = w + v.")
    compiled = RuleCompiler(SCHEMAS).body(rule.bodies[0])
    joins = _nodes(compiled.plan, Join)
    assert [j.on for j in joins] == [("Y",)]  # type: ignore[attr-defined]
    text = explain(compiled.plan)
    assert "X != Y" in text and "d := (w + v)" in text
    # the constant 3 is a filter on the scan of the second atom
    assert any("= 3" in line for line in text.splitlines() if line.strip().startswith("Filter"))
    assert compiled.types["d"] == "float"


def test_repeated_variable_and_wildcard() -> None:
    rule = _body("node(X) :- edge(X, X, _).")
    compiled = RuleCompiler(SCHEMAS).body(rule.bodies[0])
    scan = _nodes(compiled.plan, Scan)[0]
    filters = _nodes(compiled.plan, Filter)
    assert len(filters) == 1  # X = X across positions 0 and 1
    assert [n for n, _ in compiled.plan.schema] == ["X"]
    assert scan.relation == "edge"  # type: ignore[attr-defined]


def test_negation_is_an_anti_join() -> None:
    rule = _body("node(X) :- edge(X, _, _), !bad(X).")
    plan = RuleCompiler(SCHEMAS).body(rule.bodies[0]).plan
    (anti,) = _nodes(plan, AntiJoin)
    assert anti.on == ("X",)  # type: ignore[attr-defined]


def test_unbound_variable_is_a_compile_error() -> None:
    rule = _body("out(X, d) :- node(X), d < 3.0.")
    with pytest.raises(CompileError, match="unbound"):
        RuleCompiler(SCHEMAS).body(rule.bodies[0])


def test_head_casts_to_declared_types() -> None:
    rule = _body("out(X, d) :- node(X), d = X * 2.")
    compiler = RuleCompiler(SCHEMAS)
    head = compiler.head(rule, compiler.body(rule.bodies[0]), ("number", "float"))
    assert isinstance(head, Project)
    assert [t for _, t in head.schema] == ["number", "float"]


def test_the_compiler_runs_without_spark() -> None:
    """Plans have two backends, Spark and the driver's numpy kernels: compiling rules to
    plans must not load pyspark (a fresh interpreter, so nothing else loaded it first)."""
    src = Path(__file__).resolve().parents[2] / "src"
    probe = "import sys, fixflow.operators.compiler; print(sorted(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "fixflow.operators.compiler" in loaded
    assert "pyspark" not in loaded and "fixflow.operators.spark_backend" not in loaded


def test_column_names_keep_case_apart() -> None:
    assert column_name("x") != column_name("X")
    assert column_name("b'") != column_name("b")
    assert len({column_name(n) for n in ["a_b", "aB", "a__b", "a_B", "#e.1"]}) == 5


PROGRAM = """
.decl edge(src: number, dst: number, w: float)
.input edge
.decl name(id: number, label: symbol)
.input name
.decl banned(id: number)
.input banned
.decl loop(x: number)
.output loop
.decl two(x: number, z: number, d: float)
.output two
.decl calc(x: number, q: float, r: float, m: float, e: float, l: float, a: float, u: float)
.output calc
.decl labelled(label: symbol, w: float)
.output labelled
.decl fact(a: number, b: float)
.output fact
.decl outdeg(x: number, n: number)
.output outdeg
loop(X) :- edge(X, X, _).
two(X, Z, d) :- edge(X, Y, w1), edge(Y, Z, w2), !banned(Y), d = w1 + w2.
outdeg(X, count[Y]) :- edge(X, Y, _).
calc(X, q, r, m, e, l, a, u) :- edge(X, Y, w), q = (X - 10) / 3, r = -7 / 2,
    m = min(w, 2.5), e = exp(0.0), l = log(1.0), a = abs(0 - w), u = relu(1.0 - w).
labelled(L, w) :- name(X, L), edge(X, _, w), L != "skip".
fact(1, 2).
.decl quot(x: number, y: number, z: number)
.output quot
quot(X, y, -7 / (X - 3)) :- edge(X, _, _), y = 6 / (X - 2).
.decl notafter(x: number)
.output notafter
notafter(X) :- edge(X, _, _), !loop(X - 1).
.decl later(y: number)
.output later
later(y) :- edge(X, _, _), !loop(y), y = X - 1.
"""

FACTS = {
    "edge": [(1, 1, 1.0), (1, 2, 2.0), (1, 3, 2.0), (2, 3, 1.5), (3, 4, 4.0)],
    "name": [(1, "one"), (2, "skip"), (3, "three")],
    "banned": [(3,)],
}


@pytest.fixture(scope="module")
def compiled_rows(spark: SparkSession) -> dict[str, set[tuple[object, ...]]]:
    rows, _ = run(spark, PROGRAM, FACTS)
    return rows


def test_repeated_variable_selects_self_loops(compiled_rows: dict) -> None:
    assert compiled_rows["loop"] == {(1,)}


def test_join_antijoin_and_assignment(compiled_rows: dict) -> None:
    # paths of two edges, not through the banned node 3
    assert compiled_rows["two"] == {(1, 1, 2.0), (1, 2, 3.0), (1, 3, 3.0), (1, 3, 3.5)}


def test_count_ranges_over_distinct_bindings(compiled_rows: dict) -> None:
    # edge(1,2,2.0) and edge(1,3,2.0) share the weight: both count; _ collapses nothing.
    assert compiled_rows["outdeg"] == {(1, 3), (2, 1), (3, 1)}


def test_arithmetic_and_builtins(compiled_rows: dict) -> None:
    by_x = {row[0]: row for row in compiled_rows["calc"] if row[0] == 3}
    _, q, r, m, e, ln, a, u = by_x[3]
    # number / number truncates toward zero, as in Soufflé: (3 - 10) / 3 = -2, -7 / 2 = -3
    assert (q, r) == (-2.0, -3.0)
    assert (m, e, ln, a, u) == (2.5, 1.0, 0.0, 4.0, 0.0)


def test_division_by_zero_drops_the_binding(compiled_rows: dict) -> None:
    # X = 2 divides by zero in the body, X = 3 in the head: no rows, and no nulls.
    assert compiled_rows["quot"] == {(1, -6, 3)}


def test_negated_atoms_with_expressions_and_later_bound_variables(compiled_rows: dict) -> None:
    # loop = {1}: `!loop(X - 1)` drops X = 2; `!loop(y)` waits for `y = X - 1`, written
    # after it, instead of testing whether loop is empty.
    assert compiled_rows["notafter"] == {(1,), (3,)}
    assert compiled_rows["later"] == {(0,), (2,)}


def test_symbols_and_symbol_comparison(compiled_rows: dict) -> None:
    assert compiled_rows["labelled"] == {("one", 1.0), ("one", 2.0), ("three", 4.0)}


def test_facts_are_cast_to_declared_types(compiled_rows: dict) -> None:
    (row,) = compiled_rows["fact"]
    assert row == (1, 2.0) and isinstance(row[1], float)


def test_program_plans_show_each_stratum_with_its_fixpoint() -> None:
    from fixflow.checker import load
    from fixflow.operators.evaluate import program_plans
    from fixflow.operators.plan import Fixpoint, relations_read

    report = load(
        ".decl e(a: number, b: number)\n.input e\n.decl tc(a: number, b: number)\n"
        ".output tc\ntc(X, Y) :- e(X, Y).\ntc(X, Z) :- tc(X, Y), e(Y, Z).\n",
        "tc.dl",
    )
    (plan,) = program_plans(report, max_iterations=50)
    assert isinstance(plan, Fixpoint)
    assert (plan.strategy, plan.relations, plan.max_iterations) == ("set", ("tc",), 50)
    assert relations_read(plan.init[0]) == {("e", "full")}
    assert relations_read(plan.step[0]) == {("tc", "delta"), ("e", "full")}
    assert explain(plan).splitlines()[0] == "Fixpoint set (tc) cap 50"


def test_set_minus_is_except_without_the_distinct_null_safe_and_unambiguous(
    spark: SparkSession,
) -> None:
    from fixflow.operators.spark_backend import minus, set_minus

    rows = [(1, 1.0), (2, None), (None, 3.0), (4, float("nan")), (5, 5.0)]
    left = spark.createDataFrame(rows, "c0 long, c1 double")
    right = left.where("c0 is null or c0 in (2, 4)").union(
        spark.createDataFrame([(9, 9.0)], "c0 long, c1 double")
    )
    expected = sorted(map(tuple, minus(left, right).collect()), key=str)
    assert expected == [(1, 1.0), (5, 5.0)]
    assert sorted(map(tuple, set_minus(left, right).collect()), key=str) == expected
    # Both sides projections of one frame: the condition must still compare left to right.
    assert set_minus(left, left.where("c0 = 5")).count() == 4
    nullary = spark.createDataFrame([()], "")
    assert set_minus(nullary, nullary).count() == 0
