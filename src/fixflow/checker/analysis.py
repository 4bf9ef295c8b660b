"""Semantic analysis: declarations, types, safety, dependency graph, strata, structural classes.

``analyze(program) -> Analysis`` collects every diagnostic it can in one pass; the strata
are computed even when there are errors, so that later errors can still be found.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from fixflow.checker.ast import (
    NO_SPAN,
    Aggregate,
    Atom,
    Attribute,
    BinOp,
    Body,
    Call,
    Cast,
    Comparison,
    Constraint,
    Declaration,
    Expr,
    Head,
    InputDirective,
    Neg,
    Negation,
    NumberLit,
    OutputDirective,
    Pragma,
    PrintSizeDirective,
    Program,
    Rule,
    Span,
    StringLit,
    Var,
    Wildcard,
    body_atoms,
    expr_vars,
    without_casts,
)
from fixflow.checker.catalog import index_var
from fixflow.checker.diagnostics import Diagnostic
from fixflow.checker.directives import PRAGMAS
from fixflow.checker.model import Analysis, EvalClass, Stratum
from fixflow.checker.regex import InvalidRegex, UntranslatableRegex, java_regex
from fixflow.checker.subaggregates import Lifted, is_hidden, lift_sub_aggregates
from fixflow.checker.types import BodyTypes, assignment_sides, bindings, infer_body
from fixflow.checker.unions import merged_alternatives

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- shared helpers


def rule_variables(rule: Rule) -> set[str]:
    names: set[str] = set()
    for arg in rule.head.args:
        names |= expr_vars(arg)
    for body in rule.bodies:
        for literal in body.literals:
            names |= _literal_vars(literal)
    return names


def _literal_vars(literal: object) -> set[str]:
    match literal:
        case Atom(args=args):
            return set().union(*(expr_vars(a) for a in args))
        case Negation(atom=atom):
            return _literal_vars(atom)
        case Comparison(left=left, right=right):
            return expr_vars(left) | expr_vars(right)
        case Constraint(args=args):
            return set().union(*(expr_vars(a) for a in args))
    return set()


def _var_occurrences(expr: Expr | Aggregate | None) -> Iterator[Var]:
    match expr:
        case Var():
            yield expr
        case BinOp(left=left, right=right):
            yield from _var_occurrences(left)
            yield from _var_occurrences(right)
        case Aggregate(arg=arg):
            yield from _var_occurrences(arg)
        case Neg(operand=operand) | Cast(operand=operand):
            yield from _var_occurrences(operand)
        case Call(args=args):
            for arg in args:
                yield from _var_occurrences(arg)


# ---------------------------------------------------------------- the analyzer


@dataclass
class _Analyzer:
    program: Program
    diagnostics: list[Diagnostic] = field(default_factory=list)
    schemas: dict[str, tuple[Attribute, ...]] = field(default_factory=dict)
    decl_spans: dict[str, Span] = field(default_factory=dict)
    inputs: dict[str, Span] = field(default_factory=dict)
    printsizes: dict[str, Span] = field(default_factory=dict)

    def error(self, message: str, span: Span, *notes: str) -> None:
        self.diagnostics.append(Diagnostic(message, span, tuple(notes)))

    def warning(self, message: str, span: Span, *notes: str) -> None:
        self.diagnostics.append(Diagnostic(message, span, tuple(notes), "warning"))

    # ------------------------------------------------------------ declarations

    def declarations(self) -> None:
        for item in self.program.items:
            if isinstance(item, Declaration):
                self._declare(item)
        for item in self.program.items:
            if isinstance(item, InputDirective | OutputDirective | PrintSizeDirective):
                self._directive(item)
            elif isinstance(item, Pragma):  # the parser let through only harmless ones
                self.warning(
                    f'`.pragma "{item.key}"` has no effect in Fixflow',
                    item.span,
                    f"{PRAGMAS[item.key]}; the pragma is accepted so Soufflé programs run",
                )

    def _declare(self, decl: Declaration) -> None:
        if decl.relation in self.schemas:
            self.error(
                f"relation `{decl.relation}` is declared twice",
                decl.span,
                f"first declared at {self.decl_spans[decl.relation]}",
            )
            return
        names: set[str] = set()
        for attribute in decl.attributes:
            if attribute.name in names:
                self.error(
                    f"attribute `{attribute.name}` of `{decl.relation}` is declared twice",
                    attribute.span,
                )
            names.add(attribute.name)
        self.schemas[decl.relation] = decl.attributes
        self.decl_spans[decl.relation] = decl.span

    def _directive(self, item: InputDirective | OutputDirective | PrintSizeDirective) -> None:
        kind = type(item).__name__.removesuffix("Directive").lower()  # input, output, printsize
        if item.relation not in self.schemas:
            self.error(
                f"undeclared {kind} relation `{item.relation}`",
                item.span,
                f"declare it with `.decl {item.relation}(...)` before `.{kind} {item.relation}`",
            )
        if isinstance(item, InputDirective):
            self.inputs.setdefault(item.relation, item.span)
        if isinstance(item, PrintSizeDirective):
            first = self.printsizes.setdefault(item.relation, item.span)
            if first is not item.span:  # Soufflé: "Redefinition of printsize directives"
                self.error(
                    f"`.printsize {item.relation}` is given twice",
                    item.span,
                    f"first given at {first}; Soufflé rejects a second one too",
                )

    # ------------------------------------------------------------ rules

    def rules(self) -> None:
        for rule in self.program.rules:
            self._rule(rule)
        self._aggregate_agreement()
        self._index_shapes()

    def _rule(self, rule: Rule) -> None:
        head = rule.head
        self._relation_use(head.relation, len(head.args), head.span)
        aggregates = [a for a in head.args if isinstance(a, Aggregate)]
        for extra in aggregates[1:]:
            self.error(
                f"more than one aggregate in the head of `{head.relation}`",
                extra.span,
                "a head has at most one aggregate; the other arguments are its group-by keys",
            )
        for arg in head.args:
            if isinstance(arg, Wildcard):
                self.error("`_` in a rule head", arg.span, "a head argument must have a value")
        index = index_var(rule)
        for body in rule.bodies:
            self._body(rule, body, index)

    def _relation_use(self, relation: str, arity: int, span: Span) -> None:
        schema = self.schemas.get(relation)
        if schema is None:
            self.error(
                f"undeclared relation `{relation}`",
                _name_span(span, relation),
                f"declare it with `.decl {relation}(...)`",
            )
        elif len(schema) != arity:
            self.error(
                f"arity mismatch: `{relation}` has {len(schema)} attributes "
                f"but is used with {arity} arguments",
                span,
                f"declared at {self.decl_spans[relation]}",
            )

    def _body(self, rule: Rule, body: Body, index: str | None) -> None:
        for literal in body.literals:
            if isinstance(literal, Atom):
                self._relation_use(literal.relation, len(literal.args), literal.span)
            elif isinstance(literal, Negation):
                atom = literal.atom
                self._relation_use(atom.relation, len(atom.args), atom.span)
            elif isinstance(literal, Constraint) and literal.func == "match":
                self._match_pattern(literal.args[0])
        pre_bound = [index] if index is not None else []
        bound, assignments = bindings(body, pre_bound)
        self._safety(rule, body, bound, assignments)
        types = infer_body(body, self.schemas, assignments)
        self._head_types(rule.head, types)
        self.diagnostics.extend(types.diagnostics)

    def _match_pattern(self, pattern: Expr) -> None:
        """A literal ``match`` pattern, read as Soufflé's C++ ECMAScript (checker/regex.py);
        a computed one is read at run time."""
        if not isinstance(pattern, StringLit):
            return
        try:
            java_regex(pattern.value)
        except InvalidRegex as exc:
            self.warning(
                f"wrong pattern provided to `match`: {exc.message} "
                f"(character {exc.offset + 1} of the pattern)",
                pattern.span,
                "as in Soufflé, `match` and `!match` are both false for this pattern",
            )
        except UntranslatableRegex as exc:
            self.error(
                f"unsupported pattern in `match`: {exc.message} "
                f"(character {exc.offset + 1} of the pattern)",
                pattern.span,
            )

    def _safety(
        self, rule: Rule, body: Body, bound: set[str], assignments: list[Comparison]
    ) -> None:
        reported: set[str] = set()

        def report(var: Var, where: str) -> None:
            if var.name in bound or var.name in reported:
                return
            reported.add(var.name)
            self.error(
                f"unsafe variable `{var.name}` in {where}",
                var.span,
                f"bind `{var.name}` in a positive body atom or with an assignment "
                f"`{var.name} = expr` whose right side is bound",
            )

        for literal in body.literals:
            if isinstance(literal, Atom):
                for arg in literal.args:
                    if not isinstance(arg, Var):
                        for var in _var_occurrences(arg):
                            report(var, "an atom argument")
            elif isinstance(literal, Negation):
                for var in _var_occurrences_of_args(literal.atom.args):
                    report(var, f"negated atom `!{literal.atom.relation}`")
            elif isinstance(literal, Constraint):
                for var in _var_occurrences_of_args(literal.args):
                    report(var, f"`{literal.func}`")
            elif literal not in assignments:
                target, value = assignment_sides(literal, bound)
                if target is not None:
                    # A failed assignment: blame its right side, not the target again
                    # wherever the target is used.
                    reported.add(target.name)
                    sides = list(_var_occurrences(value))
                else:
                    sides = [*_var_occurrences(literal.left), *_var_occurrences(literal.right)]
                for var in sides:
                    report(var, "a comparison")
        # A hidden relation's head holds a body aggregate's target (docs/language.md).
        head = "a body aggregate" if is_hidden(rule.head.relation) else None
        for head_arg in rule.head.args:
            for var in _var_occurrences(head_arg):
                report(var, head or f"the head of `{rule.head.relation}`")

    def _head_types(self, head: Head, types: BodyTypes) -> None:
        schema = self.schemas.get(head.relation)
        if schema is None or len(schema) != len(head.args):
            return
        for arg, attribute in zip(head.args, schema, strict=True):
            if isinstance(arg, Aggregate):
                types.check_aggregate(arg, attribute, head.relation)
            elif not isinstance(arg, Wildcard):
                types.check_value(arg, attribute, head.relation, exact=True)

    def _aggregate_agreement(self) -> None:
        """All rules of a relation contribute to one aggregate (docs/language.md)."""
        seen: dict[str, tuple[str, int, Span]] = {}
        for rule in self.program.rules:
            head = rule.head
            aggregate = head.aggregate
            if aggregate is None:
                continue
            position = head.args.index(aggregate)
            first = seen.setdefault(head.relation, (aggregate.func, position, aggregate.span))
            if first[:2] != (aggregate.func, position):
                self.error(
                    f"conflicting aggregates for `{head.relation}`: `{aggregate.func}` "
                    f"in argument {position + 1} here but `{first[0]}` in argument "
                    f"{first[1] + 1} at {first[2]}",
                    aggregate.span,
                )

    def _index_shapes(self) -> None:
        indexed = {r.head.relation: r for r in self.program.rules if index_var(r) is not None}
        for rule in self.program.rules:
            relation = rule.head.relation
            if relation not in indexed:
                continue
            index = index_var(rule)
            if index is None:
                self._base_rule_shape(rule)
                continue
            self._recursive_index_shape(rule, index)
        for relation, rule in indexed.items():
            schema = self.schemas.get(relation)
            if schema and schema[0].type != "number":
                self.error(
                    f"the iteration index of `{relation}` must be a number column",
                    schema[0].span,
                    f"`{relation}` is iteration-indexed at {rule.head.span}",
                )
            if relation in self.inputs:
                # Loaded facts would need an iteration of their own: X⁰ comes from base rules.
                self.error(
                    f"iteration-indexed `{relation}` cannot also be an input relation",
                    self.inputs[relation],
                    f"`{relation}` is iteration-indexed at {rule.head.span}; load the facts "
                    f"into another relation and read it in the base rule `{relation}(0, ...)`",
                )

    def _base_rule_shape(self, rule: Rule) -> None:
        first = rule.head.args[0] if rule.head.args else None
        if isinstance(first, NumberLit) and first.value == 0:
            if any(a.relation == rule.head.relation for b in rule.bodies for a in body_atoms(b)):
                self.error(
                    f"the base rule of iteration-indexed `{rule.head.relation}` "
                    "cannot read the relation itself",
                    rule.head.span,
                )
            return
        self.error(
            f"a rule for iteration-indexed `{rule.head.relation}` must have `0` (base rule) "
            "or `i+1` (recursive rule) as its first argument",
            first.span if first is not None else rule.head.span,
        )

    def _recursive_index_shape(self, rule: Rule, index: str) -> None:
        for body in rule.bodies:
            for atom in body_atoms(body):
                if atom.relation != rule.head.relation or not atom.args:
                    continue
                first = atom.args[0]
                if not (isinstance(first, Var) and first.name == index):
                    self.error(
                        f"in an iteration-indexed rule, `{atom.relation}` in the body must "
                        f"have `{index}` as its first argument",
                        first.span,
                        f"the head reads `{index}+1`: each round reads round `{index}`",
                    )


def _name_span(span: Span, name: str) -> Span:
    """The span of the relation name at the start of an atom's span."""
    if span is NO_SPAN:
        return span
    return Span(span.file, span.line, span.col, span.line, span.col + len(name))


def _var_occurrences_of_args(args: tuple[Expr, ...]) -> Iterator[Var]:
    for arg in args:
        yield from _var_occurrences(arg)


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


def _strata(
    analyzer: _Analyzer, rules: tuple[Rule, ...], idb: frozenset[str], empty: tuple[str, ...]
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


def _negation_in_recursion(analyzer: _Analyzer, edges: list[Edge], members: set[str]) -> None:
    for edge in edges:
        if is_hidden(edge.body):
            continue  # a body aggregate's empty-group test: `_aggregates_in_recursion`
        if edge.negated and edge.head in members and edge.body in members:
            cycle = _cycle_through(edge.head, edge.body, edges, members)
            path = " -> ".join([edge.body, *cycle])
            analyzer.error(
                f"negation of `{edge.body}` inside its own recursion: {path}",
                edge.span,
                "negation must be stratified: a negated relation is computed "
                "completely before the rule that negates it",
            )


def _aggregates_in_recursion(
    analyzer: _Analyzer, strata: tuple[Stratum, ...], lifted: tuple[Lifted, ...]
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


def _termination_checks(analyzer: _Analyzer, strata: tuple[Stratum, ...]) -> None:
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


def _empty_relations(analyzer: _Analyzer, idb: frozenset[str]) -> None:
    """A declared relation that is neither input nor defined is always empty: warn once."""
    warned: set[str] = set()
    for rule in analyzer.program.rules:
        for body in rule.bodies:
            for literal in body.literals:
                atom = literal.atom if isinstance(literal, Negation) else literal
                if not isinstance(atom, Atom):
                    continue
                name = atom.relation
                defined = idb | set(analyzer.inputs)
                if name in analyzer.schemas and name not in defined and name not in warned:
                    warned.add(name)
                    analyzer.warning(
                        f"relation `{name}` is neither an input nor defined by rules: "
                        "it is always empty",
                        atom.span,
                        f"add `.input {name}` to feed it",
                    )


def loaded_relation(relation: str) -> str:
    """The hidden EDB relation of an input relation that rules or facts also define. No
    program can name it: identifiers do not start with `_`."""
    return f"_{relation}_input"


def _split_inputs(analyzer: _Analyzer) -> tuple[dict[str, str], tuple[Rule, ...]]:
    """Soufflé unions an input relation's loaded facts with those its rules and facts
    derive. Such a relation ``r`` becomes an IDB relation, its facts are loaded into a
    hidden ``_r_input`` and one more rule ``r(x0, ..) :- _r_input(x0, ..).`` unions them
    in: the engine needs no notion of a relation that is both. Returns every input's EDB
    relation (``Analysis.loaded``) and the added rules."""
    defined = {rule.head.relation for rule in analyzer.program.rules}
    loaded: dict[str, str] = {}
    bridges: list[Rule] = []
    for relation, span in analyzer.inputs.items():
        schema = analyzer.schemas.get(relation)
        if relation not in defined or schema is None:
            loaded[relation] = relation
            continue
        hidden = loaded[relation] = loaded_relation(relation)
        analyzer.schemas[hidden] = schema
        args = tuple(Var(f"x{i}", span) for i in range(len(schema)))
        body = Body((Atom(hidden, args, span),), span)
        bridges.append(Rule(Head(relation, args, span), (body,), None, span))
    return loaded, tuple(bridges)


def _empty_outputs(analyzer: _Analyzer, defined: frozenset[str]) -> tuple[str, ...]:
    """``.output`` relations with neither rules, facts nor `.input`: always empty, but
    still results (with their declared schema), so each is a stratum without rules."""
    empty: list[str] = []
    for item in analyzer.program.items:
        if not isinstance(item, OutputDirective):
            continue
        name = item.relation
        if name in defined or name in analyzer.inputs or name in empty:
            continue
        if name in analyzer.schemas:
            empty.append(name)
            analyzer.warning(
                f"no rules or facts defined for output relation `{name}`: it is always empty",
                item.span,
                f"add rules or facts for `{name}`, or `.input {name}` to feed it",
            )
    return tuple(empty)


def analyze(program: Program, source: str | None = None) -> Analysis:
    """Check a parsed program and compute its strata (see the module docstring)."""
    program, lifted, problems = lift_sub_aggregates(program)
    analyzer = _Analyzer(program)
    analyzer.diagnostics.extend(problems)
    analyzer.declarations()
    analyzer.rules()
    # Types are checked: `as(x, T)` is `x` from here on, for the strata and the engine.
    program = analyzer.program = without_casts(program)
    loaded, bridges = _split_inputs(analyzer)
    rules = program.rules + bridges
    defined = frozenset(r.head.relation for r in rules)
    empty = _empty_outputs(analyzer, defined)
    idb = defined | frozenset(empty)
    strata = _strata(analyzer, rules, idb, empty)
    _termination_checks(analyzer, strata)
    _aggregates_in_recursion(analyzer, strata, lifted)
    _empty_relations(analyzer, idb)
    # A body with count/sum aggregates becomes several alternatives (subaggregates), each
    # checked on its own: report a problem of the user's body once.
    unique = list(dict.fromkeys(analyzer.diagnostics))
    diagnostics = sorted(unique, key=_diagnostic_order)
    log.debug("analyzed %s: %d strata, %d diagnostics", program.file, len(strata), len(diagnostics))
    return Analysis(
        program=program,
        source=source,
        schemas=dict(analyzer.schemas),
        edb=frozenset(loaded.values()),
        idb=idb,
        strata=strata,
        diagnostics=tuple(diagnostics),
        loaded=loaded,
    )


def _diagnostic_order(diagnostic: Diagnostic) -> tuple[int, int, int]:
    span = diagnostic.span
    if span is NO_SPAN:
        return (1 << 30, 0, 0)
    return (span.line, span.col, 0 if diagnostic.severity == "error" else 1)
