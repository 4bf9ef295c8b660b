"""Soufflé's ``to_number``, ``to_float`` and ``match`` on Spark, value by value, against
what Soufflé computes (its source: RamSignedFromString with base 0 and std::stoll,
std::stod, libstdc++'s ECMAScript std::regex with regex_match). Where Soufflé stops the
program ("wrong string provided by to_number"), Fixflow's rule does not fire (None below).
The reference evaluator's independent implementation must agree."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from reference.evaluator import NoValue, _convert, _python_regex

from .helpers import run

INT64_MAX = 2**63 - 1

TO_NUMBER: dict[str, int | None] = {
    "0xcafe": 51966,
    "0b100": 4,
    "12": 12,
    "010": 10,  # base 10 unless 0x/0b: no octal
    "-0x10": -16,
    "-0b101": -5,
    "0x": 0,  # strtoll reads the "0" before the x
    "-0x": 0,
    "0xg": 0,
    "0XCAFE": 0,  # the prefixes are lower case: decimal "0", then stop
    "0B101": 0,
    "  42": 42,  # C's spaces, then a sign
    "\t-7": -7,
    "+5": 5,
    "12abc": 12,  # reading stops at the first other character
    "1.5": 1,
    "1e3": 1,
    " 0x10": 0,  # a space first: decimal
    "0b 11": 3,  # after 0b, strtoll skips spaces and reads a sign
    "0b-11": -3,
    "0b": None,
    "0b2": None,
    "-0b-1": None,
    "-0b 1": None,
    "abc": None,
    "": None,
    "-": None,
    "9223372036854775807": INT64_MAX,
    "9223372036854775808": None,  # out of range: Soufflé stops
    "-9223372036854775808": -(2**63),
    "0x7fffffffffffffff": INT64_MAX,
    "0x8000000000000000": None,
    "-0x8000000000000000": -(2**63),
    "0x1ffffffffffffffff": None,
    "0x000000000000000000000001": 1,
    "0b" + "1" * 63: INT64_MAX,
    "0b1" + "0" * 63: None,
}

TO_FLOAT: dict[str, float | None] = {
    "1.5": 1.5,
    " 1.5x": 1.5,
    "1e": 1.0,  # an incomplete exponent is not read
    ".5": 0.5,
    "5.": 5.0,
    "-2.5e1abc": -25.0,
    "+3": 3.0,
    "inf": None,  # Fixflow floats are finite
    "nan": None,
    "1e400": None,
    "0x1p3": None,  # strtod's hexadecimal floats are not read (Soufflé: 8.0)
    "abc": None,
    "": None,
}


def _conversions(spark: SparkSession, func: str, type_: str, cases: dict) -> dict:
    program = (
        f".decl s(x: symbol)\n.input s\n.decl v(x: symbol, v: {type_})\n"
        f"v(x, y) :- s(x), y = {func}(x).\n"
    )
    rows, _ = run(spark, program, {"s": [(text,) for text in cases]})
    return dict(rows["v"])


def _reference(func: str, text: str) -> object:
    try:
        return _convert(func, text)
    except NoValue:
        return None


def test_to_number_reads_symbols_as_souffle(spark: SparkSession) -> None:
    found = _conversions(spark, "to_number", "number", TO_NUMBER)
    assert {text: found.get(text) for text in TO_NUMBER} == TO_NUMBER
    assert {text: _reference("to_number", text) for text in TO_NUMBER} == TO_NUMBER


def test_to_float_reads_symbols_as_souffle(spark: SparkSession) -> None:
    found = _conversions(spark, "to_float", "float", TO_FLOAT)
    assert {text: found.get(text) for text in TO_FLOAT} == TO_FLOAT
    assert {text: _reference("to_float", text) for text in TO_FLOAT} == TO_FLOAT


STRINGS = ["T_12#NOT", "T_a#NOT", "a\n", "aaa", "A1", "x y", "[", "a", "&", "-", "ab"]

MATCHES: list[tuple[str, set[str] | None]] = [
    ("T_[[:digit:]]+#NOT", {"T_12#NOT"}),
    ("a$\\n", set()),  # `$` is the very end: Java's would match before the \n
    ("a*+a", {"a", "aaa"}),  # (a*)+a; possessive in Java, matching nothing
    ("[a[b]", {"a", "["}),
    ("[[:alpha:]][[:digit:]]", {"A1"}),
    ("x\\\\sy", {"x y"}),
    ("[^]", {"[", "a", "&", "-"}),
    ("[]a", set()),
    ("[a&&b]", {"a", "&"}),  # Java: the intersection of a and b, empty
    ("[[:punct:]]", {"[", "&", "-"}),
    ("a(", None),  # std::regex rejects: match and !match both false
    ("(?<=a)b", None),
]


def _match_program(patterns: list[str]) -> str:
    lines = [".decl s(x: symbol)", ".input s", ".decl m(i: number, x: symbol)"]
    lines.append(".decl nm(i: number, x: symbol)")
    for i, pattern in enumerate(patterns):
        quoted = '"' + pattern.replace('"', '\\"') + '"'
        lines.append(f"m({i}, x) :- s(x), match({quoted}, x).")
        lines.append(f"nm({i}, x) :- s(x), !match({quoted}, x).")
    return "\n".join(lines) + "\n"


def test_literal_patterns_match_as_in_souffle(spark: SparkSession) -> None:
    rows, _ = run(spark, _match_program([p for p, _ in MATCHES]), {"s": [(s,) for s in STRINGS]})
    for i, (pattern, expected) in enumerate(MATCHES):
        matched = {x for j, x in rows["m"] if j == i}
        unmatched = {x for j, x in rows["nm"] if j == i}
        if expected is None:
            assert matched == unmatched == set(), pattern
        else:
            assert (matched, unmatched) == (expected, set(STRINGS) - expected), pattern


def test_computed_patterns_are_java_and_an_invalid_one_is_false(spark: SparkSession) -> None:
    program = (
        ".decl s(x: symbol)\n.input s\n.decl p(r: symbol)\n.input p\n"
        ".decl m(r: symbol, x: symbol)\n.decl nm(r: symbol, x: symbol)\n"
        "m(r, x) :- p(r), s(x), match(r, x).\nnm(r, x) :- p(r), s(x), !match(r, x).\n"
    )
    facts = {"s": [("ab",), ("b",)], "p": [("a.",), ("a(",)]}
    rows, _ = run(spark, program, facts)
    assert rows["m"] == {("a.", "ab")}  # the whole string, as regex_match
    assert rows["nm"] == {("a.", "b")}  # `a(` fails the job in neither direction


@pytest.mark.parametrize("pattern", ["a(", "(?<=a)b"])
def test_reference_evaluator_rejects_what_std_regex_rejects(pattern: str) -> None:
    assert _python_regex(pattern) is None
