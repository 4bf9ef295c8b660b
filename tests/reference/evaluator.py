"""A small, deliberately naive evaluator of Fixflow programs: the test oracle.

It interprets the AST (``fixflow.checker.ast``) directly and favours obviousness over speed.
It never imports pyspark and never uses Python eval/exec. Semantics (docs/language.md,
"Semantics of aggregates"; ``MraSpec`` in ``fixflow.checker.model``):

- Strata: strongly connected components of the IDB dependency graph, in topological order.
- A body denotes the set of its *distinct* satisfying variable assignments; alternative
  bodies of a rule each contribute their own assignments.
- Set relations (no aggregate rule): iterate to the least fixpoint (inflationary union).
- Aggregate relations: every rule of the relation contributes values to one aggregate,
  grouped by the other head arguments. ``count`` in a recursive stratum adds up the
  contributed values (``count[*]`` contributes 1 per assignment); outside recursion it counts
  assignments.
- Non-indexed recursion: naive Jacobi-style rounds S ← T(S) from S = ∅ for all relations of
  the stratum, until S does not change, or every termination clause holds (and relations
  without a clause are unchanged), or the iteration cap is reached.
- Iteration-indexed recursion (``r(i+1, ...) :- ... r(i, ...)``): X⁰ from the rules whose
  index argument is the literal ``0``; X^{n+1} = G(C ∪ F(X^n)) until X^{n+1} = X^n, the
  termination clause holds, or the cap. The result keeps the last X^n, index dropped.
- Termination clause ``{agg[Δv] op bound}``: ``agg`` over keys of |X^{n+1}(k) − X^n(k)|
  (a key missing on one side counts as 0 there), compared with ``bound``.
- Division of two ``number`` values truncates toward zero (int64 semantics); otherwise
  true division.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from fixflow.checker.ast import (
    Aggregate,
    Atom,
    BinOp,
    Body,
    Call,
    Cast,
    Comparison,
    Constraint,
    Expr,
    FloatLit,
    Head,
    Neg,
    Negation,
    NumberLit,
    Program,
    Rule,
    StringLit,
    SubAggregate,
    Termination,
    Var,
    Wildcard,
    expr_vars,
)

Value = int | float | str
Row = tuple[Value, ...]
Binding = dict[str, Value]
Database = dict[str, set[Row]]


class EvaluationError(Exception):
    """The program uses something this oracle does not interpret."""


@dataclass
class StratumStats:
    relations: tuple[str, ...]
    iterations: int
    capped: bool
    """True when the iteration cap stopped the stratum (the result is then unconverged)."""


@dataclass
class Stats:
    strata: list[StratumStats] = field(default_factory=list)

    @property
    def capped(self) -> bool:
        return any(s.capped for s in self.strata)


def evaluate(
    program: Program, facts: Mapping[str, list[tuple]], max_iterations: int = 1000
) -> dict[str, set[Row]]:
    """Every relation's rows (EDB and IDB) in declared column order, iteration index dropped."""
    return evaluate_with_stats(program, facts, max_iterations)[0]


def evaluate_with_stats(
    program: Program, facts: Mapping[str, list[tuple]], max_iterations: int = 1000
) -> tuple[dict[str, set[Row]], Stats]:
    evaluator = _Evaluator(program, max_iterations)
    return evaluator.run(facts)


# ---------------------------------------------------------------- expressions


class NoValue(Exception):
    """An expression with no value (``x % 0``, ``to_number("a")``): the binding is dropped."""


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _int64(value: int) -> int:
    """Two's-complement wraparound, as in Soufflé (C) and Spark (Java)."""
    return (value - INT64_MIN) % 2**64 + INT64_MIN


def _wrapped(value: int | float) -> int | float:
    """An int64 result wrapped around (Soufflé's C++ arithmetic); a float as it is."""
    return _int64(value) if isinstance(value, int) else value


def _truncated_int(value: float) -> int:
    if not math.isfinite(value) or not INT64_MIN <= math.trunc(value) <= INT64_MAX:
        raise NoValue(f"{value!r} does not fit a number")
    return math.trunc(value)


def _souffle_op(op: str, a: int | float, b: int | float) -> Value:
    """Soufflé's ``%``, ``^``, bitwise and logical operators, straight from their C meaning."""
    if op == "%":
        if b == 0:
            raise NoValue("x % 0")
        remainder = abs(a) % abs(b)  # C's remainder: the sign of the dividend
        return remainder if a >= 0 else -remainder
    if op == "^":
        try:
            power = float(a) ** float(b)
        except (OverflowError, ZeroDivisionError) as error:
            raise NoValue(str(error)) from error
        if isinstance(power, complex) or not math.isfinite(power):
            raise NoValue("no finite power")
        both_int = isinstance(a, int) and isinstance(b, int)
        return _truncated_int(power) if both_int else power
    assert isinstance(a, int) and isinstance(b, int), "the checker types these as numbers"
    logical = {"land": bool(a) and bool(b), "lor": bool(a) or bool(b), "lxor": bool(a) != bool(b)}
    if op in logical:
        return int(logical[op])
    shifts = {"bshl": lambda: _int64(a << (b & 63)), "bshr": lambda: a >> (b & 63)}
    if op in shifts:
        return shifts[op]()
    return {"band": a & b, "bor": a | b, "bxor": a ^ b}[op]


def _arith(op: str, left: Value, right: Value) -> Value:
    if isinstance(left, str) or isinstance(right, str):
        raise EvaluationError(f"arithmetic on a symbol: {left!r} {op} {right!r}")
    if op not in ("+", "-", "*", "/"):
        return _souffle_op(op, left, right)
    if op == "+":
        return _wrapped(left + right)
    if op == "-":
        return _wrapped(left - right)
    if op == "*":
        return _wrapped(left * right)
    if right == 0:
        raise NoValue("x / 0")  # Soufflé: undefined (C++); Fixflow drops the binding
    if isinstance(left, int) and isinstance(right, int):
        # Soufflé's number / number is C++'s: truncated toward zero, unlike Python's //
        if (left, right) == (INT64_MIN, -1):
            raise NoValue("INT64_MIN / -1 overflows")
        quotient = abs(left) // abs(right)
        return quotient if (left >= 0) == (right >= 0) else -quotient
    return left / right


def _call(func: str, args: list[Value]) -> Value:
    if func == "min":
        return min(args[0], args[1])
    if func == "max":
        return max(args[0], args[1])
    if func == "abs":
        return _wrapped(abs(args[0]))
    if func == "exp":
        return math.exp(args[0])
    if func == "log":
        return math.log(args[0])
    if func == "relu":
        return args[0] if args[0] > 0 else 0 * args[0]
    raise EvaluationError(f"unknown function {func}")


C_SPACES = " \t\n\v\f\r"
"""What C's ``isspace`` accepts in the "C" locale (``strtoll``/``strtod`` skip it)."""
FLOAT_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _convert(func: str, value: Value) -> Value:
    if func == "to_string":
        return (
            value
            if isinstance(value, str)
            else (str(value) if isinstance(value, int) else f"{value:.6f}")  # std::to_string
        )
    if func in ("to_number", "ftoi"):
        if isinstance(value, str):
            return _souffle_to_number(value)
        return value if isinstance(value, int) else _truncated_int(value)
    if isinstance(value, str):  # to_float of a symbol: std::stod's longest decimal prefix
        text = value.lstrip(C_SPACES)
        found = FLOAT_TEXT.match(text)
        hexadecimal = text.lstrip("+-")[:2].lower() == "0x"  # strtod's hex floats: no value
        parsed = float(found.group()) if found and not hexadecimal else math.inf
        if not math.isfinite(parsed):
            raise NoValue(f"not a float: {value!r}")
        return parsed
    return float(value)


def _souffle_to_number(text: str) -> int:
    """Soufflé's ``to_number`` (RamSignedFromString with base 0): ``0b``/``-0b`` is binary,
    ``0x``/``-0x`` hexadecimal, anything else decimal, each read as C's ``strtoll`` does
    (see ``_strtoll``). Where Soufflé stops with "wrong string provided", no value."""
    if text.startswith("-0b"):
        return _strtoll("-" + text[3:], 2)
    if text.startswith("0b"):
        return _strtoll(text[2:], 2)
    return _strtoll(text, 16 if text.startswith(("0x", "-0x")) else 10)


def _strtoll(text: str, base: int) -> int:
    """``std::stoll(text, nullptr, base)``: C-locale spaces, a sign, then the longest run of
    digits (after an optional ``0x`` in base 16); what follows is ignored. No digit, or a
    value outside int64: no value."""
    digits = "0123456789abcdef"[:base]
    i = len(text) - len(text.lstrip(C_SPACES))
    sign = -1 if text[i : i + 1] == "-" else 1
    i += text[i : i + 1] in ("+", "-")
    if (
        base == 16
        and text[i : i + 2].lower() == "0x"
        and text[i + 2 : i + 3].lower() in list(digits)
    ):
        i += 2
    start = i
    while i < len(text) and text[i].lower() in list(digits):
        i += 1
    if i == start:
        raise NoValue(f"not a number: {text!r}")
    value = sign * int(text[start:i], base)
    if not INT64_MIN <= value <= INT64_MAX:
        raise NoValue(f"out of range: {text!r}")
    return value


def _string_call(func: str, args: list[Value]) -> Value:
    if func == "cat":
        return "".join(str(a) for a in args)
    text = args[0]
    assert isinstance(text, str), "the checker types these as symbols"
    if func == "strlen":
        return len(text)
    start, count = args[1], args[2]
    assert isinstance(start, int) and isinstance(count, int)
    if not 0 <= start <= len(text):
        return ""
    return text[start:] if count < 0 else text[start : start + count]


def _constraint_holds(constraint: Constraint, binding: Mapping[str, Value]) -> bool:
    if not constraint.args:
        holds = constraint.func == "true"
    else:
        first, second = (eval_expr(a, binding) for a in constraint.args)
        assert isinstance(first, str) and isinstance(second, str)
        if constraint.func == "contains":
            holds = first in second
        else:  # `match` as Soufflé's std::regex_match: the whole string
            pattern = _python_regex(first)
            if pattern is None:  # Soufflé: "wrong pattern provided", match and !match false
                return False
            holds = pattern.fullmatch(second) is not None
    return holds != constraint.negated


POSIX_RANGES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "d": "0-9",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "s": " \\t\\n\\r\\f\\v",
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "w": "a-zA-Z0-9_",
    "xdigit": "0-9A-Fa-f",
}
"""C's "C"-locale classes, as the ranges of a Python character set."""


def _python_regex(pattern: str) -> re.Pattern[str] | None:
    """A C++ ECMAScript ``std::regex`` pattern as a Python ``re`` one (ASCII classes),
    written independently of fixflow.checker.regex; None where std::regex rejects it. Only
    what the goldens use is covered: POSIX classes in brackets, ``.``, ``$``, ``\\v``."""
    out, i, in_set = [], 0, False
    while i < len(pattern):
        char, following = pattern[i], pattern[i + 1 : i + 2]
        step = 2 if char == "\\" else 1
        if char == "\\":
            out.append({"v": r"\x0b", "0": r"\x00"}.get(following, char + following))
        elif in_set and pattern.startswith("[:", i):
            end = pattern.find(":]", i)
            if pattern[i + 2 : end] not in POSIX_RANGES:
                return None
            out.append(POSIX_RANGES[pattern[i + 2 : end]])
            step = end + 2 - i
        elif in_set:
            in_set = char != "]"
            out.append("\\[" if char == "[" else char)
        elif char == "(" and following == "?" and pattern[i + 2 : i + 3] not in (":", "=", "!"):
            return None  # lookbehind, named groups, flags: not ECMAScript
        else:
            in_set = char == "["
            out.append({".": "[^\\n\\r]", "$": r"\Z"}.get(char, char))
        i += step
    try:
        return re.compile("".join(out), re.ASCII)
    except re.error:
        return None


def eval_expr(expr: Expr, binding: Mapping[str, Value]) -> Value:
    match expr:
        case NumberLit(value=v) | FloatLit(value=v) | StringLit(value=v):
            return v
        case Var(name=name):
            if name not in binding:
                raise EvaluationError(f"unbound variable {name}")
            return binding[name]
        case BinOp(op=op, left=left, right=right):
            return _arith(op, eval_expr(left, binding), eval_expr(right, binding))
        case Neg(operand=operand):
            return _wrapped(-eval_expr(operand, binding))  # type: ignore[operator]
        case Cast(operand=operand):
            return eval_expr(operand, binding)  # `as` retypes; it never converts
        case Call(func="bnot", args=(operand,)):
            return ~eval_expr(operand, binding)  # type: ignore[operator]
        case Call(func="lnot", args=(operand,)):
            return int(eval_expr(operand, binding) == 0)
        case Call(func="itof" | "ftoi" | "to_float" | "to_number" | "to_string" as func):
            return _convert(func, eval_expr(expr.args[0], binding))
        case Call(func="cat" | "strlen" | "substr" as func, args=args):
            return _string_call(func, [eval_expr(a, binding) for a in args])
        case Call(func=func, args=args):
            return _call(func, [eval_expr(a, binding) for a in args])
        case Wildcard():
            raise EvaluationError("_ used as a value")
    raise EvaluationError(f"not an expression: {expr!r}")


def _compare(op: str, left: Value, right: Value) -> bool:
    if op == "=":
        return left == right
    if op == "!=":
        return left != right
    if op == "<":
        return left < right  # type: ignore[operator]
    if op == "<=":
        return left <= right  # type: ignore[operator]
    if op == ">":
        return left > right  # type: ignore[operator]
    return left >= right  # type: ignore[operator]


# ---------------------------------------------------------------- bodies


class _Indexes:
    """Hash indexes over one database snapshot, built on demand (the snapshot never changes
    while it is being read)."""

    def __init__(self, db: Mapping[str, set[Row]]) -> None:
        self.db = db
        self.cache: dict[tuple[str, tuple[int, ...]], dict[Row, list[Row]]] = {}

    def lookup(self, relation: str, positions: tuple[int, ...], key: Row) -> list[Row]:
        index = self.cache.get((relation, positions))
        if index is None:
            index = defaultdict(list)
            for row in self.db.get(relation, ()):
                index[tuple(row[p] for p in positions)].append(row)
            self.cache[(relation, positions)] = index
        return index.get(key, [])


def _is_bound(expr: Expr, binding: Mapping[str, Value]) -> bool:
    return expr_vars(expr) <= binding.keys()


# ---------------------------------------------------------------- body aggregates


@dataclass(frozen=True)
class _AggregateLiteral:
    """A Soufflé body aggregate, evaluated in place: its body is solved with its
    correlation variables (``keys``: those the enclosing body binds) bound, and the result
    bound to ``var``, which replaces the aggregate in the literal that used it. With
    several alternatives (``{ a ; b }``) it ranges over the set of their solutions projected
    on ``columns`` (keys, target variables, variables every alternative names). A
    ``min``/``max`` also binds its ``witnesses`` (variables the rule uses but binds only
    inside it), once per tuple reaching the extreme value, as Soufflé does."""

    func: str
    target: Expr | None
    bodies: tuple[Body, ...]
    var: str
    keys: frozenset[str]
    columns: frozenset[str]
    witnesses: frozenset[str] = frozenset()


def _outermost_aggregates(node: object) -> list[SubAggregate]:
    if isinstance(node, SubAggregate):
        return [node]
    children = {
        Atom: lambda n: n.args,
        Call: lambda n: n.args,
        Constraint: lambda n: n.args,
        Negation: lambda n: (n.atom,),
        Comparison: lambda n: (n.left, n.right),
        BinOp: lambda n: (n.left, n.right),
        Neg: lambda n: (n.operand,),
        Cast: lambda n: (n.operand,),
    }.get(type(node))
    found = (_outermost_aggregates(child) for child in (children(node) if children else ()))
    return [a for aggregates in found for a in aggregates]


def _names_outside(node: object) -> set[str]:
    """Variable names of ``node`` outside its body aggregates."""
    if isinstance(node, SubAggregate):
        return set()
    if isinstance(node, Var):
        return {node.name}
    if dataclasses.is_dataclass(node):
        values = [getattr(node, f.name) for f in dataclasses.fields(node)]
        return set().union(*(_names_outside(v) for v in values))
    if isinstance(node, tuple):
        return set().union(*(_names_outside(v) for v in node))
    return set()


def _names_anywhere(node: object) -> set[str]:
    if isinstance(node, Var):
        return {node.name}
    if dataclasses.is_dataclass(node):
        fields = dataclasses.fields(node)
        return set().union(*(_names_anywhere(getattr(node, f.name)) for f in fields))
    if isinstance(node, tuple):
        return set().union(*(_names_anywhere(v) for v in node))
    return set()


def _replace_aggregates(node: object, by: dict[int, str]) -> object:
    if isinstance(node, SubAggregate) and id(node) in by:
        return Var(by[id(node)])
    if isinstance(node, tuple):
        return tuple(_replace_aggregates(v, by) for v in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, SubAggregate | type):
        fields = dataclasses.fields(node)
        changes = {f.name: _replace_aggregates(getattr(node, f.name), by) for f in fields}
        return dataclasses.replace(node, **changes)  # type: ignore[type-var]
    return node


def _bound_outside(body: Body) -> set[str]:
    """What ``body`` binds outside its aggregates (an aggregate's value is bound): the
    variables of its positive atoms, then of ``X = e`` with ``e`` bound, repeatedly."""
    bound = {
        a.name
        for lit in body.literals
        if isinstance(lit, Atom)
        for a in lit.args
        if isinstance(a, Var)
    }
    changed = True
    while changed:
        changed = False
        for lit in body.literals:
            if not (isinstance(lit, Comparison) and lit.op == "="):
                continue
            for side, other in ((lit.left, lit.right), (lit.right, lit.left)):
                free = _names_outside(side) - bound
                if isinstance(side, Var) and free and _names_outside(other) <= bound:
                    bound.add(side.name)
                    changed = True
    return bound


def _expand_body(body: Body, used: set[str], fresh: Iterator[int]) -> Body:
    """``body`` with every aggregate moved into an ``_AggregateLiteral`` before its use;
    ``used``: the names the head of the body's rule uses."""
    bound = _bound_outside(body)
    unbound = (used | _names_outside(body.literals)) - bound
    literals: list[object] = []
    for literal in body.literals:
        by: dict[int, str] = {}
        for aggregate in _outermost_aggregates(literal):
            by[id(aggregate)] = var = f"?agg{next(fresh)}"
            keys = frozenset(_names_anywhere(aggregate) & bound)
            binds = set().union(*(_bound_outside(b) for b in aggregate.bodies))
            witnesses = frozenset(unbound & binds) if aggregate.func in ("min", "max") else None
            inner_used = keys | expr_vars(aggregate.target) | (witnesses or set())
            inner = tuple(
                _expand_body(_named_wildcards(b, fresh), inner_used, fresh)
                for b in aggregate.bodies
            )
            shared = set.intersection(*(_names_outside(b.literals) for b in aggregate.bodies))
            columns = keys | shared | expr_vars(aggregate.target) | (witnesses or set())
            literals.append(
                _AggregateLiteral(
                    aggregate.func,
                    aggregate.target,
                    inner,
                    var,
                    keys,
                    columns,
                    witnesses or frozenset(),
                )
            )
        literals.append(_replace_aggregates(literal, by) if by else literal)
    return Body(tuple(literals), body.span)  # type: ignore[arg-type]


def _named_wildcards(body: Body, fresh: Iterator[int]) -> Body:
    """Soufflé aggregates over tuples: ``count : { r(x, _) }`` counts r's rows."""
    literals = tuple(
        Atom(lit.relation, tuple(_fresh_if_wildcard(a, fresh) for a in lit.args))
        if isinstance(lit, Atom)
        else lit
        for lit in body.literals
    )
    return Body(literals)


def _fresh_if_wildcard(arg: Expr, fresh: Iterator[int]) -> Expr:
    return Var(f"?w{next(fresh)}") if isinstance(arg, Wildcard) else arg


def _head_aggregates_to_body(rule: Rule) -> Rule:
    """An aggregate in the head is evaluated as ``?hN = aggregate`` after the body."""
    found = [a for arg in rule.head.args for a in _outermost_aggregates(arg)]
    if not found:
        return rule
    by = {id(a): f"?h{i}" for i, a in enumerate(found)}
    head = _replace_aggregates(rule.head, by)
    tests = tuple(Comparison("=", Var(by[id(a)]), a) for a in found)
    bodies = tuple(Body((*b.literals, *tests), b.span) for b in rule.bodies)
    return Rule(head, bodies, rule.termination, rule.span)  # type: ignore[arg-type]


def _expand_rule(rule: Rule) -> Rule:
    rule = _head_aggregates_to_body(rule)
    if not any(_outermost_aggregates(lit) for b in rule.bodies for lit in b.literals):
        return rule
    fresh = itertools.count(1)
    bodies = tuple(_expand_body(b, _names_outside(rule.head), fresh) for b in rule.bodies)
    return Rule(rule.head, bodies, rule.termination, rule.span)


def _aggregate_rows(
    literal: _AggregateLiteral, binding: Binding, indexes: _Indexes
) -> list[Binding]:
    initial = {k: binding[k] for k in literal.keys}
    if len(literal.bodies) == 1:
        rows = solve_body(literal.bodies[0], indexes, initial)
    else:
        projected = {
            tuple(sorted((k, v) for k, v in row.items() if k in literal.columns))
            for body in literal.bodies
            for row in solve_body(body, indexes, initial)
        }
        rows = [dict(row) for row in projected]
    return rows


def _aggregate_bindings(
    literal: _AggregateLiteral, binding: Binding, indexes: _Indexes
) -> Iterator[Binding]:
    """``binding`` with the aggregate's value, and its witnesses: every distinct
    assignment of them among the rows whose target is the extreme value."""
    rows = _aggregate_rows(literal, binding, indexes)
    value = _aggregate_value(literal, rows)
    if value is None:
        return
    if not literal.witnesses:
        yield {**binding, literal.var: value}
        return
    assert literal.target is not None
    reached = {
        tuple(sorted((w, row[w]) for w in literal.witnesses))
        for row in rows
        if eval_expr(literal.target, row) == value
    }
    for witnesses in sorted(reached):
        yield {**binding, literal.var: value, **dict(witnesses)}


def _aggregate_value(literal: _AggregateLiteral, rows: list[Binding]) -> Value | None:
    if literal.func == "count":
        return len(rows)
    assert literal.target is not None
    values = [eval_expr(literal.target, row) for row in rows]
    if literal.func == "sum":
        return math.fsum(values) if any(isinstance(v, float) for v in values) else sum(values)  # type: ignore[arg-type]
    if not values:
        return None
    if literal.func == "mean":
        return math.fsum(values) / len(values)  # type: ignore[arg-type]
    return min(values) if literal.func == "min" else max(values)


def _ready(literal: object, binding: Mapping[str, Value]) -> bool:
    """Whether a literal can be evaluated now: atoms need every non-variable argument bound,
    negations and tests need everything bound, ``X = e`` needs one side bound."""
    match literal:
        case _AggregateLiteral(keys=keys):
            return keys <= binding.keys()
        case Atom(args=args):
            return all(isinstance(a, Var | Wildcard) or _is_bound(a, binding) for a in args)
        case Negation(atom=atom):
            return all(isinstance(a, Wildcard) or _is_bound(a, binding) for a in atom.args)
        case Constraint(args=args):
            return all(_is_bound(a, binding) for a in args)
        case Comparison(op=op, left=left, right=right):
            if _is_bound(left, binding) and _is_bound(right, binding):
                return True
            if op != "=":
                return False
            return (isinstance(left, Var) and _is_bound(right, binding)) or (
                isinstance(right, Var) and _is_bound(left, binding)
            )
    raise EvaluationError(f"unknown literal {literal!r}")


def _match_atom(atom: Atom, binding: Binding, indexes: _Indexes) -> Iterator[Binding]:
    bound_positions = tuple(
        p for p, a in enumerate(atom.args) if not isinstance(a, Wildcard) and _is_bound(a, binding)
    )
    key = tuple(eval_expr(atom.args[p], binding) for p in bound_positions)
    for row in indexes.lookup(atom.relation, bound_positions, key):
        if len(row) != len(atom.args):
            raise EvaluationError(f"arity mismatch for {atom.relation}")
        extended = dict(binding)
        if _unify_free(atom, row, extended):
            yield extended


def _unify_free(atom: Atom, row: Row, binding: Binding) -> bool:
    """Bind the atom's still-free variables to ``row``; a repeated variable must agree."""
    for arg, value in zip(atom.args, row, strict=True):
        if isinstance(arg, Var):
            if arg.name in binding and binding[arg.name] != value:
                return False
            binding[arg.name] = value
    return True


def _apply(literal: object, binding: Binding, indexes: _Indexes) -> Iterator[Binding]:
    match literal:
        case _AggregateLiteral():
            yield from _aggregate_bindings(literal, binding, indexes)
        case Atom():
            yield from _match_atom(literal, binding, indexes)
        case Negation(atom=atom):
            # every variable is bound (see _ready), so a match only tests presence
            if next(_match_atom(atom, binding, indexes), None) is None:
                yield binding
        case Comparison(op=op, left=left, right=right):
            try:
                yield from list(_apply_comparison(op, left, right, binding))
            except NoValue:
                return  # as in the engine: an expression without a value drops the binding
        case Constraint():
            try:
                if _constraint_holds(literal, binding):
                    yield binding
            except NoValue:
                return


def _apply_comparison(op: str, left: Expr, right: Expr, binding: Binding) -> Iterator[Binding]:
    if _is_bound(left, binding) and _is_bound(right, binding):
        if _compare(op, eval_expr(left, binding), eval_expr(right, binding)):
            yield binding
        return
    # an assignment: exactly one side is a free variable (checked by _ready)
    var, expr = (
        (left, right)
        if isinstance(left, Var) and not _is_bound(left, binding)
        else (
            right,
            left,
        )
    )
    assert isinstance(var, Var)
    yield {**binding, var.name: eval_expr(expr, binding)}


def _solve(literals: tuple, binding: Binding, indexes: _Indexes) -> Iterator[Binding]:
    if not literals:
        yield binding
        return
    # filters and assignments first (cheap), then the first evaluable atom
    order = sorted(range(len(literals)), key=lambda k: isinstance(literals[k], Atom))
    pick = next((k for k in order if _ready(literals[k], binding)), None)
    if pick is None:
        raise EvaluationError(f"no literal can be evaluated with {sorted(binding)} bound")
    rest = literals[:pick] + literals[pick + 1 :]
    for extended in _apply(literals[pick], binding, indexes):
        yield from _solve(rest, extended, indexes)


def solve_body(body: Body, indexes: _Indexes, initial: Binding | None = None) -> list[Binding]:
    """The distinct satisfying assignments of a body's variables (extending ``initial``)."""
    seen: dict[frozenset, Binding] = {}
    for binding in _solve(body.literals, dict(initial or {}), indexes):
        seen.setdefault(frozenset(binding.items()), binding)
    return list(seen.values())


# ---------------------------------------------------------------- program structure


@dataclass(frozen=True)
class _AggInfo:
    func: str
    value_pos: int


def _index_var(head: Head) -> str | None:
    """``i`` when the head's first argument is ``i+1`` (an iteration-indexed head)."""
    if not head.args:
        return None
    first = head.args[0]
    if (
        isinstance(first, BinOp)
        and first.op == "+"
        and isinstance(first.left, Var)
        and isinstance(first.right, NumberLit)
        and first.right.value == 1
    ):
        return first.left.name
    return None


def _body_relations(rule: Rule) -> set[str]:
    names: set[str] = set()
    for body in rule.bodies:
        for literal in body.literals:
            if isinstance(literal, Atom):
                names.add(literal.relation)
            elif isinstance(literal, Negation):
                names.add(literal.atom.relation)
            elif isinstance(literal, _AggregateLiteral):
                names |= _body_relations(Rule(Head("", ()), literal.bodies))
    return names


def _sccs(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components in topological order (dependencies first), via
    reachability: small programs only, so the quadratic closure is fine and obvious."""
    reach = {n: _reachable(n, edges) for n in nodes}
    components: list[list[str]] = []
    assigned: set[str] = set()
    for n in nodes:
        if n not in assigned:
            component = [m for m in nodes if m == n or (m in reach[n] and n in reach[m])]
            assigned.update(component)
            components.append(component)
    ordered: list[list[str]] = []
    while components:
        # pick a component none of whose dependencies is still pending
        pending = {m for c in components for m in c}
        for c in components:
            deps = {d for m in c for d in edges.get(m, ()) if d not in c}
            if not deps & pending:
                ordered.append(c)
                components.remove(c)
                break
    return ordered


def _reachable(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(edges.get(start, ()))
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(edges.get(n, ()))
    return seen


# ---------------------------------------------------------------- the evaluator


class _Evaluator:
    def __init__(self, program: Program, max_iterations: int) -> None:
        self.program = program
        self.max_iterations = max_iterations
        self.rules: dict[str, list[Rule]] = defaultdict(list)
        self.loaded: dict[str, set[Row]] = {}
        """Loaded facts of relations that rules also define (set by ``run``)."""
        self.float_columns = {
            d.relation: tuple(a.type == "float" for a in d.attributes) for d in program.declarations
        }
        """Per relation, which columns are floats: an integer stored there is a float, so
        that a later ``/`` on it divides as floats do."""
        for rule in program.rules:
            self.rules[rule.head.relation].append(_expand_rule(rule))
        self.aggs: dict[str, _AggInfo] = {}
        for rel, rules in self.rules.items():
            for rule in rules:
                for pos, arg in enumerate(rule.head.args):
                    if isinstance(arg, Aggregate):
                        self.aggs[rel] = _AggInfo(arg.func, pos)
        self.indexed = {
            rel
            for rel, rules in self.rules.items()
            if rel in self.aggs and any(_index_var(r.head) for r in rules)
        }

    # -- driver

    def run(self, facts: Mapping[str, list[tuple]]) -> tuple[dict[str, set[Row]], Stats]:
        db: Database = {d.relation: set() for d in self.program.declarations}
        for rel, rows in facts.items():
            db[rel] = {tuple(r) for r in rows}
        # Soufflé: an input relation that rules also define holds its loaded facts too.
        self.loaded = {rel: set(db[rel]) for rel in facts if rel in self.rules}
        stats = Stats()
        idb = list(self.rules)
        deps = {rel: _body_relations_all(self.rules[rel]) & set(idb) for rel in idb}
        for component in _sccs(idb, deps):
            recursive = len(component) > 1 or component[0] in deps[component[0]]
            stats.strata.append(self._stratum(component, recursive, db))
        return {rel: self._strip(rel, rows) for rel, rows in db.items()}, stats

    def _strip(self, rel: str, rows: set[Row]) -> set[Row]:
        return {r[1:] for r in rows} if rel in self.indexed else rows

    def _stratum(self, component: list[str], recursive: bool, db: Database) -> StratumStats:
        if not recursive:
            db[component[0]] = self._derive(component[0], db, recursive=False)
            return StratumStats(tuple(component), 1, False)
        if not any(rel in self.aggs for rel in component):
            return self._set_fixpoint(component, db)
        if any(rel in self.indexed for rel in component):
            if len(component) != 1:
                raise EvaluationError("iteration-indexed mutual recursion is not supported")
            return self._indexed(component[0], db)
        return self._naive(component, db)

    # -- rule firing

    def _contributions(
        self, rules: list[Rule], db: Database, recursive: bool, iteration: int | None = None
    ) -> Iterator[Row]:
        """One head row per distinct body assignment of every body of ``rules``; the
        aggregate position holds the contributed value (1 for ``count[*]``). ``iteration``
        binds the index variable of iteration-indexed heads, also in bodies that do not
        mention it (PageRank's ``node(Y), r = 0.15``)."""
        indexes = _Indexes(db)
        for rule in rules:
            index_var = _index_var(rule.head)
            initial = {index_var: iteration} if index_var and iteration is not None else {}
            for body in rule.bodies:
                for binding in solve_body(body, indexes, initial):
                    try:
                        yield self._head_row(rule.head, binding, recursive)
                    except NoValue:
                        continue  # a head value without a value (`x / 0`): no row

    def _head_row(self, head: Head, binding: Binding, recursive: bool) -> Row:
        row: list[Value] = []
        for arg in head.args:
            if isinstance(arg, Aggregate):
                counts_assignments = arg.func == "count" and (arg.arg is None or not recursive)
                value = 1 if counts_assignments else eval_expr(arg.arg, binding)  # type: ignore[arg-type]
                row.append(value)
            else:
                row.append(eval_expr(arg, binding))
        floats = self.float_columns.get(head.relation, ())
        return tuple(
            float(v) if is_float and type(v) is int else v
            for v, is_float in zip(row, floats or (False,) * len(row), strict=True)
        )

    def _derive(self, rel: str, db: Database, recursive: bool) -> set[Row]:
        rows = list(self._contributions(self.rules[rel], db, recursive))
        rows += self.loaded.get(rel, ())
        info = self.aggs.get(rel)
        if info is None:
            return set(rows)
        return _group(rows, info)

    # -- strategies

    def _set_fixpoint(self, component: list[str], db: Database) -> StratumStats:
        for n in range(1, self.max_iterations + 1):
            changed = False
            new = {rel: self._derive(rel, db, recursive=True) for rel in component}
            for rel in component:
                if not new[rel] <= db[rel]:
                    db[rel] = db[rel] | new[rel]
                    changed = True
            if not changed:
                return StratumStats(tuple(component), n, False)
        return StratumStats(tuple(component), self.max_iterations, True)

    def _naive(self, component: list[str], db: Database) -> StratumStats:
        for rel in component:
            db[rel] = set()
        clauses = {rel: c for rel in component if (c := self._clause(rel)) is not None}
        for n in range(1, self.max_iterations + 1):
            new = {rel: self._derive(rel, db, recursive=True) for rel in component}
            unchanged = {rel for rel in component if new[rel] == db[rel]}
            done = len(unchanged) == len(component) or (
                bool(clauses)
                and all(self._clause_holds(rel, c, db[rel], new[rel]) for rel, c in clauses.items())
                and all(rel in unchanged for rel in component if rel not in clauses)
            )
            db.update(new)
            if done:
                return StratumStats(tuple(component), n, False)
        return StratumStats(tuple(component), self.max_iterations, True)

    def _indexed(self, rel: str, db: Database) -> StratumStats:
        base = [r for r in self.rules[rel] if _index_var(r.head) is None]
        step = [r for r in self.rules[rel] if _index_var(r.head) is not None]
        info = self.aggs[rel]
        # X⁰: the base rules (index literal 0), combined by G like every contribution
        initial = list(self._contributions(base, db, recursive=True))
        current = _group([row[1:] for row in initial], _shift(info))
        clause = self._clause(rel)
        for n in range(self.max_iterations):
            db[rel] = {(n, *row) for row in current}
            produced = list(self._contributions(step, db, recursive=True, iteration=n))
            nxt = _group([row[1:] for row in produced], _shift(info))
            stop = nxt == current or (
                clause is not None and self._clause_holds(rel, clause, current, nxt, shift=1)
            )
            current = nxt
            if stop:
                db[rel] = {(n + 1, *row) for row in current}
                return StratumStats((rel,), n + 1, False)
        db[rel] = {(self.max_iterations, *row) for row in current}
        return StratumStats((rel,), self.max_iterations, True)

    # -- termination

    def _clause(self, rel: str) -> Termination | None:
        return next((r.termination for r in self.rules[rel] if r.termination), None)

    def _clause_holds(
        self, rel: str, clause: Termination, old: set[Row], new: set[Row], shift: int = 0
    ) -> bool:
        pos = self.aggs[rel].value_pos - shift
        before, after = _by_key(old, pos), _by_key(new, pos)
        deltas = [abs(after.get(k, 0) - before.get(k, 0)) for k in before.keys() | after.keys()]
        measured = _aggregate_deltas(clause.func, deltas)
        return _compare(clause.op, measured, eval_expr(clause.bound, {}))


def _body_relations_all(rules: list[Rule]) -> set[str]:
    return set().union(*(_body_relations(r) for r in rules))


def _shift(info: _AggInfo) -> _AggInfo:
    """The aggregate position once the iteration index column is removed."""
    return _AggInfo(info.func, info.value_pos - 1)


def _by_key(rows: set[Row], pos: int) -> dict[Row, Value]:
    return {r[:pos] + r[pos + 1 :]: r[pos] for r in rows}


def _aggregate_deltas(func: str, deltas: list[Value]) -> Value:
    if func == "sum":
        return sum(deltas)
    if func == "max":
        return max(deltas, default=0)
    if func == "min":
        return min(deltas, default=0)
    if func == "count":
        return sum(1 for d in deltas if d != 0)
    return sum(deltas) / len(deltas) if deltas else 0  # mean


def _group(rows: list[Row], info: _AggInfo) -> set[Row]:
    """Combine contributed values per group (the head's other arguments) with G."""
    groups: dict[Row, list[Value]] = defaultdict(list)
    pos = info.value_pos
    for row in rows:
        groups[row[:pos] + row[pos + 1 :]].append(row[pos])
    result: set[Row] = set()
    for key, values in groups.items():
        value = _combine(info.func, values)
        result.add((*key[:pos], value, *key[pos:]))
    return result


def _combine(func: str, values: list[Value]) -> Value:
    if func == "min":
        return min(values)
    if func == "max":
        return max(values)
    if func in ("sum", "count"):
        # count contributions are 1 per assignment, or partial counts inside recursion
        return math.fsum(values) if any(isinstance(v, float) for v in values) else sum(values)
    return math.fsum(values) / len(values)  # mean
