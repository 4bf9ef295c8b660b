"""The pretty-printer: canonical layout, and ``parse(pretty(p)) == p`` for hand-written
programs, the example corpus and random ASTs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixflow.checker.ast import (
    AGGREGATE_FUNCS,
    BUILTIN_FUNCS,
    CONSTRAINT_FUNCS,
    RESERVED_WORDS,
    TYPE_NAMES,
    Aggregate,
    Atom,
    Attribute,
    BinOp,
    Body,
    Call,
    Comparison,
    Constraint,
    Declaration,
    Expr,
    FloatLit,
    Head,
    InputDirective,
    Item,
    Neg,
    Negation,
    NumberLit,
    OutputDirective,
    Program,
    Rule,
    StringLit,
    Termination,
    Var,
    Wildcard,
)
from fixflow.checker.parser import parse
from fixflow.checker.printer import PRECEDENCE, format_float, pretty, quote

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_FILES = sorted(EXAMPLES_DIR.glob("*.dl"))

PAGERANK = """\
.decl edge(src: number, dst: number)
.decl node(id: number)
.decl degree(id: number, d: number)
.decl rank(i: number, id: number, r: float)
.input edge
.input node
.output rank
degree(X, count[Y]) :- edge(X, Y).
rank(0, X, r) :- node(X), r = 0.
rank(i+1, Y, sum[ry]) :- node(Y), ry = 0.15 ; rank(i, X, rx), edge(X, Y), degree(X, d),
    ry = 0.85*rx/d, {sum[Δry] < 0.001}.
"""

PAGERANK_CANONICAL = """\
.decl edge(src: number, dst: number)
.decl node(id: number)
.decl degree(id: number, d: number)
.decl rank(i: number, id: number, r: float)
.input edge
.input node
.output rank

degree(X, count[Y]) :- edge(X, Y).
rank(0, X, r) :- node(X), r = 0.
rank(i + 1, Y, sum[ry]) :-
    node(Y), ry = 0.15 ;
    rank(i, X, rx), edge(X, Y), degree(X, d), ry = 0.85 * rx / d
    {sum[Δry] < 0.001}.
"""

PROGRAMS = {
    "pagerank": PAGERANK,
    "sssp": """
        .decl edge(src: number, dst: number, w: float)
        .input edge
        .decl sssp(node: number, dist: float)
        .output sssp
        sssp(X, d) :- X = 1, d = 0.
        sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
    """,
    "katz_with_ascii_delta": """
        katz(Y, sum[k]) :- source(Y), k = 1.0
          ; katz(X, kx), edge(X, Y), k = 0.1 * kx ; {sum[delta k] <= 1e-9}.
    """,
    "negation_wildcards_strings": """
        .decl name(id: number, n: symbol)
        lonely(X) :- node(X), !edge(X, _), !edge(_, X).
        label(X, "a \\"quoted\\" \\\\ name\\n") :- name(X, "Δ"), X != -1.
        sure(1). sure(-2). sure("x").
    """,
    "expressions": """
        p(X, Y) :- q(X), Y = -(X - 1) * (2 - -X) / (X * (3 + X)) - -(4) - (5 - 6) + - -7.
        r(X, max[v]) :- q(X), v = relu(min(X, 2.5) - max(abs(X), exp(log(1e-3)))).
        s(X, mean[v]) :- q(X), v = 2. * X, min(X, 3) >= 0, 1e+300 > X.
        t(count[*]) :- q(_).
    """,
    "souffle_operators": """
        p(X, Y) :- q(X), Y = X % 3 + 2 ^ 3 ^ 2 * -2 ^ 2 - (-2) ^ 2, true, !false.
        b(X, Y) :- q(X), Y = bnot X band 0x1F bor 0b101 bxor 1 bshl 2 bshr 1 land lnot X lor 0.
        c(X, Y) :- q(X), Y = (X lor 1) land (X bor 2) band (X + 1), lnot (X + 1) = bnot -1.
        s(X, S) :- q(X), S = cat("a", to_string(X), substr("abc", 1, 2)), strlen(S) > 1.
        t(F, N) :- q(X), F = itof(X) + to_float("2.5"), N = ftoi(F) + to_number("-3").
        u(X) :- q(X), w(S), contains("ab", S), !match("a.*b", S), !contains("x", S).
    """,
    "souffle_body_aggregates": """
        p(X, C) :- q(X), C = count : { e(X, _), !f(X) }, min Y : e(X, Y) < 3.
        s(X, S, M) :- q(X), S = sum Y * 2 + 1 : { e(X, Y), Y > X }, M = mean Y : e(_, Y).
        t(N) :- N = 1 + (max Y : { e(_, Y), Y = count : e(Y, _) }).
    """,
}


def roundtrip(program: Program) -> None:
    text = pretty(program)
    assert parse(text) == program, text
    assert pretty(parse(text)) == text, "the canonical form is a fixpoint"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_hand_written_programs_round_trip(name: str) -> None:
    roundtrip(parse(PROGRAMS[name]))


def test_canonical_layout_of_pagerank() -> None:
    assert pretty(parse(PAGERANK)) == PAGERANK_CANONICAL


def test_pretty_prints_single_nodes() -> None:
    rule = parse(PAGERANK).rules[2]
    assert pretty(rule.head) == "rank(i + 1, Y, sum[ry])"
    assert pretty(rule.bodies[0]) == "node(Y), ry = 0.15"
    assert pretty(rule.termination) == "{sum[Δry] < 0.001}"
    assert pretty(rule.bodies[1].literals[3]) == "ry = 0.85 * rx / d"
    assert pretty(Negation(Atom("e", (Var("X"), Wildcard())))) == "!e(X, _)"
    assert pretty(Declaration("e", (Attribute("a", "symbol"),))) == ".decl e(a: symbol)"
    assert pretty(Aggregate("count", None)) == "count[*]"
    assert pretty(InputDirective("e")) == ".input e"
    assert pretty(OutputDirective("e")) == ".output e"


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (BinOp("-", Var("a"), BinOp("-", Var("b"), Var("c"))), "a - (b - c)"),
        (BinOp("-", BinOp("-", Var("a"), Var("b")), Var("c")), "a - b - c"),
        (BinOp("*", BinOp("+", Var("a"), Var("b")), Var("c")), "(a + b) * c"),
        (BinOp("+", Var("a"), BinOp("*", Var("b"), Var("c"))), "a + b * c"),
        (BinOp("/", Var("a"), BinOp("*", Var("b"), Var("c"))), "a / (b * c)"),
        (Neg(BinOp("+", Var("a"), Var("b"))), "-(a + b)"),
        (Neg(NumberLit(5)), "-(5)"),
        (Neg(NumberLit(-5)), "- -5"),
        (Neg(Neg(Var("x"))), "- -x"),
        (BinOp("-", Var("x"), NumberLit(-1)), "x - -1"),
        (BinOp("*", NumberLit(-2), Var("x")), "-2 * x"),
        (Call("min", (Var("a"), FloatLit(2.0))), "min(a, 2.0)"),
        (BinOp("^", Var("a"), BinOp("^", Var("b"), Var("c"))), "a ^ b ^ c"),
        (BinOp("^", BinOp("^", Var("a"), Var("b")), Var("c")), "(a ^ b) ^ c"),
        (Neg(BinOp("^", NumberLit(2), NumberLit(2))), "-2 ^ 2"),
        (BinOp("^", NumberLit(-2), NumberLit(2)), "(-2) ^ 2"),
        (BinOp("^", Var("a"), Neg(Var("b"))), "a ^ -b"),
        (BinOp("%", BinOp("*", Var("a"), Var("b")), Var("c")), "a * b % c"),
        (BinOp("*", Var("a"), BinOp("%", Var("b"), Var("c"))), "a * (b % c)"),
        (BinOp("band", BinOp("+", Var("a"), Var("b")), Var("c")), "a + b band c"),
        (BinOp("+", Var("a"), BinOp("band", Var("b"), Var("c"))), "a + (b band c)"),
        (BinOp("land", BinOp("lor", Var("a"), Var("b")), Var("c")), "(a lor b) land c"),
        (Call("bnot", (BinOp("+", Var("a"), Var("b")),)), "bnot (a + b)"),
        (BinOp("^", Call("lnot", (Var("a"),)), Var("b")), "(lnot a) ^ b"),
        (Call("cat", (Var("a"), Var("b"), Var("c"))), "cat(a, b, c)"),
    ],
)
def test_parentheses_only_where_needed(expr: Expr, text: str) -> None:
    assert pretty(expr) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1.0"),
        (0.15, "0.15"),
        (1e-05, "1e-05"),
        (1e16, "1e+16"),
        (-2.5, "-2.5"),
    ],
)
def test_floats_always_print_as_floats(value: float, text: str) -> None:
    assert format_float(value) == text


def test_non_finite_floats_cannot_be_printed() -> None:
    with pytest.raises(ValueError, match="finite"):
        format_float(float("inf"))


def test_strings_are_re_escaped() -> None:
    assert quote('a"b\\c\nd\te\u2028') == '"a\\"b\\\\c\\nd\\te\\u2028"'


# ---------------------------------------------------------------- the example corpus


def test_the_example_corpus_exists() -> None:
    assert EXAMPLE_FILES, f"no .dl programs in {EXAMPLES_DIR}"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.name for p in EXAMPLE_FILES])
def test_examples_parse_and_round_trip(path: Path) -> None:
    program = parse(path.read_text(), str(path))
    assert program.items, f"{path.name} is empty"
    roundtrip(program)


# ---------------------------------------------------------------- random ASTs

names = st.from_regex(r"[A-Za-z][A-Za-z0-9_']{0,6}", fullmatch=True).filter(
    lambda n: n not in RESERVED_WORDS and n not in CONSTRAINT_FUNCS
)
relations = names.filter(lambda n: n not in BUILTIN_FUNCS)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
floats = st.floats(allow_nan=False, allow_infinity=False)
compare_ops = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])

leaves: st.SearchStrategy[Expr] = st.one_of(
    st.builds(Var, names),
    st.just(Wildcard()),
    st.builds(NumberLit, int64),
    st.builds(FloatLit, floats),
    st.builds(StringLit, st.text(max_size=8)),
)


def _compound(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    calls = st.sampled_from(sorted(BUILTIN_FUNCS)).flatmap(
        lambda f: st.builds(Call, st.just(f), st.tuples(*[children] * abs(BUILTIN_FUNCS[f])))
    )
    return st.one_of(
        st.builds(BinOp, st.sampled_from(sorted(PRECEDENCE)), children, children),
        st.builds(Neg, children),
        st.builds(Call, st.sampled_from(["bnot", "lnot"]), st.tuples(children)),
        calls,
    )


exprs = st.recursive(leaves, _compound, max_leaves=8)
aggregates = st.one_of(
    st.builds(Aggregate, st.sampled_from(AGGREGATE_FUNCS), exprs),
    st.just(Aggregate("count", None)),
)
atoms = st.builds(Atom, relations, st.lists(exprs, max_size=3).map(tuple))
literals = st.one_of(
    atoms,
    st.builds(Negation, atoms),
    st.builds(Comparison, compare_ops, exprs, exprs),
    st.builds(Constraint, st.sampled_from(["true", "false"]), st.just(()), st.booleans()),
    st.builds(
        Constraint, st.sampled_from(["contains", "match"]), st.tuples(exprs, exprs), st.booleans()
    ),
)
bodies = st.builds(Body, st.lists(literals, min_size=1, max_size=4).map(tuple))
heads = st.builds(Head, relations, st.lists(st.one_of(exprs, aggregates), max_size=4).map(tuple))
terminations = st.builds(Termination, st.sampled_from(AGGREGATE_FUNCS), names, compare_ops, exprs)
rules = st.one_of(
    st.builds(
        Rule, heads, st.lists(bodies, min_size=1, max_size=3).map(tuple), st.none() | terminations
    ),
    st.builds(Rule, heads, st.just((Body(()),))),  # facts
)
declarations = st.builds(
    Declaration,
    relations,
    st.lists(st.builds(Attribute, names, st.sampled_from(TYPE_NAMES)), max_size=4).map(tuple),
)
items: st.SearchStrategy[Item] = st.one_of(
    rules, declarations, st.builds(InputDirective, relations), st.builds(OutputDirective, relations)
)
programs = st.builds(Program, st.lists(items, max_size=6).map(tuple))


@settings(max_examples=300, deadline=None)
@given(programs)
def test_random_programs_round_trip(program: Program) -> None:
    roundtrip(program)


@settings(max_examples=300, deadline=None)
@given(exprs)
def test_random_expressions_round_trip(expr: Expr) -> None:
    program = Program((Rule(Head("p", (Var("X"),)), (Body((Comparison("=", Var("X"), expr),)),)),))
    roundtrip(program)


def test_a_long_single_body_rule_is_split_over_lines() -> None:
    atoms = ", ".join(f"edge{i}(X, Y)" for i in range(10))
    text = pretty(parse(f"p(X, sum[Y]) :- {atoms} {{sum[ΔY] < 1}}.").rules[0])
    assert text == f"p(X, sum[Y]) :-\n    {atoms}\n    {{sum[ΔY] < 1}}."
    assert pretty(parse("p(X) :- q(X).").rules[0]) == "p(X) :- q(X)."
