"""The rules pass of ``analyze``: every relation a rule uses is declared with its arity,
a head has at most one aggregate and all rules of a relation agree on it, ``match``
patterns are readable, variables are safe (Soufflé's groundedness check: every variable
a head, negation, constraint or expression argument reads is bound by a positive atom or
an assignment), body and head types fit the declarations (``checker.types``), and
iteration-indexed rules have their shape."""

from __future__ import annotations

from collections.abc import Iterator

from fixflow.checker.ast import (
    NO_SPAN,
    Aggregate,
    Atom,
    BinOp,
    Body,
    Call,
    Cast,
    Comparison,
    Constraint,
    Expr,
    Head,
    Neg,
    Negation,
    NumberLit,
    Rule,
    Span,
    StringLit,
    Var,
    Wildcard,
    body_atoms,
    expr_vars,
)
from fixflow.checker.catalog import index_var
from fixflow.checker.declarations import Analyzer
from fixflow.checker.regex import InvalidRegex, UntranslatableRegex, java_regex
from fixflow.checker.subaggregates import is_hidden
from fixflow.checker.types import BodyTypes, assignment_sides, bindings, infer_body

# ---------------------------------------------------------------- variables


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


def _var_occurrences_of_args(args: tuple[Expr, ...]) -> Iterator[Var]:
    for arg in args:
        yield from _var_occurrences(arg)


# ---------------------------------------------------------------- the pass


def check_rules(analyzer: Analyzer) -> None:
    """Each rule on its own, then what holds across the rules of one relation."""
    for rule in analyzer.program.rules:
        _rule(analyzer, rule)
    _aggregate_agreement(analyzer)
    _index_shapes(analyzer)


def _rule(analyzer: Analyzer, rule: Rule) -> None:
    head = rule.head
    _relation_use(analyzer, head.relation, len(head.args), head.span)
    aggregates = [a for a in head.args if isinstance(a, Aggregate)]
    for extra in aggregates[1:]:
        analyzer.error(
            f"more than one aggregate in the head of `{head.relation}`",
            extra.span,
            "a head has at most one aggregate; the other arguments are its group-by keys",
        )
    for arg in head.args:
        if isinstance(arg, Wildcard):
            analyzer.error("`_` in a rule head", arg.span, "a head argument must have a value")
    index = index_var(rule)
    for body in rule.bodies:
        _body(analyzer, rule, body, index)


def _relation_use(analyzer: Analyzer, relation: str, arity: int, span: Span) -> None:
    schema = analyzer.schemas.get(relation)
    if schema is None:
        analyzer.error(
            f"undeclared relation `{relation}`",
            _name_span(span, relation),
            f"declare it with `.decl {relation}(...)`",
        )
    elif len(schema) != arity:
        analyzer.error(
            f"arity mismatch: `{relation}` has {len(schema)} attributes "
            f"but is used with {arity} arguments",
            span,
            f"declared at {analyzer.decl_spans[relation]}",
        )


def _body(analyzer: Analyzer, rule: Rule, body: Body, index: str | None) -> None:
    for literal in body.literals:
        if isinstance(literal, Atom):
            _relation_use(analyzer, literal.relation, len(literal.args), literal.span)
        elif isinstance(literal, Negation):
            atom = literal.atom
            _relation_use(analyzer, atom.relation, len(atom.args), atom.span)
        elif isinstance(literal, Constraint) and literal.func == "match":
            _match_pattern(analyzer, literal.args[0])
    pre_bound = [index] if index is not None else []
    bound, assignments = bindings(body, pre_bound)
    _safety(analyzer, rule, body, bound, assignments)
    types = infer_body(body, analyzer.schemas, assignments)
    _head_types(analyzer, rule.head, types)
    analyzer.diagnostics.extend(types.diagnostics)


def _match_pattern(analyzer: Analyzer, pattern: Expr) -> None:
    """A literal ``match`` pattern, read as Soufflé's C++ ECMAScript (checker/regex.py);
    a computed one is read at run time."""
    if not isinstance(pattern, StringLit):
        return
    try:
        java_regex(pattern.value)
    except InvalidRegex as exc:
        analyzer.warning(
            f"wrong pattern provided to `match`: {exc.message} "
            f"(character {exc.offset + 1} of the pattern)",
            pattern.span,
            "as in Soufflé, `match` and `!match` are both false for this pattern",
        )
    except UntranslatableRegex as exc:
        analyzer.error(
            f"unsupported pattern in `match`: {exc.message} "
            f"(character {exc.offset + 1} of the pattern)",
            pattern.span,
        )


def _safety(
    analyzer: Analyzer, rule: Rule, body: Body, bound: set[str], assignments: list[Comparison]
) -> None:
    reported: set[str] = set()

    def report(var: Var, where: str) -> None:
        if var.name in bound or var.name in reported:
            return
        reported.add(var.name)
        analyzer.error(
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


def _head_types(analyzer: Analyzer, head: Head, types: BodyTypes) -> None:
    schema = analyzer.schemas.get(head.relation)
    if schema is None or len(schema) != len(head.args):
        return
    for arg, attribute in zip(head.args, schema, strict=True):
        if isinstance(arg, Aggregate):
            types.check_aggregate(arg, attribute, head.relation)
        elif not isinstance(arg, Wildcard):
            types.check_value(arg, attribute, head.relation, exact=True)


def _aggregate_agreement(analyzer: Analyzer) -> None:
    """All rules of a relation contribute to one aggregate (docs/language.md)."""
    seen: dict[str, tuple[str, int, Span]] = {}
    for rule in analyzer.program.rules:
        head = rule.head
        aggregate = head.aggregate
        if aggregate is None:
            continue
        position = head.args.index(aggregate)
        first = seen.setdefault(head.relation, (aggregate.func, position, aggregate.span))
        if first[:2] != (aggregate.func, position):
            analyzer.error(
                f"conflicting aggregates for `{head.relation}`: `{aggregate.func}` "
                f"in argument {position + 1} here but `{first[0]}` in argument "
                f"{first[1] + 1} at {first[2]}",
                aggregate.span,
            )


def _index_shapes(analyzer: Analyzer) -> None:
    indexed = {r.head.relation: r for r in analyzer.program.rules if index_var(r) is not None}
    for rule in analyzer.program.rules:
        relation = rule.head.relation
        if relation not in indexed:
            continue
        index = index_var(rule)
        if index is None:
            _base_rule_shape(analyzer, rule)
            continue
        _recursive_index_shape(analyzer, rule, index)
    for relation, rule in indexed.items():
        schema = analyzer.schemas.get(relation)
        if schema and schema[0].type != "number":
            analyzer.error(
                f"the iteration index of `{relation}` must be a number column",
                schema[0].span,
                f"`{relation}` is iteration-indexed at {rule.head.span}",
            )
        if relation in analyzer.inputs:
            # Loaded facts would need an iteration of their own: X⁰ comes from base rules.
            analyzer.error(
                f"iteration-indexed `{relation}` cannot also be an input relation",
                analyzer.inputs[relation],
                f"`{relation}` is iteration-indexed at {rule.head.span}; load the facts "
                f"into another relation and read it in the base rule `{relation}(0, ...)`",
            )


def _base_rule_shape(analyzer: Analyzer, rule: Rule) -> None:
    first = rule.head.args[0] if rule.head.args else None
    if isinstance(first, NumberLit) and first.value == 0:
        if any(a.relation == rule.head.relation for b in rule.bodies for a in body_atoms(b)):
            analyzer.error(
                f"the base rule of iteration-indexed `{rule.head.relation}` "
                "cannot read the relation itself",
                rule.head.span,
            )
        return
    analyzer.error(
        f"a rule for iteration-indexed `{rule.head.relation}` must have `0` (base rule) "
        "or `i+1` (recursive rule) as its first argument",
        first.span if first is not None else rule.head.span,
    )


def _recursive_index_shape(analyzer: Analyzer, rule: Rule, index: str) -> None:
    for body in rule.bodies:
        for atom in body_atoms(body):
            if atom.relation != rule.head.relation or not atom.args:
                continue
            first = atom.args[0]
            if not (isinstance(first, Var) and first.name == index):
                analyzer.error(
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
