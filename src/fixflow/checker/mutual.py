"""Mutually recursive aggregated relations → one relation tagged by which of them a row is.

Shortest walks with an even and with an odd number of edges, by mutual recursion::

    even(X, d) :- X = 1, d = 0.0.
    odd(Y, min[d]) :- even(X, dx), edge(X, Y, w), d = dx + w.
    even(Y, min[d]) :- odd(X, dx), edge(X, Y, w), d = dx + w.

are two relations, each linear, that no single-relation engine can run. Tagging every row
with the relation it belongs to makes them one relation, the spelling a user would
otherwise write by hand (a parity index)::

    _mutual_even_odd(_tag, X, d) :- X = 1, d = 0.0, _tag = 0.
    _mutual_even_odd(_tag, Y, min[d]) :- _mutual_even_odd(1, X, dx), ..., _tag = 0.
    _mutual_even_odd(_tag, Y, min[d]) :- _mutual_even_odd(0, X, dx), ..., _tag = 1.
    even(v0, min[v1]) :- _mutual_even_odd(0, v0, v1).
    odd(v0, min[v1]) :- _mutual_even_odd(1, v0, v1).

The encoding is exact: the tag is part of every group, a rule of relation *i* derives only
rows tagged *i*, and an atom of relation *j* reads only rows tagged *j*; so the tagged
relation holds exactly the rows of the relations it joins, and each keeps its declared
schema and aggregate. The recursive rules then share one aggregated head and are one union
(``checker.unions``): PowerLog's conditions are checked on it, and a linear union is
``mra``. ``fixflow check`` names the tagged relation with the user's relations.

A recursive component is tagged when it has two or more relations, all declared alike
(the same attribute types, the same ``min``, ``max`` or ``sum`` head aggregate in the
same position), none loaded
from input, hidden, or under a termination clause (a clause speaks of one rule's deltas).
Anything else is left as written. The rules keep their spans, so diagnostics and
counterexamples name the lines the user wrote.
"""

from __future__ import annotations

from collections.abc import Mapping

from fixflow.checker.ast import (
    Aggregate,
    AggregateFunc,
    Atom,
    Attribute,
    Body,
    Comparison,
    Declaration,
    Head,
    Item,
    NumberLit,
    Program,
    Rule,
    Span,
    TypeName,
    Var,
    map_nodes,
)
from fixflow.checker.stratification import dependency_edges, strongly_connected

PREFIX = "_mutual_"
"""Tagged relations are named ``_mutual_<relations>``: hidden (no identifier of a program
starts with ``_``, docs/language.md)."""
TAG = Var("_tag")
"""The head variable bound to the rule's tag (a head constant would keep the rules of
different relations from being one union: ``unions._merges_into``)."""
TAG_TYPE: TypeName = "number"
TAGGED_AGGREGATES = ("min", "max", "sum")
"""The aggregates under which a member's projection keeps the one value of each group:
``count`` would count it; ``mean`` recursion is naive anyway."""


def tag_mutual_recursion(
    program: Program, schemas: dict[str, tuple[Attribute, ...]], inputs: Mapping[str, Span]
) -> tuple[Program, dict[str, tuple[str, ...]]]:
    """``program`` with every eligible recursive component tagged as one relation (see the
    module doc), its declaration added to ``schemas``; and each tagged relation → the
    user's relations it holds, in tag order."""
    defined = frozenset(r.head.relation for r in program.rules)
    edges = dependency_edges(program.rules, defined)
    nodes = list(dict.fromkeys(r.head.relation for r in program.rules))
    tagged: dict[str, tuple[str, ...]] = {}
    for component in strongly_connected(nodes, edges):
        members = _declared_order(component, schemas)
        if _eligible(members, program.rules, schemas, inputs):
            name = PREFIX + "_".join(members)
            program = _tagged(program, name, members, schemas)
            tagged[name] = members
    return program, tagged


def _declared_order(component: list[str], schemas: Mapping[str, object]) -> tuple[str, ...]:
    order = {name: i for i, name in enumerate(schemas)}
    return tuple(sorted(component, key=lambda r: order.get(r, len(order))))


def _eligible(
    members: tuple[str, ...],
    rules: tuple[Rule, ...],
    schemas: Mapping[str, tuple[Attribute, ...]],
    inputs: Mapping[str, Span],
) -> bool:
    if len(members) < 2 or any(r.startswith("_") or r in inputs for r in members):
        return False
    if any(r not in schemas for r in members):
        return False
    own = [rule for rule in rules if rule.head.relation in members]
    if any(rule.termination is not None or _negates(rule, members) for rule in own):
        return False
    types = {tuple(a.type for a in schemas[r]) for r in members}
    aggregates = {_aggregate_of(r, own) for r in members}
    if len(types) != 1 or len(aggregates) != 1:
        return False
    (aggregate,) = aggregates
    return aggregate is not None and aggregate[0] in TAGGED_AGGREGATES


def _negates(rule: Rule, members: tuple[str, ...]) -> bool:
    return any(
        e.negated and e.body in members for e in dependency_edges([rule], frozenset(members))
    )


def _aggregate_of(relation: str, rules: list[Rule]) -> tuple[AggregateFunc, int] | None:
    """The one (function, position) of ``relation``'s head aggregates; None if it has none
    or several."""
    found = {
        (arg.func, position)
        for rule in rules
        if rule.head.relation == relation
        for position, arg in enumerate(rule.head.args)
        if isinstance(arg, Aggregate)
    }
    return found.pop() if len(found) == 1 else None


def _tagged(
    program: Program,
    name: str,
    members: tuple[str, ...],
    schemas: dict[str, tuple[Attribute, ...]],
) -> Program:
    """``program`` with ``members`` held by ``name``: its declaration after theirs, the
    members' rules deriving tagged rows, one projection rule per member."""
    tags = {relation: i for i, relation in enumerate(members)}
    first = schemas[members[0]]
    tag_name = _fresh_name("relation", {a.name for a in first})
    schemas[name] = (Attribute(tag_name, TAG_TYPE, first[0].span), *first)
    aggregate = _aggregate_of(members[0], list(program.rules))
    assert aggregate is not None, "only components with one head aggregate are tagged"
    items: list[Item] = []
    for item in program.items:
        if isinstance(item, Rule) and item.head.relation in tags:
            item = _tagged_rule(item, name, tags)
        items.append(item)
        if isinstance(item, Declaration) and item.relation == members[-1]:
            items.append(Declaration(name, schemas[name], item.span))
            arity = len(first)
            items += [_projection(r, name, i, arity, aggregate, item.span) for r, i in tags.items()]
    return Program(tuple(items), program.file)


def _tagged_rule(rule: Rule, name: str, tags: Mapping[str, int]) -> Rule:
    """A member's rule deriving rows tagged by its relation, its reads of members tagged."""
    rule = _retagged_reads(rule, name, tags)
    tag = Comparison("=", TAG, NumberLit(tags[rule.head.relation]), rule.head.span)
    bodies = tuple(Body((*b.literals, tag), b.span) for b in rule.bodies)
    head = Head(name, (TAG, *rule.head.args), rule.head.span)
    return Rule(head, bodies, rule.termination, rule.span)


def _retagged_reads(rule: Rule, name: str, tags: Mapping[str, int]) -> Rule:
    """Every atom of a member read as the tagged relation's rows of its tag."""

    def retag(atom: Atom) -> Atom:
        tag = tags.get(atom.relation)
        if tag is None:
            return atom
        return Atom(name, (NumberLit(tag, atom.span), *atom.args), atom.span)

    return map_nodes(rule, Atom, retag)


def _projection(
    relation: str, name: str, tag: int, arity: int, aggregate: tuple[AggregateFunc, int], span: Span
) -> Rule:
    """``relation(v0, .., g[vk], ..) :- name(tag, v0, ..).``: the member's rows. The group
    has one value already; the aggregate keeps the relation what it was declared (keyed by
    its group, its value updated in place)."""
    func, position = aggregate
    values = [Var(f"v{i}", span) for i in range(arity)]
    head: list[Var | Aggregate] = list(values)
    head[position] = Aggregate(func, values[position], span)
    read = Atom(name, (NumberLit(tag, span), *values), span)
    return Rule(Head(relation, tuple(head), span), (Body((read,), span),), None, span)


def tagged_title(relation: str, members: tuple[str, ...]) -> str:
    """How ``fixflow check`` names a tagged relation: the user's relations first."""
    tags = ", ".join(f"{i} = {member}" for i, member in enumerate(members))
    return f"{', '.join(members)} — one relation `{relation}`, rows tagged {tags}"


def _fresh_name(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name
