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
    Cast,
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
        if len(aggregate.bodies) == 1:
            keys, value_type = self._aggregate_rules(relation, aggregate, body, outer, enclosing)
        else:
            keys, value_type = self._union_rules(relation, aggregate, body, outer, enclosing)
        self._declare(relation, [*keys, Attribute("value", value_type, span)], span)
        self.lifted.append(Lifted(relation, span, enclosing))
        value = Var(f"{relation}_v", span)
        key_vars = tuple(Var(k.name, span) for k in keys)
        options: list[list[BodyLiteral]] = [[Atom(relation, (*key_vars, value), span)]]
        if aggregate.func in ("count", "sum"):
            zero: Expr = FloatLit(0.0, span) if value_type == "float" else NumberLit(0, span)
            absent = Negation(Atom(relation, (*key_vars, Wildcard(span)), span), span)
            options.append([absent, Comparison("=", value, zero, span)])
        return value, options

    def _aggregate_rules(
        self, relation: str, aggregate: SubAggregate, body: Body, outer: set[str], enclosing: str
    ) -> tuple[list[Attribute], TypeName]:
        """``_aggN(keys.., f[target]) :- inner.`` for a body aggregate of one body: its
        keys (correlation variables) and the type of its value."""
        span = aggregate.span
        inner = _with_named_wildcards(aggregate.bodies[0], relation)
        inner_names = _body_names(inner) | expr_vars(aggregate.target)
        candidates = sorted(inner_names & outer)
        inner, types = self._typed_keys(f"{relation}_dom", candidates, body, inner, span)
        # A key still unbound stays a plain variable: the analysis reports it as unsafe
        # where the user wrote it.
        keys = [Attribute(k, types.types[k], span) for k in candidates if k in types.types]
        head_args: tuple[HeadArg, ...] = (
            *[Var(k.name, span) for k in keys],
            Aggregate(aggregate.func, aggregate.target, span),
        )
        for alternative in self._body(inner, outer | inner_names, enclosing):
            self.items.append(Rule(Head(relation, head_args, span), (alternative,), None, span))
        return keys, _value_type(aggregate, types)

    def _union_rules(
        self, relation: str, aggregate: SubAggregate, body: Body, outer: set[str], enclosing: str
    ) -> tuple[list[Attribute], TypeName]:
        """``f t : { b1 ; b2 }``: a hidden set relation ``_aggN_set(keys.., locals..)`` with
        one rule per alternative, and ``_aggN(keys.., f[t]) :- _aggN_set(keys.., locals..)``.
        The set removes tuples found by several alternatives, so the aggregate ranges over
        the *set* of the union's tuples, as it does over one body's (several bodies of
        ``_aggN`` itself would each contribute their own). The locals are the target's
        variables and those every alternative names; the others, and ``_``, are existential."""
        span = aggregate.span
        union = f"{relation}_set"
        names = [_body_names(b) | expr_vars(aggregate.target) for b in aggregate.bodies]
        keys = sorted(set().union(*names) & outer)
        columns = [*keys, *_union_locals(aggregate, keys)]
        head = Head(union, tuple(Var(c, span) for c in columns), span)
        typed: list[BodyTypes] = []
        for index, alternative in enumerate(aggregate.bodies, start=1):
            domain = f"{relation}_dom{index}"
            inner, types = self._typed_keys(domain, keys, body, alternative, span)
            typed.append(types)
            for expanded in self._body(inner, outer | names[index - 1], enclosing):
                self.items.append(Rule(head, (expanded,), None, span))
        self._declare(union, [Attribute(c, _column_type(c, typed), span) for c in columns], span)
        set_body = Body((Atom(union, tuple(Var(c, span) for c in columns), span),), span)
        head_args: tuple[HeadArg, ...] = (
            *[Var(k, span) for k in keys],
            Aggregate(aggregate.func, aggregate.target, span),
        )
        self.items.append(Rule(Head(relation, head_args, span), (set_body,), None, span))
        key_attributes = [Attribute(k, _column_type(k, typed), span) for k in keys]
        return key_attributes, _value_type(aggregate, _infer(set_body, self.schemas))

    def _typed_keys(
        self, domain: str, keys: list[str], body: Body, inner: Body, span: Span
    ) -> tuple[Body, BodyTypes]:
        """``inner`` with the keys it only tests bound by a domain relation, and its types."""
        types = _infer(inner, self.schemas)
        unbound = [k for k in keys if k not in types.types]
        if unbound:
            inner = self._with_domain(domain, unbound, body, inner, span)
            types = _infer(inner, self.schemas)
        return inner, types

    def _with_domain(
        self, domain: str, unbound: list[str], body: Body, inner: Body, span: Span
    ) -> Body:
        """``inner`` joined with a hidden ``domain(x..)`` (``_aggN_dom``) holding the values
        of the correlation variables it only tests (``count : { r(y), y > x }``), projected
        from the enclosing body's literals without aggregates."""
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


def _union_locals(aggregate: SubAggregate, keys: list[str]) -> list[str]:
    """A disjunctive aggregate's columns besides its keys: its target's variables and the
    variables that every alternative names outside nested aggregates."""
    named = [set().union(*(_names(lit) for lit in b.literals)) for b in aggregate.bodies]
    shared = set.intersection(*named) | expr_vars(aggregate.target)
    return sorted(shared - set(keys))


def _column_type(name: str, typed: list[BodyTypes]) -> TypeName:
    """The type of ``name`` in the first alternative that binds it (``number`` if none
    does: the analysis reports the variable as unsafe)."""
    return next((t.types[name] for t in typed if name in t.types), "number")


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
        case Neg(operand=operand) | Cast(operand=operand):
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
        case Cast(operand=operand):
            return Cast(_replace(operand, by), expr.type_name, expr.base, expr.span)
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
        case Neg(operand=operand) | Aggregate(arg=operand) | Cast(operand=operand):
            return _names(operand)
    return set()


def _body_names(body: Body) -> set[str]:
    names: set[str] = set()
    for literal in body.literals:
        names |= _names(literal)
        for aggregate in _sub_aggregates(literal):
            names |= expr_vars(aggregate.target)
            names = names.union(*(_body_names(b) for b in aggregate.bodies))
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
