"""Soufflé's declaration-level syntax: ``.type``, ``unsigned``, I/O options, several
relations per directive, ``.printsize`` and ``.pragma`` (parser, printer, analysis)."""

from __future__ import annotations

import pytest

from fixflow.checker import diagnose, load
from fixflow.checker.ast import (
    Attribute,
    Declaration,
    InputDirective,
    OutputDirective,
    Pragma,
    PrintSizeDirective,
    TypeDeclaration,
)
from fixflow.checker.diagnostics import CheckError
from fixflow.checker.parser import parse
from fixflow.checker.printer import pretty

TYPED = """\
.decl edge(a: Id, b: Key, n: Name, c: unsigned)
.type Id <: number
.type Name <: symbol
.type Key = Id | Count
.type Count = unsigned
.input edge
"""


def errors(source: str) -> list[tuple[str, int, int]]:
    with pytest.raises(CheckError) as caught:
        parse(source, "t.dl")
    return [(d.message, d.span.line, d.span.col) for d in caught.value.diagnostics]


# ---------------------------------------------------------------- types


def test_types_resolve_to_their_base_type_even_when_declared_later() -> None:
    program = parse(TYPED)
    assert program.items[1:5] == (
        TypeDeclaration("Id", "<:", ("number",)),
        TypeDeclaration("Name", "<:", ("symbol",)),
        TypeDeclaration("Key", "=", ("Id", "Count")),
        TypeDeclaration("Count", "=", ("unsigned",)),
    )
    edge = program.declaration("edge")
    assert edge == Declaration(
        "edge",
        (
            Attribute("a", "number", declared="Id"),
            Attribute("b", "number", declared="Key"),
            Attribute("n", "symbol", declared="Name"),
            Attribute("c", "number", declared="unsigned"),
        ),
    )


def test_checked_program_sees_base_types_only() -> None:
    source = TYPED + ".decl p(x: Name)\n.output p\np(N) :- edge(_, _, N, _).\n"
    report = load(source, "t.dl")
    assert report.catalog["edge"].types == ("number", "number", "symbol", "number")
    assert report.catalog["p"].types == ("symbol",)


def test_subtypes_are_structural_so_different_symbol_subtypes_compare() -> None:
    source = (
        ".type A <: symbol\n.type B <: symbol\n.decl a(x: A)\n.decl b(x: B)\n.decl c(x: A)\n"
        ".input a, b\n.output c\nc(X) :- a(X), b(Y), X = Y.\n"
    )
    assert [d for d in diagnose(source, "t.dl") if d.severity == "error"] == []


def test_a_symbol_subtype_still_cannot_meet_a_number() -> None:
    source = (
        ".type A <: symbol\n.decl a(x: A)\n.decl c(x: number)\n.input a\n.output c\nc(X) :- a(X).\n"
    )
    messages = [d.message for d in diagnose(source, "t.dl") if d.severity == "error"]
    assert any("type mismatch" in m for m in messages), messages


@pytest.mark.parametrize(
    ("source", "message", "line", "col"),
    [
        (".decl p(x: Nope)", "unknown type `Nope`", 1, 12),
        (".decl p(a: number,\n  x: int)", "unknown type `int`", 2, 6),
        (".type U = number | Missing", "unknown type `Missing`", 1, 20),
        (
            ".type U = number | symbol",
            "union type `U` mixes `number` (number) and `symbol` (symbol)",
            1,
            1,
        ),
        (".type A = B\n.type B = A", "type `A` is defined in terms of itself", 1, 1),
        (".type number <: symbol", "`number` is a built-in type", 1, 1),
        (".type T <: number\n.type T <: symbol", "type `T` is declared twice", 2, 1),
        (".type T", "expected `<:` or `=` after `.type T`, found end of file", 1, 8),
        (".type T < : number", "expected `<:` or `=` after `.type T`, found `<`", 1, 9),
        (
            ".type T = A {x: number}",
            "expected a rule or a directive (`.decl`, `.input`, `.output`), found `{`",
            1,
            13,
        ),
    ],
)
def test_type_errors(source: str, message: str, line: int, col: int) -> None:
    assert (message, line, col) in errors(source)


def test_unsigned_is_no_longer_an_unknown_type() -> None:
    assert parse(".decl p(x: unsigned)").declaration("p") == Declaration(
        "p", (Attribute("x", "number", declared="unsigned"),)
    )


# ---------------------------------------------------------------- I/O directives


def test_io_options_and_several_relations_per_directive() -> None:
    program = parse(
        ".decl a(x: number)\n.decl b(x: number)\n"
        '.input a, b(IO=file, filename="in/x.csv", delimiter=",")\n'
        ".output a(IO=stdout)\n.printsize a, b\n"
    )
    options = (("IO", "file"), ("filename", "in/x.csv"), ("delimiter", ","))
    assert program.items[2:] == (
        InputDirective("a", options=options),
        InputDirective("b", options=options),
        OutputDirective("a", options=(("IO", "stdout"),)),
        PrintSizeDirective("a"),
        PrintSizeDirective("b"),
    )
    assert program.inputs == ("a", "b")
    assert program.input_directives("b") == (
        {"IO": "file", "filename": "in/x.csv", "delimiter": ","},
    )
    assert program.output_directives("b") == ()
    assert program.printsizes == ("a", "b")


def test_every_directive_of_a_relation_keeps_its_own_options() -> None:
    """Soufflé writes each `.output` (and loads each `.input`) of a relation: the options
    of two directives are not merged, and the relation is listed once."""
    program = parse(
        '.decl a(x: number)\n.input a\n.input a(filename="b.tsv")\n'
        '.output a(IO=file, filename="AA.csv")\n.output a(IO=file, filename="BB.csv")\n'
        ".output a(IO=stdout)\n"
    )
    assert program.inputs == ("a",) and program.outputs == ("a",)
    assert program.input_directives("a") == ({}, {"filename": "b.tsv"})
    assert program.output_directives("a") == (
        {"IO": "file", "filename": "AA.csv"},
        {"IO": "file", "filename": "BB.csv"},
        {"IO": "stdout"},
    )


def test_printsize_twice_is_an_error_as_in_souffle() -> None:
    source = ".decl a(x: number)\na(1).\n.printsize a\n.printsize a\n"
    errors = [d for d in diagnose(source, "p.dl") if d.severity == "error"]
    assert [(e.message, e.span.line, e.span.col) for e in errors] == [
        ("`.printsize a` is given twice", 4, 1)
    ]
    assert errors[0].notes[0].startswith("first given at p.dl:3:1;")


@pytest.mark.parametrize(
    ("source", "message", "line", "col"),
    [
        ('.input e(file="x")', "unknown .input option `file`", 1, 10),
        (".input e(IO=sqlite)", "unsupported .input option `IO=sqlite`", 1, 13),
        (".input e(IO=stdout)", "unsupported .input option `IO=stdout`", 1, 13),
        (".output e(IO=json)", "unsupported .output option `IO=json`", 1, 14),
        (".output e(headers=true)", "unknown .output option `headers`", 1, 11),
        ('.input e(delimiter=",", delimiter=";")', "option `delimiter` is given twice", 1, 25),
        ('.input e(filename="")', "`filename` must not be empty", 1, 19),
        (
            '.output e(IO=stdout, filename="x")',
            "`filename` cannot be combined with `IO=stdout`",
            1,
            22,
        ),
        (".input e(IO)", "expected `=` after `IO`, found `)`", 1, 12),
        (".input e(IO=)", "expected a value for `IO`, found `)`", 1, 13),
        (".input e(IO=file", "expected `,` or `)` after an option, found end of file", 1, 17),
        (".input e, ", "expected a relation name after `,`, found end of file", 1, 10),
        (".printsize e(IO=file)", "expected a new line after `.printsize e`, found `(`", 1, 13),
        (".printsise e", "unknown directive `.printsise`", 1, 1),
    ],
)
def test_directive_errors(source: str, message: str, line: int, col: int) -> None:
    assert (message, line, col) in errors(source)


def test_undeclared_printsize_relation() -> None:
    messages = [(d.message, d.span.line) for d in diagnose(".printsize q\n", "t.dl")]
    assert ("undeclared printsize relation `q`", 1) in messages


# ---------------------------------------------------------------- pragmas


def test_harmless_pragmas_are_accepted() -> None:
    program = parse(
        '.pragma "jobs" "4"\n.pragma "magic-transform" "*"\n.pragma "magic-transform-exclude"\n'
    )
    assert program.items == (
        Pragma("jobs", "4"),
        Pragma("magic-transform", "*"),
        Pragma("magic-transform-exclude", ""),
    )


def test_a_harmless_pragma_warns_that_it_has_no_effect() -> None:
    source = '.pragma "jobs" "4"\n.decl e(x: number)\n.input e\n'
    warnings = [d for d in diagnose(source, "t.dl") if d.severity == "warning"]
    assert [(d.message, d.span.line) for d in warnings] == [
        ('`.pragma "jobs"` has no effect in Fixflow', 1)
    ]


@pytest.mark.parametrize(
    ("source", "message", "col"),
    [
        ('.pragma "fact-dir" "in"', "unsupported pragma `fact-dir`", 9),
        ('.pragma "legacy"', "unsupported pragma `legacy`", 9),
        (
            ".pragma jobs",
            'expected a string after `.pragma`, e.g. `.pragma "jobs" "4"`, found `jobs`',
            9,
        ),
    ],
)
def test_other_pragmas_are_rejected(source: str, message: str, col: int) -> None:
    assert (message, 1, col) in errors(source)


# ---------------------------------------------------------------- printing


ROUND_TRIP = """\
.type Id <: number
.type Name <: symbol
.type Key = Id | Count
.type Count = unsigned
.decl edge(a: Id, b: Key, n: Name, c: unsigned)
.input edge(IO=file, filename="dir/edges 1.csv", delimiter="\\t")
.decl p(a: Id)
.output p(IO=stdout, delimiter=";")
.output p(IO=file, filename=p, delimiter="|")
.printsize p
.printsize edge
.pragma "jobs" "4"
.pragma "magic-transform"

p(X) :- edge(X, _, _, _).
"""


def test_print_is_canonical_and_reads_back() -> None:
    program = parse(ROUND_TRIP)
    text = pretty(program)
    assert text == ROUND_TRIP
    assert parse(text) == program


def test_several_relations_print_as_one_directive_each() -> None:
    program = parse('.decl a(x: number)\n.decl b(x: number)\n.input a, b(delimiter=",")\n')
    text = pretty(program)
    assert '.input a(delimiter=",")\n.input b(delimiter=",")\n' in text
    assert parse(text) == program


def test_the_declared_type_name_prints_not_the_base() -> None:
    assert pretty(Attribute("x", "number", declared="unsigned")) == "x: unsigned"
    assert pretty(Attribute("x", "symbol")) == "x: symbol"
    assert pretty(TypeDeclaration("U", "=", ("A", "B"))) == ".type U = A | B"
    assert pretty(OutputDirective("r", options=(("IO", "file"), ("delimiter", ",")))) == (
        '.output r(IO=file, delimiter=",")'
    )
    assert pretty(Pragma("jobs", "4")) == '.pragma "jobs" "4"'
