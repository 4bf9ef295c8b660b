"""Soufflé's body aggregates → Fixflow's head aggregates.

``p(x, c) :- q(x), c = count : { r(x, y) }.`` becomes a hidden relation and an atom::

    _agg1(x, count[*]) :- r(x, y).
    p(x, c) :- q(x), _agg1(x, _agg1_v), c = _agg1_v ;
               q(x), !_agg1(x, _), _agg1_v = 0, c = _agg1_v.

The aggregate's variables that also occur elsewhere in the rule are its group-by keys
(correlation variables); the others are local. ``count`` and ``sum`` over an empty group
are 0 (the second alternative); ``min``, ``max`` and ``mean`` then give no value, so the
rule does not fire. A correlation variable the aggregate only tests (``count : { r(y),
y > x }``) takes its values from a hidden ``_aggN_dom(x)`` projected from the enclosing
body. Wildcards of the aggregate's atoms become hidden variables: as in
Soufflé, ``count : { r(x, _) }`` counts tuples. Hidden names start with ``_``, which no
identifier of a program can (docs/language.md), so they never collide with user names.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from fixflow.checker.ast import (
    Aggregate,
    Atom,
    Attribute,
    BinOp,
    Body,
    BodyLiteral,
    Call,
    Comparison,
    Constraint,
    Declaration,
    Expr,
    FloatLit,
    Head,
    HeadArg,
    Item,
    Neg,
    Negation,
    NumberLit,
    Program,
    Rule,
    Span,
    SubAggregate,
    TypeName,
    Var,
    Wildcard,
    expr_vars,
)
from fixflow.checker.types import BodyTypes, assignment_sides

HIDDEN_PREFIX = "_agg"


@dataclass(frozen=True)
class Lifted:
    """One body aggregate: its hidden relation and where the user wrote it."""

    relation: str
    span: Span
    enclosing: str
    """The head relation of the rule the aggregate appears in."""


@dataclass
class _Lifter:
    schemas: dict[str, tuple[Attribute, ...]]
    items: list[Item] = field(default_factory=list)
    lifted: list[Lifted] = field(default_factory=list)
    counter: itertools.count = field(default_factory=lambda: itertools.count(1))

    def rule(self, rule: Rule) -> Rule:
        rule = _head_aggregates_to_body(rule)
        outer_names = _rule_names_outside_aggregates(rule)
        bodies: list[Body] = []
        for body in rule.bodies:
            bodies += self._body(body, outer_names, rule.head.relation)
        return Rule(rule.head, tuple(bodies), rule.termination, rule.span)

    def _body(self, body: Body, outer: set[str], enclosing: str) -> list[Body]:
        """The alternatives replacing ``body``: one per empty/non-empty choice of each
        ``count``/``sum`` aggregate."""
        alternatives: list[list[BodyLiteral]] = [[]]
        for literal in body.literals:
            choices = self._literal(literal, body, outer, enclosing)
            alternatives = [a + c for a in alternatives for c in choices]
        return [Body(tuple(a), body.span) for a in alternatives]

    def _literal(
        self, literal: BodyLiteral, body: Body, outer: set[str], enclosing: str
    ) -> list[list[BodyLiteral]]:
        aggregates = _sub_aggregates(literal)
        if not aggregates:
            return [[literal]]
        choices: list[list[BodyLiteral]] = [[]]
        replacements: dict[int, Var] = {}
        for aggregate in aggregates:
            value, options = self._lift(aggregate, body, outer, enclosing)
            replacements[id(aggregate)] = value
            choices = [c + o for c in choices for o in options]
        rewritten = _replace_in_literal(literal, replacements)
        return [[*c, rewritten] for c in choices]

    def _lift(
        self, aggregate: SubAggregate, body: Body, outer: set[str], enclosing: str
    ) -> tuple[Var, list[list[BodyLiteral]]]:
        relation = f"{HIDDEN_PREFIX}{next(self.counter)}"
        span = aggregate.span
        inner = _with_named_wildcards(aggregate.body, relation)
        inner_names = _body_names(inner) | expr_vars(aggregate.target)
        keys = sorted(inner_names & outer)
        types = _infer(inner, self.schemas)
        unbound = [k for k in keys if k not in types.types]
        if unbound:
            inner = self._with_domain(relation, unbound, body, inner, span)
            types = _infer(inner, self.schemas)
        # A key still unbound stays a plain variable: the analysis reports it as unsafe
        # where the user wrote it.
        keys = [k for k in keys if k in types.types]
        value_type = _value_type(aggregate, types)
        head_args: tuple[HeadArg, ...] = (
            *[Var(k, span) for k in keys],
            Aggregate(aggregate.func, aggregate.target, span),
        )
        for alternative in self._body(inner, outer | inner_names, enclosing):
            self.items.append(Rule(Head(relation, head_args, span), (alternative,), None, span))
        attributes = [Attribute(k, types.types[k], span) for k in keys]
        self._declare(relation, [*attributes, Attribute("value", value_type, span)], span)
        self.lifted.append(Lifted(relation, span, enclosing))
        value = Var(f"{relation}_v", span)
        key_vars = tuple(Var(k, span) for k in keys)
        options: list[list[BodyLiteral]] = [[Atom(relation, (*key_vars, value), span)]]
        if aggregate.func in ("count", "sum"):
            zero: Expr = FloatLit(0.0, span) if value_type == "float" else NumberLit(0, span)
            absent = Negation(Atom(relation, (*key_vars, Wildcard(span)), span), span)
            options.append([absent, Comparison("=", value, zero, span)])
        return value, options

    def _with_domain(
        self, relation: str, unbound: list[str], body: Body, inner: Body, span: Span
    ) -> Body:
        """``inner`` joined with a hidden ``_aggN_dom(x..)`` holding the values of the
        correlation variables it only tests (``count : { r(y), y > x }``), projected from
        the enclosing body's literals without aggregates."""
        domain = f"{relation}_dom"
        outside = Body(tuple(lit for lit in body.literals if not _sub_aggregates(lit)), body.span)
        types = _infer(outside, self.schemas)
        bound = [k for k in unbound if k in types.types]
        if not bound:
            return inner
        args = tuple(Var(k, span) for k in bound)
        self.items.append(Rule(Head(domain, args, span), (outside,), None, span))
        self._declare(domain, [Attribute(k, types.types[k], span) for k in bound], span)
        return Body((Atom(domain, args, span), *inner.literals), inner.span)

    def _declare(self, relation: str, attributes: list[Attribute], span: Span) -> None:
        self.schemas[relation] = tuple(attributes)
        self.items.append(Declaration(relation, tuple(attributes), span))


def _head_aggregates_to_body(rule: Rule) -> Rule:
    """``p(x, count : {...}) :- b.`` → ``p(x, _h1) :- b, _h1 = count : {...}.``"""
    literals: list[BodyLiteral] = []
    args: list[HeadArg] = []
    for arg in rule.head.args:
        found = [] if isinstance(arg, Aggregate) else _sub_aggregates(arg)
        by = {id(s): Var(f"_h{len(literals) + i + 1}", s.span) for i, s in enumerate(found)}
        literals += [Comparison("=", by[id(s)], s, s.span) for s in found]
        args.append(_replace(arg, by) if found else arg)  # type: ignore[arg-type]
    if not literals:
        return rule
    head = Head(rule.head.relation, tuple(args), rule.head.span)
    bodies = tuple(Body((*b.literals, *literals), b.span) for b in rule.bodies)
    return Rule(head, bodies, rule.termination, rule.span)


def _infer(body: Body, schemas: dict[str, tuple[Attribute, ...]]) -> BodyTypes:
    """The types of the variables ``body`` binds (atoms, then assignments to a fixpoint)."""
    types = BodyTypes(dict(schemas))
    for literal in body.literals:
        if isinstance(literal, Atom):
            types.bind_from_atom(literal)
    pending = [lit for lit in body.literals if isinstance(lit, Comparison) and lit.op == "="]
    progress = True
    while progress:
        progress = False
        for comparison in list(pending):
            target, value = assignment_sides(comparison, set(types.types))
            if target is not None and expr_vars(value) <= set(types.types):
                types.bind_assignment(target, value)
                pending.remove(comparison)
                progress = True
    return types


def _value_type(aggregate: SubAggregate, types: BodyTypes) -> TypeName:
    if aggregate.func == "count":
        return "number"
    if aggregate.func == "mean":
        return "float"
    assert aggregate.target is not None, "only count has no target"
    if not expr_vars(aggregate.target) <= set(types.types):
        return "number"  # unbound: the analysis reports it on the hidden rule's head
    return types.expr_type(aggregate.target) or "number"


def _with_named_wildcards(body: Body, relation: str) -> Body:
    """``r(x, _)`` → ``r(x, _aggN_w1)`` in positive atoms, so that tuples are counted."""
    names = (f"{relation}_w{i}" for i in itertools.count(1))
    literals: list[BodyLiteral] = []
    for literal in body.literals:
        if isinstance(literal, Atom):
            args = tuple(
                Var(next(names), a.span) if isinstance(a, Wildcard) else a for a in literal.args
            )
            literal = Atom(literal.relation, args, literal.span)
        literals.append(literal)
    return Body(tuple(literals), body.span)


# ---------------------------------------------------------------- traversal


def _sub_aggregates(node: object) -> list[SubAggregate]:
    """The outermost body aggregates inside a literal or expression."""
    match node:
        case SubAggregate():
            return [node]
        case Atom(args=args) | Call(args=args) | Constraint(args=args):
            return [s for a in args for s in _sub_aggregates(a)]
        case Negation(atom=atom):
            return _sub_aggregates(atom)
        case Comparison(left=left, right=right) | BinOp(left=left, right=right):
            return _sub_aggregates(left) + _sub_aggregates(right)
        case Neg(operand=operand):
            return _sub_aggregates(operand)
    return []


def _replace(expr: Expr, by: dict[int, Var]) -> Expr:
    match expr:
        case SubAggregate() if id(expr) in by:
            return by[id(expr)]
        case BinOp(op=op, left=left, right=right):
            return BinOp(op, _replace(left, by), _replace(right, by), expr.span)
        case Neg(operand=operand):
            return Neg(_replace(operand, by), expr.span)
        case Call(func=func, args=args):
            return Call(func, tuple(_replace(a, by) for a in args), expr.span)
    return expr


def _replace_in_literal(literal: BodyLiteral, by: dict[int, Var]) -> BodyLiteral:
    match literal:
        case Atom(relation=relation, args=args):
            return Atom(relation, tuple(_replace(a, by) for a in args), literal.span)
        case Negation(atom=atom):
            replaced = _replace_in_literal(atom, by)
            assert isinstance(replaced, Atom)
            return Negation(replaced, literal.span)
        case Comparison(op=op, left=left, right=right):
            return Comparison(op, _replace(left, by), _replace(right, by), literal.span)
        case Constraint(func=func, args=args, negated=negated):
            replaced_args = tuple(_replace(a, by) for a in args)
            return Constraint(func, replaced_args, negated, literal.span)
    return literal


def _names(node: object) -> set[str]:
    """Variable names of a literal or expression outside any body aggregate."""
    match node:
        case Var(name=name):
            return {name}
        case SubAggregate():
            return set()
        case Atom(args=args) | Call(args=args) | Constraint(args=args):
            return set().union(*(_names(a) for a in args))
        case Negation(atom=atom):
            return _names(atom)
        case Comparison(left=left, right=right) | BinOp(left=left, right=right):
            return _names(left) | _names(right)
        case Neg(operand=operand) | Aggregate(arg=operand):
            return _names(operand)
    return set()


def _body_names(body: Body) -> set[str]:
    names: set[str] = set()
    for literal in body.literals:
        names |= _names(literal)
        for aggregate in _sub_aggregates(literal):
            names |= _body_names(aggregate.body) | expr_vars(aggregate.target)
    return names


def _rule_names_outside_aggregates(rule: Rule) -> set[str]:
    names = set().union(*(_names(a) for a in rule.head.args))
    for body in rule.bodies:
        for literal in body.literals:
            names |= _names(literal)
    return names


# ---------------------------------------------------------------- entry points


def has_sub_aggregates(program: Program) -> bool:
    heads = (a for r in program.rules for a in r.head.args if not isinstance(a, Aggregate))
    literals = (lit for r in program.rules for b in r.bodies for lit in b.literals)
    return any(_sub_aggregates(node) for node in (*heads, *literals))


def lift_sub_aggregates(
    program: Program,
) -> tuple[Program, tuple[Lifted, ...]]:
    """The program with every body aggregate lifted into a hidden relation (module doc)."""
    if not has_sub_aggregates(program):
        return program, ()
    schemas = {d.relation: d.attributes for d in program.declarations}
    lifter = _Lifter(schemas)
    items: list[Item] = []
    for item in program.items:
        items.append(lifter.rule(item) if isinstance(item, Rule) else item)
    return Program(tuple(items + lifter.items), program.file), tuple(lifter.lifted)


def is_hidden(relation: str) -> bool:
    return relation.startswith(HIDDEN_PREFIX)
