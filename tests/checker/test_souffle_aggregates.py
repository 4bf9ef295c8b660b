"""Soufflé's body aggregates (``x = min y : { body }``): parsing, printing, the lifting into
hidden head-aggregate relations, stratification, and the reference evaluator."""

from __future__ import annotations

import pytest

from fixflow.checker import diagnose, load
from fixflow.checker.analysis import analyze
from fixflow.checker.ast import (
    Atom,
    BinOp,
    Comparison,
    NumberLit,
    SubAggregate,
    Var,
    Wildcard,
)
from fixflow.checker.parser import parse
from fixflow.checker.printer import pretty
from fixflow.checker.report import human
from fixflow.checker.subaggregates import is_hidden
from reference.evaluator import evaluate

DECLS = """
.decl e(a: number, b: number)
.input e
.decl k(a: number)
.input k
.decl p(a: number, c: number)
.output p
"""


def _literal(body_text: str, index: int = 1) -> object:
    program = parse(DECLS + f"p(x, c) :- {body_text}.")
    return program.rules[0].bodies[0].literals[index]


def test_braced_count_is_a_sub_aggregate() -> None:
    literal = _literal("k(x), c = count : { e(x, _), x > 1 }")
    assert isinstance(literal, Comparison)
    aggregate = literal.right
    assert isinstance(aggregate, SubAggregate)
    assert aggregate.func == "count" and aggregate.target is None
    assert aggregate.bodies[0].literals[0] == Atom("e", (Var("x"), Wildcard()))


def test_atom_form_and_expression_target() -> None:
    literal = _literal("k(x), c = sum y * 2 : e(x, y)")
    assert isinstance(literal, Comparison) and isinstance(literal.right, SubAggregate)
    assert literal.right.target == BinOp("*", Var("y"), NumberLit(2))
    assert literal.right.bodies[0].literals == (Atom("e", (Var("x"), Var("y"))),)


def test_aggregate_on_the_left_of_a_test() -> None:
    literal = _literal("k(x), min y : { e(x, y) } < 3, c = 1")
    assert isinstance(literal, Comparison) and literal.op == "<"
    assert isinstance(literal.left, SubAggregate) and literal.left.func == "min"


def test_aggregate_words_stay_ordinary_names() -> None:
    program = parse(DECLS + "p(sum, count) :- e(sum, count), count = min(sum, 2).")
    body = program.rules[0].bodies[0]
    assert body.literals[0] == Atom("e", (Var("sum"), Var("count")))


def test_the_span_covers_the_aggregate() -> None:
    literal = _literal("k(x), c = count : { e(x, _) }")
    assert isinstance(literal, Comparison)
    span = literal.right.span
    text = (DECLS + "p(x, c) :- k(x), c = count : { e(x, _) }.").splitlines()[span.line - 1]
    assert text[span.col - 1 : span.end_col - 1] == "count : { e(x, _) }"


def test_a_missing_body_is_a_syntax_error() -> None:
    [error] = diagnose(DECLS + "p(x, c) :- k(x), c = count : 5.", "f.dl")
    assert "expected `{` or an atom after `count ... :`" in error.message
    assert (error.span.line, error.span.col) == (8, 30)  # at the `5`


@pytest.mark.parametrize(
    "text",
    [
        "p(x, c) :- k(x), c = count : { e(x, _), !k(x) }, min y : { e(x, y) } < 3.",
        "p(x, c) :- k(x), c = 1 + max y : { e(_, y), y = count : { e(y, _) } } * 2.",
        "p(x, c) :- k(x), c = mean y * 2.0 : { e(x, y) }.",
    ],
)
def test_printing_gives_back_the_same_program(text: str) -> None:
    program = parse(DECLS + text)
    assert parse(pretty(program)) == program
    assert text in pretty(program)


def test_lifting_groups_by_the_correlation_variables() -> None:
    analysis = analyze(parse(DECLS + "p(x, c) :- k(x), c = count : { e(x, y) }."))
    assert not analysis.errors
    hidden = [r for s in analysis.strata for r in s.relations if is_hidden(r)]
    assert len(hidden) == 1
    [relation] = hidden
    assert [a.name for a in analysis.schemas[relation]] == ["x", "value"]
    # The hidden relation is computed before the rule that uses it.
    order = [r for s in analysis.strata for r in s.relations]
    assert order.index(relation) < order.index("p")


def test_errors_inside_an_aggregate_point_at_the_users_code() -> None:
    source = DECLS + "p(x, c) :- k(x), c = count : { nope(x) }."
    [error] = [d for d in diagnose(source, "f.dl") if d.severity == "error"]
    assert error.message == "undeclared relation `nope`"
    assert (error.span.line, error.span.col) == (8, 32)  # at `nope`


def test_recursion_through_an_aggregate_is_rejected() -> None:
    source = DECLS + "p(x, 0) :- k(x).\np(x, c) :- k(x), c = max v : { p(x, v) }."
    errors = [d for d in diagnose(source, "f.dl") if d.severity == "error"]
    assert [e.message for e in errors] == ["aggregate inside the recursion of `p` (through `p`)"]
    assert (errors[0].span.line, errors[0].span.col) == (9, 22)
    assert not any("_agg" in e.message or "_agg" in " ".join(e.notes) for e in errors)


def test_a_tested_correlation_variable_is_not_an_error() -> None:
    source = DECLS + "p(x, c) :- k(x), c = count : { e(y, z), z > x }."
    assert not [d for d in diagnose(source, "f.dl") if d.severity == "error"]


PROGRAM = (
    DECLS
    + """
.decl q(a: number, lo: number, s: number, m: float)
.output q
p(x, c) :- k(x), c = count : { e(x, _) }.
q(x, lo, s, m) :- k(x), lo = min y : e(x, y), s = sum y - x : { e(x, y) }, m = mean y : e(x, y).
"""
)


def test_the_reference_evaluator_follows_souffle() -> None:
    facts = {"e": [(1, 5), (1, 7), (2, 3)], "k": [(1,), (2,), (3,)]}
    db = evaluate(parse(PROGRAM), facts)
    assert db["p"] == {(1, 2), (2, 1), (3, 0)}
    assert db["q"] == {(1, 5, 10, 6.0), (2, 3, 1, 3.0)}


def test_an_aggregate_in_the_head_is_computed_in_the_body() -> None:
    program = parse(DECLS + "p(1, count : { e(_, _) }).\np(x, 1 + sum y : e(x, y)) :- k(x).")
    assert parse(pretty(program)) == program
    assert not analyze(program).errors
    facts = {"e": [(1, 5), (1, 7)], "k": [(1,), (2,)]}
    assert evaluate(program, facts)["p"] == {(1, 2), (1, 13), (2, 1)}


def test_the_check_report_names_aggregates_by_position() -> None:
    report = load(DECLS + "p(x, c) :- k(x), c = count : { e(x, _) }.", "f.dl")
    text = human(report)
    assert "body aggregate at 8:22" in text and "_agg" not in text


# ---------------------------------------------------------------- `;` inside the braces


def test_a_disjunction_gives_the_aggregate_several_bodies() -> None:
    literal = _literal("k(x), c = count : { e(x, y), y > 1 ; e(y, x) }")
    assert isinstance(literal, Comparison) and isinstance(literal.right, SubAggregate)
    first, second = literal.right.bodies
    assert len(first.literals) == 2
    assert second.literals == (Atom("e", (Var("y"), Var("x"))),)


def test_a_disjunctive_aggregate_ranges_over_the_set_of_the_union() -> None:
    source = DECLS + "p(x, c) :- k(x), c = sum y : { e(x, y) ; e(y, x) ; e(x, y), y > 5 }."
    program = parse(source)
    analysis = analyze(program)
    assert not analysis.errors
    facts = {"e": [(1, 5), (5, 1), (1, 7), (2, 3)], "k": [(1,), (2,), (9,)]}
    # x = 1: y in {5, 7} ∪ {5} ∪ {7} = {5, 7}; x = 2: {3}; x = 9: empty, so 0.
    assert evaluate(program, facts)["p"] == {(1, 12), (2, 3), (9, 0)}
    hidden = {r for s in analysis.strata for r in s.relations if is_hidden(r)}
    assert len(hidden) == 2  # _aggN_set (the union, a set) and _aggN (the sum over it)


def test_variables_of_one_alternative_only_are_existential() -> None:
    source = DECLS + "p(x, c) :- k(x), c = count : { e(x, y), y > 1 ; e(x, _), k(x) }."
    program = parse(source)
    assert not analyze(program).errors
    facts = {"e": [(1, 5), (1, 7), (2, 0)], "k": [(1,), (2,)]}
    # The set of x: y is not in every alternative, so it is not a column.
    assert evaluate(program, facts)["p"] == {(1, 1), (2, 1)}


def test_an_unbound_target_is_reported_without_hidden_names() -> None:
    source = DECLS + "p(x, c) :- k(x), c = sum z : { e(x, y) ; e(y, x) }."
    errors = [d for d in diagnose(source, "f.dl") if d.severity == "error"]
    assert [e.message for e in errors] == ["unsafe variable `z` in a body aggregate"]


# ---------------------------------------------------------------- targets with `(` and `-`


def test_targets_may_start_with_a_parenthesis_or_a_minus() -> None:
    literal = _literal("k(x), c = sum (y + 1) * 2 : e(x, y)")
    assert isinstance(literal, Comparison) and isinstance(literal.right, SubAggregate)
    assert literal.right.target == BinOp("*", BinOp("+", Var("y"), NumberLit(1)), NumberLit(2))
    literal = _literal("k(x), min -y : { e(x, y) } < c")
    assert isinstance(literal, Comparison) and isinstance(literal.left, SubAggregate)
    assert literal.left.func == "min"


def test_calls_subtractions_and_atoms_keep_their_meaning() -> None:
    decls = DECLS + ".decl sum(a: number)\n"
    program = parse(decls + "p(x, c) :- e(sum, x), sum(x), c = min(sum, x) + (sum - x).")
    body = program.rules[0].bodies[0]
    assert body.literals[1] == Atom("sum", (Var("x"),))
    assert pretty(body.literals[2]) == "c = min(sum, x) + (sum - x)"


@pytest.mark.parametrize(
    "text",
    [
        "p(x, c) :- k(x), c = sum (x + y) * 2 : { e(x, y) }.",
        "p(x, c) :- k(x), c = min -y : { e(x, y) ; e(y, x) }.",
        "p(x, c) :- e(x, sum), c = max (sum - x) : { e(x, sum) }.",
        "p(x, c) :- k(x), c = count : { e(x, _) ; e(_, x), !k(x) ; e(x, x) }.",
    ],
)
def test_new_aggregate_forms_round_trip(text: str) -> None:
    program = parse(DECLS + text)
    assert parse(pretty(program)) == program
    assert pretty(parse(pretty(program))) == pretty(program)


# ---------------------------------------------------------------- witnesses and nesting


def _hidden_keys(analysis: object) -> list[list[str]]:
    schemas = analysis.schemas  # type: ignore[attr-defined]
    hidden = sorted(r for r in schemas if is_hidden(r) and "_" not in r[1:])
    return [[a.name for a in schemas[r]][:-1] for r in hidden]


def test_a_variable_bound_only_inside_a_max_is_its_witness() -> None:
    """As in Soufflé, `x` (the head's only) does not group the max: it takes the values of
    the tuples reaching it, every one of them on a tie."""
    program = parse(DECLS + "p(x, c) :- c = max y : e(x, y).")
    analysis = analyze(program)
    assert not analysis.errors
    assert _hidden_keys(analysis) == [[]]  # one global max, no group-by key
    facts = {"e": [(1, 5), (2, 7), (3, 7), (4, 1)]}
    assert evaluate(program, facts)["p"] == {(2, 7), (3, 7)}


def test_a_witness_next_to_a_correlation_variable() -> None:
    program = parse(
        DECLS
        + ".decl w(a: number, b: number, c: number)\n.output w\n"
        + "w(x, y, m) :- k(x), m = min z : { e(x, z), e(y, z) }."
    )
    analysis = analyze(program)
    assert not analysis.errors
    assert _hidden_keys(analysis) == [["x"]]
    facts = {"e": [(1, 5), (2, 5), (1, 7), (3, 7)], "k": [(1,), (3,), (9,)]}
    # x = 1: z in {5, 7}, min 5, reached with y in {1, 2}; x = 3: 7 with y in {1, 3}.
    assert evaluate(program, facts)["w"] == {(1, 1, 5), (1, 2, 5), (3, 1, 7), (3, 3, 7)}


@pytest.mark.parametrize(
    ("value", "func"),
    [
        ("count : { e(x, y) }", "count"),
        ("sum y : { e(x, y) }", "sum"),
        ("ftoi(mean y : { e(x, y) })", "mean"),
    ],
)
def test_a_witness_of_count_sum_or_mean_is_an_error_as_in_souffle(value: str, func: str) -> None:
    source = DECLS + f"p(x, c) :- c = {value}."
    [error] = [d for d in diagnose(source, "f.dl") if d.severity == "error"]
    assert error.message == f"`x` is bound only inside a `{func}` aggregate, but used outside it"
    text = source.splitlines()[error.span.line - 1]
    assert text[error.span.col - 1 :].startswith("x, y) }")
    assert "_agg" not in error.message + " ".join(error.notes)


def test_an_aggregate_assigned_inside_another_one() -> None:
    """The inner sum is grouped by `n`, which the outer body binds; `z` stays local."""
    program = parse(DECLS + "p(0, s) :- s = sum y : { k(n), y = sum z : { k(z), z < n } }.")
    analysis = analyze(program)
    assert not analysis.errors
    assert sorted(_hidden_keys(analysis)) == [[], ["n"]]
    assert evaluate(program, {"k": [(2,), (3,), (5,)]})["p"] == {(0, 7)}


def test_an_aggregate_compared_inside_another_one() -> None:
    source = DECLS + "p(x, c) :- k(x), c = count : { k(n), n < x, n > max z : { k(z), z < n } }."
    program = parse(source)
    assert not [d for d in diagnose(source, "f.dl") if d.severity == "error"]
    facts = {"k": [(2,), (3,), (5,)]}
    # n = 2 has no smaller k (no max: dropped); 3 > 2 and 5 > 3.
    assert evaluate(program, facts)["p"] == {(2, 0), (3, 0), (5, 1)}
