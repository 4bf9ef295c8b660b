"""The only module that imports Z3: decides the MRA properties by refuting their negation.

Every verb builds ``¬property`` over universally quantified values and asks Z3 for a
model: ``unsat`` ⇒ the property holds; ``sat`` ⇒ it fails and the model is the
counterexample; ``unknown`` ⇒ unknown (never treated as holds). ``exp`` and ``log`` are
uninterpreted functions with ground monotonicity axioms (and ``exp > 0``), so a ``sat``
answer that involves them is only "not proven" and reported as unknown. Every other
operator and functor (``%``, ``^``, bitwise and logical operators, conversions, string
functors) is opaque: an uninterpreted function of its translated arguments, and a string
literal an unconstrained constant named after its text. A query through an opaque functor
answers ``unknown`` either way, never ``holds`` nor ``fails``: ``unsat`` would prove the
property for every function in the functor's place, but its real definition was never
modelled, and ``sat`` may be a model no real function allows.

Each verb takes a ``Budget``: Z3's resource limit for that one query, counted in solver
steps rather than seconds, and solves in a fresh Z3 context. So a query's answer depends
only on the query and the budget, never on machine load or on what was solved before.

An F′ application is partial: when a body comparison fails the alternative yields
nothing. Values are therefore (present, value) pairs and G ignores absent operands.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

import z3

from fixflow.checker.ast import (
    BinOp,
    Call,
    Comparison,
    Expr,
    FloatLit,
    Neg,
    NumberLit,
    StringLit,
    Var,
)
from fixflow.checker.conditions import Sort, ValueMap

log = logging.getLogger(__name__)

DEFAULT_RLIMIT = 1_000_000
"""Z3 resource units per query. Units count solver steps, not time, so a query gets the
same answer on any machine under any load (for one Z3 version: versions count
differently). The hardest query of the corpus and the checker tests uses ~104k units with
Z3 5.4 and ~193k with 4.12; a query that spends the whole limit takes under a second
here."""


@dataclass(frozen=True)
class Budget:
    """How much work Z3 may do on each query of a check: a deterministic resource limit
    (Z3's ``rlimit``), deliberately with no wall-clock component. Past it a query is
    ``unknown``, never ``holds``."""

    rlimit: int = DEFAULT_RLIMIT

    def __post_init__(self) -> None:
        if self.rlimit <= 0:
            raise ValueError(f"rlimit must be positive, not {self.rlimit}")


DEFAULT_BUDGET = Budget()


Status = Literal["holds", "fails", "unknown"]


@dataclass(frozen=True)
class Verdict:
    status: Status
    witness: dict[str, Fraction | float] = field(default_factory=dict)
    """Model values by name: inputs (``x1``…), auxiliaries (``w#1``…) and results."""
    note: str = ""


# ---------------------------------------------------------------- translation


@dataclass
class _Translation:
    """Expressions over a symbol environment; collects side conditions and UF uses."""

    ctx: z3.Context
    env: dict[str, z3.ArithRef]
    side: list[z3.BoolRef] = field(default_factory=list)
    uf_calls: list[tuple[str, z3.ArithRef, z3.ArithRef]] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    """What was left unmodelled, by operator or functor name (see the module doc)."""

    def expr(self, expr: Expr) -> z3.ArithRef:
        match expr:
            case StringLit(value=value):
                self.opaque.append("strings")
                return z3.Const(f"string {value!r}", z3.IntSort(self.ctx))
            case BinOp(op=op, left=left, right=right) if op not in MODELLED_OPS:
                args = [self.expr(left), self.expr(right)]
                real = op == "^" and not all(a.is_int() for a in args)
                return self._opaque(op, args, real)
            case Call(func=func, args=args) if func not in MODELLED_FUNCS:
                real = func in ("itof", "to_float")
                return self._opaque(func, [self.expr(a) for a in args], real)
            case NumberLit(value=value):
                return z3.IntVal(value, self.ctx)
            case FloatLit(value=value):
                fraction = Fraction(repr(value))  # the decimal as written, not the binary float
                return z3.Q(fraction.numerator, fraction.denominator, self.ctx)
            case Var(name=name):
                return self.env[name]
            case Neg(operand=operand):
                return -self.expr(operand)
            case BinOp(op=op, left=left, right=right):
                return self._binop(op, self.expr(left), self.expr(right))
            case Call(func=func, args=args):
                return self._call(func, [self.expr(a) for a in args])
        raise ValueError(f"cannot translate {expr!r}")

    def _opaque(self, name: str, args: list[z3.ArithRef], real: bool) -> z3.ArithRef:
        """An unmodelled operator applied as an uninterpreted function (symbols are opaque
        integers; the result is real or integer like the operator's Fixflow type)."""
        self.opaque.append(f"`{name}`")
        result = z3.RealSort(self.ctx) if real else z3.IntSort(self.ctx)
        sorts = [a.sort() for a in args]
        function = z3.Function(f"{name}/{'/'.join(map(str, sorts))}", *sorts, result)
        return function(*args)

    def _binop(self, op: str, left: z3.ArithRef, right: z3.ArithRef) -> z3.ArithRef:
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        # Dividing by zero yields no value.
        self.side.append(right != 0)
        if left.is_int() and right.is_int():
            return _truncated_division(left, right)
        left, right = _real(left), _real(right)
        return left / right

    def _call(self, func: str, args: list[z3.ArithRef]) -> z3.ArithRef:
        if func in ("min", "max"):
            return binary(func, args[0], args[1])
        (arg,) = args
        if func == "abs":
            return z3.If(arg >= 0, arg, -arg)
        if func == "relu":
            return z3.If(
                arg > 0, arg, z3.IntVal(0, self.ctx) if arg.is_int() else z3.RealVal(0, self.ctx)
            )
        function = z3.Function(func, z3.RealSort(self.ctx), z3.RealSort(self.ctx))
        real_arg = _real(arg)
        if func == "log":
            self.side.append(real_arg > 0)
        result = function(real_arg)
        self.uf_calls.append((func, real_arg, result))
        return result

    def comparison(self, comparison: Comparison) -> z3.BoolRef:
        left, right = self.expr(comparison.left), self.expr(comparison.right)
        return {
            "=": lambda: left == right,
            "!=": lambda: left != right,
            "<": lambda: left < right,
            "<=": lambda: left <= right,
            ">": lambda: left > right,
            ">=": lambda: left >= right,
        }[comparison.op]()

    def axioms(self) -> list[z3.BoolRef]:
        """Ground facts about exp/log over the applications used: monotone, exp > 0."""
        facts: list[z3.BoolRef] = []
        for func, _arg, result in self.uf_calls:
            if func == "exp":
                facts.append(result > 0)
        for func, arg, result in self.uf_calls:
            for other_func, other_arg, other_result in self.uf_calls:
                if func == other_func and result is not other_result:
                    facts.append(z3.Implies(arg < other_arg, result < other_result))
        return facts


MODELLED_OPS = frozenset(("+", "-", "*", "/"))
MODELLED_FUNCS = frozenset(("min", "max", "abs", "relu", "exp", "log"))


def _truncated_division(left: z3.ArithRef, right: z3.ArithRef) -> z3.ArithRef:
    """``number / number`` truncated toward zero (Soufflé's C++ division); Z3's integer
    division rounds the other way for a negative dividend, so divide the magnitudes."""
    magnitude = z3.If(left >= 0, left, -left) / z3.If(right >= 0, right, -right)
    return z3.If((left >= 0) == (right >= 0), magnitude, -magnitude)


def _real(term: z3.ArithRef) -> z3.ArithRef:
    return z3.ToReal(term) if term.is_int() else term


def _sort(sort: Sort, ctx: z3.Context) -> z3.ArithSortRef:
    return z3.IntSort(ctx) if sort == "int" else z3.RealSort(ctx)


def binary(operator: str, a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    """G as a binary operator (``count`` is passed here as ``sum``)."""
    if operator == "min":
        return z3.If(a <= b, a, b)
    if operator == "max":
        return z3.If(a >= b, a, b)
    if operator == "sum":
        return a + b
    if operator == "mean":
        return (_real(a) + _real(b)) / 2
    raise ValueError(f"unknown aggregate {operator}")


# ---------------------------------------------------------------- partial values


@dataclass(frozen=True)
class _Partial:
    present: z3.BoolRef
    value: z3.ArithRef


def _combine(operator: str, a: _Partial, b: _Partial) -> _Partial:
    both = z3.And(a.present, b.present)
    value = z3.If(both, binary(operator, a.value, b.value), z3.If(a.present, a.value, b.value))
    return _Partial(z3.simplify(z3.Or(a.present, b.present)), value)


def _same(a: _Partial, b: _Partial) -> z3.BoolRef:
    return z3.And(a.present == b.present, z3.Implies(a.present, a.value == b.value))


class _Applier:
    """Applies one ValueMap to given inputs under one group's auxiliary symbols."""

    def __init__(self, value_map: ValueMap, group: str, shared: _Translation) -> None:
        self.map = value_map
        self.aux = {
            s.name: z3.Const(f"{s.name}#{group}", _sort(s.sort, shared.ctx)) for s in value_map.aux
        }
        self.shared = shared

    def __call__(self, *inputs: z3.ArithRef) -> _Partial:
        env = dict(self.aux)
        env.update({s.name: v for s, v in zip(self.map.inputs, inputs, strict=True)})
        translation = _Translation(self.shared.ctx, env)
        value = translation.expr(self.map.output)
        guards = [translation.comparison(c) for c in self.map.constraints] + translation.side
        self.shared.uf_calls.extend(translation.uf_calls)
        self.shared.opaque.extend(translation.opaque)
        if self.map.output_sort == "real":
            value = _real(value)
        return _Partial(z3.And(*guards) if guards else z3.BoolVal(True, self.shared.ctx), value)


# ---------------------------------------------------------------- solving


def _fresh() -> _Translation:
    """A translation in a new Z3 context: each query starts from the same solver state
    whatever was solved before in the process, so its answer within the budget depends
    only on the query."""
    return _Translation(z3.Context(), {})


def _solve(
    negation: z3.BoolRef,
    shared: _Translation,
    named: dict[str, z3.ArithRef],
    budget: Budget,
    simple: tuple[list[z3.BoolRef], ...] = (),
) -> Verdict:
    solver = z3.Solver(ctx=shared.ctx)
    solver.set("rlimit", budget.rlimit)
    solver.add(negation, *shared.axioms())
    result = solver.check()
    if result == z3.unsat:
        return _proven(shared)
    if result == z3.unknown:
        return Verdict("unknown", note=_unknown_note(solver.reason_unknown(), budget))
    model = _simplest_model(solver, simple, budget)
    witness = {n: _value(model.eval(term, model_completion=True)) for n, term in named.items()}
    if shared.opaque:
        names = ", ".join(sorted(set(shared.opaque)))
        return Verdict("unknown", witness, f"not proven: {names} not modelled (opaque)")
    if shared.uf_calls:
        return Verdict(
            "unknown", witness, "not proven: exp/log are modelled only by their monotonicity"
        )
    return Verdict("fails", witness)


def _proven(shared: _Translation) -> Verdict:
    """``holds``, unless the query went through an opaque functor. Such a proof is valid
    for every function in that functor's place, but Fixflow promises ``holds`` only for
    what it models: the functor's real definition was never looked at."""
    if shared.opaque:
        names = ", ".join(sorted(set(shared.opaque)))
        return Verdict("unknown", note=f"proven only if {names} may be any function: not modelled")
    return Verdict("holds")


def _unknown_note(reason: str, budget: Budget) -> str:
    if reason in ("canceled", "max. resource limit exceeded"):
        return f"Z3 spent its budget of {budget.rlimit} resource units without an answer"
    return f"Z3 gave no answer ({reason})"


def _simplest_model(
    solver: z3.Solver, tiers: tuple[list[z3.BoolRef], ...], budget: Budget
) -> z3.ModelRef:
    """A model that reads well: try the preference tiers in order (auxiliaries = 1, small
    whole inputs, ...), keep the first that is still a counterexample. Only cosmetic, so
    each tier gets half the query's budget."""
    model = solver.model()
    solver.set("rlimit", max(1, budget.rlimit // 2))
    for tier in tiers:
        if solver.check(*tier) == z3.sat:
            return solver.model()
    return model


def _small_whole(terms: list[z3.ArithRef], bound: int = 4) -> list[z3.BoolRef]:
    """Each term is a whole number in [-bound, bound], stated as a choice of values rather
    than ``IsInt``: fixed values keep the arithmetic linear, which Z3 settles with little
    work, where ``IsInt`` over nonlinear terms could spend the whole budget."""
    return [z3.Or(*(term == v for v in range(-bound, bound + 1))) for term in terms]


def _signs(terms: list[z3.ArithRef], nonnegative: bool) -> list[z3.BoolRef]:
    return [t >= 0 for t in terms] if nonnegative else []


def _ones(terms: list[z3.ArithRef]) -> list[z3.BoolRef]:
    return [t == 1 for t in terms]


def _value(term: z3.ExprRef) -> Fraction | float:
    if z3.is_int_value(term):
        return Fraction(term.as_long())
    if z3.is_rational_value(term):
        return Fraction(term.numerator_as_long(), term.denominator_as_long())
    if z3.is_algebraic_value(term):
        return float(term.approx(8).as_decimal(8).rstrip("?"))
    return float("nan")


def algebra(operator: str, sort: Sort, law: str, *, budget: Budget = DEFAULT_BUDGET) -> Verdict:
    """Property 1: ``commutativity`` or ``associativity`` of G as a binary operator."""
    shared = _fresh()
    value_sort = _sort("real" if operator == "mean" else sort, shared.ctx)
    a, b, c = (z3.Const(n, value_sort) for n in "abc")
    if law == "commutativity":
        left, right = binary(operator, a, b), binary(operator, b, a)
        named = {"a": a, "b": b, "left": left, "right": right}
    else:
        left = binary(operator, binary(operator, a, b), c)
        right = binary(operator, a, binary(operator, b, c))
        named = {"a": a, "b": b, "c": c, "left": left, "right": right}
    return _solve(left != right, shared, named, budget, (_small_whole([a, b, c]),))


def property2(
    operator: str,
    value_map: ValueMap,
    nonnegative: bool = False,
    *,
    budget: Budget = DEFAULT_BUDGET,
) -> Verdict:
    """G∘F′∘G(X) = G∘F′(X) on PowerLog's Figure 4 template, generalised: two source groups,
    each with its own auxiliary values and two recursive values. ``nonnegative`` assumes
    every value and auxiliary is ≥ 0 (used only to suggest guards, never for a verdict)."""
    shared = _fresh()
    sort = _sort(value_map.input.sort, shared.ctx)
    x1, y1, x2, y2 = (z3.Const(n, sort) for n in ("x1", "y1", "x2", "y2"))
    f1, f2 = _Applier(value_map, "1", shared), _Applier(value_map, "2", shared)

    def g(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
        return binary(operator, a, b)

    lhs = _combine(operator, f1(g(x1, y1)), f2(g(x2, y2)))
    rhs = _combine(operator, _combine(operator, _combine(operator, f1(x1), f1(y1)), f2(x2)), f2(y2))
    named: dict[str, z3.ArithRef] = {"x1": x1, "y1": y1, "x2": x2, "y2": y2}
    named.update(_aux_named(f1, f2))
    named.update({"lhs": lhs.value, "rhs": rhs.value})
    named.update({"lhs?": z3.If(lhs.present, 1, 0), "rhs?": z3.If(rhs.present, 1, 0)})
    aux = list(_aux_named(f1, f2).values())
    values = [x1, y1, x2, y2]
    tiers = (
        _ones(aux) + _small_whole(values),
        _small_whole(aux + values),
        _ones(aux),
    )
    negation = z3.And(z3.Not(_same(lhs, rhs)), *_signs(aux + values, nonnegative))
    return _solve(negation, shared, named, budget, tiers)


def _aux_named(*appliers: _Applier) -> dict[str, z3.ArithRef]:
    named: dict[str, z3.ArithRef] = {}
    for applier in appliers:
        for term in applier.aux.values():
            named[str(term)] = term
    return named


def contraction(value_map: ValueMap, *, budget: Budget = DEFAULT_BUDGET) -> Verdict:
    """A3 Theorem 3.9 (eliminable, sufficient): |f(x)| < |x| for every x ≠ 0 the body
    admits; refuted by a model with x ≠ 0 and |f(x)| ≥ |x|."""
    shared = _fresh()
    x = z3.Const("x1", _sort(value_map.input.sort, shared.ctx))
    f = _Applier(value_map, "1", shared)
    out = f(x)
    size_in = z3.If(x >= 0, x, -x)
    size_out = z3.If(out.value >= 0, out.value, -out.value)
    negation = z3.And(x != 0, out.present, size_out >= size_in)
    named = {"x1": x, **_aux_named(f), "lhs": out.value}
    aux = list(_aux_named(f).values())
    tiers = (_small_whole([x, *aux]), _ones(aux))
    return _solve(negation, shared, named, budget, tiers)


def monotone(
    value_map: ValueMap,
    position: int,
    nonnegative: bool = False,
    *,
    budget: Budget = DEFAULT_BUDGET,
) -> Verdict:
    """The combining expression never decreases when input ``position`` grows (others
    fixed): what min/max semi-naive evaluation with "keep only improved" needs.
    ``nonnegative`` as in ``property2``."""
    shared = _fresh()
    f = _Applier(value_map, "1", shared)
    inputs = [z3.Const(s.name, _sort(s.sort, shared.ctx)) for s in value_map.inputs]
    larger = list(inputs)
    larger[position] = z3.Const(f"{value_map.inputs[position].name}'", inputs[position].sort())
    low, high = f(*inputs), f(*larger)
    aux = list(_aux_named(f).values())
    negation = z3.And(
        inputs[position] <= larger[position],
        low.present,
        high.present,
        low.value > high.value,
        *_signs([*inputs, larger[position], *aux], nonnegative),
    )
    named = {str(t): t for t in [*inputs, larger[position]]}
    named.update(_aux_named(f))
    named.update({"lhs": low.value, "rhs": high.value})
    tiers = (_small_whole([*inputs, larger[position], *aux]),)
    return _solve(negation, shared, named, budget, tiers)


__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_RLIMIT",
    "Budget",
    "Verdict",
    "algebra",
    "contraction",
    "monotone",
    "property2",
]
