"""Iteration-indexed rules → their MRA form (PowerLog Program 2 → Program 2.b).

``rank(i+1, Y, sum[r]) :- node(Y), r = 0.15 ; rank(i, X, rx), ..., r = 0.85 * rx / d.``
becomes ``rank(Y, sum[r]) :- node(Y), r = 0.15 ; rank(X, rx), ..., r = 0.85 * rx / d.``
with the index column dropped from the declaration: the recursive rule now accumulates
into one value per key instead of recomputing it each round.

The base rule ``rank(0, X, r) :- ...`` gives X⁰. Under ``min``/``max`` X⁰ stays one more
candidate of the aggregate. Under ``sum`` a program that converges to a limit forgets X⁰
(A3 Theorem 3.5: the limit is g′(…, f(C), C), independent of X⁰), so the base rule is
dropped; a sum program that reaches a fixpoint keeps it.
"""

from __future__ import annotations

from fixflow.checker.ast import (
    Atom,
    Body,
    Declaration,
    Head,
    Item,
    Program,
    Rule,
)


def drop_index(program: Program, relation: str, recursive_rule: Rule, keep_base: bool) -> Program:
    """The program with ``relation``'s iteration index removed (see the module doc)."""
    items: list[Item] = []
    for item in program.items:
        if isinstance(item, Declaration) and item.relation == relation:
            items.append(Declaration(relation, item.attributes[1:], item.span))
        elif isinstance(item, Rule) and item.head.relation == relation:
            if item is recursive_rule or keep_base:
                items.append(_unindexed_rule(item, relation))
        else:
            items.append(item)
    return Program(tuple(items), program.file)


def _unindexed_rule(rule: Rule, relation: str) -> Rule:
    head = Head(rule.head.relation, rule.head.args[1:], rule.head.span)
    bodies = tuple(_unindexed_body(b, relation) for b in rule.bodies)
    return Rule(head, bodies, rule.termination, rule.span)


def _unindexed_body(body: Body, relation: str) -> Body:
    literals = tuple(
        Atom(lit.relation, lit.args[1:], lit.span)
        if isinstance(lit, Atom) and lit.relation == relation
        else lit
        for lit in body.literals
    )
    return Body(literals, body.span)
