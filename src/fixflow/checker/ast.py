"""The Fixflow abstract syntax tree.

Every node is a frozen, slotted dataclass carrying the source span it was parsed from.
Spans are excluded from equality and hashing so that ``parse(print(p)) == p`` compares
structure only. Plans are a separate IR (``fixflow.operators.plan``); AST nodes are never
reused as operators.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

TypeName: TypeAlias = Literal["number", "float", "symbol"]
AggregateFunc: TypeAlias = Literal["min", "max", "sum", "count", "mean"]
ArithOp: TypeAlias = Literal["+", "-", "*", "/"]
CompareOp: TypeAlias = Literal["=", "!=", "<", "<=", ">", ">="]
BuiltinFunc: TypeAlias = Literal["min", "max", "abs", "exp", "log", "relu"]

TYPE_NAMES: tuple[str, ...] = ("number", "float", "symbol")
AGGREGATE_FUNCS: tuple[str, ...] = ("min", "max", "sum", "count", "mean")
BUILTIN_FUNCS: dict[str, int] = {"min": 2, "max": 2, "abs": 1, "exp": 1, "log": 1, "relu": 1}
"""Built-in scalar functions and their arity. Their names cannot name relations."""


@dataclass(frozen=True, slots=True)
class Span:
    """A region of a source file; lines and columns are 1-based, ``end_*`` exclusive."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NO_SPAN = Span("<generated>", 0, 0, 0, 0)


def _span() -> Span:
    return field(default=NO_SPAN, compare=False, hash=False, repr=False)


# ---------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class Var:
    name: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Wildcard:
    """``_`` in an atom argument: matches anything, binds nothing."""

    span: Span = _span()


@dataclass(frozen=True, slots=True)
class NumberLit:
    value: int
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class FloatLit:
    value: float
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class StringLit:
    value: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class BinOp:
    op: ArithOp
    left: Expr
    right: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Neg:
    """Unary minus."""

    operand: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Call:
    """A built-in scalar function: min(a,b), max(a,b), abs, exp, log, relu."""

    func: BuiltinFunc
    args: tuple[Expr, ...]
    span: Span = _span()


Expr: TypeAlias = Var | Wildcard | NumberLit | FloatLit | StringLit | BinOp | Neg | Call
Literal_: TypeAlias = NumberLit | FloatLit | StringLit


# ---------------------------------------------------------------- heads


@dataclass(frozen=True, slots=True)
class Aggregate:
    """A head aggregate ``func[arg]``; ``arg`` is None for ``count[*]``."""

    func: AggregateFunc
    arg: Expr | None
    span: Span = _span()


HeadArg: TypeAlias = Expr | Aggregate


@dataclass(frozen=True, slots=True)
class Head:
    relation: str
    args: tuple[HeadArg, ...]
    span: Span = _span()

    @property
    def aggregate(self) -> Aggregate | None:
        """The head's aggregate, if any (the analysis rejects more than one)."""
        return next((a for a in self.args if isinstance(a, Aggregate)), None)


# ---------------------------------------------------------------- bodies


@dataclass(frozen=True, slots=True)
class Atom:
    relation: str
    args: tuple[Expr, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Negation:
    """``!atom``: stratified negation."""

    atom: Atom
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Comparison:
    """``left op right``. In a body, ``X = expr`` with X otherwise unbound is an assignment."""

    op: CompareOp
    left: Expr
    right: Expr
    span: Span = _span()


BodyLiteral: TypeAlias = Atom | Negation | Comparison


@dataclass(frozen=True, slots=True)
class Body:
    """One conjunctive body; a rule may have several, separated by ``;``."""

    literals: tuple[BodyLiteral, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Termination:
    """``{sum[Δr] < 0.001}``: stop when ``agg`` over the last round's deltas of ``var``
    satisfies ``op bound``."""

    func: AggregateFunc
    var: str
    op: CompareOp
    bound: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Rule:
    """``head :- body1 ; body2 ... {termination}.``; a fact has one empty body."""

    head: Head
    bodies: tuple[Body, ...]
    termination: Termination | None = None
    span: Span = _span()


# ---------------------------------------------------------------- declarations


@dataclass(frozen=True, slots=True)
class Attribute:
    name: str
    type: TypeName
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Declaration:
    """``.decl name(attr: type, ...)``."""

    relation: str
    attributes: tuple[Attribute, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class InputDirective:
    """``.input name``."""

    relation: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class OutputDirective:
    """``.output name``."""

    relation: str
    span: Span = _span()


Item: TypeAlias = Declaration | InputDirective | OutputDirective | Rule


@dataclass(frozen=True, slots=True)
class Program:
    """A whole program: its items in source order."""

    items: tuple[Item, ...]
    file: str = field(default="<input>", compare=False, hash=False)

    @property
    def declarations(self) -> tuple[Declaration, ...]:
        return tuple(i for i in self.items if isinstance(i, Declaration))

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(i.relation for i in self.items if isinstance(i, InputDirective))

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(i.relation for i in self.items if isinstance(i, OutputDirective))

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(i for i in self.items if isinstance(i, Rule))

    def declaration(self, relation: str) -> Declaration | None:
        return next((d for d in self.declarations if d.relation == relation), None)


# ---------------------------------------------------------------- helpers


def expr_vars(expr: Expr | Aggregate | None) -> set[str]:
    """The variable names occurring in an expression (wildcards excluded)."""
    match expr:
        case None | Wildcard() | NumberLit() | FloatLit() | StringLit():
            return set()
        case Var(name=name):
            return {name}
        case BinOp(left=left, right=right):
            return expr_vars(left) | expr_vars(right)
        case Neg(operand=operand):
            return expr_vars(operand)
        case Call(args=args):
            return set().union(*(expr_vars(a) for a in args))
        case Aggregate(arg=arg):
            return expr_vars(arg)
    raise TypeError(f"not an expression: {expr!r}")


def body_atoms(body: Body) -> tuple[Atom, ...]:
    """Positive atoms of a body, in order."""
    return tuple(lit for lit in body.literals if isinstance(lit, Atom))
