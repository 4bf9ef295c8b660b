"""The parser: the documented examples parse to the expected ASTs, spans point at the
source text, literals get the documented types, and every syntax error is reported with
a useful message at the right place (several per file)."""

from __future__ import annotations

import pytest

from fixflow.checker.ast import (
    Aggregate,
    Atom,
    Attribute,
    BinOp,
    Body,
    Call,
    Comparison,
    Declaration,
    Expr,
    FloatLit,
    Head,
    InputDirective,
    Neg,
    Negation,
    NumberLit,
    OutputDirective,
    Program,
    Rule,
    Span,
    StringLit,
    Termination,
    Var,
    Wildcard,
)
from fixflow.checker.diagnostics import CheckError, Diagnostic
from fixflow.checker.parser import parse

SSSP = """\
// comments: // and /* */
.decl edge(src: number, dst: number, w: float)
.input edge                        // fed by Kafka topic "edge" (or a facts file in batch mode)
.decl sssp(node: number, dist: float)
.output sssp                       // materialized as Delta table results/sssp

sssp(X, d) :- X = 1, d = 0.
sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
"""

PAGERANK = """\
/* PowerLog Program 2: PageRank, declarative + imperative */
.decl edge(src: number, dst: number)
.decl node(id: number)
.decl degree(id: number, d: number)
.decl rank(i: number, id: number, r: float)
.input edge
.input node
.output rank

degree(X, count[Y]) :- edge(X, Y).
rank(0, X, r) :- node(X), r = 0.
rank(i+1, Y, sum[ry]) :- node(Y), ry = 0.15 ;
                         rank(i, X, rx), edge(X, Y), degree(X, d),
                         ry = 0.85 * rx / d {sum[Δry] < 0.001}.
"""


def v(name: str) -> Var:
    return Var(name)


def only_rule(text: str) -> Rule:
    (rule,) = parse(text).rules
    return rule


def expr_of(text: str) -> Expr:
    """The right-hand side of ``p(X) :- X = <text>.``."""
    (literal,) = only_rule(f"p(X) :- X = {text}.").bodies[0].literals
    assert isinstance(literal, Comparison)
    return literal.right


def errors(text: str) -> list[Diagnostic]:
    with pytest.raises(CheckError) as raised:
        parse(text, "prog.dl")
    assert raised.value.source == text
    return raised.value.diagnostics


# ---------------------------------------------------------------- documented programs


def test_sssp_example_parses_to_the_expected_ast() -> None:
    program = parse(SSSP, "sssp.dl")
    assert program == Program(
        (
            Declaration(
                "edge",
                (Attribute("src", "number"), Attribute("dst", "number"), Attribute("w", "float")),
            ),
            InputDirective("edge"),
            Declaration("sssp", (Attribute("node", "number"), Attribute("dist", "float"))),
            OutputDirective("sssp"),
            Rule(
                Head("sssp", (v("X"), v("d"))),
                (
                    Body(
                        (
                            Comparison("=", v("X"), NumberLit(1)),
                            Comparison("=", v("d"), NumberLit(0)),
                        )
                    ),
                ),
            ),
            Rule(
                Head("sssp", (v("Y"), Aggregate("min", v("dy")))),
                (
                    Body(
                        (
                            Atom("sssp", (v("X"), v("dx"))),
                            Atom("edge", (v("X"), v("Y"), v("w"))),
                            Comparison("=", v("dy"), BinOp("+", v("dx"), v("w"))),
                        )
                    ),
                ),
            ),
        )
    )
    assert program.file == "sssp.dl"
    assert program.inputs == ("edge",) and program.outputs == ("sssp",)


def test_pagerank_program_2_parses_with_alternatives_and_termination() -> None:
    program = parse(PAGERANK)
    degree, base, step = program.rules
    assert degree.head == Head("degree", (v("X"), Aggregate("count", v("Y"))))
    assert base.head.args == (NumberLit(0), v("X"), v("r"))
    assert step.head == Head(
        "rank", (BinOp("+", v("i"), NumberLit(1)), v("Y"), Aggregate("sum", v("ry")))
    )
    assert step.bodies == (
        Body((Atom("node", (v("Y"),)), Comparison("=", v("ry"), FloatLit(0.15)))),
        Body(
            (
                Atom("rank", (v("i"), v("X"), v("rx"))),
                Atom("edge", (v("X"), v("Y"))),
                Atom("degree", (v("X"), v("d"))),
                Comparison("=", v("ry"), BinOp("/", BinOp("*", FloatLit(0.85), v("rx")), v("d"))),
            )
        ),
    )
    assert step.termination == Termination("sum", "ry", "<", FloatLit(0.001))


def test_design_doc_alternative_bodies_share_one_head() -> None:
    rule = only_rule(
        "rank(Y, sum[r]) :- node(Y), r = 0.15 ; rank(X, rx), edge(X, Y), "
        "degree(X, d), r = 0.85 * rx / d."
    )
    assert [len(b.literals) for b in rule.bodies] == [2, 4]
    assert rule.termination is None


def test_a_fact_is_a_rule_with_one_empty_body() -> None:
    assert only_rule("sure(1).") == Rule(Head("sure", (NumberLit(1),)), (Body(()),))


def test_declaration_without_attributes_and_count_star() -> None:
    program = parse('.decl unit()\nn(count[*]) :- unit(), !gone("x"), _ = 1.')
    assert program.declarations == (Declaration("unit", ()),)
    (rule,) = program.rules
    assert rule.head.aggregate == Aggregate("count", None)
    assert rule.bodies[0].literals == (
        Atom("unit", ()),
        Negation(Atom("gone", (StringLit("x"),))),
        Comparison("=", Wildcard(), NumberLit(1)),
    )


@pytest.mark.parametrize(
    "clause",
    [
        "{sum[Δr] < 0.001}",
        "{sum[∆r] < 0.001}",
        "{sum[delta r] < 0.001}",
        ", {sum[Δ r] < 0.001}",
        "; {sum[Δr] < 0.001}",
    ],
)
def test_termination_spellings(clause: str) -> None:
    rule = only_rule(f"p(X, sum[r]) :- q(X, r) {clause}.")
    assert rule.termination == Termination("sum", "r", "<", FloatLit(0.001))
    assert len(rule.bodies) == 1 and len(rule.bodies[0].literals) == 1


def test_every_comparison_operator() -> None:
    ops = ["=", "!=", "<", "<=", ">", ">="]
    rule = only_rule("p(X) :- " + ", ".join(f"X {op} 1" for op in ops) + ".")
    assert [lit.op for lit in rule.bodies[0].literals] == ops  # type: ignore[union-attr]


def test_builtin_calls_in_comparisons_and_names_that_are_not_reserved() -> None:
    rule = only_rule("p(sum, count) :- min(sum, 2) < max(count, 1), relu(exp(abs(log(x)))) = y.")
    first, second = rule.bodies[0].literals
    assert first == Comparison(
        "<", Call("min", (v("sum"), NumberLit(2))), Call("max", (v("count"), NumberLit(1)))
    )
    assert second == Comparison(
        "=", Call("relu", (Call("exp", (Call("abs", (Call("log", (v("x"),)),)),)),)), v("y")
    )


def test_identifiers_may_end_in_a_prime() -> None:
    assert only_rule("p(b') :- q(b', x_1').").head.args == (v("b'"),)


# ---------------------------------------------------------------- literals and expressions


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12", NumberLit(12)),
        ("0.15", FloatLit(0.15)),
        ("1e-3", FloatLit(0.001)),
        ("2.5E+2", FloatLit(250.0)),
        ("2.e3", FloatLit(2000.0)),
        ("-1", NumberLit(-1)),
        ("- 1", NumberLit(-1)),
        ("-0.5", FloatLit(-0.5)),
        ("-9223372036854775808", NumberLit(-(2**63))),
        ("9223372036854775807", NumberLit(2**63 - 1)),
        ('"a\\"b\\\\c\\n\\t\\u0394"', StringLit('a"b\\c\n\tΔ')),
        ('"// not a comment /* */"', StringLit("// not a comment /* */")),
    ],
)
def test_literals(text: str, expected: Expr) -> None:
    value = expr_of(text)
    assert value == expected
    assert type(value.value) is type(expected.value)  # type: ignore[union-attr]


def test_a_trailing_dot_is_a_float_unless_it_ends_the_rule() -> None:
    assert only_rule("p(X) :- X = 2.").bodies[0].literals[0].right == NumberLit(2)  # type: ignore[union-attr]
    program = parse("p(X) :- X = 2.\nq(1).\np(Y) :- Y = 2.\n.output p\n")
    assert [r.bodies[0].literals[0].right for r in program.rules if r.head.relation == "p"] == [
        NumberLit(2),
        NumberLit(2),
    ]  # type: ignore[union-attr]
    assert only_rule("p(X) :- X = min(2., 3).").bodies[0].literals[0].right == Call(
        "min", (FloatLit(2.0), NumberLit(3))
    )  # type: ignore[union-attr]
    assert expr_of("2.*x") == BinOp("*", FloatLit(2.0), v("x"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a - b - c", BinOp("-", BinOp("-", v("a"), v("b")), v("c"))),
        ("a / b * c", BinOp("*", BinOp("/", v("a"), v("b")), v("c"))),
        ("a + b * c", BinOp("+", v("a"), BinOp("*", v("b"), v("c")))),
        ("(a + b) * c", BinOp("*", BinOp("+", v("a"), v("b")), v("c"))),
        ("a - (b - c)", BinOp("-", v("a"), BinOp("-", v("b"), v("c")))),
        ("x-1", BinOp("-", v("x"), NumberLit(1))),
        ("x - -1", BinOp("-", v("x"), NumberLit(-1))),
        ("2*-3", BinOp("*", NumberLit(2), NumberLit(-3))),
        ("-2 * x", BinOp("*", NumberLit(-2), v("x"))),
        ("-x * y", BinOp("*", Neg(v("x")), v("y"))),
        ("-(x * y)", Neg(BinOp("*", v("x"), v("y")))),
        ("-(1)", Neg(NumberLit(1))),
        ("- -1", Neg(NumberLit(-1))),
        ("--x", Neg(Neg(v("x")))),
        (
            "max(a, b) + abs(-c)",
            BinOp("+", Call("max", (v("a"), v("b"))), Call("abs", (Neg(v("c")),))),
        ),
    ],
)
def test_precedence_and_unary_minus(text: str, expected: Expr) -> None:
    assert expr_of(text) == expected


def test_comments_are_skipped_anywhere() -> None:
    program = parse("/* a\nmulti-line */ p(X) :- // here\n q(X /* inline */, 1).\n// end")
    assert program.rules[0].bodies[0].literals == (Atom("q", (v("X"), NumberLit(1))),)


# ---------------------------------------------------------------- spans


def text_at(source: str, span: Span) -> str:
    """The source text a single-line span covers."""
    assert span.line == span.end_line
    return source.splitlines()[span.line - 1][span.col - 1 : span.end_col - 1]


def test_spans_cover_exactly_the_text_of_each_node() -> None:
    program = parse(SSSP, "sssp.dl")
    rule = program.rules[1]
    _, edge_atom, assignment = rule.bodies[0].literals
    assert edge_atom.span == Span("sssp.dl", 8, 34, 8, 47)
    assert text_at(SSSP, edge_atom.span) == "edge(X, Y, w)"
    assert text_at(SSSP, edge_atom.args[1].span) == "Y"  # type: ignore[union-attr]
    assert text_at(SSSP, rule.head.span) == "sssp(Y, min[dy])"
    assert text_at(SSSP, rule.head.args[1].span) == "min[dy]"
    assert text_at(SSSP, assignment.span) == "dy = dx + w"
    assert text_at(SSSP, assignment.right.span) == "dx + w"  # type: ignore[union-attr]
    assert text_at(SSSP, rule.bodies[0].span) == "sssp(X, dx), edge(X, Y, w), dy = dx + w"
    assert text_at(SSSP, rule.span) == SSSP.splitlines()[7]
    decl = program.declarations[0]
    assert text_at(SSSP, decl.span) == ".decl edge(src: number, dst: number, w: float)"
    assert text_at(SSSP, decl.attributes[2].span) == "w: float"
    assert text_at(SSSP, program.items[1].span) == ".input edge"  # type: ignore[union-attr]


def test_spans_of_operators_literals_and_termination() -> None:
    source = "p(X, sum[r]) :- !q(X), r = -(a + 1) * -2, r > 2. {sum[Δr] < 1e-3}."
    rule = only_rule(source)
    negation, product, _ = rule.bodies[0].literals
    assert text_at(source, negation.span) == "!q(X)"
    assert text_at(source, negation.atom.span) == "q(X)"  # type: ignore[union-attr]
    right = product.right  # type: ignore[union-attr]
    assert text_at(source, right.span) == "-(a + 1) * -2"
    assert text_at(source, right.left.span) == "-(a + 1)"
    assert text_at(source, right.left.operand.span) == "(a + 1)"
    assert text_at(source, right.right.span) == "-2"
    assert text_at(source, rule.bodies[0].literals[2].right.span) == "2."  # type: ignore[union-attr]
    assert text_at(source, rule.termination.span) == "{sum[Δr] < 1e-3}"  # type: ignore[union-attr]


def test_multi_line_spans_and_unicode_columns() -> None:
    program = parse(PAGERANK)
    step = program.rules[2]
    assert (step.span.line, step.span.col, step.span.end_line) == (12, 1, 14)
    assert (step.bodies[1].span.line, step.bodies[1].span.end_line) == (13, 14)
    termination = step.termination
    assert termination is not None
    # `Δ` is one column: the clause ends where its `}` is.
    line = PAGERANK.splitlines()[13]
    assert termination.span.end_col == line.index("}") + 2
    assert text_at(PAGERANK, termination.span) == "{sum[Δry] < 0.001}"


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("source", "message", "line", "col"),
    [
        ("p(X) :- edge(X, Y.", "expected `)` after the arguments of `edge`, found `.`", 1, 18),
        ("p(X) :- q(X) r(X).", "expected `,`, `;` or `.` after a body literal, found `r`", 1, 14),
        ("p(X) :- q(X)", "expected `.` at the end of the rule, found end of file", 1, 13),
        ("p(X) :- q(X)\np(1).", "expected `.` at the end of the rule, found `p`", 1, 13),
        ("p(X) q(X).", "expected `:-` or `.` after the head of `p`, found `q`", 1, 6),
        ("p(X) :- , q(X).", "expected a body literal, found `,`", 1, 9),
        (
            "p(X) :- X.",
            "expected a comparison operator (`=`, `!=`, `<`, `<=`, `>`, `>=`) "
            "after the expression, found `.`",
            1,
            10,
        ),
        ("p(X) :- X = .", "expected an expression, found `.`", 1, 13),
        ("p(X) :- X = (1 + 2.", "expected `)` to close the parenthesis, found `.`", 1, 19),
        ('p(X) :- X = "abc.', "unterminated string", 1, 13),
        ("p(X) :- q(X). /* no end", "unterminated block comment", 1, 15),
        ('p(X) :- X = "a\\qb".', "unknown escape `\\q` in a string", 1, 15),
        ("p(X) :- X = 1 # 2.", "unexpected character `#`", 1, 15),
        ("p(_x).", "`_x` is not a valid name", 1, 3),
        (".type T = [a: number]", "expected a type name, found `[`", 1, 11),
        (".decl p(x: int)", "unknown type `int`", 1, 12),
        (".decl p(x number)", "expected `:` after attribute `x`, found `number`", 1, 11),
        (".input", "expected a relation name after `.input`, found end of file", 1, 7),
        (".input edge(IO=sqlite)", "unsupported .input option `IO=sqlite`", 1, 16),
        ("p(X) :- q(X, sum[Y]).", "aggregate `sum[...]` is not allowed in a rule body", 1, 14),
        (
            "p(X) :- X = 1 + count[*].",
            "aggregate `count[...]` is not allowed in a rule body",
            1,
            17,
        ),
        (
            "p(X, sum[Y] + 1) :- q(X, Y).",
            "aggregate `sum[...]` is not allowed inside an expression",
            1,
            6,
        ),
        (
            "p(X, sum[max[Y]]) :- q(X, Y).",
            "aggregate `max[...]` is not allowed inside an expression",
            1,
            10,
        ),
        ("p(X, sum[*]) :- q(X).", "`sum[*]` is not allowed: only `count` takes `*`", 1, 10),
        ("p(X) :- q(X), Y = log(X, 2).", "`log` takes 1 argument, found 2", 1, 19),
        ("p(X) :- q(X), Y = min(X).", "`min` takes 2 arguments, found 1", 1, 19),
        ("p(X) :- q(X), Y = foo(X).", "`foo` is not a built-in function", 1, 19),
        ("p(X) :- q(X), abs(X).", "`abs` is a built-in function and cannot name a relation", 1, 15),
        (
            "p(X) :- q(X), !exp(X).",
            "`exp` is a built-in function and cannot name a relation",
            1,
            16,
        ),
        ("relu(X) :- q(X).", "`relu` is a built-in function and cannot name a relation", 1, 1),
        (".decl max(x: number)", "`max` is a built-in function and cannot name a relation", 1, 7),
        ("p(X) :- !X = 1.", "expected an atom after `!`, found `X`", 1, 10),
        (
            "p(X) :- q(X) {sum[r] < 1}.",
            "expected `Δ` before the variable of the termination clause, found `r`",
            1,
            19,
        ),
        ("p(X) :- q(X) {total[Δr] < 1}.", "`total` is not an aggregate", 1, 15),
        (
            "p(X) :- q(X) {sum[Δr] < sum[r]}.",
            "aggregate `sum[...]` is not allowed in a termination clause",
            1,
            25,
        ),
        (
            "p(X) :- q(X) {sum[Δr] < 1.",
            "expected `}` to close the termination clause, found `.`",
            1,
            26,
        ),
        (
            "p(X) :- X = 9223372036854775808.",
            "integer literal `9223372036854775808` does not fit in a `number` (int64)",
            1,
            13,
        ),
        ("p(X) :- X = 1e999.", "float literal `1e999` is out of range", 1, 13),
        (
            ") p(1).",
            "expected a rule or a directive (`.decl`, `.input`, `.output`), found `)`",
            1,
            1,
        ),
    ],
)
def test_syntax_errors(source: str, message: str, line: int, col: int) -> None:
    found = errors(source)
    assert [d.message for d in found][:1] == [message]
    assert (found[0].span.file, found[0].span.line, found[0].span.col) == ("prog.dl", line, col)
    assert found[0].severity == "error"


def test_errors_carry_explaining_notes() -> None:
    (body_aggregate,) = errors("p(X) :- q(X, sum[Y]).")
    assert any("head" in note for note in body_aggregate.notes)
    (bad_type,) = errors(".decl p(x: string)")
    assert any("`number`" in n and "`float`" in n and "`symbol`" in n for n in bad_type.notes)
    assert "did you mean `symbol`?" in bad_type.notes


def test_caret_underlines_the_offending_token() -> None:
    (error,) = errors("p(X) :- edge(X, Y), abs(Y).")
    assert error.render("p(X) :- edge(X, Y), abs(Y).").splitlines()[1:4] == [
        " --> prog.dl:1:21",
        "  |",
        "1 | p(X) :- edge(X, Y), abs(Y).",
    ]
    assert (
        error.render("p(X) :- edge(X, Y), abs(Y).").splitlines()[4] == "  |                     ^^^"
    )


def test_several_errors_are_reported_at_once_in_source_order() -> None:
    source = """\
.decl edge(src: number, dst: int)
.decl p(x number)
.input edge
p(X) :- edge(X, Y.
q(X, sum[*]) :- edge(X, _)
r(X) :- edge(X, Y), Z = sum[Y].
good(X) :- edge(X, X).
bad(X) :- edge(X, Y), Y = "open
"""
    found = errors(source)
    assert [(d.span.line, d.message.split(",")[0]) for d in found] == [
        (1, "unknown type `int`"),
        (2, "expected `:` after attribute `x`"),
        (4, "expected `)` after the arguments of `edge`"),
        (5, "`sum[*]` is not allowed: only `count` takes `*`"),
        (5, "expected `.` at the end of the rule"),
        (6, "aggregate `sum[...]` is not allowed in a rule body"),
        (8, "unterminated string"),
    ]


def test_recovery_resumes_at_the_next_directive_and_the_next_rule() -> None:
    # One error per broken item; the items after them parse (otherwise more errors appear).
    source = ".decl a(x: number\n.decl b(x: number)\np(X) :- q(X, .\np(X) :- q(X).\n.output p"
    # The missing `)` is reported at the end of line 1, where it belongs.
    assert [(d.span.line, d.span.col) for d in errors(source)] == [(1, 18), (3, 14)]


def test_an_unterminated_string_ends_its_rule_for_recovery() -> None:
    source = 'p(X) :- q(X, "open).\np(X) :- q(X) r(X).\n'
    assert [(d.span.line, d.message.split(",")[0]) for d in errors(source)] == [
        (1, "unterminated string"),
        (2, "expected `"),
    ]


def test_a_broken_directive_is_skipped_to_the_end_of_its_line() -> None:
    source = ".decl a(x number)\np(X) :- q(X) r(X).\n.decl b(x: int)\n"
    assert [d.span.line for d in errors(source)] == [1, 2, 3]


def test_windows_line_endings_count_as_one_line_break() -> None:
    source = ".decl p(x: number)\r\np(X) :- q(X), r(X, .\r\n"
    (error,) = errors(source)
    assert (error.span.line, error.span.col) == (2, 20)
    assert parse(source.replace(", .", ", 1).")).rules[0].span.line == 2


def test_a_missing_closer_is_reported_at_the_end_of_its_line() -> None:
    (error,) = errors("p(X) :- q(X, Y\nr(X).\n")
    assert (error.span.line, error.span.col) == (1, 15)  # `q(X, Y` lacks its `)`
    assert error.message == "expected `)` after the arguments of `q`, found `r`"
    (error,) = errors("p(X) :-\n    , q(X).")
    assert (error.span.line, error.span.col) == (2, 5)  # an unexpected token: point at it
    (error,) = errors("p(X) :- X = (1 + 2\n\n")
    assert (error.span.line, error.span.col) == (1, 19)
