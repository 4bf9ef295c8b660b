"""The plan IR: a small relational algebra that every evaluation strategy composes.

A plan is a tree of frozen dataclasses. Columns are named after Datalog variables (or
fresh names the compiler invents, starting with ``#``); every expression carries its
Fixflow type so that the Spark backend (``fixflow.operators.compiler``) can pick integer
or float arithmetic and cast heads to their declared types. Plans know nothing of Spark:
``explain(plan)`` pretty-prints them and tests can compare them structurally.

Core operators: ``Scan``, ``Unit``, ``Filter``, ``Project``, ``Join``, ``AntiJoin``,
``Union`` (distinct or not), ``Aggregate`` and ``Fixpoint`` (a recursive stratum, run by
a strategy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from fixflow.checker.ast import ArithOp, TypeName

Version: TypeAlias = Literal["full", "delta", "aux"]
"""Which state of a relation a scan reads: all rows so far, the last round's new rows
(semi-naive / MRA frontier), or a strategy's precomputed auxiliary table."""

# ---------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class Col:
    name: str
    type: TypeName


@dataclass(frozen=True, slots=True)
class Const:
    value: int | float | str
    type: TypeName


@dataclass(frozen=True, slots=True)
class Arith:
    op: ArithOp
    left: PExpr
    right: PExpr
    type: TypeName


@dataclass(frozen=True, slots=True)
class Negate:
    operand: PExpr
    type: TypeName


@dataclass(frozen=True, slots=True)
class Func:
    """A built-in function or prefix operator of ``ast.BUILTIN_FUNCS``/``PREFIX_OPS``, or
    the test of a ``contains``/``match`` constraint (a ``number``: 1 when it holds)."""

    name: str
    args: tuple[PExpr, ...]
    type: TypeName


@dataclass(frozen=True, slots=True)
class Compare:
    op: Literal["=", "!=", "<", "<=", ">", ">="]
    left: PExpr
    right: PExpr
    type: TypeName = "number"


@dataclass(frozen=True, slots=True)
class Cast:
    """Convert to a declared head type (number ↔ float; symbol stays symbol)."""

    operand: PExpr
    type: TypeName


PExpr: TypeAlias = Col | Const | Arith | Negate | Func | Compare | Cast

# ---------------------------------------------------------------- operators


@dataclass(frozen=True, slots=True)
class Scan:
    """Read ``relation`` (its ``version``), naming its positional columns ``columns``."""

    relation: str
    version: Version
    columns: tuple[str, ...]
    types: tuple[TypeName, ...]

    @property
    def schema(self) -> tuple[tuple[str, TypeName], ...]:
        return tuple(zip(self.columns, self.types, strict=True))


@dataclass(frozen=True, slots=True)
class Unit:
    """One row, no columns: the input of a body without positive atoms (facts)."""

    @property
    def schema(self) -> tuple[tuple[str, TypeName], ...]:
        return ()


@dataclass(frozen=True, slots=True)
class Filter:
    input: Plan
    condition: Compare

    @property
    def schema(self) -> tuple[tuple[str, TypeName], ...]:
        return self.input.schema


@dataclass(frozen=True, slots=True)
class Project:
    """Compute ``outputs`` (name, expression) from each input row; ``distinct`` dedups."""

    input: Plan
    outputs: tuple[tuple[str, PExpr], ...]
    distinct: bool = False

    @property
    def schema(self) -> tuple[tuple[str, TypeName], ...]:
        return tuple((name, expr.type) for name, expr in self.outputs)


@dataclass(frozen=True, slots=True)
class Join:
    """Natural join on the columns named in ``on`` (a cross join when empty)."""

    left: Plan
    right: Plan
    on: tuple[str, ...]

    @property
    def schema(self) -> tuple[tuple[str, TypeName], ...]:
        left = self.left.schema
        names = {name for name, _ in left}
        return left + tuple(c for c in self.right.schema if c[0] not in names)


@dataclass(frozen=True, slots=True)
class AntiJoin:
    """Rows of ``left`` with no match in ``right`` on ``on`` (stratified negation)."""

    left: Plan
    right: Plan
    on: tuple[str, ...]

    @property
    def schema(self) -> tuple[tuple[str, TypeName], ...]:
        return self.left.schema


@dataclass(frozen=True, slots=True)
class Union:
    """All inputs (same column names and types); ``distinct`` makes it a set union."""

    inputs: tuple[Plan, ...]
    distinct: bool = True

    @property
    def schema(self) -> tuple[tuple[str, TypeName], ...]:
        return self.inputs[0].schema


@dataclass(frozen=True, slots=True)
class Aggregate:
    """Group by ``group_by``; ``func`` over column ``arg`` (None: ``count[*]``) → ``output``."""

    input: Plan
    group_by: tuple[str, ...]
    func: Literal["min", "max", "sum", "count", "mean"]
    arg: str | None
    output: str
    type: TypeName

    @property
    def schema(self) -> tuple[tuple[str, TypeName], ...]:
        types = dict(self.input.schema)
        return (*((g, types[g]) for g in self.group_by), (self.output, self.type))


@dataclass(frozen=True, slots=True)
class Fixpoint:
    """A recursive stratum: ``init`` plans seed ``relations``, ``step`` plans are iterated
    by ``strategy`` (``set``, ``mra``, ``aggregate-seminaive``, ``naive``) until nothing
    changes, the termination clause holds, or ``max_iterations`` rounds ran (None: no cap)."""

    strategy: str
    relations: tuple[str, ...]
    init: tuple[Plan, ...]
    step: tuple[Plan, ...]
    max_iterations: int | None

    @property
    def schema(self) -> tuple[tuple[str, TypeName], ...]:
        return ()


Plan: TypeAlias = Scan | Unit | Filter | Project | Join | AntiJoin | Union | Aggregate | Fixpoint

# ---------------------------------------------------------------- printing


def show_expr(expr: PExpr) -> str:
    """An expression in Datalog-like notation."""
    match expr:
        case Col(name=name):
            return name
        case Const(value=value, type="symbol"):
            return f'"{value}"'
        case Const(value=value):
            return repr(value)
        case Arith(op=op, left=left, right=right):
            return f"({show_expr(left)} {op} {show_expr(right)})"
        case Negate(operand=operand):
            return f"-{show_expr(operand)}"
        case Func(name=name, args=args):
            return f"{name}({', '.join(show_expr(a) for a in args)})"
        case Compare(op=op, left=left, right=right):
            return f"{show_expr(left)} {op} {show_expr(right)}"
        case Cast(operand=operand, type=type_):
            inner = show_expr(operand)
            return inner if operand.type == type_ else f"{type_}({inner})"
    raise TypeError(f"not a plan expression: {expr!r}")


def _header(plan: Plan) -> str:
    match plan:
        case Scan(relation=rel, version=version, columns=columns):
            return f"Scan {rel}[{version}] as ({', '.join(columns)})"
        case Unit():
            return "Unit"
        case Filter(condition=condition):
            return f"Filter {show_expr(condition)}"
        case Project(outputs=outputs, distinct=distinct):
            shown = ", ".join(
                name if isinstance(e, Col) and e.name == name else f"{name} := {show_expr(e)}"
                for name, e in outputs
            )
            return f"Project{' distinct' if distinct else ''} {shown}"
        case Join(on=on):
            return f"Join on ({', '.join(on)})" if on else "Join (cross)"
        case AntiJoin(on=on):
            return f"AntiJoin on ({', '.join(on)})"
        case Union(inputs=_, distinct=distinct):
            return "Union distinct" if distinct else "Union all"
        case Aggregate(group_by=group_by, func=func, arg=arg, output=output):
            return f"Aggregate {output} := {func}[{arg or '*'}] by ({', '.join(group_by)})"
        case Fixpoint(strategy=strategy, relations=relations, max_iterations=cap):
            limit = "no cap" if cap is None else f"cap {cap}"
            return f"Fixpoint {strategy} ({', '.join(relations)}) {limit}"
    raise TypeError(f"not a plan: {plan!r}")


def children(plan: Plan) -> tuple[Plan, ...]:
    match plan:
        case Filter(input=i) | Project(input=i) | Aggregate(input=i):
            return (i,)
        case Join(left=left, right=right) | AntiJoin(left=left, right=right):
            return (left, right)
        case Union(inputs=inputs):
            return inputs
        case Fixpoint(init=init, step=step):
            return init + step
    return ()


def explain(plan: Plan, indent: int = 0) -> str:
    """The plan as an indented tree, one operator per line."""
    lines = ["  " * indent + _header(plan)]
    lines += [explain(child, indent + 1) for child in children(plan)]
    return "\n".join(lines)


def relations_read(plan: Plan) -> set[tuple[str, Version]]:
    """Every (relation, version) the plan scans."""
    return set(scans(plan))


def scans(plan: Plan) -> list[tuple[str, Version]]:
    """The (relation, version) of every scan under ``plan``, once per scan."""
    if isinstance(plan, Scan):
        return [(plan.relation, plan.version)]
    return [key for child in children(plan) for key in scans(child)]
