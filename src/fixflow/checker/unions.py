"""Rules with the same aggregated head are one recursion: their bodies are alternatives.

Users write undirected connected components as two rules, one per direction::

    cc(Y, min[v]) :- cc(X, v), edge(X, Y, _).
    cc(X, min[v]) :- cc(Y, v), edge(X, Y, _).

Rules of one relation are a union, exactly as ``;`` alternatives of one rule are, so the
recursive rules of an aggregated relation are merged into one rule before the stratum is
classified: the checker proves PowerLog's conditions on the union (G∘F′ over all bodies)
and a linear union is ``mra``, as the ``;`` spelling is. The second rule above becomes an
alternative of the first, its variables renamed to the first head's (``X`` → ``Y``) and
its own variables that would collide renamed apart (``Y`` → ``Y2``)::

    cc(Y, min[v]) :- cc(X, v), edge(X, Y, _) ; cc(Y2, v), edge(Y, Y2, _).

A head term that is not a plain variable becomes an equality in the alternative's body
(``p(X + 1, min[d]) :- q(X, d)`` → ``... ; q(X2, d2), X = X2 + 1, d = d2``). Bodies keep
their spans, so what the checker says of an alternative names the line the user wrote it
on. Iteration-indexed rules (``r(i+1, ...)``) are left as written: their index is a
shape of its own (``catalog.index_var``).
"""

from __future__ import annotations

from collections.abc import Iterable

from fixflow.checker.ast import (
    Aggregate,
    Body,
    Comparison,
    Expr,
    Rule,
    Termination,
    Var,
    body_atoms,
    map_nodes,
    renamed_vars,
)
from fixflow.checker.catalog import index_var


def merged_alternatives(rules: tuple[Rule, ...], members: frozenset[str]) -> tuple[Rule, ...]:
    """``rules`` (one stratum's) with the recursive rules of each aggregated relation
    merged into its first one; other rules unchanged, in their order."""
    aggregated = {r.head.relation for r in rules if r.head.aggregate is not None}
    groups: dict[str, list[Rule]] = {}
    for rule in rules:
        if rule.head.relation in aggregated and _mergeable(rule, members):
            groups.setdefault(rule.head.relation, []).append(rule)
    merged = {
        relation: _merge(group)
        for relation, group in groups.items()
        if len(group) > 1 and _one_termination(group) and _merges_into(_first(group))
    }
    result: list[Rule] = []
    for rule in rules:
        relation = rule.head.relation
        if relation in merged and rule in groups[relation]:
            if rule is groups[relation][0]:
                result.append(merged[relation])
            continue
        result.append(rule)
    return tuple(result)


def _mergeable(rule: Rule, members: frozenset[str]) -> bool:
    reads = any(a.relation in members for b in rule.bodies for a in body_atoms(b))
    return reads and index_var(rule) is None


def _merges_into(first: Rule) -> bool:
    """The first rule's head names each column with its own variable (the aggregate's
    target too), so another rule's head terms can be bound to them."""
    names = [t.name for t in map(_head_term, first.head.args) if isinstance(t, Var)]
    return len(names) == len(first.head.args) == len(set(names))


def _one_termination(group: list[Rule]) -> bool:
    return sum(rule.termination is not None for rule in group) <= 1


def _head_term(arg: Expr | Aggregate) -> Expr | None:
    return arg.arg if isinstance(arg, Aggregate) else arg


def _first(group: list[Rule]) -> Rule:
    return next((r for r in group if r.head.aggregate is not None), group[0])


def _merge(group: list[Rule]) -> Rule:
    """One rule: the group's first rule that writes the aggregate (the others may leave
    it to ``with_relation_aggregate``), the other rules' bodies as its alternatives."""
    first = _first(group)
    group = [first, *(r for r in group if r is not first)]
    head_vars = [term for term in map(_head_term, first.head.args) if isinstance(term, Var)]
    bodies = list(first.bodies)
    termination = first.termination
    taken = _variables([first])
    for rule in group[1:]:
        renamed, equalities, clause = _as_alternative(rule, head_vars, taken)
        bodies += [Body(b.literals + equalities, b.span) for b in renamed]
        termination = termination or clause
        taken |= _variables([Rule(first.head, tuple(renamed))])
    return Rule(first.head, tuple(bodies), termination, first.span)


def _as_alternative(
    rule: Rule, head_vars: list[Var], taken: set[str]
) -> tuple[list[Body], tuple[Comparison, ...], Termination | None]:
    """``rule``'s bodies over the first head's variables: its head variables renamed to
    them, its other variables renamed apart from ``taken``, and an equality for each head
    term that is not a fresh variable."""
    own = _variables([rule])
    mapping: dict[str, str] = {}
    equalities: list[tuple[Var, Expr]] = []
    for target, arg in zip(head_vars, map(_head_term, rule.head.args), strict=True):
        if isinstance(arg, Var) and arg.name not in mapping:
            mapping[arg.name] = target.name
        else:
            assert arg is not None, "count[*] has no target to bind"
            equalities.append((target, arg))
    avoid = taken | own | set(mapping.values())
    for name in sorted(own - set(mapping)):
        if name in taken or name in mapping.values():
            mapping[name] = _fresh(name, avoid)
            avoid.add(mapping[name])
    bodies = [renamed_vars(body, mapping) for body in rule.bodies]
    comparisons = tuple(
        Comparison("=", target, renamed_vars(term, mapping)) for target, term in equalities
    )
    clause = rule.termination
    if clause is not None:
        clause = Termination(
            clause.func, mapping.get(clause.var, clause.var), clause.op, clause.bound, clause.span
        )
    return bodies, comparisons, clause


def _fresh(name: str, avoid: set[str]) -> str:
    number = 2
    while f"{name}{number}" in avoid:
        number += 1
    return f"{name}{number}"


def _variables(rules: Iterable[Rule]) -> set[str]:
    names: set[str] = set()

    def collect(var: Var) -> Var:
        names.add(var.name)
        return var

    for rule in rules:
        map_nodes(rule, Var, collect)
    return names


def merged_lines(rule: Rule) -> tuple[int, ...]:
    """The lines of the rules merged into ``rule`` after its own (empty for a rule as
    written): its bodies that start past its own span came from other rules."""
    end = rule.span.end_line
    return tuple(dict.fromkeys(b.span.line for b in rule.bodies if b.span.line > end))
