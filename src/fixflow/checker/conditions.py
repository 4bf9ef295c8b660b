"""Extraction of G, F′ and C from recursive aggregate rules, as Z3-free descriptions.

A recursive rule ``r(K, g[y]) :- T1 ; ... ; r(K', x), P..., y = f(x, aux)`` is read as
PowerLog's Equation (1): G is the head aggregate; every alternative containing the
recursive atom contributes an F′ — the expression mapping the recursive atom's value
variable ``x`` to the aggregate argument through the body's assignments; the other
variables of that expression are auxiliary symbols (edge weights, degrees, ...),
universally quantified and constrained by the body's comparisons and by known facts
(a ``count`` result is at least 1). Alternatives without the recursive atom form C.

``smt.py`` turns these descriptions into Z3 formulas; nothing here imports Z3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias, cast

from fixflow.checker.ast import (
    Aggregate,
    AggregateFunc,
    Atom,
    Attribute,
    BinOp,
    Body,
    BuiltinFunc,
    Call,
    Comparison,
    Constraint,
    Expr,
    Neg,
    Negation,
    NumberLit,
    Program,
    Rule,
    TypeName,
    Var,
    Wildcard,
    body_atoms,
    expr_vars,
)
from fixflow.checker.catalog import index_var
from fixflow.checker.printer import pretty
from fixflow.checker.types import bindings, infer_body

Sort: TypeAlias = Literal["int", "real"]


@dataclass(frozen=True, slots=True)
class Symbol:
    """A universally quantified value: the recursive input or an auxiliary variable."""

    name: str
    sort: Sort


@dataclass(frozen=True, slots=True)
class ValueMap:
    """A function of some recursive values: F′ of one alternative (one input) or the
    combining expression of a non-linear alternative (several inputs)."""

    inputs: tuple[Symbol, ...]
    output: Expr
    """In the input and auxiliary symbols; assignments already substituted."""
    output_sort: Sort
    aux: tuple[Symbol, ...]
    constraints: tuple[Comparison, ...]
    """Body comparisons and known facts; the alternative yields nothing when one fails."""
    target: str
    """The aggregate argument's name, for display (``dy``)."""

    @property
    def input(self) -> Symbol:
        return self.inputs[0]

    def text(self) -> str:
        """``dy = dx + w`` (or just the expression when the argument is not a variable)."""
        expression = pretty(self.output)
        return expression if self.target == expression else f"{self.target} = {expression}"


@dataclass(frozen=True, slots=True)
class Alternative:
    """One body of a recursive rule, classified."""

    body: Body
    recursive_atoms: tuple[int, ...]
    """Indices into ``body.literals`` of atoms of the rule's SCC."""
    value_map: ValueMap | None
    """F′ (linear alternative) or the combining expression; None for C or when the
    value could not be extracted (``why`` says why)."""
    why: str = ""


SORTS: dict[str, Sort] = {"number": "int", "float": "real"}
"""The Z3 sort of each numeric declared type (``symbol`` has none)."""


def sort_of(type_name: str | None) -> Sort | None:
    return SORTS.get(type_name or "")


def operator_of(func: AggregateFunc) -> str:
    """G as a binary operator; a recursive ``count`` combines partial counts by addition."""
    return "sum" if func == "count" else func


# ---------------------------------------------------------------- known facts


def count_columns(program: Program) -> frozenset[tuple[str, int]]:
    """(relation, position) of columns only ever produced by a ``count`` aggregate: such a
    value is at least 1 (a group exists only if something was counted)."""
    produced: dict[tuple[str, int], bool] = {}
    for rule in program.rules:
        aggregate = rule.head.aggregate
        for position, arg in enumerate(rule.head.args):
            key = (rule.head.relation, position)
            is_count = arg is aggregate and aggregate is not None and aggregate.func == "count"
            produced[key] = produced.get(key, True) and is_count
    return frozenset(k for k, v in produced.items() if v)


# ---------------------------------------------------------------- extraction


def alternatives(
    rule: Rule,
    members: frozenset[str],
    schemas: dict[str, tuple[Attribute, ...]],
    counts: frozenset[tuple[str, int]],
    value_positions: dict[str, int] | None = None,
) -> tuple[Alternative, ...]:
    """Every body of ``rule`` with its F′ / combining expression (see the module doc).
    ``value_positions`` gives the aggregate column of each relation of the recursion
    (default: the head relation's); atoms of other relations contribute no input."""
    if value_positions is None and rule.head.aggregate is not None:
        value_positions = {rule.head.relation: _value_position(rule)}
    positions_by_relation = value_positions or {}
    return tuple(
        _alternative(rule, b, members, schemas, counts, positions_by_relation) for b in rule.bodies
    )


def value_positions_of(program: Program) -> dict[str, int]:
    """The aggregate column of every relation that has a head aggregate."""
    found: dict[str, int] = {}
    for rule in program.rules:
        aggregate = rule.head.aggregate
        if aggregate is not None:
            found.setdefault(rule.head.relation, rule.head.args.index(aggregate))
    return found


def _alternative(
    rule: Rule,
    body: Body,
    members: frozenset[str],
    schemas: dict[str, tuple[Attribute, ...]],
    counts: frozenset[tuple[str, int]],
    value_positions: dict[str, int],
) -> Alternative:
    positions = tuple(
        i
        for i, lit in enumerate(body.literals)
        if isinstance(lit, Atom) and lit.relation in members
    )
    aggregate = rule.head.aggregate
    if not positions or aggregate is None:
        return Alternative(body, positions, None)
    index = index_var(rule)
    _, assignments = bindings(body, [index] if index else [])
    types = infer_body(body, schemas, assignments).types
    atom_bound = {a.name for atom in body_atoms(body) for a in atom.args if isinstance(a, Var)}
    definitions = _definitions(assignments, atom_bound | ({index} if index else set()))
    inputs: list[Symbol] = []
    renames: dict[str, Expr] = {}
    for n, position in enumerate(positions):
        atom = body.literals[position]
        assert isinstance(atom, Atom)
        value_pos = value_positions.get(atom.relation)
        if value_pos is None:
            continue  # a set relation of the recursion: its columns are keys only
        symbol, why = _input_symbol(atom, value_pos, schemas, n, index)
        if symbol is None:
            return Alternative(body, positions, None, why)
        inputs.append(symbol)
        value_arg = atom.args[value_pos]
        if isinstance(value_arg, Var) and value_arg.name != symbol.name:
            renames[value_arg.name] = Var(symbol.name)
    if not inputs:
        why = "no recursive value flows into the aggregate"
        return Alternative(body, positions, None, why)
    reuse = _value_reuse(rule, body, positions, inputs, value_positions)
    if reuse:
        return Alternative(body, positions, None, reuse)
    target_expr: Expr = aggregate.arg if aggregate.arg is not None else NumberLit(1)
    target = "1" if aggregate.arg is None else pretty(aggregate.arg)
    output = substitute(substitute(target_expr, definitions), renames)
    constraints = _constraints(body, assignments, definitions, renames, types, counts)
    joins = _value_joins(body, positions, inputs)
    constraints += tuple(c for c, _ in joins)
    types = {**types, **{name: type_ for _, (name, type_) in joins}}
    input_names = {s.name for s in inputs}
    free = expr_vars(output).union(*(_comparison_vars(c) for c in constraints)) - input_names
    aux: list[Symbol] = []
    for name in sorted(free):
        sort = sort_of(types.get(name))
        if sort is None:
            return Alternative(body, positions, None, f"`{name}` is not numeric")
        aux.append(Symbol(name, sort))
    output_type = _output_sort(rule, schemas)
    value_map = ValueMap(tuple(inputs), output, output_type, tuple(aux), constraints, target)
    return Alternative(body, positions, value_map)


def _value_reuse(
    rule: Rule,
    body: Body,
    positions: tuple[int, ...],
    inputs: list[Symbol],
    value_positions: dict[str, int],
) -> str:
    """Why F′ cannot be read as a function of the recursive value: the value is also a
    group-by key, or another argument of a recursive atom, or negated. Empty when fine."""
    names = {s.name for s in inputs}
    aggregate = rule.head.aggregate
    for arg in rule.head.args:
        if arg is not aggregate and expr_vars(arg) & names:
            return "the recursive value is also a group-by key of the head"
    for position in positions:
        atom = body.literals[position]
        assert isinstance(atom, Atom)
        value_pos = value_positions.get(atom.relation)
        for i, arg in enumerate(atom.args):
            if i != value_pos and expr_vars(arg) & names:
                return "the recursive value is also a key of a recursive atom"
    for literal in body.literals:
        if (
            isinstance(literal, Negation)
            and set().union(*(expr_vars(a) for a in literal.atom.args)) & names
        ):
            return "the recursive value occurs in a negated atom"
    return ""


def _value_joins(
    body: Body, positions: tuple[int, ...], inputs: list[Symbol]
) -> list[tuple[Comparison, tuple[str, TypeName]]]:
    """A recursive value that also occurs in another atom is a filter: F′ yields a value
    only when the input equals that atom's column. Each occurrence becomes a fresh
    auxiliary ``x_rel`` and the constraint ``x = x_rel``."""
    by_name = {s.name: s for s in inputs}
    joins: list[tuple[Comparison, tuple[str, TypeName]]] = []
    for i, literal in enumerate(body.literals):
        if i in positions or not isinstance(literal, Atom):
            continue
        for arg in literal.args:
            if isinstance(arg, Var) and arg.name in by_name:
                symbol = by_name[arg.name]
                fresh = f"{arg.name}_{literal.relation}{len(joins) + 1}"
                type_: TypeName = "number" if symbol.sort == "int" else "float"
                joins.append((Comparison("=", Var(arg.name), Var(fresh)), (fresh, type_)))
    return joins


def _definitions(assignments: list[Comparison], atom_bound: set[str]) -> dict[str, Expr]:
    """``X ↦ expr`` for every assignment, in binding order."""
    definitions: dict[str, Expr] = {}
    bound = set(atom_bound)
    for comparison in assignments:
        if isinstance(comparison.left, Var) and comparison.left.name not in bound:
            target, value = comparison.left, comparison.right
        else:
            assert isinstance(comparison.right, Var)
            target, value = comparison.right, comparison.left
        definitions[target.name] = value
        bound.add(target.name)
    return definitions


def _input_symbol(
    atom: Atom,
    value_pos: int,
    schemas: dict[str, tuple[Attribute, ...]],
    n: int,
    index: str | None,
) -> tuple[Symbol | None, str]:
    schema = schemas.get(atom.relation)
    if schema is None or value_pos >= len(atom.args) or len(schema) != len(atom.args):
        return None, f"`{atom.relation}` does not match its declaration"
    sort = sort_of(schema[value_pos].type)
    if sort is None:
        return None, f"the value of `{atom.relation}` is not numeric"
    value_arg = atom.args[value_pos]
    if isinstance(value_arg, Var) and value_arg.name != index:
        return Symbol(value_arg.name, sort), ""
    if isinstance(value_arg, Wildcard):
        return Symbol(f"_{n + 1}", sort), ""
    return None, f"the value argument of `{atom.relation}` is not a variable"


def _value_position(rule: Rule) -> int:
    aggregate = rule.head.aggregate
    assert aggregate is not None
    return rule.head.args.index(aggregate)


def _output_sort(rule: Rule, schemas: dict[str, tuple[Attribute, ...]]) -> Sort:
    schema = schemas.get(rule.head.relation)
    if schema is None:
        return "real"
    return sort_of(schema[_value_position(rule)].type) or "real"


def _constraints(
    body: Body,
    assignments: list[Comparison],
    definitions: dict[str, Expr],
    renames: dict[str, Expr],
    types: Mapping[str, str],
    counts: frozenset[tuple[str, int]],
) -> tuple[Comparison, ...]:
    found: list[Comparison] = []
    for original in body.literals:
        literal = (
            _constraint_as_comparison(original) if isinstance(original, Constraint) else original
        )
        if isinstance(literal, Comparison) and literal not in assignments:
            vars_ = expr_vars(literal.left) | expr_vars(literal.right)
            substituted = _substitute_comparison(literal, definitions, renames)
            # A test over symbols only is a guard independent of the values, and has no
            # model; one that reaches a value through a conversion (`to_string(dx)`)
            # must stay, so that the value map is rejected or opaque rather than total.
            if all(sort_of(types.get(v)) is not None for v in vars_) or any(
                types.get(v) != "symbol" for v in _comparison_vars(substituted)
            ):
                found.append(substituted)
    for atom in body_atoms(body):
        for position, arg in enumerate(atom.args):
            if isinstance(arg, Var) and (atom.relation, position) in counts:
                at_least_one = Comparison(">=", arg, NumberLit(1))
                found.append(_substitute_comparison(at_least_one, {}, renames))
    return tuple(found)


def _constraint_as_comparison(constraint: Constraint) -> Comparison | None:
    """``true`` is no guard; ``false`` never holds; ``contains``/``match`` become a test on
    an opaque functor (``smt`` does not model them)."""
    if constraint.func == "true":
        return None if not constraint.negated else Comparison("=", NumberLit(0), NumberLit(1))
    if constraint.func == "false":
        return Comparison("=", NumberLit(0), NumberLit(1)) if not constraint.negated else None
    call = Call(cast(BuiltinFunc, constraint.func), constraint.args)
    return Comparison("!=", call, NumberLit(0))


def _substitute_comparison(
    comparison: Comparison, definitions: dict[str, Expr], renames: dict[str, Expr]
) -> Comparison:
    left = substitute(substitute(comparison.left, definitions), renames)
    right = substitute(substitute(comparison.right, definitions), renames)
    return Comparison(comparison.op, left, right)


def _comparison_vars(comparison: Comparison) -> set[str]:
    return expr_vars(comparison.left) | expr_vars(comparison.right)


def substitute(expr: Expr, mapping: dict[str, Expr], depth: int = 0) -> Expr:
    """Replace variables by their definitions, transitively (assignments never cycle: each
    is bound only from already bound variables)."""
    if depth > 64:
        return expr
    match expr:
        case Var(name=name) if name in mapping:
            return substitute(mapping[name], mapping, depth + 1)
        case BinOp(op=op, left=left, right=right):
            return BinOp(op, substitute(left, mapping, depth), substitute(right, mapping, depth))
        case Neg(operand=operand):
            return Neg(substitute(operand, mapping, depth))
        case Call(func=func, args=args):
            return Call(func, tuple(substitute(a, mapping, depth) for a in args))
    return expr


# ---------------------------------------------------------------- texts


def constant_text(rule: Rule, alternatives_: tuple[Alternative, ...]) -> str:
    """C: the alternatives without the recursive atom, as written; ``∅`` when none."""
    constant = [pretty(a.body) for a in alternatives_ if not a.recursive_atoms]
    return " ; ".join(constant) if constant else "∅"


def aggregate_text(aggregate: Aggregate | None) -> str:
    if aggregate is None:
        return ""
    if aggregate.func == "count":
        return "count (combines partial counts by +)"
    if aggregate.func == "mean":
        return "mean ((a+b)/2 as a binary operator)"
    return aggregate.func
