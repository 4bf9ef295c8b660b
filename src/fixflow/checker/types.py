"""Type inference for rule bodies and heads.

Types are ``number`` (int64), ``float`` and ``symbol``. ``number`` widens to ``float``
(an int literal or an integer value may land in a float column); the reverse is a
narrowing and an error, and mixing ``symbol`` with either numeric type is an error.
``/`` on two ``number`` operands is a ``number``, truncated toward zero as in Soufflé (C++):
``-7 / 2`` is ``-3``; with a ``float`` operand it is a ``float``.
``%``, the bitwise and the logical operators take ``number`` operands only (as in Soufflé,
where they are integer operators): a float operand is an error, not a truncation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fixflow.checker.ast import (
    Aggregate,
    Atom,
    Attribute,
    BinOp,
    Body,
    Call,
    Cast,
    Comparison,
    Constraint,
    Expr,
    FloatLit,
    Neg,
    Negation,
    NumberLit,
    Span,
    StringLit,
    TypeName,
    Var,
    Wildcard,
    body_atoms,
    expr_vars,
)
from fixflow.checker.diagnostics import Diagnostic

NUMERIC = ("number", "float")
INTEGER_OPS = frozenset(
    ("%", "band", "bor", "bxor", "bshl", "bshr", "land", "lor", "lxor", "bnot", "lnot")
)
"""Operators defined on ``number`` only; they yield a ``number``."""
ArgKind = str
"""What a function argument accepts: a type name, ``numeric`` or ``any``."""
FUNCTION_SIGNATURES: dict[str, tuple[tuple[ArgKind, ...], str]] = {
    "min": (("numeric", "numeric"), "join"),
    "max": (("numeric", "numeric"), "join"),
    "abs": (("numeric",), "join"),
    "relu": (("numeric",), "join"),
    "exp": (("numeric",), "float"),
    "log": (("numeric",), "float"),
    "bnot": (("number",), "number"),
    "lnot": (("number",), "number"),
    "itof": (("number",), "float"),
    "ftoi": (("numeric",), "number"),
    "to_float": (("any",), "float"),
    "to_number": (("any",), "number"),
    "to_string": (("any",), "symbol"),
    "cat": (("symbol",), "symbol"),  # variadic: every argument is a symbol
    "strlen": (("symbol",), "number"),
    "substr": (("symbol", "number", "number"), "symbol"),
    "contains": (("symbol", "symbol"), "number"),
    "match": (("symbol", "symbol"), "number"),
}
"""Argument kinds and result of each built-in (``join``: the numeric join of the
arguments); ``contains`` and ``match`` are constraints, typed like functions."""
CONVERSIONS: dict[tuple[str, str], str] = {
    ("number", "float"): "itof",
    ("float", "number"): "ftoi",
    ("number", "symbol"): "to_string",
    ("float", "symbol"): "to_string",
    ("symbol", "number"): "to_number",
    ("symbol", "float"): "to_float",
}
"""The built-in that converts a value of one base type to another: what a rejected
``as(x, T)`` suggests instead."""


def arith_result(op: str, left: TypeName, right: TypeName) -> TypeName:
    """The type of ``left op right`` on well-typed operands."""
    if op in INTEGER_OPS:
        return "number"
    return join_numeric(left, right)  # `^` included: number ^ number is a number


def call_result(func: str, arg_types: list[TypeName]) -> TypeName:
    """The type of a built-in call on well-typed arguments."""
    result = FUNCTION_SIGNATURES[func][1]
    if result != "join":
        return result  # type: ignore[return-value]  # a type name
    joined: TypeName = "number"
    for t in arg_types:
        joined = join_numeric(joined, t)
    return joined


def accepts(kind: ArgKind, type_: TypeName) -> bool:
    """Whether an argument of ``type_`` fits ``kind`` (``number`` widens to ``float``)."""
    if kind == "any":
        return True
    if kind == "numeric":
        return type_ in NUMERIC
    return assignable(type_, kind)  # type: ignore[arg-type]  # a type name


def join_numeric(left: TypeName, right: TypeName) -> TypeName:
    """The type of arithmetic on two numeric operands."""
    return "float" if "float" in (left, right) else "number"


def assignable(value: TypeName, column: TypeName) -> bool:
    """Whether a value of type ``value`` may be stored in a ``column`` (widening only)."""
    return value == column or (value == "number" and column == "float")


def compatible(left: TypeName, right: TypeName) -> bool:
    """Whether two values may be compared or joined: both numeric, or both symbols."""
    return (left == "symbol") == (right == "symbol")


@dataclass
class BodyTypes:
    """The inferred type of every variable of one body, and what was wrong."""

    schemas: dict[str, tuple[Attribute, ...]]
    types: dict[str, TypeName] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    # ------------------------------------------------------------ variables

    def bind_from_atom(self, atom: Atom) -> None:
        """Type the variables of a positive atom from its declaration."""
        schema = self.schemas.get(atom.relation)
        if schema is None or len(schema) != len(atom.args):
            return
        for arg, attribute in zip(atom.args, schema, strict=True):
            if isinstance(arg, Var):
                origin = f"column `{attribute.name}` of `{atom.relation}`"
                self._bind(arg, attribute.type, origin)

    def bind_assignment(self, target: Var, value: Expr) -> None:
        value_type = self.expr_type(value)
        if value_type is not None and target.name not in self.types:
            self._bind(target, value_type, "its assignment")

    def _bind(self, var: Var, type_: TypeName, origin: str) -> None:
        known = self.types.get(var.name)
        if known is None:
            self.types[var.name] = type_
            self.origins[var.name] = origin
        elif not compatible(known, type_):
            self.error(
                f"type mismatch: `{var.name}` is {type_} here ({origin}) "
                f"but {known} from {self.origins[var.name]}",
                var.span,
            )
        else:
            self.types[var.name] = join_numeric(known, type_) if type_ != "symbol" else known

    def error(self, message: str, span: Span, *notes: str) -> None:
        self.diagnostics.append(Diagnostic(message, span, tuple(notes)))

    # ------------------------------------------------------------ expressions

    def expr_type(self, expr: Expr) -> TypeName | None:
        """The type of ``expr``; None when a variable is untyped (unbound) or a part is wrong."""
        match expr:
            case NumberLit():
                return "number"
            case FloatLit():
                return "float"
            case StringLit():
                return "symbol"
            case Wildcard():
                return None
            case Var(name=name):
                return self.types.get(name)
            case Neg(operand=operand):
                return self._numeric(operand, "unary minus")
            case BinOp(op=op, left=left, right=right):
                return self._arith(op, left, right)
            case Call(func=func, args=args):
                return self._call(func, args)
            case Cast():
                return self._cast(expr)
        raise TypeError(f"not an expression: {expr!r}")

    def _cast(self, cast: Cast) -> TypeName | None:
        """``as(x, T)`` is ``x`` when ``x`` already has ``T``'s base type; any other cast
        would reinterpret the value, which Fixflow does not do (docs/language.md)."""
        operand = self.expr_type(cast.operand)
        if operand is None or cast.base is None or operand == cast.base:
            return operand if cast.base is None else cast.base
        conversion = CONVERSIONS.get((operand, cast.base), "to_number")
        target = f"`{cast.type_name}`"
        if cast.type_name != cast.base:
            target += f" (a {cast.base})"
        self.error(
            f"cannot cast a {operand} to {target} with `as`: Fixflow does not reinterpret "
            f"values; convert with `itof`, `ftoi`, `to_string` or `to_number` "
            f"(here `{conversion}(...)`)",
            cast.span,
        )
        return None

    def _numeric(self, expr: Expr, what: str) -> TypeName | None:
        type_ = self.expr_type(expr)
        if type_ == "symbol":
            self.error(f"type mismatch: {what} needs a number, found a symbol", expr.span)
            return None
        return type_

    def _arith(self, op: str, left: Expr, right: Expr) -> TypeName | None:
        kind = "number" if op in INTEGER_OPS else "numeric"
        left_type = self._argument(left, kind, f"`{op}`")
        right_type = self._argument(right, kind, f"`{op}`")
        if left_type is None or right_type is None:
            return None
        return arith_result(op, left_type, right_type)

    def _argument(self, expr: Expr, kind: ArgKind, what: str) -> TypeName | None:
        """The type of an operand or argument that must fit ``kind``; None if it does not."""
        type_ = self.expr_type(expr)
        if type_ is None or accepts(kind, type_):
            return type_
        wanted = {"numeric": "a number", "number": "a `number`", "float": "a number"}
        self.error(
            f"type mismatch: {what} needs {wanted.get(kind, f'a {kind}')}, found a {type_}",
            expr.span,
            *(("convert it with `ftoi(x)`",) if kind == "number" and type_ == "float" else ()),
        )
        return None

    def _call(self, func: str, args: tuple[Expr, ...]) -> TypeName | None:
        kinds = FUNCTION_SIGNATURES[func][0]
        arg_types = [
            self._argument(a, kinds[min(i, len(kinds) - 1)], f"`{func}`")
            for i, a in enumerate(args)
        ]
        known = [t for t in arg_types if t is not None]
        if len(known) < len(arg_types):
            return None
        return call_result(func, known)

    def check_constraint(self, constraint: Constraint) -> None:
        if constraint.args:
            self._call(constraint.func, constraint.args)

    # ------------------------------------------------------------ checks

    def check_comparison(self, comparison: Comparison) -> None:
        left = self.expr_type(comparison.left)
        right = self.expr_type(comparison.right)
        if left is not None and right is not None and not compatible(left, right):
            self.error(
                f"type mismatch: cannot compare {left} with {right}",
                comparison.span,
            )

    def check_atom_expressions(self, atom: Atom) -> None:
        """Non-variable arguments of an atom (constants, ``t+1``) must fit their column."""
        schema = self.schemas.get(atom.relation)
        if schema is None or len(schema) != len(atom.args):
            return
        for arg, attribute in zip(atom.args, schema, strict=True):
            if isinstance(arg, Var | Wildcard):
                continue
            self.check_value(arg, attribute, atom.relation, exact=False)

    def check_value(self, expr: Expr, attribute: Attribute, relation: str, exact: bool) -> None:
        """``expr`` stored into (``exact``) or matched against a column."""
        type_ = self.expr_type(expr)
        if type_ is None:
            return
        ok = assignable(type_, attribute.type) if exact else compatible(type_, attribute.type)
        if not ok:
            self.error(
                f"type mismatch: column `{attribute.name}` of `{relation}` is "
                f"{attribute.type} but this value is {type_}",
                expr.span,
            )

    def check_aggregate(self, aggregate: Aggregate, attribute: Attribute, relation: str) -> None:
        if aggregate.func == "count":
            result: TypeName | None = "number"
        elif aggregate.arg is None:
            result = None
        elif aggregate.func == "mean":
            result = "float" if self._numeric(aggregate.arg, "`mean`") else None
        elif aggregate.func == "sum":
            result = self._numeric(aggregate.arg, "`sum`")
        else:
            result = self.expr_type(aggregate.arg)
        if result is not None and not assignable(result, attribute.type):
            self.error(
                f"type mismatch: column `{attribute.name}` of `{relation}` is "
                f"{attribute.type} but `{aggregate.func}` yields {result}",
                aggregate.span,
            )


def infer_body(
    body: Body, schemas: dict[str, tuple[Attribute, ...]], assignments: list[Comparison]
) -> BodyTypes:
    """Type every variable of ``body``; ``assignments`` are its ``X = expr`` literals in the
    order the safety analysis bound them."""
    types = BodyTypes(schemas)
    for literal in body.literals:
        if isinstance(literal, Atom):
            types.bind_from_atom(literal)
    for assignment in assignments:
        target, value = assignment_sides(assignment, set(types.types))
        if target is not None:
            types.bind_assignment(target, value)
    for literal in body.literals:
        if isinstance(literal, Atom):
            types.check_atom_expressions(literal)
        elif isinstance(literal, Negation):
            types.check_atom_expressions(literal.atom)
            _check_negated_vars(types, literal.atom)
        elif isinstance(literal, Constraint):
            types.check_constraint(literal)
        elif literal not in assignments:
            types.check_comparison(literal)
    return types


def _check_negated_vars(types: BodyTypes, atom: Atom) -> None:
    schema = types.schemas.get(atom.relation)
    if schema is None or len(schema) != len(atom.args):
        return
    for arg, attribute in zip(atom.args, schema, strict=True):
        if isinstance(arg, Var):
            types.check_value(arg, attribute, atom.relation, exact=False)


def assignment_sides(comparison: Comparison, bound: set[str]) -> tuple[Var | None, Expr]:
    """For ``X = expr`` (or ``expr = X``) with X not in ``bound``: (X, expr)."""
    if comparison.op != "=":
        return None, comparison.right
    if isinstance(comparison.left, Var) and comparison.left.name not in bound:
        return comparison.left, comparison.right
    if isinstance(comparison.right, Var) and comparison.right.name not in bound:
        return comparison.right, comparison.left
    return None, comparison.right


def bindings(body: Body, pre_bound: Iterable[str] = ()) -> tuple[set[str], list[Comparison]]:
    """The variables a body binds (positive atoms, then assignments whose right side is
    bound, to a fixpoint) and its assignments in binding order."""
    bound = set(pre_bound)
    for atom in body_atoms(body):
        bound |= {a.name for a in atom.args if isinstance(a, Var)}
    assignments: list[Comparison] = []
    pending = [lit for lit in body.literals if isinstance(lit, Comparison) and lit.op == "="]
    progress = True
    while progress:
        progress = False
        for comparison in list(pending):
            target, value = assignment_sides(comparison, bound)
            if target is not None and expr_vars(value) <= bound:
                bound.add(target.name)
                assignments.append(comparison)
                pending.remove(comparison)
                progress = True
    return bound, assignments
