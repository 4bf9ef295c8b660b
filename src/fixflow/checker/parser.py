"""The Fixflow parser: program text → ``Program`` (the grammar is in docs/language.md).

A hand-written recursive-descent parser over the tokens of ``fixflow.checker.lexer``,
one method per grammar rule, in four classes layered by grammar area, each building on
the one before: ``TokenStream`` (the cursor, diagnostics, recovery) → ``ExpressionParser``
→ ``RuleParser`` (heads, bodies, termination clauses) → ``Parser`` (the program, its
declarations and directives). Expressions and bodies are mutually recursive through the
body aggregate (``min y : { ... }``), which ``ExpressionParser`` leaves, abstract, to
``RuleParser``.

Errors come in two strengths:
- a *syntax* error (an unexpected token) is reported, then the parser skips to the next
  item boundary (the ``.`` ending a rule, or the next directive) and carries on;
- a *local* error (an aggregate in a body, a built-in name used as a relation, a wrong
  number of arguments, an unknown type) is reported and parsing continues in place,
  because the structure around it is still clear.
Every diagnostic of the file is raised together in one ``CheckError``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Literal, TypeVar, cast

from fixflow.checker.ast import (
    AGGREGATE_FUNCS,
    BUILTIN_FUNCS,
    CONSTRAINT_FUNCS,
    PREFIX_OPS,
    RESERVED_WORDS,
    TYPE_NAMES,
    WORD_OPS,
    Aggregate,
    AggregateFunc,
    ArithOp,
    Atom,
    Attribute,
    BinOp,
    Body,
    BodyLiteral,
    BuiltinFunc,
    Call,
    Cast,
    CompareOp,
    Comparison,
    Constraint,
    ConstraintFunc,
    Declaration,
    Expr,
    FloatLit,
    Head,
    HeadArg,
    InputDirective,
    IOOptions,
    Item,
    Neg,
    Negation,
    NumberLit,
    OutputDirective,
    Pragma,
    PrintSizeDirective,
    Program,
    Rule,
    Span,
    StringLit,
    SubAggregate,
    Termination,
    TypeDeclaration,
    TypeName,
    Var,
    Wildcard,
    map_casts,
)
from fixflow.checker.diagnostics import CheckError, Diagnostic
from fixflow.checker.directives import (
    PRAGMA_NOTE,
    PRAGMAS,
    IOOption,
    TypeResolver,
    check_io_options,
)
from fixflow.checker.lexer import Kind, Lexer, Token, int_value, unescape

log = logging.getLogger(__name__)

COMPARE_OPS: tuple[str, ...] = ("=", "!=", "<", "<=", ">", ">=")
ARITH_OPS: tuple[str, ...] = ("+", "-", "*", "/", "%", "^")
BINARY_LEVELS: tuple[tuple[str, ...], ...] = (
    ("lor",),
    ("lxor",),
    ("land",),
    ("bor",),
    ("bxor",),
    ("band",),
    ("bshl", "bshr"),
    ("+", "-"),
    ("*", "/", "%"),
)
"""Left-associative binary operators, loosest first (Soufflé's precedence); below them
come the prefix operators (``-``, ``bnot``, ``lnot``) and then ``^`` (right-associative)."""
CAST_WORD = "as"
"""Soufflé's cast ``as(x, T)``: a word that starts an expression when ``(`` follows."""
FUNCTION_WORDS = frozenset(BUILTIN_FUNCS) | frozenset(PREFIX_OPS) | {CAST_WORD}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

BUILTINS_NOTE = (
    "the built-in functions are `min(a, b)`, `max(a, b)`, `abs(x)`, `exp(x)`, `log(x)`, "
    "`relu(x)`, `itof(x)`, `ftoi(x)`, `to_float(x)`, `to_number(x)`, `to_string(x)`, "
    "`cat(a, b, ...)`, `strlen(s)` and `substr(s, i, n)`"
)
UNSUPPORTED_SOUFFLE_FUNCS = {
    "ord": "its value is the symbol's number in Soufflé's internal symbol table, which depends "
    "on load order and has no equivalent in a distributed engine",
    "to_unsigned": "`unsigned` values are numbers in Fixflow: write `as(x, unsigned)`",
    "range": "a functor with several results has no counterpart here: join a relation of the "
    "numbers instead",
    "autoinc": "its numbering depends on Soufflé's evaluation order, which a distributed "
    "engine does not reproduce",
}
"""Soufflé functors Fixflow refuses on purpose, with why (a one-line error, not "unknown")."""
_SAME_RESULTS = "it only chooses Soufflé's data structure or plan: remove it, the rows are the same"
SOUFFLE_QUALIFIERS = {
    **dict.fromkeys(("brie", "btree", "btree_delete", "inline", "no_inline"), _SAME_RESULTS),
    **dict.fromkeys(("magic", "no_magic"), _SAME_RESULTS),
    "eqrel": "Fixflow has no equivalence relations: write the reflexive, symmetric and "
    "transitive rules",
    "choice": "`choice-domain` (one tuple kept per key) has no counterpart here",
    "overridable": "components are not supported",
    **dict.fromkeys(("input", "output", "printsize"), "write the directive, e.g. `.output r`"),
}
"""Soufflé's relation qualifiers (`.decl r(x: number) brie`), refused with why."""
CONSTRAINTS_NOTE = (
    "the built-in constraints are `true`, `false`, `contains(sub, s)` and `match(regex, s)`"
)
LITERAL_NOTE = (
    "a body literal is an atom `p(X, Y)`, a negated atom `!p(X, Y)` "
    "or a comparison such as `d = dx + w`"
)
SUBAGG_NOTE = (
    "a body aggregate is `x = min y : { r(y, z), z > 0 }`, `c = count : { r(_) ; q(_) }` "
    "or `s = sum y : r(y)`"
)
CAST_NOTE = "a cast is written `as(x, T)` with `T` a type: `as(id, Node)`, `as(n, number)`"
TERMINATION_NOTE = (
    "a termination clause reads `{sum[Δr] < 0.001}` (ASCII: `{sum[delta r] < 0.001}`)"
)
TYPES_NOTE = (
    "the types are `number` (int64), `unsigned` (int64, not negative), `float` (float64), "
    "`symbol` (string) and those declared with `.type`"
)
TYPE_SUGGESTIONS = {
    "int": "number",
    "integer": "number",
    "long": "number",
    "double": "float",
    "real": "float",
    "string": "symbol",
    "str": "symbol",
}

T = TypeVar("T")


class _Abort(Exception):
    """A syntax error has been reported: unwind to the enclosing item and recover."""


def _join(first: Span, last: Span) -> Span:
    """The span from the start of ``first`` to the end of ``last``."""
    return Span(first.file, first.line, first.col, last.end_line, last.end_col)


def _aggregates_in(node: object) -> list[Aggregate]:
    """Every aggregate inside an expression (the expression itself included)."""
    match node:
        case Aggregate(arg=arg):
            return [node, *_aggregates_in(arg)]
        case BinOp(left=left, right=right):
            return _aggregates_in(left) + _aggregates_in(right)
        case Neg(operand=operand) | Cast(operand=operand):
            return _aggregates_in(operand)
        case Call(args=args):
            return [a for arg in args for a in _aggregates_in(arg)]
    return []


class TokenStream:
    """The tokens of one file, a cursor, the diagnostics so far, and the helpers every
    grammar rule uses: look ahead, consume, expect, report, recover, make spans."""

    def __init__(self, text: str, file: str) -> None:
        lexer = Lexer(text, file)
        self.tokens = lexer.run()
        self.source_map = lexer.source_map
        self.text = text
        self.file = file
        self.pos = 0
        self.diagnostics: list[Diagnostic] = [t.error for t in self.tokens if t.error]

    # ------------------------------------------------------------ recovery

    def _recover(self, item_start: int) -> None:
        """Skip to the next item boundary after a syntax error in the item at ``item_start``."""
        in_directive = self.tokens[item_start].kind is Kind.DIRECTIVE
        if self.pos == item_start:
            self._advance()
        while True:
            token = self._peek()
            if token.kind in (Kind.EOF, Kind.DIRECTIVE):
                return
            if in_directive and token.span.col == 1 and self._starts_line(self.pos):
                return  # directives are one line: the next line's first word starts an item
            self._advance()
            if not in_directive and token.is_punct("."):
                return
            if (
                token.kind is Kind.ERROR
                and token.text.startswith('"')
                and self._peek().span.col == 1
                and self._starts_line(self.pos)
            ):
                return  # an unterminated string ate its line, and likely the rule's `.`

    # ------------------------------------------------------------ token helpers

    def _peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def _advance(self) -> Token:
        token = self._peek()
        if token.kind is not Kind.EOF:
            self.pos += 1
        return token

    def _at(self, *texts: str, ahead: int = 0) -> bool:
        return self._peek(ahead).is_punct(*texts)

    def _starts_line(self, index: int) -> bool:
        """Whether token ``index`` is the first token on its line."""
        return index == 0 or self.tokens[index - 1].span.end_line < self.tokens[index].span.line

    def _report(self, message: str, span: Span, *notes: str) -> None:
        self.diagnostics.append(Diagnostic(message, span, tuple(notes)))

    def _fail(self, message: str, *notes: str, missing_closer: bool = False) -> _Abort:
        """Report a syntax error at the current token; the caller raises the result.

        An error token was already reported by the lexer, so it is not reported twice.
        """
        token = self._peek()
        if token.kind is not Kind.ERROR:
            span = self._error_span(missing_closer)
            self._report(f"{message}, found {token.describe()}", span, *notes)
        return _Abort()

    def _error_span(self, missing_closer: bool) -> Span:
        """Where a syntax error at the current token points: at the token, except at the
        end of the file, or when a closing `)`, `]`, `}` or `.` is missing before a new
        line: then the mistake is at the end of the text before, so point just past it."""
        token = self._peek()
        at_line_start = missing_closer and self._starts_line(self.pos)
        if self.pos == 0 or not (token.kind is Kind.EOF or at_line_start):
            return token.span
        end = self.tokens[self.pos - 1].span
        return Span(end.file, end.end_line, end.end_col, end.end_line, end.end_col)

    def _expect(self, text: str, message: str, *notes: str) -> Token:
        if not self._at(text):
            # `,` is expected between arguments: its absence usually means a missing `)`.
            raise self._fail(message, *notes, missing_closer=text in (")", "]", "}", ","))
        return self._advance()

    def _ident(self, message: str, *notes: str) -> Token:
        if self._peek().kind is not Kind.IDENT:
            raise self._fail(message, *notes)
        return self._advance()

    def _span(self, first: Token, last: Token) -> Span:
        return self.source_map.span(first.start, last.end)

    def _comma_list(self, parse_element: Callable[[], T], message: str) -> tuple[T, ...]:
        """``[element ("," element)*]`` up to (not including) a closing ``)``."""
        elements: list[T] = []
        if self._at(")"):
            return ()
        while True:
            elements.append(parse_element())
            if self._at(")"):
                return tuple(elements)
            self._expect(",", message)

    def _string(self, token: Token) -> StringLit:
        """A string token's value, escapes decoded; here because expressions, ``.pragma``
        and I/O options all read strings."""
        value, errors = unescape(token, self.source_map)
        self.diagnostics.extend(errors)
        return StringLit(value, token.span)


class ExpressionParser(TokenStream, ABC):
    """Expressions and terms: operators by precedence, literals, variables, calls, casts
    and head aggregates (``sum[x]``)."""

    def __init__(self, text: str, file: str) -> None:
        super().__init__(text, file)
        self._target_then_colon: dict[int, bool] = {}
        """Memo of ``_starts_sub_aggregate`` by token position: nested parentheses would
        otherwise be parsed ahead again at every level."""

    @abstractmethod
    def _sub_aggregate(self) -> SubAggregate:
        """A body aggregate (``min y : { ... }``): its braces hold rule bodies, so the
        rules layer parses it."""

    # ------------------------------------------------------------ expressions

    def _can_start_expr(self, token: Token) -> bool:
        return token.kind in (Kind.IDENT, Kind.INT, Kind.FLOAT, Kind.STRING) or token.is_punct(
            "(", "-", "_"
        )

    def _at_operator(self, ops: tuple[str, ...]) -> bool:
        """Whether the current token is one of ``ops``: punctuation or a word (``band``)."""
        token = self._peek()
        return token.is_punct(*ops) or (token.kind is Kind.IDENT and token.text in ops)

    def _binary(self, level: int = 0) -> Expr:
        """A left-associative chain of ``BINARY_LEVELS[level]`` over the tighter levels."""
        if level == len(BINARY_LEVELS):
            return self._unary()
        ops = BINARY_LEVELS[level]
        left = self._binary(level + 1)
        while self._at_operator(ops):
            op = cast(ArithOp, self._advance().text)
            right = self._binary(level + 1)
            left = BinOp(op, left, right, _join(left.span, right.span))
        return left

    def _expr(self) -> Expr:
        return self._binary()

    def _unary(self) -> Expr:
        """``-`` directly before a number literal makes a negative literal (``-1`` is
        ``NumberLit(-1)``, which also lets ``-9223372036854775808`` fit in int64);
        before anything else, including ``(1)`` and ``-1``, it is a ``Neg`` node. As in
        Soufflé, ``^`` binds tighter than a prefix operator: ``-2^2`` is ``-(2^2)``."""
        token = self._peek()
        if token.kind is Kind.IDENT and token.text in PREFIX_OPS:
            self._advance()
            operand = self._unary()
            func = cast(BuiltinFunc, token.text)
            return Call(func, (operand,), _join(token.span, operand.span))
        if not self._at("-"):
            return self._power()
        minus = self._advance()
        token = self._peek()
        if token.kind in (Kind.INT, Kind.FLOAT) and not self._at("^", ahead=1):
            literal = self._primary()
            assert isinstance(literal, NumberLit | FloatLit), "a number token is a literal"
            span = _join(minus.span, literal.span)
            negative: Expr = (
                NumberLit(-literal.value, span)
                if isinstance(literal, NumberLit)
                else FloatLit(-literal.value, span)
            )
            return self._check_int_range(negative, token)
        operand = self._unary()
        return Neg(operand, _join(minus.span, operand.span))

    def _power(self) -> Expr:
        """``primary ["^" unary]``: right-associative, and its exponent may be negated."""
        token = self._peek()
        base = self._check_int_range(self._primary(), token)
        if not self._at("^"):
            return base
        self._advance()
        exponent = self._unary()
        return BinOp("^", base, exponent, _join(base.span, exponent.span))

    def _check_int_range(self, node: Expr, token: Token) -> Expr:
        if isinstance(node, NumberLit) and not INT64_MIN <= node.value <= INT64_MAX:
            self._report(
                f"integer literal `{token.text}` does not fit in a `number` (int64)",
                node.span,
                "write it as a float, e.g. `1e20`",
            )
        return node

    def _primary(self) -> Expr:
        token = self._peek()
        if token.kind is Kind.INT:
            return self._int_or_dotted_float()
        if token.kind is Kind.FLOAT:
            return self._float(self._advance())
        if token.kind is Kind.STRING:
            return self._string(self._advance())
        if token.is_punct("_"):
            return Wildcard(self._advance().span)
        if token.is_punct("("):
            return self._parenthesized()
        if token.kind is Kind.IDENT:
            return self._name_expr()
        raise self._fail("expected an expression")

    def _int_or_dotted_float(self) -> Expr:
        """``2.`` is a float unless its dot ends the rule, i.e. unless what follows the dot
        is the end of the file or the start of another item (a name or a directive)."""
        token = self._advance()
        dot, following = self._peek(), self._peek(1)
        if (
            dot.is_punct(".")
            and dot.start == token.end
            and token.text.isdigit()
            and following.kind not in (Kind.EOF, Kind.IDENT, Kind.DIRECTIVE)
        ):
            self._advance()
            return FloatLit(float(token.text), self._span(token, dot))
        return NumberLit(int_value(token.text), token.span)

    def _float(self, token: Token) -> FloatLit:
        value = float(token.text)
        if not math.isfinite(value):
            self._report(
                f"float literal `{token.text}` is out of range",
                token.span,
                "a `float` is a 64-bit IEEE double (at most about 1.8e308)",
            )
            value = 0.0
        return FloatLit(value, token.span)

    def _parenthesized(self) -> Expr:
        opening = self._advance()
        inner = self._expr()
        line, col = opening.span.line, opening.span.col
        closing = self._expect(
            ")", "expected `)` to close the parenthesis", f"the `(` opened at {line}:{col}"
        )
        return dataclasses.replace(inner, span=self._span(opening, closing))

    def _report_unknown_function(self, name: Token) -> None:
        if name.text in UNSUPPORTED_SOUFFLE_FUNCS:
            self._report(
                f"Soufflé's `{name.text}` is not supported",
                name.span,
                UNSUPPORTED_SOUFFLE_FUNCS[name.text],
                'docs/language.md, "Coming from Soufflé", lists what differs',
            )
            return
        self._report(
            f"`{name.text}` is not a built-in function",
            name.span,
            BUILTINS_NOTE,
            "a relation is used as an atom of the body, not inside an expression",
        )

    def _name_expr(self) -> Expr:
        name = self._peek()
        if name.text in RESERVED_WORDS:
            what = "a constraint" if name.text in CONSTRAINT_FUNCS else "an operator"
            self._report(f"`{name.text}` is {what}, not a value", name.span, "rename the variable")
            raise _Abort()
        if name.text in CONSTRAINT_FUNCS:
            self._report(
                f"`{name.text}` is a constraint, not a function",
                name.span,
                CONSTRAINTS_NOTE,
                f"write it as a body literal: `..., {name.text}(a, b), ...`",
            )
            raise _Abort()
        if name.text == CAST_WORD and self._at("(", ahead=1):
            return self._cast()
        if self._starts_sub_aggregate():
            return self._sub_aggregate()
        if self._at("(", ahead=1) and name.text not in BUILTIN_FUNCS:
            self._report_unknown_function(name)
            raise _Abort()
        self._advance()
        if self._at("[") and name.text in AGGREGATE_FUNCS:
            return self._aggregate(name)  # type: ignore[return-value]  # callers reject it
        if not self._at("("):
            return Var(name.text, name.span)
        self._advance()
        args = self._comma_list(self._expr, f"expected `)` after the arguments of `{name.text}`")
        end = self._advance()
        call = Call(cast(BuiltinFunc, name.text), args, self._span(name, end))
        self._check_arity(call)
        return call

    def _starts_sub_aggregate(self) -> bool:
        """``count :`` or ``min|max|sum|mean <expr> :``. A name followed by a name or a
        literal would otherwise be a syntax error. After ``(`` or ``-`` the name may also
        be a call (``min(a, b)``), a variable (``sum - x``) or an atom (``sum(x)``): it
        starts an aggregate only when an expression and then ``:`` follow."""
        name, after = self._peek(), self._peek(1)
        if name.kind is not Kind.IDENT or name.text not in AGGREGATE_FUNCS:
            return False
        if name.text == "count":
            return after.is_punct(":")
        if not self._can_start_expr(after):
            return False
        if not after.is_punct("(", "-"):
            return True
        if self.pos not in self._target_then_colon:
            self._target_then_colon[self.pos] = self._expression_then_colon(self.pos + 1)
        return self._target_then_colon[self.pos]

    def _expression_then_colon(self, start: int) -> bool:
        """Whether an expression starting at token ``start`` is followed by ``:``. Parses
        ahead and then forgets it: position and diagnostics are restored."""
        saved_pos, saved_diagnostics = self.pos, len(self.diagnostics)
        self.pos = start
        try:
            self._expr()
            return self._at(":")
        except _Abort:
            return False
        finally:
            self.pos = saved_pos
            del self.diagnostics[saved_diagnostics:]

    def _cast(self) -> Cast:
        """Soufflé's ``as(expr, T)``; the parser resolves ``T`` once it has read every
        ``.type`` (``_resolve_types``), the analysis checks the operand's type."""
        word = self._advance()
        self._advance()  # `(`
        operand = self._expr()
        self._expect(",", "expected `,` and a type after the expression of `as(`", CAST_NOTE)
        type_token = self._ident("expected a type name in `as(x, T)`", CAST_NOTE)
        end = self._expect(")", "expected `)` to close `as(`", CAST_NOTE)
        return Cast(operand, type_token.text, None, self._span(word, end))

    def _check_arity(self, call: Call) -> None:
        expected = BUILTIN_FUNCS[call.func]
        if expected < 0 and len(call.args) < -expected:
            self._report(
                f"`{call.func}` takes at least {-expected} arguments, found {len(call.args)}",
                call.span,
                BUILTINS_NOTE,
            )
        elif expected >= 0 and len(call.args) != expected:
            plural = "argument" if expected == 1 else "arguments"
            self._report(
                f"`{call.func}` takes {expected} {plural}, found {len(call.args)}",
                call.span,
                BUILTINS_NOTE,
            )

    def _aggregate(self, func: Token) -> Aggregate:
        self._advance()  # `[`
        arg: Expr | None = None
        if self._at("*"):
            star = self._advance()
            if func.text != "count":
                self._report(
                    f"`{func.text}[*]` is not allowed: only `count` takes `*`",
                    star.span,
                    "`count[*]` counts the satisfying assignments of "
                    f"the body; `{func.text}` needs a value, e.g. `{func.text}[x]`",
                )
        else:
            arg = self._expr()
        end = self._expect("]", f"expected `]` after the argument of `{func.text}[...]`")
        return Aggregate(cast(AggregateFunc, func.text), arg, self._span(func, end))


class RuleParser(ExpressionParser):
    """Rules: the head, the bodies and their literals (atoms, negations, comparisons,
    constraints, body aggregates) and the termination clause."""

    # ------------------------------------------------------------ rules

    def _rule(self) -> Rule:
        head = self._head()
        bodies: list[Body] = []
        termination: Termination | None = None
        after = f"expected `:-` or `.` after the head of `{head.relation}`"
        if self._at(":-"):
            self._advance()
            bodies.append(self._body())
            while self._at(";") and not self._at("{", ahead=1):
                self._advance()
                bodies.append(self._body())
            after = "expected `,`, `;` or `.` after a body literal"
        else:
            at = head.span
            bodies.append(Body((), Span(at.file, at.end_line, at.end_col, at.end_line, at.end_col)))
        if self._at(",", ";") and self._at("{", ahead=1):
            self._advance()
        if self._at("{"):
            termination = self._termination()
            after = "expected `.` after the termination clause"
        end = self._end_of_rule(after)
        return Rule(head, tuple(bodies), termination, _join(head.span, end.span))

    def _end_of_rule(self, message: str) -> Token:
        if self._at("."):
            return self._advance()
        token = self._peek()
        if token.kind is not Kind.ERROR and (token.kind is Kind.EOF or self._starts_line(self.pos)):
            # A missing `.` before a new line: report it where the `.` belongs and go on
            # parsing the next line as a new item, instead of skipping it.
            self._report(
                f"expected `.` at the end of the rule, found {token.describe()}",
                self._error_span(missing_closer=True),
                "every rule and fact ends with `.`",
            )
            return self.tokens[self.pos - 1]
        raise self._fail(message)

    def _head(self) -> Head:
        name = self._advance()
        self._check_relation_name(name)
        self._expect(
            "(",
            f"expected `(` after `{name.text}`",
            f"a rule starts with its head, e.g. `{name.text}(X, Y) :- ...`",
        )
        args = self._comma_list(
            self._head_arg, f"expected `)` after the arguments of `{name.text}`"
        )
        end = self._advance()
        return Head(name.text, args, self._span(name, end))

    def _head_arg(self) -> HeadArg:
        arg = self._expr()
        nested = _aggregates_in(arg.arg) if isinstance(arg, Aggregate) else _aggregates_in(arg)
        for aggregate in nested:
            self._report(
                f"aggregate `{aggregate.func}[...]` is not allowed inside an expression",
                aggregate.span,
                "an aggregate must be a whole head argument: compute the value in the body, "
                "e.g. `p(X, sum[v]) :- ..., v = 2 * w.`",
            )
        return arg

    def _check_relation_name(self, name: Token) -> None:
        if name.text in BUILTIN_FUNCS:
            self._report(
                f"`{name.text}` is a built-in function and cannot name a relation",
                name.span,
                BUILTINS_NOTE,
                "rename the relation",
            )
        elif name.text in CONSTRAINT_FUNCS:
            self._report(
                f"`{name.text}` is a built-in constraint and cannot name a relation",
                name.span,
                CONSTRAINTS_NOTE,
                "rename the relation",
            )
        elif name.text in RESERVED_WORDS:
            self._report(
                f"`{name.text}` is an operator and cannot name a relation",
                name.span,
                "rename the relation",
            )

    def _reject_aggregates(self, node: object, where: str, *notes: str) -> None:
        for aggregate in _aggregates_in(node):
            self._report(
                f"aggregate `{aggregate.func}[...]` is not allowed in {where}",
                aggregate.span,
                *notes,
            )

    def _body_expr(self) -> Expr:
        expr = self._expr()
        self._reject_aggregates(
            expr,
            "a rule body",
            "aggregates go in the head, as a whole argument: `p(X, sum[v]) :- q(X, v).`, "
            "or in the body in Soufflé's form: `t = sum v : { q(X, v) }`",
        )
        return expr

    def _body(self) -> Body:
        literals = [self._literal()]
        while self._at(",") and not self._at("{", ahead=1):
            self._advance()
            literals.append(self._literal())
        return Body(tuple(literals), _join(literals[0].span, literals[-1].span))

    def _literal(self) -> BodyLiteral:
        token = self._peek()
        if token.is_punct("!"):
            self._advance()
            if self._peek().kind is Kind.IDENT and self._peek().text in CONSTRAINT_FUNCS:
                inner = self._constraint()
                span = _join(token.span, inner.span)
                return dataclasses.replace(inner, negated=True, span=span)
            if not (self._peek().kind is Kind.IDENT and self._at("(", ahead=1)):
                raise self._fail(
                    "expected an atom after `!`", "only atoms can be negated, e.g. `!edge(X, Y)`"
                )
            atom = self._atom()
            return Negation(atom, _join(token.span, atom.span))
        if token.kind is Kind.IDENT and token.text in CONSTRAINT_FUNCS:
            return self._constraint()
        if token.kind is Kind.IDENT and self._starts_sub_aggregate():
            return self._comparison()  # `sum (x + y) : {...} > 3` is no atom `sum(x + y)`
        starts_atom = token.kind is Kind.IDENT and self._at("(", ahead=1)
        if starts_atom and (token.text not in FUNCTION_WORDS or self._builtin_used_as_atom()):
            return self._atom()
        if not self._can_start_expr(token):
            raise self._fail("expected a body literal", LITERAL_NOTE)
        return self._comparison()

    def _comparison(self) -> Comparison:
        left = self._body_expr()
        if not self._at(*COMPARE_OPS):
            raise self._fail(
                "expected a comparison operator (`=`, `!=`, `<`, `<=`, `>`, `>=`) "
                "after the expression",
                LITERAL_NOTE,
            )
        op = cast(CompareOp, self._advance().text)
        right = self._body_expr()
        return Comparison(op, left, right, _join(left.span, right.span))

    def _constraint(self) -> Constraint:
        """``true``, ``false``, ``contains(sub, s)`` or ``match(regex, s)``."""
        name = self._advance()
        func = cast(ConstraintFunc, name.text)
        arity = CONSTRAINT_FUNCS[name.text]
        if arity == 0:
            if self._at("("):
                raise self._fail(f"expected `,`, `;` or `.` after `{name.text}`", CONSTRAINTS_NOTE)
            return Constraint(func, (), span=name.span)
        self._expect("(", f"expected `(` after `{name.text}`", CONSTRAINTS_NOTE)
        args = self._comma_list(
            self._body_expr, f"expected `)` after the arguments of `{name.text}`"
        )
        end = self._advance()
        constraint = Constraint(func, args, span=self._span(name, end))
        if len(args) != arity:
            self._report(
                f"`{name.text}` takes {arity} arguments, found {len(args)}",
                constraint.span,
                CONSTRAINTS_NOTE,
            )
        return constraint

    def _builtin_used_as_atom(self) -> bool:
        """Whether ``min(...)`` etc. at the current token stands alone like an atom rather
        than starting an expression such as ``min(a, b) < c``."""
        depth = 0
        index = self.pos + 1
        while index < len(self.tokens):
            token = self.tokens[index]
            if token.kind is Kind.EOF or token.is_punct("."):
                return False
            if token.is_punct("("):
                depth += 1
            elif token.is_punct(")"):
                depth -= 1
                if depth == 0:
                    after = self.tokens[index + 1]
                    word_op = after.kind is Kind.IDENT and after.text in WORD_OPS
                    return not (word_op or after.is_punct(*COMPARE_OPS, *ARITH_OPS))
            index += 1
        return False

    def _atom(self) -> Atom:
        name = self._advance()
        self._check_relation_name(name)
        self._expect("(", f"expected `(` after `{name.text}`")
        args = self._comma_list(
            self._body_expr, f"expected `)` after the arguments of `{name.text}`"
        )
        end = self._advance()
        return Atom(name.text, args, self._span(name, end))

    def _sub_aggregate(self) -> SubAggregate:
        """Soufflé's body aggregate: ``func [target] : { body ; body ... }`` or ``: atom``."""
        func = self._advance()
        target = None if func.text == "count" else self._expr()
        self._expect(":", f"expected `:` after `{func.text}` and its target", SUBAGG_NOTE)
        if self._at("{"):
            self._advance()
            bodies = [self._body()]
            while self._at(";"):
                self._advance()
                bodies.append(self._body())
            end = self._expect("}", "expected `}` to close the aggregate's body", SUBAGG_NOTE)
            span = self._span(func, end)
        elif self._peek().kind is Kind.IDENT and self._at("(", ahead=1):
            atom = self._atom()
            bodies = [Body((atom,), atom.span)]
            span = _join(func.span, atom.span)
        else:
            raise self._fail(f"expected `{{` or an atom after `{func.text} ... :`", SUBAGG_NOTE)
        return SubAggregate(cast(AggregateFunc, func.text), target, tuple(bodies), span)

    # ------------------------------------------------------------ termination

    def _termination(self) -> Termination:
        start = self._advance()
        func = self._ident(
            "expected an aggregate (`min`, `max`, `sum`, `count`, `mean`) "
            "in the termination clause",
            TERMINATION_NOTE,
        )
        if func.text not in AGGREGATE_FUNCS:
            self._report(
                f"`{func.text}` is not an aggregate",
                func.span,
                "the aggregates are `min`, `max`, `sum`, `count` and `mean`",
                TERMINATION_NOTE,
            )
        self._expect("[", f"expected `[` after `{func.text}`", TERMINATION_NOTE)
        self._delta_marker()
        var = self._ident("expected a variable after `Δ`", TERMINATION_NOTE)
        self._expect("]", f"expected `]` after `Δ{var.text}`", TERMINATION_NOTE)
        if not self._at(*COMPARE_OPS):
            raise self._fail(
                f"expected a comparison operator after `{func.text}[Δ{var.text}]`", TERMINATION_NOTE
            )
        op = cast(CompareOp, self._advance().text)
        bound = self._expr()
        self._reject_aggregates(bound, "a termination clause", TERMINATION_NOTE)
        end = self._expect("}", "expected `}` to close the termination clause")
        func_name = cast(AggregateFunc, func.text if func.text in AGGREGATE_FUNCS else "sum")
        return Termination(func_name, var.text, op, bound, self._span(start, end))

    def _delta_marker(self) -> None:
        """``Δ``, ``∆`` or the ASCII ``delta`` followed by the variable."""
        token = self._peek()
        ascii_delta = token.kind is Kind.IDENT and token.text == "delta"
        if token.kind is Kind.DELTA or (ascii_delta and self._peek(1).kind is Kind.IDENT):
            self._advance()
        else:
            raise self._fail(
                "expected `Δ` before the variable of the termination clause", TERMINATION_NOTE
            )


class Parser(RuleParser):
    """A whole program: its items (rules and directives), with the ``.type`` names
    resolved once every declaration has been read."""

    def __init__(self, text: str, file: str) -> None:
        super().__init__(text, file)
        self._member_spans: dict[tuple[str, str], Span] = {}
        """Where each ``(type, member)`` of a ``.type`` declaration was written."""

    # ------------------------------------------------------------ program and items

    def parse_program(self) -> Program:
        items: list[Item] = []
        while self._peek().kind is not Kind.EOF:
            start = self.pos
            try:
                items.extend(self._item())
            except _Abort:
                self._recover(start)
        items = self._resolve_types(items)
        if any(d.severity == "error" for d in self.diagnostics):
            ordered = sorted(self.diagnostics, key=lambda d: (d.span.line, d.span.col))
            raise CheckError(ordered, self.text)
        return Program(tuple(items), self.file)

    def _item(self) -> tuple[Item, ...]:
        """The next item; a directive naming several relations (``.input a, b``) gives one
        item per relation."""
        token = self._peek()
        if token.kind is Kind.DIRECTIVE:
            return self._directive(token)
        if token.kind is Kind.IDENT:
            return (self._rule(),)
        raise self._fail("expected a rule or a directive (`.decl`, `.input`, `.output`)")

    def _directive(self, token: Token) -> tuple[Item, ...]:
        if token.text == ".decl":
            return (self._declaration(),)
        if token.text == ".type":
            return (self._type_declaration(),)
        if token.text in (".input", ".output", ".printsize"):
            return self._relations_directive()
        if token.text == ".pragma":
            return (self._pragma(),)
        self._report(
            f"unknown directive `{token.text}`",
            token.span,
            "the directives are `.decl`, `.type`, `.input`, `.output`, `.printsize` and `.pragma`",
        )
        raise _Abort()

    # ------------------------------------------------------------ declarations

    def _relation_name(self, after: str) -> Token:
        name = self._ident(f"expected a relation name after {after}")
        self._check_relation_name(name)
        return name

    def _declaration(self) -> Declaration:
        start = self._advance()
        name = self._relation_name("`.decl`")
        self._expect(
            "(",
            f"expected `(` after `.decl {name.text}`",
            f"declare the attributes: `.decl {name.text}(src: number, dst: number)`",
        )
        attributes = self._comma_list(
            self._attribute, f"expected `,` or `)` after an attribute of `{name.text}`"
        )
        end = self._advance()  # the `)` that _comma_list stopped at
        qualifier = self._peek()
        if qualifier.span.line == end.span.line and qualifier.text in SOUFFLE_QUALIFIERS:
            why = SOUFFLE_QUALIFIERS[qualifier.text]
            shown = "choice-domain" if qualifier.text == "choice" else qualifier.text
            self._report(
                f"Soufflé's relation qualifier `{shown}` is not supported",
                qualifier.span,
                why,
            )
            raise _Abort()
        return Declaration(name.text, attributes, self._span(start, end))

    def _attribute(self) -> Attribute:
        name = self._ident("expected an attribute name")
        self._expect(
            ":",
            f"expected `:` after attribute `{name.text}`",
            f"an attribute is written `name: type`, e.g. `{name.text}: number`",
        )
        type_token = self._ident(f"expected a type after `{name.text}:`", TYPES_NOTE)
        span = self._span(name, type_token)
        if type_token.text in TYPE_NAMES:
            return Attribute(name.text, cast(TypeName, type_token.text), span)
        # `unsigned` or a `.type`, which may be declared later: `_resolve_types` sets the
        # base type ("number" until then).
        return Attribute(name.text, "number", span, declared=type_token.text)

    # ------------------------------------------------------------ types

    def _type_declaration(self) -> TypeDeclaration:
        """``.type T <: base``, ``.type T = U`` or ``.type T = A | B``."""
        start = self._advance()
        name = self._ident("expected a type name after `.type`")
        subtype = self._at("<") and self._at(":", ahead=1)
        if subtype and self._peek().end == self._peek(1).start:
            self._advance()
        elif not self._at("="):
            raise self._fail(
                f"expected `<:` or `=` after `.type {name.text}`",
                f"declare a subtype `.type {name.text} <: symbol`, an alias "
                f"`.type {name.text} = number` or a union `.type {name.text} = A | B`",
            )
        op: Literal["<:", "="] = "<:" if subtype else "="
        self._advance()
        if self._at("[", "{"):
            raise self._fail("expected a type name", "record and ADT types are not supported")
        members = [self._type_member(name.text)]
        while op == "=" and self._at("|"):
            self._advance()
            members.append(self._type_member(name.text))
        span = self._span(start, members[-1])
        return TypeDeclaration(name.text, op, tuple(t.text for t in members), span)

    def _type_member(self, declared: str) -> Token:
        token = self._ident("expected a type name", TYPES_NOTE)
        self._member_spans[(declared, token.text)] = token.span
        return token

    def _resolve_types(self, items: list[Item]) -> list[Item]:
        """Replace every attribute's type name by its base type (``.type`` declarations
        may come after their uses); report unknown, cyclic and mixed types."""
        declarations = [i for i in items if isinstance(i, TypeDeclaration)]
        resolver = TypeResolver(declarations, self._member_spans)
        self.diagnostics.extend(resolver.diagnostics)
        resolved: list[Item] = []
        for item in items:
            if isinstance(item, Declaration):
                attributes = tuple(self._resolve_attribute(a, resolver) for a in item.attributes)
                item = dataclasses.replace(item, attributes=attributes)
            elif isinstance(item, Rule):
                item = map_casts(item, lambda cast: self._resolve_cast(cast, resolver))
            resolved.append(item)
        return resolved

    def _resolve_cast(self, cast: Cast, resolver: TypeResolver) -> Cast:
        if not resolver.known(cast.type_name):
            end = cast.span  # it ends with `T)`: point at `T` when written without spaces
            col = max(end.end_col - 1 - len(cast.type_name), end.col)
            span = Span(end.file, end.end_line, col, end.end_line, end.end_col - 1)
            self._report(f"unknown type `{cast.type_name}` in `as`", span, TYPES_NOTE)
        return dataclasses.replace(cast, base=resolver.base(cast.type_name))

    def _resolve_attribute(self, attribute: Attribute, resolver: TypeResolver) -> Attribute:
        if attribute.declared is None:
            return attribute
        base = resolver.base(attribute.declared)
        if base is not None:
            return dataclasses.replace(attribute, type=base)
        if not resolver.known(attribute.declared):
            end = attribute.span  # it ends with the type name
            col = end.end_col - len(attribute.declared)
            span = Span(end.file, end.end_line, col, end.end_line, end.end_col)
            notes = [TYPES_NOTE]
            suggestion = TYPE_SUGGESTIONS.get(attribute.declared.lower())
            if suggestion:
                notes.append(f"did you mean `{suggestion}`?")
            self._report(f"unknown type `{attribute.declared}`", span, *notes)
        return attribute  # the program is rejected anyway

    # ------------------------------------------------------------ I/O and other directives

    def _relations_directive(self) -> tuple[Item, ...]:
        """``.input a, b(key=value, ...)``, ``.output ...`` and ``.printsize a, b``."""
        start = self._advance()
        names = [self._relation_name(f"`{start.text}`")]
        while self._at(","):
            self._advance()
            names.append(self._relation_name("`,`"))
        options: IOOptions = ()
        if self._at("(") and not self._starts_line(self.pos):
            if start.text == ".printsize":
                raise self._fail(
                    f"expected a new line after `.printsize {names[-1].text}`",
                    "`.printsize` takes only relation names",
                )
            options = self._io_options(start.text)
        if start.text == ".printsize":
            return tuple(PrintSizeDirective(n.text, self._span(start, n)) for n in names)
        node = InputDirective if start.text == ".input" else OutputDirective
        return tuple(node(n.text, self._span(start, n), options) for n in names)

    def _io_options(self, directive: str) -> IOOptions:
        self._advance()  # `(`
        options = self._comma_list(self._io_option, "expected `,` or `)` after an option")
        self._advance()  # the `)` that _comma_list stopped at
        self.diagnostics.extend(check_io_options(directive, options))
        return tuple((o.key, o.value) for o in options)

    def _io_option(self) -> IOOption:
        key = self._ident("expected an option name, e.g. `filename`")
        example = 'write `key=value`, e.g. `delimiter=","`'
        self._expect("=", f"expected `=` after `{key.text}`", example)
        value = self._peek()
        if value.kind is Kind.STRING:
            text = self._string(self._advance()).value
        elif value.kind in (Kind.IDENT, Kind.INT):
            text = self._advance().text
        else:
            raise self._fail(f"expected a value for `{key.text}`", 'e.g. `filename="edge.tsv"`')
        return IOOption(key.text, text, key.span, value.span)

    def _pragma(self) -> Pragma:
        """``.pragma "key" "value"`` or ``.pragma "key"``; only harmless keys pass."""
        start = self._advance()
        if self._peek().kind is not Kind.STRING:
            raise self._fail('expected a string after `.pragma`, e.g. `.pragma "jobs" "4"`')
        key_token = self._advance()
        key = self._string(key_token).value
        value, end = "", key_token
        if self._peek().kind is Kind.STRING and not self._starts_line(self.pos):
            end = self._advance()
            value = self._string(end).value
        if key not in PRAGMAS:
            self._report(f"unsupported pragma `{key}`", key_token.span, PRAGMA_NOTE)
        return Pragma(key, value, self._span(start, end))


def parse(text: str, file: str = "<input>") -> Program:
    """Parse a whole program; raise ``CheckError`` with every syntax error found."""
    program = Parser(text, file).parse_program()
    log.debug("parsed %s: %d items", file, len(program.items))
    return program
