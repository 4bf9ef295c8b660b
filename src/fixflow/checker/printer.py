"""The pretty-printer: any AST node → canonical Fixflow text.

``parse(pretty(program)) == program`` holds for every program the parser accepts (and for
every well-formed AST): parentheses appear only where precedence needs them, floats print
in a form that reads back as the same float, strings are re-escaped, and termination
clauses use ``Δ``.
"""

from __future__ import annotations

import math
import re

from fixflow.checker.ast import (
    AGGREGATE_FUNCS,
    Aggregate,
    Atom,
    Attribute,
    BinOp,
    Body,
    Call,
    Cast,
    Comparison,
    Constraint,
    Declaration,
    FloatLit,
    Head,
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
    StringLit,
    SubAggregate,
    Termination,
    TypeDeclaration,
    Var,
    Wildcard,
)
from fixflow.checker.lexer import LINE_BREAKS

INDENT = "    "
MAX_LINE = 100
"""A one-body rule longer than this is laid out like a rule with several bodies."""
# Binding strength; higher binds tighter (Soufflé's order). Prefix operators (`-`, `bnot`,
# `lnot`) bind tighter than every binary operator but `^`; atoms of expressions sit above.
PRECEDENCE = {
    "lor": 1,
    "lxor": 2,
    "land": 3,
    "bor": 4,
    "bxor": 5,
    "band": 6,
    "bshl": 7,
    "bshr": 7,
    "+": 8,
    "-": 8,
    "*": 9,
    "/": 9,
    "%": 9,
    "^": 11,
}
UNARY_PRECEDENCE = 10
ATOMIC_PRECEDENCE = 12
BARE_VALUE = re.compile(r"[A-Za-z][A-Za-z0-9_']*|[0-9]+")
"""An I/O option value that reads back unquoted: a name or digits."""
NAMED_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def pretty(node: object) -> str:
    """The canonical text of a Program (one item per line, ending with a newline) or of any
    other AST node."""
    match node:
        case Program():
            return _program(node)
        case (
            Declaration()
            | Attribute()
            | TypeDeclaration()
            | InputDirective()
            | OutputDirective()
            | PrintSizeDirective()
            | Pragma()
        ):
            return _declaration_item(node)
        case Rule():
            return _rule(node)
        case Head(relation=relation, args=args) | Atom(relation=relation, args=args):
            return f"{relation}({', '.join(pretty(a) for a in args)})"
        case Body(literals=literals):
            return ", ".join(pretty(lit) for lit in literals)
        case Negation(atom=atom):
            return f"!{pretty(atom)}"
        case Comparison(op=op, left=left, right=right):
            return f"{pretty(left)} {op} {pretty(right)}"
        case Constraint(func=func, args=args, negated=negated):
            call = f"{func}({', '.join(_expr(a) for a in args)})" if args else func
            return f"!{call}" if negated else call
        case Termination(func=func, var=var, op=op, bound=bound):
            return f"{{{func}[Δ{var}] {op} {pretty(bound)}}}"
        case Aggregate(func=func, arg=arg):
            return f"{func}[{'*' if arg is None else pretty(arg)}]"
    return _expr(node)


def _declaration_item(node: Item | Attribute) -> str:
    """A directive or declaration; an attribute prints the type name as written."""
    match node:
        case Declaration(relation=relation, attributes=attributes):
            return f".decl {relation}({', '.join(pretty(a) for a in attributes)})"
        case Attribute(name=name, type=type_name, declared=declared):
            return f"{name}: {declared or type_name}"
        case TypeDeclaration(name=name, op=op, members=members):
            return f".type {name} {op} {' | '.join(members)}"
        case InputDirective(relation=relation, options=options):
            return f".input {relation}{_io_options(options)}"
        case OutputDirective(relation=relation, options=options):
            return f".output {relation}{_io_options(options)}"
        case PrintSizeDirective(relation=relation):
            return f".printsize {relation}"
        case Pragma(key=key, value=value):
            return f".pragma {quote(key)} {quote(value)}" if value else f".pragma {quote(key)}"
    raise TypeError(f"not a declaration or directive: {node!r}")


def _io_options(options: IOOptions) -> str:
    """``(IO=file, filename="e.tsv")``: names and integers bare, anything else quoted."""
    if not options:
        return ""
    shown = (f"{k}={v if BARE_VALUE.fullmatch(v) else quote(v)}" for k, v in options)
    return f"({', '.join(shown)})"


def _program(program: Program) -> str:
    """Items one per line; a blank line where directives give way to rules and back."""
    lines: list[str] = []
    previous_is_rule: bool | None = None
    for item in program.items:
        is_rule = isinstance(item, Rule)
        if previous_is_rule is not None and is_rule != previous_is_rule:
            lines.append("")
        lines.append(pretty(item))
        previous_is_rule = is_rule
    return "".join(line + "\n" for line in lines)


def _rule(rule: Rule) -> str:
    """``head.`` for a fact, ``head :- body.`` for one body, and for several bodies (or
    one too long for a line)::

        head :-
            body1 ;
            body2
            {sum[Δr] < 0.001}.
    """
    head = pretty(rule.head)
    termination = "" if rule.termination is None else pretty(rule.termination)
    bodies = [b for b in rule.bodies if b.literals]
    if len(bodies) <= 1:
        text = head if not bodies else f"{head} :- {pretty(bodies[0])}"
        one_line = f"{text} {termination}." if termination else f"{text}."
        if not bodies or len(one_line) <= MAX_LINE:
            return one_line
    lines = [f"{head} :-"]
    lines += [f"{INDENT}{pretty(body)} ;" for body in bodies[:-1]]
    lines.append(f"{INDENT}{pretty(bodies[-1])}")
    if termination:
        lines.append(f"{INDENT}{termination}")
    return "\n".join(lines) + "."


# ---------------------------------------------------------------- expressions


def _precedence(node: object) -> int:
    match node:
        case BinOp(op=op):
            return PRECEDENCE[op]
        case Neg() | Call(func="bnot" | "lnot"):
            return UNARY_PRECEDENCE
        case NumberLit(value=value) | FloatLit(value=value) if value < 0 or _is_negative_zero(
            value
        ):
            return UNARY_PRECEDENCE  # printed with a leading minus
    return ATOMIC_PRECEDENCE


def _is_negative_zero(value: float) -> bool:
    return value == 0 and math.copysign(1.0, value) < 0


def _expr(node: object) -> str:
    match node:
        case Var(name=name):
            return name
        case Wildcard():
            return "_"
        case NumberLit(value=value):
            return str(value)
        case FloatLit(value=value):
            return format_float(value)
        case StringLit(value=value):
            return quote(value)
        case Call(func="bnot" | "lnot" as func, args=(operand,)):
            return f"{func} {_wrap(operand, _precedence(operand) < UNARY_PRECEDENCE)}"
        case Call(func=func, args=args):
            return f"{func}({', '.join(_expr(a) for a in args)})"
        case Neg(operand=operand):
            return _negation(operand)
        case BinOp(op="^", left=left, right=right):
            # Right-associative, and its exponent may be any prefix expression.
            left_text = _wrap(left, _precedence(left) <= PRECEDENCE["^"])
            right_text = _wrap(right, _precedence(right) < UNARY_PRECEDENCE)
            return f"{left_text} ^ {right_text}"
        case BinOp(op=op, left=left, right=right):
            own = PRECEDENCE[op]
            # Left-associative: the right operand needs parentheses at equal precedence.
            left_text = _wrap(left, _precedence(left) < own)
            right_text = _wrap(right, _precedence(right) <= own)
            return f"{left_text} {op} {right_text}"
        case Cast(operand=operand, type_name=type_name):
            return f"as({_expr(operand)}, {type_name})"
        case Aggregate():
            return pretty(node)
        case SubAggregate(func=func, target=target, bodies=bodies):
            head = func if target is None else f"{func} {_target(target)}"
            return f"{head} : {{ {' ; '.join(pretty(b) for b in bodies)} }}"
    raise TypeError(f"not an AST node: {node!r}")


def _target(target: object) -> str:
    """A body aggregate's target. A variable named like an aggregate (``sum``) followed
    by ``-`` or ``(`` and, later, the target's ``:`` would read back as an aggregate of its
    own, so a target mentioning one is parenthesized: ``min (sum - x) : {...}``."""
    text = _expr(target)
    names = _var_names(target)
    return f"({text})" if names & set(AGGREGATE_FUNCS) else text


def _var_names(node: object) -> set[str]:
    match node:
        case Var(name=name):
            return {name}
        case BinOp(left=left, right=right):
            return _var_names(left) | _var_names(right)
        case Neg(operand=operand) | Cast(operand=operand):
            return _var_names(operand)
        case Call(args=args):
            return set().union(*(_var_names(a) for a in args))
    return set()  # literals, and nested aggregates, which print their own targets


def _wrap(node: object, parenthesize: bool) -> str:
    text = _expr(node)
    return f"({text})" if parenthesize else text


def _negation(operand: object) -> str:
    """``-x``. A minus written directly before a number literal reads back as a negative
    literal, so ``Neg(NumberLit(5))`` prints as ``-(5)`` to keep its shape."""
    if isinstance(operand, NumberLit | FloatLit) and _precedence(operand) == ATOMIC_PRECEDENCE:
        return f"-({_expr(operand)})"
    text = _wrap(operand, _precedence(operand) < UNARY_PRECEDENCE)
    return f"- {text}" if text.startswith("-") else f"-{text}"


def format_float(value: float) -> str:
    """The shortest text that reads back as exactly ``value`` and always lexes as a float
    (``1.0``, ``0.15``, ``1e-05``, ``1e+16``)."""
    if not math.isfinite(value):
        raise ValueError(f"a float literal must be finite, not {value!r}")
    text = repr(value)
    return text if any(c in text for c in ".eE") else text + ".0"


def quote(value: str) -> str:
    """A string literal for ``value``: quotes, backslashes and unprintable characters escaped."""
    return '"' + "".join(_escape(c) for c in value) + '"'


def _escape(char: str) -> str:
    if char in NAMED_ESCAPES:
        return NAMED_ESCAPES[char]
    if char in LINE_BREAKS or not char.isprintable():
        code = ord(char)
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return char
