"""Soufflé's ``match`` patterns in Java's regex syntax (Spark's ``regexp_like``).

Soufflé matches with C++ ``std::regex`` in its ECMAScript grammar (libstdc++, the library
Soufflé is built with on Linux) and ``regex_match`` (the whole string). Java reads many
patterns differently: ``[[:digit:]]`` is a POSIX class in C++ but a set of the characters
``[:digt`` in Java, ``$`` may match before a final line break in Java, ``a*+`` is
possessive in Java but ``(a*)+`` in C++, ``\\v`` is one character in C++ and a class in
Java, ``[a[b]`` is a union in Java. ``java_regex`` parses a pattern with libstdc++'s
grammar and writes the Java pattern that matches the same strings (ASCII text: C++ reads
UTF-8 bytes where Java reads characters).

A pattern ``std::regex`` rejects raises ``InvalidRegex``: Soufflé then warns "wrong
pattern provided" and both ``match`` and ``!match`` are false. A pattern C++ accepts but
that has no exact Java equivalent here raises ``UntranslatableRegex``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class RegexError(Exception):
    """A pattern that cannot be used as written; ``offset`` is where, 0-based."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message, self.offset = message, offset


class InvalidRegex(RegexError):
    """``std::regex`` rejects the pattern (Soufflé: a warning; match and !match false)."""


class UntranslatableRegex(RegexError):
    """A valid ECMAScript pattern that Fixflow cannot translate exactly."""


POSIX_CLASSES: dict[str, str] = {
    "alnum": r"\p{Alnum}",
    "alpha": r"\p{Alpha}",
    "blank": r"\p{Blank}",
    "cntrl": r"\p{Cntrl}",
    "digit": r"\p{Digit}",
    "d": r"\p{Digit}",
    "graph": r"\p{Graph}",
    "lower": r"\p{Lower}",
    "print": r"\p{Print}",
    "punct": r"\p{Punct}",
    "space": r"\s",
    "s": r"\s",
    "upper": r"\p{Upper}",
    "xdigit": r"\p{XDigit}",
    "w": r"\w",
}
"""libstdc++'s class names (``[[:digit:]]``) as Java's ASCII classes, which are the "C"
locale's: Java's ``\\s`` is C's ``isspace``, ``\\p{Punct}`` its ``ispunct``."""

CHAR_ESCAPES = {"0": "\0", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
"""ECMAScript's character escapes (``\\b`` is also one, backspace, inside brackets)."""
CLASS_ESCAPES = "dDsSwW"
WORD_BOUNDARY = r"(?:(?<=\w)(?!\w)|(?<!\w)(?=\w))"
"""``\\b`` with ``\\w``'s ASCII word characters, as libstdc++ decides (Java's own ``\\b``
used Unicode letters before Java 19)."""
MAX_REPEAT = 100_000
"""libstdc++ builds one automaton state per repetition at least and gives up at 100,000
states (``_GLIBCXX_REGEX_STATE_LIMIT``): a larger count is an invalid pattern there (and
Java would reject one past 2**31)."""
ANY_CHAR = r"[^\n\r]"
"""ECMAScript's ``.``: anything but a line feed or carriage return."""


def java_regex(pattern: str) -> str:
    """The Java regex matching exactly the strings ``pattern`` matches as a C++ ECMAScript
    ``std::regex`` (not anchored: the caller anchors both ends for ``regex_match``)."""
    parser = _Parser(pattern)
    body = parser.disjunction()
    if parser.pos < len(pattern):  # only a `)` stops a disjunction
        raise InvalidRegex("unmatched `)`", parser.pos)
    return body


def _literal(char: str) -> str:
    """One character as Java reads it literally, inside or outside brackets."""
    if char.isascii() and char.isalnum():
        return char
    return f"\\x{{{ord(char):x}}}"


@dataclass
class _Bracket:
    """A bracket expression's Java items and the character that may start a range."""

    items: list[str] = field(default_factory=list)
    pending: str | None = None
    after_class: bool = False

    def char(self, char: str) -> None:
        self.flush()
        self.pending, self.after_class = char, False

    def klass(self, java: str) -> None:
        self.flush()
        self.items.append(java)
        self.after_class = True

    def flush(self) -> None:
        if self.pending is not None:
            self.items.append(_literal(self.pending))
            self.pending = None


@dataclass
class _Parser:
    """libstdc++'s ECMAScript grammar (regex_scanner.tcc, regex_compiler.tcc), writing
    Java as it goes."""

    text: str
    pos: int = 0
    groups: int = 0
    open_groups: list[int] = field(default_factory=list)

    def peek(self, ahead: int = 0) -> str:
        index = self.pos + ahead
        return self.text[index] if index < len(self.text) else ""

    def invalid(self, message: str, at: int | None = None) -> InvalidRegex:
        return InvalidRegex(message, self.pos if at is None else at)

    # ------------------------------------------------------------ structure

    def disjunction(self) -> str:
        parts = [self.alternative()]
        while self.peek() == "|":
            self.pos += 1
            parts.append(self.alternative())
        return "|".join(parts)

    def alternative(self) -> str:
        terms = []
        while self.peek() not in ("", "|", ")"):
            terms.append(self.term())
        return "".join(terms)

    def term(self) -> str:
        assertion = self.assertion()
        if assertion is not None:
            if self.peek() in ("*", "+", "?", "{"):
                raise self.invalid("nothing to repeat: an assertion cannot be quantified")
            return assertion
        atom = self.atom()
        quantified = False
        while (quantifier := self.quantifier()) is not None:
            # C++ repeats the repetition (`a*+` is `(a*)+`); Java would read a possessive
            # or an error, so the repeated part is grouped.
            atom = (f"(?:{atom})" if quantified else atom) + quantifier
            quantified = True
        return atom

    def assertion(self) -> str | None:
        char = self.peek()
        if char == "^":
            self.pos += 1
            return "^"  # Java's `^` without MULTILINE: the start of the input only
        if char == "$":
            self.pos += 1
            return r"\z"  # Java's `$` would also match before a final line break
        if char == "\\" and self.peek(1) in ("b", "B"):
            self.pos += 2
            return WORD_BOUNDARY if self.text[self.pos - 1] == "b" else f"(?!{WORD_BOUNDARY})"
        if char == "(" and self.peek(1) == "?" and self.peek(2) in ("=", "!"):
            kind, opened = self.peek(2), self.pos
            self.pos += 3
            return f"(?{kind}{self.group_body(opened)})"
        return None

    def group_body(self, opened: int) -> str:
        body = self.disjunction()
        if self.peek() != ")":
            raise self.invalid("unclosed `(`", opened)
        self.pos += 1
        return body

    def atom(self) -> str:
        start, char = self.pos, self.peek()
        if char in ("*", "+", "?", "{"):
            raise self.invalid(f"nothing to repeat before `{char}`")
        self.pos += 1
        if char == "(":
            return self.group(start)
        if char == "[":
            return self.bracket()
        if char == ".":
            return ANY_CHAR
        if char == "\\":
            return self.escape()
        return _literal(char)  # `]` and `}` are ordinary characters too

    def group(self, start: int) -> str:
        if self.peek() == "?":
            if self.peek(1) != ":":
                found = self.text[start : start + 3]
                message = f"`{found}` is not ECMAScript (only `(?:`, `(?=`, `(?!`)"
                raise self.invalid(message, start)
            self.pos += 2
            return f"(?:{self.group_body(start)})"
        self.groups += 1
        self.open_groups.append(self.groups)
        body = self.group_body(start)
        self.open_groups.pop()
        return f"({body})"

    def quantifier(self) -> str | None:
        char = self.peek()
        if char in ("*", "+", "?"):
            self.pos += 1
            text = char
        elif char == "{":
            text = self.interval()
        else:
            return None
        if self.peek() == "?":  # non-greedy, as in Java
            self.pos += 1
            text += "?"
        return text

    def interval(self) -> str:
        start = self.pos
        self.pos += 1
        low = self.digits()
        if low is None:
            raise self.invalid("`{` must start a repetition count `{n}`, `{n,}` or `{n,m}`")
        high: int | None = low
        comma = self.peek() == ","
        if comma:
            self.pos += 1
            high = self.digits()
        if self.peek() != "}":
            raise self.invalid("unclosed repetition count `{`", start)
        self.pos += 1
        if high is not None and high < low:
            raise self.invalid(f"repetition count {{{low},{high}}} counts down", start)
        if max(low, high or 0) > MAX_REPEAT:
            raise self.invalid(f"repetition count over {MAX_REPEAT}", start)
        if not comma:
            return f"{{{low}}}"
        return f"{{{low},}}" if high is None else f"{{{low},{high}}}"

    def digits(self) -> int | None:
        start = self.pos
        while self.peek().isascii() and self.peek().isdigit():
            self.pos += 1
        return int(self.text[start : self.pos]) if self.pos > start else None

    # ------------------------------------------------------------ escapes

    def escape(self) -> str:
        """After a `\\` outside brackets (`\\b`, `\\B` are assertions, read before)."""
        start = self.pos - 1
        char = self.peek()
        if char in CLASS_ESCAPES and char:
            self.pos += 1
            return f"\\{char}"  # Java's \d \s \w are ASCII, C's "C" locale classes
        if char.isascii() and char.isdigit() and char != "0":
            return self.backreference(start)
        return _literal(self.escaped_char(start))

    def escaped_char(self, start: int) -> str:
        """The character an escape stands for (not a class, backreference or boundary)."""
        char = self.peek()
        if not char:
            raise self.invalid("`\\` at the end of the pattern", start)
        self.pos += 1
        if char in CHAR_ESCAPES:
            return CHAR_ESCAPES[char]
        if char == "c":
            # libstdc++ reads `\cX` as the character X itself (not a control character).
            if not self.peek():
                raise self.invalid("`\\c` at the end of the pattern", start)
            self.pos += 1
            return self.text[self.pos - 1]
        if char in ("x", "u"):
            width = 2 if char == "x" else 4
            code = self.text[self.pos : self.pos + width]
            if len(code) < width or any(c not in "0123456789abcdefABCDEF" for c in code):
                raise self.invalid(f"`\\{char}` needs {width} hexadecimal digits", start)
            self.pos += width
            return chr(int(code, 16))
        return char  # libstdc++: any other escaped character is itself (`\.`, `\p`, `\A`)

    def backreference(self, start: int) -> str:
        number = self.digits()
        assert number is not None
        if number > self.groups or number in self.open_groups:
            raise self.invalid(f"backreference `\\{number}` to no complete group", start)
        return f"(?:\\{number})"  # grouped: a digit after it stays a digit in Java

    # ------------------------------------------------------------ brackets

    def bracket(self) -> str:
        start = self.pos - 1
        negated = self.peek() == "^"
        self.pos += negated
        state = _Bracket()
        while True:
            char = self.peek()
            if not char:
                raise self.invalid("unclosed `[`", start)
            self.pos += 1
            if char == "]":  # ECMAScript: even right after `[`, so `[]` is empty
                break
            if char == "-":
                self.dash(state)
            else:
                self.bracket_element(char, state)
        state.flush()
        if not state.items:
            return r"[\s\S]" if negated else "(?!)"
        return f"[{'^' if negated else ''}{''.join(state.items)}]"

    def dash(self, state: _Bracket) -> None:
        """A `-` in brackets: a range after a character, else itself (libstdc++'s rules)."""
        at = self.pos - 1
        if self.peek() == "]":
            state.char("-")
        elif state.after_class:
            raise self.invalid("a range cannot start at a class", at)
        elif state.pending is not None:
            low = state.pending
            high = self.range_end(at)
            if ord(high) < ord(low):
                raise self.invalid(f"range `{low}-{high}` is out of order", at)
            state.pending = None
            state.items.append(f"{_literal(low)}-{_literal(high)}")
        else:
            state.char("-")

    def range_end(self, at: int) -> str:
        char = self.peek()
        self.pos += 1
        if char == "-":
            return "-"
        if char == "\\" and self.peek() and self.peek() not in CLASS_ESCAPES + "B123456789":
            return self.escaped_char(self.pos - 1) if self.peek() != "b" else self.backspace()
        if char and char not in "[]\\":
            return char
        if char == "[" and self.peek() not in (".", ":", "="):
            return "["
        raise self.invalid("a range must end at a character", at)

    def backspace(self) -> str:
        self.pos += 1
        return "\b"

    def bracket_element(self, char: str, state: _Bracket) -> None:
        if char == "[" and self.peek() in (".", ":", "="):
            self.bracket_name(state)
        elif char == "\\":
            self.bracket_escape(state)
        else:
            state.char(char)  # `[`, `&`, `^` are literal here; _literal escapes them

    def bracket_escape(self, state: _Bracket) -> None:
        start = self.pos - 1
        char = self.peek()
        if char in CLASS_ESCAPES and char:
            self.pos += 1
            state.klass(f"\\{char}")
        elif char == "b":
            state.char(self.backspace())
        elif char == "B" or (char.isascii() and char.isdigit() and char != "0"):
            raise self.invalid(f"`\\{char}` cannot stand in brackets", start)
        else:
            state.char(self.escaped_char(start))

    def bracket_name(self, state: _Bracket) -> None:
        """``[:class:]``, ``[.x.]`` (a collating element), ``[=x=]`` (an equivalence class)."""
        start = self.pos - 1
        kind = self.peek()
        end = self.text.find(kind + "]", self.pos + 1)
        if end < 0:
            raise self.invalid(f"unclosed `[{kind}`", start)
        name = self.text[self.pos + 1 : end]
        self.pos = end + 2
        if kind == ":":
            if name not in POSIX_CLASSES:
                raise self.invalid(f"unknown character class `[:{name}:]`", start)
            state.klass(POSIX_CLASSES[name])
        elif len(name) != 1:
            raise UntranslatableRegex(
                f"`[{kind}{name}{kind}]`: only one-character collating elements and "
                "equivalence classes are supported",
                start,
            )
        elif kind == ".":
            state.char(name)  # may start a range, as a character
        else:
            state.klass(_literal(name))  # in the "C" locale, the character itself
