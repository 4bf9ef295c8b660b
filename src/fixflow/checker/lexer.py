"""The Fixflow lexer: program text → tokens with exact source positions.

Lexical errors (an unterminated string or comment, a stray character) do not stop lexing:
they become ``ERROR`` tokens carrying their diagnostic, so the parser can report every
problem of a file in one run.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import Enum

from fixflow.checker.ast import Span
from fixflow.checker.diagnostics import Diagnostic


class Kind(Enum):
    IDENT = "identifier"
    INT = "integer"
    FLOAT = "float"
    STRING = "string"
    DIRECTIVE = "directive"  # `.decl`, `.input`, ... (the text includes the dot)
    DELTA = "Δ"
    PUNCT = "punctuation"  # operators and brackets; the text says which
    ERROR = "error"
    EOF = "end of file"


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str
    start: int
    """Offset of the first character in the source."""
    end: int
    """Offset just past the last character."""
    span: Span
    error: Diagnostic | None = None

    def is_punct(self, *texts: str) -> bool:
        return self.kind is Kind.PUNCT and self.text in texts

    def describe(self) -> str:
        """How an error message names this token: ``found `edge``` or ``found end of file``."""
        if self.kind is Kind.EOF:
            return "end of file"
        return f"`{self.text}`"


DELTA_CHARS = ("\u0394", "\u2206")  # Greek capital delta, increment sign
# Longest first, so that `:-` wins over `:` and `<=` over `<`.
PUNCTUATION = (
    ":-",
    "!=",
    "<=",
    ">=",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ";",
    ":",
    ".",
    "+",
    "-",
    "*",
    "/",
    "=",
    "<",
    ">",
    "!",
    "%",
    "^",
    "|",  # separates the members of a union type: `.type U = A | B`
)
NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
NAME_CHARS = NAME_START | frozenset("0123456789_'")
DIGITS = frozenset("0123456789")
RADIX_DIGITS = {"0x": frozenset("0123456789abcdefABCDEF"), "0b": frozenset("01")}


UNSIGNED_SUFFIX = "u"
"""Soufflé's unsigned literal suffix (``5u``, ``0x1Fu``): the value is an ordinary
``number``, since ``unsigned`` is stored as int64 (docs/language.md)."""


def int_value(text: str) -> int:
    """The value of an INT token: decimal, ``0x`` hexadecimal or ``0b`` binary, with an
    optional ``u`` suffix."""
    text = text.removesuffix(UNSIGNED_SUFFIX)
    base = {"0x": 16, "0b": 2}.get(text[:2].lower(), 10)
    return int(text[2:] if base != 10 else text, base)


SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}
# Every character str.splitlines() breaks at: diagnostics number lines the same way.
LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


class SourceMap:
    """Turns offsets into 1-based (line, col) the way ``str.splitlines`` counts lines."""

    def __init__(self, text: str, file: str) -> None:
        self.file = file
        self.line_starts = [0]
        for line in text.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))

    def position(self, offset: int) -> tuple[int, int]:
        line_index = bisect.bisect_right(self.line_starts, offset) - 1
        line_index = min(line_index, max(len(self.line_starts) - 2, 0))
        return line_index + 1, offset - self.line_starts[line_index] + 1

    def span(self, start: int, end: int) -> Span:
        line, col = self.position(start)
        end_line, end_col = self.position(end) if end > start else (line, col)
        return Span(self.file, line, col, end_line, end_col)


class Lexer:
    def __init__(self, text: str, file: str) -> None:
        self.text = text
        self.pos = 0
        self.source_map = SourceMap(text, file)
        self.tokens: list[Token] = []

    # ------------------------------------------------------------ driver

    def run(self) -> list[Token]:
        while True:
            self._skip_trivia()
            if self.pos >= len(self.text):
                self._emit(Kind.EOF, self.pos, self.pos)
                return self.tokens
            self._lex_one()

    def _lex_one(self) -> None:
        char = self.text[self.pos]
        if char in NAME_START:
            self._lex_name()
        elif char in DIGITS:
            self._lex_number()
        elif char == '"':
            self._lex_string()
        elif char in DELTA_CHARS:
            self._emit(Kind.DELTA, self.pos, self.pos + 1)
        elif char == "_":
            self._lex_underscore()
        elif char == "." and self._peek(1) in NAME_START:
            end = self._scan_name(self.pos + 1)
            self._emit(Kind.DIRECTIVE, self.pos, end)
        else:
            self._lex_punct()

    def _emit(self, kind: Kind, start: int, end: int, error: Diagnostic | None = None) -> None:
        span = self.source_map.span(start, end)
        token = Token(kind, self.text[start:end], start, end, span, error)
        self.tokens.append(token)
        self.pos = end

    def _error(self, start: int, end: int, message: str, *notes: str) -> None:
        diagnostic = Diagnostic(message, self.source_map.span(start, end), tuple(notes))
        self._emit(Kind.ERROR, start, end, diagnostic)

    def _peek(self, ahead: int) -> str:
        index = self.pos + ahead
        return self.text[index] if index < len(self.text) else ""

    # ------------------------------------------------------------ trivia

    def _skip_trivia(self) -> None:
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char.isspace():
                self.pos += 1
            elif self.text.startswith("//", self.pos):
                self._skip_line_comment()
            elif self.text.startswith("/*", self.pos):
                if not self._skip_block_comment():
                    return
            else:
                return

    def _skip_line_comment(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] not in LINE_BREAKS:
            self.pos += 1

    def _skip_block_comment(self) -> bool:
        """Skip ``/* ... */``; on a missing ``*/`` emit an error token and stop at the end."""
        close = self.text.find("*/", self.pos + 2)
        if close >= 0:
            self.pos = close + 2
            return True
        self._error(
            self.pos,
            self.pos + 2,
            "unterminated block comment",
            "the comment opened here is never closed with `*/`",
        )
        self.pos = len(self.text)
        return False

    # ------------------------------------------------------------ tokens

    def _scan_name(self, start: int) -> int:
        end = start
        while end < len(self.text) and self.text[end] in NAME_CHARS:
            end += 1
        return end

    def _lex_name(self) -> None:
        self._emit(Kind.IDENT, self.pos, self._scan_name(self.pos))

    def _lex_underscore(self) -> None:
        end = self._scan_name(self.pos)
        if end == self.pos + 1:
            self._emit(Kind.PUNCT, self.pos, end)
            return
        self._error(
            self.pos,
            end,
            f"`{self.text[self.pos : end]}` is not a valid name",
            "names start with a letter; `_` alone is the wildcard",
        )

    def _scan_digits(self, start: int) -> int:
        end = start
        while end < len(self.text) and self.text[end] in DIGITS:
            end += 1
        return end

    def _scan_exponent(self, start: int) -> int:
        """The end of an exponent ``e[+-]digits`` at ``start``, or ``start`` if there is none."""
        if start >= len(self.text) or self.text[start] not in "eE":
            return start
        digits_start = start + 1
        if digits_start < len(self.text) and self.text[digits_start] in "+-":
            digits_start += 1
        end = self._scan_digits(digits_start)
        return end if end > digits_start else start

    def _lex_radix_number(self) -> bool:
        """``0x1F`` (hex) and ``0b101`` (binary) are INTs, as in Soufflé; a prefix with no
        digit after it is an error. False when the text is no such literal."""
        prefix = self.text[self.pos : self.pos + 2].lower()
        if prefix not in RADIX_DIGITS:
            return False
        end = self.pos + 2
        while end < len(self.text) and self.text[end] in NAME_CHARS:
            end += 1
        digits = self.text[self.pos + 2 : end]
        if len(digits) > 1:
            digits = digits.removesuffix(UNSIGNED_SUFFIX)
        if digits and all(c in RADIX_DIGITS[prefix] for c in digits):
            self._emit(Kind.INT, self.pos, end)
        else:
            base = "hexadecimal" if prefix == "0x" else "binary"
            self._error(self.pos, end, f"invalid {base} literal `{self.text[self.pos : end]}`")
        return True

    def _lex_number(self) -> None:
        """``12`` and ``12u`` are INTs; ``0.15``, ``1e-3``, ``2.5e3``, ``2.e3`` are FLOATs.

        A dot followed by a digit belongs to the number. A bare trailing dot (``2.``) is
        left as a separate ``.`` token: whether it makes ``2.`` a float or ends the rule is
        decided by the parser, which can see what follows.
        """
        if self._lex_radix_number():
            return
        start = self.pos
        end = self._scan_digits(start)
        is_float = False
        if self.text.startswith(".", end):
            if self._char_at(end + 1) in DIGITS:
                end = self._scan_digits(end + 1)
                is_float = True
            elif self._scan_exponent(end + 1) > end + 1:  # `2.e3`
                end += 1
                is_float = True
        exponent_end = self._scan_exponent(end)
        is_float = is_float or exponent_end > end
        if not is_float and self._unsigned_suffix_at(end):
            exponent_end = end + 1
        self._emit(Kind.FLOAT if is_float else Kind.INT, start, exponent_end)

    def _unsigned_suffix_at(self, index: int) -> bool:
        """``5u``: a ``u`` right after an integer's digits and not starting a longer name
        (``5ux`` stays the number 5 followed by the name ``ux``)."""
        return (
            self._char_at(index) == UNSIGNED_SUFFIX and self._char_at(index + 1) not in NAME_CHARS
        )

    def _char_at(self, index: int) -> str:
        return self.text[index] if index < len(self.text) else ""

    def _lex_string(self) -> None:
        start = self.pos
        index = start + 1
        while index < len(self.text):
            char = self.text[index]
            if char == '"':
                self._emit(Kind.STRING, start, index + 1)
                return
            if char in LINE_BREAKS:
                break
            escapes_next = char == "\\" and self._char_at(index + 1) not in LINE_BREAKS
            index += 2 if escapes_next and index + 1 < len(self.text) else 1
        self._error(
            start,
            index,
            "unterminated string",
            'a string ends with `"` on the same line; write a line break as `\\n`',
        )

    def _lex_punct(self) -> None:
        for punct in PUNCTUATION:
            if self.text.startswith(punct, self.pos):
                self._emit(Kind.PUNCT, self.pos, self.pos + len(punct))
                return
        char = self.text[self.pos]
        shown = char if char.isprintable() else f"\\u{ord(char):04x}"
        self._error(self.pos, self.pos + 1, f"unexpected character `{shown}`")


def tokenize(text: str, file: str = "<input>") -> list[Token]:
    """The tokens of ``text``, ending with one ``EOF`` token."""
    return Lexer(text, file).run()


ESCAPES_HINT = 'escapes are `\\"`, `\\\\`, `\\n`, `\\t`, `\\r`, `\\uXXXX` and `\\UXXXXXXXX`'
"""What an unknown escape's diagnostic lists as allowed."""


def unescape(token: Token, source_map: SourceMap) -> tuple[str, list[Diagnostic]]:
    """The value of a STRING token and a diagnostic for each invalid escape in it."""
    body = token.text[1:-1]
    chars: list[str] = []
    errors: list[Diagnostic] = []
    index = 0
    while index < len(body):
        char = body[index]
        if char != "\\":
            chars.append(char)
            index += 1
            continue
        value, length = _escape_at(body, index)
        if value is None:
            offset = token.start + 1 + index
            errors.append(
                Diagnostic(
                    f"unknown escape `{body[index : index + length]}` in a string",
                    source_map.span(offset, offset + length),
                    (ESCAPES_HINT,),
                )
            )
            value = ""
        chars.append(value)
        index += length
    return "".join(chars), errors


def _escape_at(body: str, index: int) -> tuple[str | None, int]:
    """Decode the escape starting at ``body[index] == '\\'``: (value or None, length)."""
    letter = body[index + 1] if index + 1 < len(body) else ""
    if letter in SIMPLE_ESCAPES and letter:
        return SIMPLE_ESCAPES[letter], 2
    width = {"u": 4, "U": 8}.get(letter)
    if width is not None:
        digits = body[index + 2 : index + 2 + width]
        if len(digits) == width and all(c in "0123456789abcdefABCDEF" for c in digits):
            code = int(digits, 16)
            if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF:
                return chr(code), 2 + width
        return None, 2 + len(digits)
    return None, 2 if letter else 1
