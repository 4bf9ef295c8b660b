"""Soufflé's body aggregates → Fixflow's head aggregates.

``p(x, c) :- q(x), c = count : { r(x, y) }.`` becomes a hidden relation and an atom::

    _agg1(x, count[*]) :- r(x, y).
    p(x, c) :- q(x), _agg1(x, _agg1_v), c = _agg1_v ;
               q(x), !_agg1(x, _), _agg1_v = 0, c = _agg1_v.

As in Soufflé, the aggregate's variables that the enclosing body binds outside aggregates
are its group-by keys (correlation variables); the others are local. ``count`` and ``sum``
over an empty group are 0 (the second alternative); ``min``, ``max`` and ``mean`` then
give no value, so the rule does not fire. A correlation variable the aggregate only tests
(``count : { r(y), y > x }``) takes its values from a hidden ``_aggN_dom(x)`` projected
from the enclosing body. Wildcards of the aggregate's atoms become hidden variables: as in
Soufflé, ``count : { r(x, _) }`` counts tuples. An aggregate inside another one's body is
lifted from that body in turn (its keys are what that body binds).

A variable that the rule uses outside the aggregate (in its head, say) without binding it
there, and that the aggregate's body binds, is a *witness* of a ``min`` or ``max``:
``top(x, m) :- m = max y : e(x, y).`` is, as in Soufflé's GroundWitnesses transform,
``top(x, m) :- _agg1(_agg1_v), e(x, _agg1_c1_y), _agg1_c1_y = _agg1_v, m = _agg1_v.``: the
aggregate's body once more, its locals renamed, its target equal to the value, so every
tuple reaching the extreme value (all of them, on a tie) gives its witnesses. A witness of
``count``, ``sum`` or ``mean`` is an error, as in Soufflé.

Hidden names start with ``_``, which no identifier of a program can (docs/language.md), so
they never collide with user names.
"""

from __future__ import annotations

import dataclasses
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
    renamed_vars,
)
from fixflow.checker.diagnostics import Diagnostic
from fixflow.checker.types import BodyTypes, assignment_sides, bindings

HIDDEN_PREFIX = "_agg"
WITNESSED = ("min", "max")
"""The aggregates whose body may bind variables the rule uses outside it (Soufflé's)."""


@dataclass(frozen=True)
class Lifted:
    """One body aggregate: its hidden relation and where the user wrote it."""

    relation: str
    span: Span
    enclosing: str
    """The head relation of the rule the aggregate appears in."""


@dataclass(frozen=True)
class _Scope:
    """What a body aggregate sees of the body it is in."""

    keys: frozenset[str]
    """The names that may group it: bound by the body outside aggregates."""
    unbound: frozenset[str]
    """The names the rule uses outside aggregates without binding them: its witnesses if
    the aggregate binds them."""


@dataclass
class _Lifter:
    schemas: dict[str, tuple[Attribute, ...]]
    items: list[Item] = field(default_factory=list)
    lifted: list[Lifted] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    counter: itertools.count = field(default_factory=lambda: itertools.count(1))

    def rule(self, rule: Rule) -> Rule:
        rule = _head_aggregates_to_body(rule)
        head_names = set().union(*(_names(a) for a in rule.head.args))
        bodies: list[Body] = []
        for body in rule.bodies:
            bodies += self._body(body, head_names, rule.head.relation)
        return Rule(rule.head, tuple(bodies), rule.termination, rule.span)

    def _body(self, body: Body, used: set[str], enclosing: str) -> list[Body]:
        """The alternatives replacing ``body``: one per empty/non-empty choice of each
        ``count``/``sum`` aggregate, and per alternative of a witnessed one. ``used``: the
        names the head of ``body``'s rule uses."""
        if not any(_sub_aggregates(lit) for lit in body.literals):
            return [body]
        bound = _grounded(body)
        used = used.union(*(_names(lit) for lit in body.literals))
        scope = _Scope(frozenset(bound), frozenset(used - bound))
        alternatives: list[list[BodyLiteral]] = [[]]
        for literal in body.literals:
            choices = self._literal(literal, body, scope, enclosing)
            alternatives = [a + c for a in alternatives for c in choices]
        return [Body(tuple(a), body.span) for a in alternatives]

    def _literal(
        self, literal: BodyLiteral, body: Body, scope: _Scope, enclosing: str
    ) -> list[list[BodyLiteral]]:
        aggregates = _sub_aggregates(literal)
        if not aggregates:
            return [[literal]]
        choices: list[list[BodyLiteral]] = [[]]
        replacements: dict[int, Var] = {}
        for aggregate in aggregates:
            value, options = self._lift(aggregate, body, scope, enclosing)
            replacements[id(aggregate)] = value
            choices = [c + o for c in choices for o in options]
        rewritten = _replace_in_literal(literal, replacements)
        return [[*c, rewritten] for c in choices]

    def _lift(
        self, aggregate: SubAggregate, body: Body, scope: _Scope, enclosing: str
    ) -> tuple[Var, list[list[BodyLiteral]]]:
        relation = f"{HIDDEN_PREFIX}{next(self.counter)}"
        span = aggregate.span
        witnesses = self._witnesses(aggregate, scope)
        refused = aggregate.func not in WITNESSED and bool(witnesses)
        if refused:
            # Reported: grouping by them (without the empty group, where they would have
            # no value) spares the user errors that only follow from it.
            scope = _Scope(scope.keys | set(witnesses), scope.unbound)
            witnesses = []
        if len(aggregate.bodies) == 1:
            keys, value_type = self._aggregate_rules(relation, aggregate, body, scope, enclosing)
        else:
            keys, value_type = self._union_rules(relation, aggregate, body, scope, enclosing)
        self._declare(relation, [*keys, Attribute("value", value_type, span)], span)
        self.lifted.append(Lifted(relation, span, enclosing))
        value = Var(f"{relation}_v", span)
        key_vars = tuple(Var(k.name, span) for k in keys)
        options: list[list[BodyLiteral]] = [[Atom(relation, (*key_vars, value), span)]]
        if witnesses:
            kept = {k.name for k in keys} | set(witnesses)
            copies = self._witness_copies(aggregate, value, kept, relation)
            used = scope.unbound | scope.keys
            expanded = [b for c in copies for b in self._body(c, set(used), enclosing)]
            options = [[*o, *c.literals] for o in options for c in expanded]
        if aggregate.func in ("count", "sum") and not refused:
            zero: Expr = FloatLit(0.0, span) if value_type == "float" else NumberLit(0, span)
            absent = Negation(Atom(relation, (*key_vars, Wildcard(span)), span), span)
            options.append([absent, Comparison("=", value, zero, span)])
        return value, options

    def _witnesses(self, aggregate: SubAggregate, scope: _Scope) -> list[str]:
        """The variables ``aggregate`` binds that the rule uses unbound outside it (module
        doc); for ``count``, ``sum`` and ``mean`` each is an error, as in Soufflé."""
        bound = set().union(*(_grounded(b) for b in aggregate.bodies))
        witnesses = sorted(scope.unbound & bound)
        if aggregate.func not in WITNESSED:
            for name in witnesses:
                self.diagnostics.append(
                    Diagnostic(
                        f"`{name}` is bound only inside a `{aggregate.func}` aggregate, "
                        "but used outside it",
                        _first_occurrence(aggregate, name),
                        (
                            f"bind `{name}` outside the aggregate to group by it; only a "
                            "`min` or `max` aggregate gives values (witnesses) to variables "
                            "used outside it, as in Soufflé",
                        ),
                    )
                )
        return witnesses

    def _witness_copies(
        self, aggregate: SubAggregate, value: Var, kept: set[str], relation: str
    ) -> list[Body]:
        """Per alternative of ``aggregate``, its body with the target equal to ``value``
        and every variable but ``kept`` (its keys and witnesses) renamed: joined to the
        rule, it binds the witnesses to the tuples that reach the value (module doc)."""
        assert aggregate.target is not None, "min and max have a target"
        copies: list[Body] = []
        for index, alternative in enumerate(aggregate.bodies, start=1):
            names = _body_names(alternative) | expr_vars(aggregate.target)
            rename = {n: f"{relation}_c{index}_{n}" for n in sorted(names - kept)}
            target = renamed_vars(aggregate.target, rename)
            literals = renamed_vars(alternative.literals, rename)
            reached = Comparison("=", target, value, aggregate.span)
            copies.append(Body((*literals, reached), alternative.span))
        return copies

    def _aggregate_rules(
        self, relation: str, aggregate: SubAggregate, body: Body, scope: _Scope, enclosing: str
    ) -> tuple[list[Attribute], TypeName]:
        """``_aggN(keys.., f[target]) :- inner.`` for a body aggregate of one body: its
        keys (correlation variables) and the type of its value."""
        span = aggregate.span
        inner = _with_named_wildcards(aggregate.bodies[0], relation)
        inner_names = _body_names(inner) | expr_vars(aggregate.target)
        candidates = sorted(inner_names & scope.keys)
        inner, types = self._typed_keys(f"{relation}_dom", candidates, body, inner, span)
        # A key still unbound stays a plain variable: the analysis reports it as unsafe
        # where the user wrote it.
        keys = [Attribute(k, types.types[k], span) for k in candidates if k in types.types]
        head_args: tuple[HeadArg, ...] = (
            *[Var(k.name, span) for k in keys],
            Aggregate(aggregate.func, aggregate.target, span),
        )
        # Aggregates nested in ``inner`` are lifted from it: its head uses the keys and
        # the target.
        used = {k.name for k in keys} | expr_vars(aggregate.target)
        for alternative in self._body(inner, used, enclosing):
            self.items.append(Rule(Head(relation, head_args, span), (alternative,), None, span))
        return keys, _value_type(aggregate, types)

    def _union_rules(
        self, relation: str, aggregate: SubAggregate, body: Body, scope: _Scope, enclosing: str
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
        keys = sorted(set().union(*names) & scope.keys)
        columns = [*keys, *_union_locals(aggregate, keys)]
        head = Head(union, tuple(Var(c, span) for c in columns), span)
        typed: list[BodyTypes] = []
        for index, alternative in enumerate(aggregate.bodies, start=1):
            domain = f"{relation}_dom{index}"
            inner, types = self._typed_keys(domain, keys, body, alternative, span)
            typed.append(types)
            for expanded in self._body(inner, set(columns), enclosing):
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


def _infer(
    body: Body, schemas: dict[str, tuple[Attribute, ...]], known: dict[str, TypeName] | None = None
) -> BodyTypes:
    """The types of the variables ``body`` binds (atoms, then assignments to a fixpoint;
    ``known``: those of an enclosing body). A nested aggregate's value has the type of its
    target in its own body."""
    types = BodyTypes(dict(schemas), dict(known or {}))
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
                types.bind_assignment(target, _typed_values(value, types))
                pending.remove(comparison)
                progress = True
    return types


def _typed_values(expr: Expr, types: BodyTypes) -> Expr:
    """``expr`` with each body aggregate replaced by a hidden variable of its value's type
    (added to ``types``), so that ``expr`` can be typed."""
    by: dict[int, Var] = {}
    for aggregate in _sub_aggregates(expr):
        name = f"{HIDDEN_PREFIX}_type{len(types.types)}"
        inner = _infer(aggregate.bodies[0], types.schemas, types.types)
        types.types[name] = _value_type(aggregate, inner)
        by[id(aggregate)] = Var(name, aggregate.span)
    return _replace(expr, by) if by else expr


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


def _grounded(body: Body) -> set[str]:
    """The variables ``body`` binds outside its aggregates (an aggregate's value counts as
    bound, as in Soufflé): ``types.bindings``."""
    return bindings(body)[0]


def _first_occurrence(aggregate: SubAggregate, name: str) -> Span:
    """Where ``name`` first occurs in ``aggregate``'s bodies (for a diagnostic)."""
    found: list[Span] = []

    def visit(node: object) -> None:
        if isinstance(node, Var) and node.name == name:
            found.append(node.span)
        elif isinstance(node, tuple):
            for child in node:
                visit(child)
        elif dataclasses.is_dataclass(node) and not isinstance(node, Span | type):
            for f in dataclasses.fields(node):
                visit(getattr(node, f.name))

    visit(aggregate.bodies)
    return found[0] if found else aggregate.span


def _body_names(body: Body) -> set[str]:
    names: set[str] = set()
    for literal in body.literals:
        names |= _names(literal)
        for aggregate in _sub_aggregates(literal):
            names |= expr_vars(aggregate.target)
            names = names.union(*(_body_names(b) for b in aggregate.bodies))
    return names


# ---------------------------------------------------------------- entry points


def has_sub_aggregates(program: Program) -> bool:
    heads = (a for r in program.rules for a in r.head.args if not isinstance(a, Aggregate))
    literals = (lit for r in program.rules for b in r.bodies for lit in b.literals)
    return any(_sub_aggregates(node) for node in (*heads, *literals))


def lift_sub_aggregates(
    program: Program,
) -> tuple[Program, tuple[Lifted, ...], tuple[Diagnostic, ...]]:
    """The program with every body aggregate lifted into a hidden relation (module doc),
    and what is wrong with its aggregates (a witness of ``count``, ``sum`` or ``mean``)."""
    if not has_sub_aggregates(program):
        return program, (), ()
    schemas = {d.relation: d.attributes for d in program.declarations}
    lifter = _Lifter(schemas)
    items: list[Item] = []
    for item in program.items:
        items.append(lifter.rule(item) if isinstance(item, Rule) else item)
    lifted = Program(tuple(items + lifter.items), program.file)
    return lifted, tuple(lifter.lifted), tuple(lifter.diagnostics)


def is_hidden(relation: str) -> bool:
    return relation.startswith(HIDDEN_PREFIX)
