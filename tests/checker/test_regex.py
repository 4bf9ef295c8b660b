"""``match`` patterns: C++ ECMAScript (libstdc++'s std::regex, as Soufflé uses it) read into
Java's syntax, and the patterns std::regex rejects (Soufflé: a warning, match and !match
false). The Java side is exercised on Spark in tests/operators/test_souffle_strings.py."""

from __future__ import annotations

import pytest

from fixflow.checker import diagnose
from fixflow.checker.regex import InvalidRegex, UntranslatableRegex, java_regex


@pytest.mark.parametrize(
    ("pattern", "java"),
    [
        ("a.*c", r"a[^\n\r]*c"),  # `.` is anything but \n and \r
        ("T_[[:digit:]]+#NOT", r"T\x{5f}[\p{Digit}]+\x{23}NOT"),
        ("[[:alpha:][:space:]_]", r"[\p{Alpha}\s\x{5f}]"),
        ("[^[:upper:]]", r"[^\p{Upper}]"),
        ("a$", r"a\z"),  # Java's `$` also matches before a final line break
        ("a*+", "(?:a*)+"),  # repeated repetition in C++, possessive in Java
        ("a+?b??", "a+?b??"),  # non-greedy, the same in both
        ("x{2,}{3}", "(?:x{2,}){3}"),
        ("[]", "(?!)"),  # ECMAScript: the empty class matches nothing ...
        ("[^]", r"[\s\S]"),  # ... and its complement everything
        ("[a[b]", r"[a\x{5b}b]"),  # `[` is literal in a C++ class, nests in Java
        ("[a&&b]", r"[a\x{26}\x{26}b]"),  # `&&` intersects in Java
        ("[a-]", r"[a\x{2d}]"),
        ("[--0]", r"[\x{2d}-0]"),
        (r"\v\0", r"\x{b}\x{0}"),  # Java's \v is a class; \0 alone is an error there
        (r"\d\s\w\D", r"\d\s\w\D"),
        (r"\pL\Q", "pLQ"),  # libstdc++ reads an unknown escape as the character itself
        (r"\cA", "A"),  # libstdc++ reads `\cX` as X
        (r"\x41\u0042", "AB"),
        (r"(a)\1", r"(a)(?:\1)"),
        (r"\bx\B", r"(?:(?<=\w)(?!\w)|(?<!\w)(?=\w))x(?!(?:(?<=\w)(?!\w)|(?<!\w)(?=\w)))"),
        ("(?:a|b)(?=c)(?!d)", "(?:a|b)(?=c)(?!d)"),
        ("a]b}", r"a\x{5d}b\x{7d}"),
        ("é", r"\x{e9}"),
    ],
)
def test_ecmascript_patterns_in_java(pattern: str, java: str) -> None:
    assert java_regex(pattern) == java


@pytest.mark.parametrize(
    ("pattern", "message", "offset"),
    [
        ("a(", "unclosed `(`", 1),
        ("a)", "unmatched `)`", 1),
        ("[ab", "unclosed `[`", 0),
        ("*a", "nothing to repeat before `*`", 0),
        ("a|+", "nothing to repeat before `+`", 2),
        ("^*", "nothing to repeat: an assertion cannot be quantified", 1),
        ("(?=a)?", "nothing to repeat: an assertion cannot be quantified", 5),
        ("(?<=a)b", "`(?<` is not ECMAScript", 0),  # lookbehind
        ("(?>a)", "`(?>` is not ECMAScript", 0),  # atomic group (Java only)
        ("(?i)a", "`(?i` is not ECMAScript", 0),
        ("a{2,1}", "counts down", 1),
        ("a{x}", "`{` must start a repetition count", 2),
        ("a{2", "unclosed repetition count", 1),
        ("a{100001}", "repetition count over 100000", 1),
        ("[z-a]", "range `z-a` is out of order", 2),
        (r"[\d-z]", "a range cannot start at a class", 3),
        (r"[a-\d]", "a range must end at a character", 2),
        ("[[:word:]]", "unknown character class `[:word:]`", 1),
        (r"\p{L}", "`{` must start a repetition count", 3),  # `p` then a bad `{`
        ("a\\", "`\\` at the end of the pattern", 1),
        (r"\x4", "`\\x` needs 2 hexadecimal digits", 0),
        (r"(a\1)", "backreference `\\1` to no complete group", 2),
        (r"\2(a)", "backreference `\\2` to no complete group", 0),
    ],
)
def test_patterns_std_regex_rejects(pattern: str, message: str, offset: int) -> None:
    with pytest.raises(InvalidRegex) as caught:
        java_regex(pattern)
    assert message in caught.value.message and caught.value.offset == offset


def test_multi_character_collating_elements_are_refused() -> None:
    assert java_regex("[[.a.]-c]") == "[a-c]"
    assert java_regex("[[=e=]]") == "[e]"
    with pytest.raises(UntranslatableRegex, match=r"\[\.space\.\]"):
        java_regex("[[.space.]]")


PROGRAM = """.decl s(x: symbol)
.input s
.decl m(x: symbol)
m(x) :- s(x), match({pattern}, x).
"""


def test_an_invalid_literal_pattern_is_a_warning_where_it_is_written() -> None:
    diagnostics = diagnose(PROGRAM.format(pattern='"a("'), "p.dl")
    (warning,) = diagnostics
    assert warning.severity == "warning" and (warning.span.line, warning.span.col) == (4, 21)
    assert warning.message == (
        "wrong pattern provided to `match`: unclosed `(` (character 2 of the pattern)"
    )
    assert "`match` and `!match` are both false" in warning.notes[0]


def test_an_untranslatable_literal_pattern_is_an_error() -> None:
    (error,) = diagnose(PROGRAM.format(pattern='"[[.space.]]"'), "p.dl")
    assert error.severity == "error" and error.message.startswith("unsupported pattern")


def test_a_computed_pattern_is_not_checked() -> None:
    assert diagnose(PROGRAM.format(pattern='cat("a", "(")'), "p.dl") == []
