"""The Fixflow abstract syntax tree.

Every node is a frozen, slotted dataclass carrying the source span it was parsed from.
Spans are excluded from equality and hashing so that ``parse(print(p)) == p`` compares
structure only. Plans are a separate IR (``fixflow.operators.plan``); AST nodes are never
reused as operators.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, TypeVar

TypeName: TypeAlias = Literal["number", "float", "symbol"]
AggregateFunc: TypeAlias = Literal["min", "max", "sum", "count", "mean"]
ArithOp: TypeAlias = Literal[
    "+", "-", "*", "/", "%", "^", "band", "bor", "bxor", "bshl", "bshr", "land", "lor", "lxor"
]
CompareOp: TypeAlias = Literal["=", "!=", "<", "<=", ">", ">="]
BuiltinFunc: TypeAlias = Literal[
    "min",
    "max",
    "abs",
    "exp",
    "log",
    "relu",
    "bnot",
    "lnot",
    "itof",
    "ftoi",
    "to_float",
    "to_number",
    "to_string",
    "cat",
    "strlen",
    "substr",
]
ConstraintFunc: TypeAlias = Literal["true", "false", "contains", "match"]

TYPE_NAMES: tuple[str, ...] = ("number", "float", "symbol")
AGGREGATE_FUNCS: tuple[str, ...] = ("min", "max", "sum", "count", "mean")
BUILTIN_FUNCS: dict[str, int] = {
    "min": 2,
    "max": 2,
    "abs": 1,
    "exp": 1,
    "log": 1,
    "relu": 1,
    "itof": 1,
    "ftoi": 1,
    "to_float": 1,
    "to_number": 1,
    "to_string": 1,
    "cat": -2,
    "strlen": 1,
    "substr": 3,
}
"""Built-in scalar functions and their arity (``-n``: at least n). Their names cannot name
relations."""
PREFIX_OPS: tuple[str, ...] = ("bnot", "lnot")
"""Soufflé's prefix operators, written ``bnot x``; in the AST a one-argument ``Call``."""
WORD_OPS: tuple[str, ...] = ("band", "bor", "bxor", "bshl", "bshr", "land", "lor", "lxor")
"""Soufflé's infix operators spelled as words: ``x band y`` is a ``BinOp``."""
CONSTRAINT_FUNCS: dict[str, int] = {"true": 0, "false": 0, "contains": 2, "match": 2}
"""Body constraints that are not comparisons: ``true``, ``false``, ``contains(sub, s)``,
``match(regex, s)``, and their arity."""
RESERVED_WORDS: frozenset[str] = frozenset(PREFIX_OPS + WORD_OPS) | {"true", "false"}
"""Words that name neither a variable nor a relation (operators and constraints)."""


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
    """A built-in scalar function (``BUILTIN_FUNCS``: ``min(a, b)``, ``cat(a, b, c)``, ...)
    or a prefix operator ``bnot x`` / ``lnot x`` (one argument)."""

    func: BuiltinFunc
    args: tuple[Expr, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Cast:
    """Soufflé's ``as(operand, T)``. Fixflow types are structural, so a cast only checks
    that the operand's base type is ``base``, the base type of ``type_name`` (as written);
    ``base`` is None until the parser resolves it, or when ``type_name`` is unknown. The
    analysis replaces every cast by its operand once types are checked (``without_casts``)."""

    operand: Expr
    type_name: str
    base: TypeName | None = None
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class SubAggregate:
    """Soufflé's body aggregate ``min y : { body }`` (``count : atom``, ...): ``target`` is
    None for ``count``; ``bodies`` has one entry per alternative of ``{ b1 ; b2 }``. The
    checker lifts it into a hidden head-aggregate relation (``checker.subaggregates``)
    before the analysis."""

    func: AggregateFunc
    target: Expr | None
    bodies: tuple[Body, ...]
    span: Span = _span()


Expr: TypeAlias = (
    Var | Wildcard | NumberLit | FloatLit | StringLit | BinOp | Neg | Call | Cast | SubAggregate
)
Literal_: TypeAlias = NumberLit | FloatLit | StringLit
NodeT = TypeVar("NodeT")
KindT = TypeVar("KindT")


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


@dataclass(frozen=True, slots=True)
class Constraint:
    """A built-in test that is not a comparison: ``true``, ``false`` (no arguments),
    ``contains(sub, s)``, ``match(regex, s)``; ``negated`` for ``!match(...)``. It binds
    no variable."""

    func: ConstraintFunc
    args: tuple[Expr, ...]
    negated: bool = False
    span: Span = _span()


BodyLiteral: TypeAlias = Atom | Negation | Comparison | Constraint


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
    """``name: type``. ``type`` is always the base type the engine stores; ``declared`` is
    the name written when it was a ``.type`` or ``unsigned`` (kept for printing)."""

    name: str
    type: TypeName
    span: Span = _span()
    declared: str | None = None


@dataclass(frozen=True, slots=True)
class TypeDeclaration:
    """``.type T <: base`` (a subtype: ``op == "<:"``, one member), ``.type T = U`` (an
    alias) or ``.type T = A | B`` (a union): ``op == "="`` with one member or more."""

    name: str
    op: Literal["<:", "="]
    members: tuple[str, ...]
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Declaration:
    """``.decl name(attr: type, ...)``."""

    relation: str
    attributes: tuple[Attribute, ...]
    span: Span = _span()


IOOptions: TypeAlias = tuple[tuple[str, str], ...]
"""``(key, value)`` pairs of ``.input r(IO=file, filename="r.tsv")``, in source order."""


@dataclass(frozen=True, slots=True)
class InputDirective:
    """``.input name`` or ``.input name(key=value, ...)``; ``.input a, b`` is one per name."""

    relation: str
    span: Span = _span()
    options: IOOptions = ()


@dataclass(frozen=True, slots=True)
class OutputDirective:
    """``.output name`` or ``.output name(key=value, ...)``."""

    relation: str
    span: Span = _span()
    options: IOOptions = ()


@dataclass(frozen=True, slots=True)
class PrintSizeDirective:
    """``.printsize name``: ``fixflow eval`` prints ``name<TAB>rows`` after evaluating."""

    relation: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Pragma:
    """``.pragma "key" "value"`` (the value may be absent: ``""``)."""

    key: str
    value: str = ""
    span: Span = _span()


Item: TypeAlias = (
    Declaration
    | TypeDeclaration
    | InputDirective
    | OutputDirective
    | PrintSizeDirective
    | Pragma
    | Rule
)


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
        """The ``.input`` relations, each once (a relation may have several directives)."""
        return _unique(i.relation for i in self.items if isinstance(i, InputDirective))

    @property
    def outputs(self) -> tuple[str, ...]:
        """The ``.output`` relations, each once (a relation may have several directives)."""
        return _unique(i.relation for i in self.items if isinstance(i, OutputDirective))

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(i for i in self.items if isinstance(i, Rule))

    @property
    def printsizes(self) -> tuple[str, ...]:
        return tuple(i.relation for i in self.items if isinstance(i, PrintSizeDirective))

    def input_directives(self, relation: str) -> tuple[dict[str, str], ...]:
        """The options of each of ``relation``'s ``.input`` directives, in source order:
        as in Soufflé, every one is loaded (``{}`` for a directive without options)."""
        return tuple(
            dict(i.options)
            for i in self.items
            if isinstance(i, InputDirective) and i.relation == relation
        )

    def output_directives(self, relation: str) -> tuple[dict[str, str], ...]:
        """The options of each of ``relation``'s ``.output`` directives, in source order:
        as in Soufflé, every one is written."""
        return tuple(
            dict(o.options)
            for o in self.items
            if isinstance(o, OutputDirective) and o.relation == relation
        )

    def declaration(self, relation: str) -> Declaration | None:
        return next((d for d in self.declarations if d.relation == relation), None)


# ---------------------------------------------------------------- helpers


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def expr_vars(expr: Expr | Aggregate | None) -> set[str]:
    """The variable names occurring in an expression (wildcards excluded)."""
    match expr:
        case None | Wildcard() | NumberLit() | FloatLit() | StringLit():
            return set()
        case Var(name=name):
            return {name}
        case BinOp(left=left, right=right):
            return expr_vars(left) | expr_vars(right)
        case Neg(operand=operand) | Cast(operand=operand):
            return expr_vars(operand)
        case Call(args=args):
            return set().union(*(expr_vars(a) for a in args))
        case Aggregate(arg=arg):
            return expr_vars(arg)
        case SubAggregate():
            return set()  # its variables are local to it or bound elsewhere in the rule
    raise TypeError(f"not an expression: {expr!r}")


def map_nodes(node: NodeT, kind: type[KindT], replace: Callable[[KindT], object]) -> NodeT:
    """``node`` (any AST node, a tuple of them or a Program) with every node of ``kind``
    replaced by ``replace(it)``, innermost first. Parts without one stay the same objects."""
    if isinstance(node, tuple):
        parts = tuple(map_nodes(n, kind, replace) for n in node)
        unchanged = all(new is old for new, old in zip(parts, node, strict=True))
        return node if unchanged else parts  # type: ignore[return-value]
    if not dataclasses.is_dataclass(node) or isinstance(node, Span | type):
        return node
    fields = {f.name: getattr(node, f.name) for f in dataclasses.fields(node)}
    changes = {name: map_nodes(value, kind, replace) for name, value in fields.items()}
    if any(changes[name] is not value for name, value in fields.items()):
        node = dataclasses.replace(node, **changes)
    return replace(node) if isinstance(node, kind) else node  # type: ignore[return-value]


def renamed_vars(node: NodeT, rename: dict[str, str]) -> NodeT:
    """``node`` with the variables of ``rename`` renamed, inside nested aggregates too."""
    return map_nodes(node, Var, lambda v: Var(rename.get(v.name, v.name), v.span))


def map_casts(node: NodeT, replace: Callable[[Cast], Expr]) -> NodeT:
    """``node`` with every ``Cast`` replaced by ``replace(cast)`` (``map_nodes``)."""
    return map_nodes(node, Cast, replace)


def without_casts(node: NodeT) -> NodeT:
    """``node`` with every ``as(x, T)`` replaced by ``x``: once types are checked, a cast
    means nothing more (``Cast``)."""
    return map_casts(node, lambda cast: cast.operand)


def body_atoms(body: Body) -> tuple[Atom, ...]:
    """Positive atoms of a body, in order."""
    return tuple(lit for lit in body.literals if isinstance(lit, Atom))
