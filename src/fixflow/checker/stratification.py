"""The stratification pass of ``analyze``: the dependency graph of the IDB relations and
its strongly connected components (Soufflé's precedence and SCC graphs), the strata in
evaluation order with their structural class (what the rules' shape decides without Z3;
``checker.check`` refines it), and the checks that need the strata: negation and body
aggregates are stratified, termination clauses sit on recursive aggregate rules."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fixflow.checker.ast import Aggregate, Atom, Head, Negation, Rule, Span, Wildcard, body_atoms
from fixflow.checker.declarations import Analyzer
from fixflow.checker.model import EvalClass, Stratum
from fixflow.checker.rule_checks import rule_variables
from fixflow.checker.subaggregates import Lifted, is_hidden
from fixflow.checker.unions import merged_alternatives

# ---------------------------------------------------------------- dependency graph


@dataclass(frozen=True)
class Edge:
    head: str
    body: str
    negated: bool
    span: Span


def dependency_edges(rules: Iterable[Rule], idb: frozenset[str]) -> list[Edge]:
    """``head`` depends on ``body`` for every IDB relation a rule reads."""
    edges: list[Edge] = []
    for rule in rules:
        for body in rule.bodies:
            for literal in body.literals:
                if isinstance(literal, Atom) and literal.relation in idb:
                    edges.append(Edge(rule.head.relation, literal.relation, False, literal.span))
                elif isinstance(literal, Negation) and literal.atom.relation in idb:
                    edges.append(
                        Edge(rule.head.relation, literal.atom.relation, True, literal.span)
                    )
    return edges


def strongly_connected(nodes: list[str], edges: list[Edge]) -> list[list[str]]:
    """Tarjan's SCCs over "depends on" edges: dependencies come out before dependents."""
    successors: dict[str, list[str]] = {n: [] for n in nodes}
    for edge in edges:
        if edge.body not in successors[edge.head]:
            successors[edge.head].append(edge.body)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in successors[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component, key=nodes.index))

    for node in nodes:
        if node not in index:
            visit(node)
    return components


def _cycle_through(start: str, end: str, edges: list[Edge], members: set[str]) -> list[str]:
    """A path start → … → end along "is used by" edges inside one SCC (BFS, shortest)."""
    used_by: dict[str, list[str]] = {}
    for edge in edges:
        if edge.head in members and edge.body in members:
            used_by.setdefault(edge.body, []).append(edge.head)
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        if node == end:
            break
        for nxt in used_by.get(node, []):
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    path = [end]
    while (prior := previous.get(path[-1])) is not None:
        path.append(prior)
    return list(reversed(path))


# ---------------------------------------------------------------- strata and classes


def with_relation_aggregate(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """Rules as the engine reads them: all rules of a relation contribute to its one
    aggregate (docs/language.md), so a rule without a head aggregate for a relation that
    has one gets it: ``s(Y, d) :- ...`` next to ``s(X, min[d]) :- ...`` is
    ``s(Y, min[d]) :- ...``. Other rules are returned unchanged (the same objects)."""
    rules = tuple(rules)
    aggregates: dict[str, tuple[int, Aggregate]] = {}
    for rule in rules:
        aggregate = rule.head.aggregate
        if aggregate is not None:
            aggregates.setdefault(rule.head.relation, (rule.head.args.index(aggregate), aggregate))
    result: list[Rule] = []
    for rule in rules:
        known = aggregates.get(rule.head.relation)
        if rule.head.aggregate is not None or known is None:
            result.append(rule)
            continue
        position, aggregate = known
        args = list(rule.head.args)
        if position >= len(args) or isinstance(args[position], Wildcard):
            result.append(rule)
            continue
        value = args[position]
        assert not isinstance(value, Aggregate), "a head without an aggregate has none"
        args[position] = Aggregate(aggregate.func, value, value.span)
        head = Head(rule.head.relation, tuple(args), rule.head.span)
        result.append(Rule(head, rule.bodies, rule.termination, rule.span))
    return tuple(result)


def structural_class(
    relations: tuple[str, ...], rules: tuple[Rule, ...], recursive: bool
) -> tuple[EvalClass | None, str]:
    """The class the analysis can decide without Z3 (``check`` refines it)."""
    if not recursive:
        return None, "not recursive"
    members = set(relations)
    rules = with_relation_aggregate(rules)
    aggregated = [r for r in rules if r.head.aggregate is not None and _reads(r, members)]
    if not any(r.head.aggregate is not None for r in rules):
        return "set", "recursion without aggregates: semi-naive evaluation"
    funcs = sorted({r.head.aggregate.func for r in rules if r.head.aggregate is not None})
    if "mean" in funcs:
        return "naive", "`mean` is not associative: naive evaluation"
    linear = all(
        sum(a.relation in members for a in body_atoms(b)) <= 1 for r in rules for b in r.bodies
    )
    if len(relations) == 1 and linear and len(aggregated) == 1:
        return "mra", (
            f"linear recursive `{funcs[0]}` over one relation: MRA candidate, "
            "pending the condition check"
        )
    if set(funcs) <= {"min", "max"}:
        return "aggregate-seminaive", (
            f"`{'/'.join(funcs)}` recursion that is not linear over one relation: "
            "semi-naive candidate, pending the monotonicity check"
        )
    if funcs == ["count"]:
        return "aggregate-seminaive", (
            "recursion through `count`: semi-naive candidate, pending the monotonicity check"
        )
    return "naive", f"non-linear or mutual recursion through `{'/'.join(funcs)}`"


def _reads(rule: Rule, members: set[str]) -> bool:
    return any(a.relation in members for b in rule.bodies for a in body_atoms(b))


def stratify(
    analyzer: Analyzer, rules: tuple[Rule, ...], idb: frozenset[str], empty: tuple[str, ...]
) -> tuple[Stratum, ...]:
    """The strata of ``rules``; every relation of ``empty`` is a stratum without rules."""
    nodes: list[str] = []
    for rule in rules:
        if rule.head.relation not in nodes:
            nodes.append(rule.head.relation)
    nodes += [relation for relation in empty if relation not in nodes]
    edges = dependency_edges(rules, idb)
    strata: list[Stratum] = []
    for component in strongly_connected(nodes, edges):
        members = set(component)
        recursive = len(component) > 1 or any(
            e.head in members and e.body in members for e in edges
        )
        _negation_in_recursion(analyzer, edges, members)
        stratum_rules = tuple(r for r in rules if r.head.relation in members)
        if recursive:  # rules of one aggregated head are one union (checker.unions)
            stratum_rules = merged_alternatives(stratum_rules, frozenset(members))
        eval_class, reason = structural_class(tuple(component), stratum_rules, recursive)
        strata.append(
            Stratum(len(strata), tuple(component), stratum_rules, recursive, eval_class, reason)
        )
    return tuple(strata)


def _negation_in_recursion(analyzer: Analyzer, edges: list[Edge], members: set[str]) -> None:
    for edge in edges:
        if is_hidden(edge.body):
            continue  # a body aggregate's empty-group test: `check_aggregates_in_recursion`
        if edge.negated and edge.head in members and edge.body in members:
            cycle = _cycle_through(edge.head, edge.body, edges, members)
            path = " -> ".join([edge.body, *cycle])
            analyzer.error(
                f"negation of `{edge.body}` inside its own recursion: {path}",
                edge.span,
                "negation must be stratified: a negated relation is computed "
                "completely before the rule that negates it",
            )


def check_aggregates_in_recursion(
    analyzer: Analyzer, strata: tuple[Stratum, ...], lifted: tuple[Lifted, ...]
) -> None:
    """A body aggregate is stratified like negation: what it aggregates is complete
    before the rule that uses it."""
    for aggregate in lifted:
        stratum = next(s for s in strata if aggregate.relation in s.relations)
        if not stratum.recursive:
            continue
        cycle = [r for r in stratum.relations if not is_hidden(r)]
        analyzer.error(
            f"aggregate inside the recursion of `{aggregate.enclosing}` "
            f"(through {', '.join(f'`{r}`' for r in cycle)})",
            aggregate.span,
            "a body aggregate must be stratified: the relations it aggregates are computed "
            "completely before the rule that uses it; recursive aggregation is a head "
            "aggregate, e.g. `p(X, min[d]) :- ...`",
        )


def check_terminations(analyzer: Analyzer, strata: tuple[Stratum, ...]) -> None:
    for stratum in strata:
        members = set(stratum.relations)
        for rule in stratum.rules:
            clause = rule.termination
            if clause is None:
                continue
            recursive = stratum.recursive and _reads(rule, members)
            if not recursive or rule.head.aggregate is None:
                analyzer.error(
                    "termination clause on a rule that is not a recursive aggregate rule",
                    clause.span,
                    "only a recursive rule with a head aggregate can have `{...}`",
                )
            elif clause.var not in rule_variables(rule):
                analyzer.error(
                    f"termination clause names `{clause.var}`, which is not a variable "
                    "of this rule",
                    clause.span,
                    "name the head aggregate's argument or the recursive atom's value variable",
                )
