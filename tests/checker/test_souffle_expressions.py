"""Soufflé's operators, functors and constraints: parsing (precedence, literals, errors
with positions), typing, safety, the condition checker (unmodelled functors are opaque)
and the async engine's fallback for expressions without a numpy kernel."""

from __future__ import annotations

import pytest

from fixflow.checker import diagnose, load
from fixflow.checker.analysis import analyze
from fixflow.checker.ast import BinOp, Call, Cast, Comparison, Constraint, Neg, NumberLit, Var
from fixflow.checker.diagnostics import CheckError
from fixflow.checker.model import Report
from fixflow.checker.parser import parse
from fixflow.checker.printer import pretty
from fixflow.operators.compiler import RuleCompiler
from fixflow.operators.engines import kernels


def value_of(expr_text: str) -> object:
    rule = parse(f"p(Y) :- q(X), Y = {expr_text}.").rules[0]
    comparison = rule.bodies[0].literals[1]
    assert isinstance(comparison, Comparison)
    return comparison.right


X = Var("X")


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        ("X % 3 * 2", BinOp("*", BinOp("%", X, NumberLit(3)), NumberLit(2))),
        ("2 ^ 3 ^ X", BinOp("^", NumberLit(2), BinOp("^", NumberLit(3), X))),
        ("-2 ^ 2", Neg(BinOp("^", NumberLit(2), NumberLit(2)))),
        ("(-2) ^ 2", BinOp("^", NumberLit(-2), NumberLit(2))),
        ("2 ^ -X", BinOp("^", NumberLit(2), Neg(X))),
        ("X band 1 bor 2", BinOp("bor", BinOp("band", X, NumberLit(1)), NumberLit(2))),
        ("X + 1 bshl 2", BinOp("bshl", BinOp("+", X, NumberLit(1)), NumberLit(2))),
        ("X lor 1 land 0", BinOp("lor", X, BinOp("land", NumberLit(1), NumberLit(0)))),
        ("bnot X + 1", BinOp("+", Call("bnot", (X,)), NumberLit(1))),
        ("lnot X ^ 2", Call("lnot", (BinOp("^", X, NumberLit(2)),))),
        (
            "0x1F + 0b101 + 0XfF",
            BinOp("+", BinOp("+", NumberLit(31), NumberLit(5)), NumberLit(255)),
        ),
    ],
)
def test_souffle_precedence_and_literals(text: str, tree: object) -> None:
    assert value_of(text) == tree


def test_constraints_parse_and_print() -> None:
    text = 'p(X) :- q(X, S), true, !false, contains("a", S), !match("a.*", S).\n'
    literals = parse(text).rules[0].bodies[0].literals
    assert literals[1:] == (
        Constraint("true", ()),
        Constraint("false", (), negated=True),
        Constraint("contains", (parse('p("a").').rules[0].head.args[0], Var("S"))),
        Constraint("match", (parse('p("a.*").').rules[0].head.args[0], Var("S")), negated=True),
    )
    assert pretty(parse(text)) == text


@pytest.mark.parametrize(
    ("text", "message", "where"),
    [
        ("p(Y) :- q(X), Y = substr(X, 1).", "`substr` takes 3 arguments, found 2", "1:19"),
        ("p(Y) :- q(X), Y = cat(X).", "`cat` takes at least 2 arguments, found 1", "1:19"),
        ("p(Y) :- q(X), contains(X).", "`contains` takes 2 arguments, found 1", "1:15"),
        ("p(Y) :- q(X), Y = 0x1G.", "invalid hexadecimal literal `0x1G`", "1:19"),
        ("p(Y) :- q(X), Y = band.", "`band` is an operator, not a value", "1:19"),
        ("p(Y) :- q(X), Y = contains(X, X).", "`contains` is a constraint, not a function", "1:19"),
        ("match(X) :- q(X).", "`match` is a built-in constraint and cannot name a relation", "1:1"),
        ("p(X) :- q(X), true(X).", "expected `,`, `;` or `.` after `true`, found `(`", "1:19"),
    ],
)
def test_misuse_is_reported_with_its_position(text: str, message: str, where: str) -> None:
    with pytest.raises(CheckError) as raised:
        parse(text, "f.dl")
    found = [(d.message, f"{d.span.line}:{d.span.col}") for d in raised.value.diagnostics]
    assert (message, where) in found


def type_errors(body: str) -> list[str]:
    program = parse(
        ".decl q(x: number, f: float, s: symbol)\n.decl p(y: number)\n.input q\n"
        f"p(y) :- q(x, f, s), {body}.\n"
    )
    return [d.message for d in analyze(program).errors]


def test_integer_operators_reject_floats_and_functors_check_their_arguments() -> None:
    assert type_errors("y = x % 2 + x band 3 + bnot x + strlen(s) + to_number(s)") == []
    assert type_errors("y = f % 2") == ["type mismatch: `%` needs a `number`, found a float"]
    assert type_errors("y = x bor f") == ["type mismatch: `bor` needs a `number`, found a float"]
    assert type_errors("y = strlen(x)") == [
        "type mismatch: `strlen` needs a symbol, found a number"
    ]
    assert type_errors('y = x, contains(x, "a")') == [
        "type mismatch: `contains` needs a symbol, found a number"
    ]
    assert type_errors("y = 2 ^ f") == [
        "type mismatch: column `y` of `p` is number but this value is float"
    ]


def test_a_constraint_needs_its_variables_bound() -> None:
    assert type_errors("y = x, match(t, s)") == ["unsafe variable `t` in `match`"]


def verdict_of(step: str) -> object:
    report = load(
        ".decl e(x: number, y: number, w: number, s: symbol)\n.input e\n"
        ".decl v(x: number, d: number)\nv(X, a) :- e(X, _, a, _).\n"
        f"v(Y, min[b]) :- v(X, a), e(X, Y, w, s), {step}.\n",
        "t.dl",
    )
    assert isinstance(report, Report)
    (verdict,) = report.verdicts
    return verdict


def test_opaque_functors_give_unknown_never_holds_nor_fails() -> None:
    # `w % 5` is not modelled: Z3 proves min-distributivity for any function in its place,
    # which is still reported as unknown (the rule: opaque means never `holds`).
    through_modulo = verdict_of("b = a + w % 5")
    assert through_modulo.properties["property2"] == "unknown"
    assert "`%`" in through_modulo.reason and "not modelled" in through_modulo.reason
    # The same rule without the functor is proven.
    assert verdict_of("b = a + w").properties["property2"] == "holds"
    # A guard on the value through a conversion cannot be decided: unknown, not fails.
    guarded = verdict_of('b = a + w, t = to_string(a), contains("1", t)')
    assert guarded.properties["property2"] == "unknown"
    assert "not modelled" in guarded.reason
    # A guard on symbols only does not involve the value (as with `s = "x"` before).
    assert verdict_of('b = a + w, contains("1", s)').properties["property2"] == "holds"


def test_expressions_without_a_kernel_make_the_plan_unsupported() -> None:
    compiler = RuleCompiler({"q": ("number",), "p": ("number",)})
    for step, reason in [("Y = X % 2", "operator `%`"), ("Y = strlen(to_string(X))", "`strlen`")]:
        body = parse(f"p(Y) :- q(X), {step}.").rules[0].bodies[0]
        plan = compiler.body(body).plan
        found = kernels.unsupported(plan)
        assert found is not None and reason in found
    body = parse("p(Y) :- q(X), Y = X * 2.").rules[0].bodies[0]
    assert kernels.unsupported(compiler.body(body).plan) is None


# ---------------------------------------------------------------- `5u` and `as(x, T)`


@pytest.mark.parametrize(
    ("text", "value"),
    [("5u", 5), ("0x1Fu", 31), ("0b101u", 5), ("0u", 0), ("9223372036854775807u", 2**63 - 1)],
)
def test_unsigned_literals_are_numbers(text: str, value: int) -> None:
    program = parse(f"p(Y) :- q(X), Y = X + {text}.")
    comparison = program.rules[0].bodies[0].literals[1]
    assert isinstance(comparison, Comparison)
    assert comparison.right == BinOp("+", Var("X"), NumberLit(value))
    assert pretty(program).count(str(value)) == 1  # printed back without the suffix


def test_a_u_starting_a_name_is_no_suffix() -> None:
    with pytest.raises(CheckError):
        parse("p(Y) :- q(X), Y = 5ux.")  # the number 5, then a name: a syntax error
    with pytest.raises(CheckError, match="invalid hexadecimal literal `0xu`"):
        parse("p(Y) :- q(X), Y = 0xu.")


def test_a_cast_keeps_the_value_and_names_the_type() -> None:
    program = parse(".type Id <: number\np(Y) :- q(X), Y = as(X, Id) + 1.")
    comparison = program.rules[0].bodies[0].literals[1]
    assert isinstance(comparison, Comparison)
    assert comparison.right == BinOp("+", Cast(Var("X"), "Id", "number"), NumberLit(1))
    assert "as(X, Id) + 1" in pretty(program)
    assert parse(pretty(program)) == program


def test_a_cast_to_a_type_declared_later_is_resolved() -> None:
    program = parse("p(Y) :- q(X), Y = as(X, Name).\n.type Name <: symbol")
    comparison = program.rules[0].bodies[0].literals[1]
    assert isinstance(comparison, Comparison)
    assert comparison.right == Cast(Var("X"), "Name", "symbol")


def test_a_cast_to_an_unknown_type_is_an_error() -> None:
    with pytest.raises(CheckError) as raised:
        parse("p(Y) :- q(X), Y = as(X, Nope).", "f.dl")
    [error] = raised.value.diagnostics
    assert error.message == "unknown type `Nope` in `as`"
    assert (error.span.line, error.span.col) == (1, 25)


def test_a_cast_that_would_convert_is_one_error() -> None:
    source = ".decl q(x: number)\n.decl p(y: float)\np(Y) :- q(X), Y = as(X, float)."
    [error] = [d for d in diagnose(source, "f.dl") if d.severity == "error"]
    assert error.message.startswith("cannot cast a number to `float` with `as`")
    assert "`itof(...)`" in error.message
    assert (error.span.line, error.span.col) == (3, 19)


def test_casts_are_gone_after_the_analysis() -> None:
    source = ".type Id <: number\n.decl q(x: Id)\n.decl p(y: number)\np(as(X, number)) :- q(X)."
    analysis = analyze(parse(source))
    assert not analysis.errors
    [rule] = analysis.program.rules
    assert rule.head.args == (Var("X"),)
