"""``check(analysis) -> Report``: the MRA condition check and the final class per stratum.

For every recursive aggregate rule: Property 1 (G commutative and associative), Property 2
(G∘F′∘G = G∘F′ for every linear alternative), A3 convergence for sum programs that reach
a limit, and the initial delta. Then one class per recursive stratum (docs/architecture.md):
``set``, ``mra`` (one relation, linear, Properties 1 and 2 hold), ``aggregate-seminaive``
(min/max recursion with monotone combining expressions, or recursion through a count
used only in upward-closed tests) or ``naive``. ``unknown`` never yields ``mra``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from fractions import Fraction

import fixflow.checker.smt as smt
from fixflow.checker.ast import (
    Atom,
    Comparison,
    Expr,
    Program,
    Rule,
    Var,
    body_atoms,
    expr_vars,
)
from fixflow.checker.catalog import build_catalog, index_var
from fixflow.checker.conditions import (
    Alternative,
    Sort,
    ValueMap,
    aggregate_text,
    alternatives,
    constant_text,
    count_columns,
    operator_of,
    sort_of,
    substitute,
    value_positions_of,
)
from fixflow.checker.model import (
    Analysis,
    EvalClass,
    MraSpec,
    PropertyStatus,
    Report,
    RuleVerdict,
    Stratum,
)
from fixflow.checker.printer import pretty
from fixflow.checker.rewrite import drop_index
from fixflow.checker.stratification import with_relation_aggregate

log = logging.getLogger(__name__)

NA: dict[str, PropertyStatus] = {
    "commutativity": "n/a",
    "associativity": "n/a",
    "property2": "n/a",
    "convergence": "n/a",
}
UPWARD = {">=": "left", ">": "left", "<=": "right", "<": "right"}
"""Comparisons that stay true when the named side grows."""


@dataclass
class _RuleCheck:
    """What the checker found for one recursive rule."""

    rule: Rule
    """The rule as checked: with the relation's aggregate (``with_relation_aggregate``)."""
    alternatives: tuple[Alternative, ...]
    original: Rule
    """The rule as written."""
    properties: dict[str, PropertyStatus] = field(default_factory=lambda: dict(NA))
    counterexample: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def operator(self) -> str:
        aggregate = self.rule.head.aggregate
        return operator_of(aggregate.func) if aggregate else ""

    @property
    def linear(self) -> bool:
        """Every alternative reads at most one atom of the recursion, of the head relation."""
        relation = self.rule.head.relation
        for alternative in self.alternatives:
            atoms = [alternative.body.literals[i] for i in alternative.recursive_atoms]
            if len(atoms) > 1 or any(
                not isinstance(a, Atom) or a.relation != relation for a in atoms
            ):
                return False
        return True

    def first_failure(self, names: tuple[str, ...]) -> tuple[str, PropertyStatus] | None:
        for name in names:
            if self.properties[name] != "holds":
                return name, self.properties[name]
        return None


# ---------------------------------------------------------------- rule properties


def _value_sort(analysis: Analysis, rule: Rule) -> Sort:
    aggregate = rule.head.aggregate
    schema = analysis.schemas.get(rule.head.relation)
    if aggregate is None or schema is None:
        return "real"
    return sort_of(schema[rule.head.args.index(aggregate)].type) or "real"


def _check_rule(
    analysis: Analysis, rule: Rule, original: Rule, members: frozenset[str], budget: smt.Budget
) -> _RuleCheck:
    # The rules as evaluated: a loaded input's bridge rule is one more producer of its values.
    evaluated = Program(tuple(r for s in analysis.strata for r in s.rules), analysis.program.file)
    counts = count_columns(evaluated)
    positions = value_positions_of(evaluated)
    found = _RuleCheck(
        rule, alternatives(rule, members, analysis.schemas, counts, positions), original
    )
    if rule.head.aggregate is None:
        return found
    sort = _value_sort(analysis, rule)
    for law in ("commutativity", "associativity"):
        verdict = smt.algebra(found.operator, sort, law, budget=budget)
        found.properties[law] = verdict.status
        if verdict.status == "fails" and found.counterexample is None:
            found.counterexample = _algebra_counterexample(found.operator, law, verdict)
    if found.linear:
        _property2(found, budget)
        _convergence(found, rule, sort, budget)
    return found


def _property2(found: _RuleCheck, budget: smt.Budget) -> None:
    statuses: list[PropertyStatus] = []
    for alternative in found.alternatives:
        if not alternative.recursive_atoms:
            continue
        if alternative.value_map is None:
            statuses.append("unknown")
            found.notes.append(f"F′ could not be extracted: {alternative.why}")
            continue
        verdict = smt.property2(found.operator, alternative.value_map, budget=budget)
        statuses.append(verdict.status)
        if verdict.note:
            found.notes.append(f"Property 2: {verdict.note}")
        if verdict.status != "holds" and verdict.witness and found.counterexample is None:
            found.counterexample = _property2_counterexample(
                found.operator, alternative.value_map, verdict
            )
        if verdict.status == "fails":
            signed = smt.property2(
                found.operator, alternative.value_map, nonnegative=True, budget=budget
            )
            if signed.status == "holds":
                found.notes.append(_sign_hint("Property 2", alternative.value_map))
    found.properties["property2"] = _conjunction(statuses)


def _sign_hint(what: str, value_map: ValueMap) -> str:
    """Probabilities, weights and counts are often non-negative by nature; if that is all
    the property needs, say which guards would state it."""
    names = [s.name for s in value_map.inputs] + [s.name for s in _shown_aux(value_map)]
    guards = ", ".join(f"{n} >= 0" for n in names if not n.startswith("_"))
    return f"{what} would hold if the values were non-negative: add the guards `{guards}`"


def _shown_aux(value_map: ValueMap) -> list:
    """The auxiliaries F′ reads or compares with its input (others only constrain each
    other, e.g. ``i != j``)."""
    used = expr_vars(value_map.output)
    inputs = {s.name for s in value_map.inputs}
    for constraint in value_map.constraints:
        names = expr_vars(constraint.left) | expr_vars(constraint.right)
        if names & inputs:
            used |= names
    return [s for s in value_map.aux if s.name in used]


def _convergence(found: _RuleCheck, rule: Rule, sort: str, budget: smt.Budget) -> None:
    """A3 eliminable condition, only for sum programs that reach a limit rather than a
    fixpoint: float values, or a termination clause."""
    if found.operator != "sum" or (sort == "int" and rule.termination is None):
        return
    statuses: list[PropertyStatus] = []
    for alternative in found.alternatives:
        if alternative.recursive_atoms and alternative.value_map is not None:
            verdict = smt.contraction(alternative.value_map, budget=budget)
            statuses.append("holds" if verdict.status == "holds" else "unknown")
            if verdict.status == "fails":
                found.notes.append(
                    "convergence not proven: "
                    + _contraction_witness(alternative.value_map, verdict)
                )
        elif alternative.recursive_atoms:
            statuses.append("unknown")
    found.properties["convergence"] = _conjunction(statuses)


def _conjunction(statuses: list[PropertyStatus]) -> PropertyStatus:
    if not statuses:
        return "n/a"
    for status in ("fails", "unknown"):
        if status in statuses:
            return status
    return "holds"


# ---------------------------------------------------------------- counterexamples


def number_text(value: Fraction | float) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if value.denominator == 1:
        return str(value.numerator)
    decimal = float(value)
    if Fraction(repr(decimal)) == value:
        return repr(decimal)
    return f"{value.numerator}/{value.denominator}"


def _algebra_counterexample(operator: str, law: str, verdict: smt.Verdict) -> str:
    w = {k: number_text(v) for k, v in verdict.witness.items()}
    if law == "commutativity":
        left = f"{operator}({w['a']}, {w['b']})"
        right = f"{operator}({w['b']}, {w['a']})"
    else:
        left = f"{operator}({operator}({w['a']}, {w['b']}), {w['c']})"
        right = f"{operator}({w['a']}, {operator}({w['b']}, {w['c']}))"
    return f"{left} = {w['left']} but {right} = {w['right']}"


def _plug(value_map: ValueMap, group: str, input_text: str, witness: dict) -> str:
    """F′ with the group's auxiliary values and ``input_text`` in place of the input."""
    mapping: dict[str, Expr] = {value_map.input.name: Var(input_text)}
    for symbol in _shown_aux(value_map):
        value = witness.get(f"{symbol.name}#{group}")
        if value is not None:
            mapping[symbol.name] = Var(number_text(value))
    return pretty(substitute(value_map.output, mapping))


def _property2_counterexample(operator: str, value_map: ValueMap, verdict: smt.Verdict) -> str:
    w = verdict.witness
    n = {k: number_text(v) for k, v in w.items()}
    x = value_map.input.name

    def inner(a: str, b: str) -> str:
        return f"{operator}({n[a]}, {n[b]})"

    lhs = (
        f"{operator}({_plug(value_map, '1', inner('x1', 'y1'), w)}, "
        f"{_plug(value_map, '2', inner('x2', 'y2'), w)})"
    )
    rhs_terms = [
        _plug(value_map, "1", n["x1"], w),
        _plug(value_map, "1", n["y1"], w),
        _plug(value_map, "2", n["x2"], w),
        _plug(value_map, "2", n["y2"], w),
    ]
    rhs = f"{operator}({', '.join(rhs_terms)})"
    lhs_value = n["lhs"] if w.get("lhs?", 1) else "nothing"
    rhs_value = n["rhs"] if w.get("rhs?", 1) else "nothing"
    groups = []
    for group, (a, b) in (("1", ("x1", "y1")), ("2", ("x2", "y2"))):
        aux = ", ".join(f"{s.name} = {n[f'{s.name}#{group}']}" for s in _shown_aux(value_map))
        groups.append(f"{x} = {n[a]}, {n[b]}" + (f" with {aux}" if aux else ""))
    return (
        f"{lhs} = {lhs_value} but {rhs} = {rhs_value} "
        f"(F′: {value_map.text()}; source 1: {groups[0]}; source 2: {groups[1]})"
    )


def _contraction_witness(value_map: ValueMap, verdict: smt.Verdict) -> str:
    n = {k: number_text(v) for k, v in verdict.witness.items()}
    aux = ", ".join(f"{s.name} = {n[f'{s.name}#1']}" for s in _shown_aux(value_map))
    where = f" with {aux}" if aux else ""
    return (
        f"{value_map.input.name} = {n['x1']}{where} gives {value_map.target} = {n['lhs']}, "
        "not smaller in magnitude"
    )


def _monotone_counterexample(value_map: ValueMap, position: int, verdict: smt.Verdict) -> str:
    n = {k: number_text(v) for k, v in verdict.witness.items()}
    name = value_map.inputs[position].name
    shown = {s.name for s in value_map.inputs} | {f"{s.name}#1" for s in _shown_aux(value_map)}
    others = ", ".join(
        f"{k.removesuffix('#1')} = {v}" for k, v in n.items() if k in shown and k != name
    )
    return (
        f"{value_map.text()} decreases when `{name}` grows: {name} = {n[name]} gives "
        f"{n['lhs']} but {name} = {n[name + chr(39)]} gives {n['rhs']}"
        + (f" ({others})" if others else "")
    )


# ---------------------------------------------------------------- stratum classes


@dataclass
class _Outcome:
    eval_class: EvalClass
    reason: str
    checks: list[_RuleCheck]
    mra: dict[str, MraSpec] = field(default_factory=dict)


def _check_stratum(analysis: Analysis, stratum: Stratum, budget: smt.Budget) -> _Outcome:
    members = frozenset(stratum.relations)
    effective = with_relation_aggregate(stratum.rules)
    checks = [
        _check_rule(analysis, rule, original, members, budget)
        for rule, original in zip(effective, stratum.rules, strict=True)
        if _reads(original, members)
    ]
    if stratum.eval_class == "set":
        return _Outcome("set", stratum.reason, checks)
    funcs = {c.rule.head.aggregate.func for c in checks if c.rule.head.aggregate}
    single = len(stratum.relations) == 1 and len(checks) == 1
    if single and checks[0].linear and checks[0].rule.head.aggregate is not None:
        return _mra_or_naive(analysis, stratum, checks)
    if funcs and funcs <= {"min", "max"}:
        return _monotone_min_max(checks, "/".join(sorted(funcs)), budget)
    if funcs == {"count"}:
        return _monotone_count(stratum, checks)
    return _Outcome("naive", stratum.reason, checks)


def _reads(rule: Rule, members: frozenset[str]) -> bool:
    return any(a.relation in members for b in rule.bodies for a in body_atoms(b))


def _mra_or_naive(analysis: Analysis, stratum: Stratum, checks: list[_RuleCheck]) -> _Outcome:
    check_ = checks[0]
    aggregate = check_.rule.head.aggregate
    assert aggregate is not None, "only aggregate rules are MRA candidates"
    func = aggregate.func
    failure = check_.first_failure(("commutativity", "associativity", "property2"))
    if failure is not None:
        name, status = failure
        label = {
            "commutativity": "Property 1 (commutativity)",
            "associativity": "Property 1 (associativity)",
            "property2": "Property 2 (G∘F′∘G = G∘F′)",
        }[name]
        verb = "fails" if status == "fails" else "is not proven (unknown)"
        reason = f"{label} {verb} for `{func}`: naive evaluation"
        return _Outcome("naive", reason, checks)
    spec = _mra_spec(analysis, stratum, check_)
    reason = f"linear `{func}` recursion; Properties 1 and 2 hold: MRA evaluation"
    if spec.converges_to_limit:
        reason += (
            "; converges to a limit: runs to the termination clause, else to its float "
            "fixpoint (no pending delta changes a value in float64) or the iteration cap"
        )
    if check_.properties["convergence"] == "unknown":
        reason += "; convergence not proven: termination relies on the clause / iteration cap"
    return _Outcome("mra", reason, checks, {spec.relation: spec})


def _monotone_min_max(checks: list[_RuleCheck], funcs: str, budget: smt.Budget) -> _Outcome:
    """Semi-naive with keep-only-improved is sound when every combining expression is
    monotone (non-decreasing) in each recursive value."""
    for check_ in checks:
        if check_.rule.head.aggregate is None:
            continue
        for alternative in check_.alternatives:
            if not alternative.recursive_atoms:
                continue
            if alternative.value_map is None:
                reason = f"cannot read the combining expression ({alternative.why}): naive"
                return _Outcome("naive", reason, checks)
            for position in range(len(alternative.value_map.inputs)):
                verdict = smt.monotone(alternative.value_map, position, budget=budget)
                if verdict.status != "holds":
                    what = _not_monotone(check_, alternative.value_map, position, verdict, budget)
                    reason = (
                        f"`{funcs}` recursion whose combining expression {what}: naive evaluation"
                    )
                    return _Outcome("naive", reason, checks)
    reason = (
        f"`{funcs}` recursion, not linear over one relation, with monotone combining "
        "expressions: semi-naive evaluation keeping only improved values"
    )
    return _Outcome("aggregate-seminaive", reason, checks)


def _not_monotone(
    check_: _RuleCheck, value_map: ValueMap, position: int, verdict: smt.Verdict, budget: smt.Budget
) -> str:
    """Why ``value_map`` is not (proven) monotone in input ``position``; a failure also
    records its counterexample and, if non-negative values would fix it, a hint."""
    if verdict.status != "fails":
        return f"`{value_map.text()}` is not proven monotone"
    if check_.counterexample is None:
        check_.counterexample = _monotone_counterexample(value_map, position, verdict)
    signed = smt.monotone(value_map, position, nonnegative=True, budget=budget)
    if signed.status == "holds":
        check_.notes.append(_sign_hint("monotonicity", value_map))
    return f"`{value_map.text()}` is not monotone"


def _monotone_count(stratum: Stratum, checks: list[_RuleCheck]) -> _Outcome:
    """Recursion through ``count`` (Party): counts only grow as the recursion derives more,
    so it is monotone when each count is used only in tests that stay true as it grows."""
    counted = {
        r.head.relation: r.head.args.index(r.head.aggregate)
        for r in stratum.rules
        if r.head.aggregate is not None
    }
    for rule in stratum.rules:
        for body in rule.bodies:
            problem = _non_monotone_count_use(rule, body.literals, counted)
            if problem:
                return _Outcome("naive", f"recursion through `count`: {problem}", checks)
    reason = (
        "recursion through `count` used only in upward-closed tests: counts only grow, "
        "semi-naive evaluation keeping only improved counts"
    )
    return _Outcome("aggregate-seminaive", reason, checks)


def _non_monotone_count_use(rule: Rule, literals: tuple, counted: dict[str, int]) -> str:
    count_vars: set[str] = set()
    for literal in literals:
        if isinstance(literal, Atom) and literal.relation in counted:
            arg = literal.args[counted[literal.relation]]
            if isinstance(arg, Var):
                count_vars.add(arg.name)
    if not count_vars:
        return ""
    head_vars = set().union(*(expr_vars(a) for a in rule.head.args))
    if count_vars & head_vars:
        return f"a count flows into the head of `{rule.head.relation}`"
    for literal in literals:
        if isinstance(literal, Comparison):
            used = (expr_vars(literal.left) | expr_vars(literal.right)) & count_vars
            if used and not _upward(literal, count_vars):
                return f"the count is used in `{pretty(literal)}`, which is not upward-closed"
        elif (
            isinstance(literal, Atom)
            and literal.relation not in counted
            and count_vars & set().union(*(expr_vars(a) for a in literal.args))
        ):
            return f"a count is joined with `{literal.relation}`"
    return ""


def _upward(comparison: Comparison, count_vars: set[str]) -> bool:
    side = UPWARD.get(comparison.op)
    if side is None:
        return False
    left, right = comparison.left, comparison.right
    grows, fixed = (left, right) if side == "left" else (right, left)
    return isinstance(grows, Var) and grows.name in count_vars and not expr_vars(fixed) & count_vars


# ---------------------------------------------------------------- the MRA spec


def _mra_spec(analysis: Analysis, stratum: Stratum, check_: _RuleCheck) -> MraSpec:
    rule = check_.rule
    relation = rule.head.relation
    aggregate = rule.head.aggregate
    assert aggregate is not None
    value_pos = rule.head.args.index(aggregate)
    index_pos = 0 if index_var(rule) is not None else None
    keys = tuple(i for i in range(len(rule.head.args)) if i not in (value_pos, index_pos))
    recursive = [a for a in check_.alternatives if a.recursive_atoms]
    constant = [a for a in check_.alternatives if not a.recursive_atoms]
    limit = aggregate.func in ("sum", "count") and (
        rule.termination is not None or check_.properties["convergence"] == "holds"
    )
    init_rules = tuple(r for r in stratum.rules if not _reads(r, frozenset(stratum.relations)))
    rewritten = None
    if index_pos is not None:
        keep_base = aggregate.func in ("min", "max") or not limit
        rewritten = drop_index(analysis.program, relation, check_.original, keep_base)
    return MraSpec(
        relation=relation,
        aggregate=aggregate.func,
        key_positions=keys,
        value_pos=value_pos,
        index_pos=index_pos,
        head=rule,
        init_rules=init_rules,
        constant_bodies=tuple(a.body for a in constant),
        recursive_bodies=tuple(a.body for a in recursive),
        recursive_atom_index=tuple(a.recursive_atoms[0] for a in recursive),
        termination=rule.termination,
        converges_to_limit=limit,
        rewritten=rewritten,
    )


def initial_delta(rule: Rule) -> str:
    aggregate = rule.head.aggregate
    if aggregate is None:
        return ""
    g = operator_of(aggregate.func)
    if index_var(rule) is not None:
        x1 = f"X¹ = {g}(C ∪ F′(X⁰))"
        if g == "sum":
            return f"ΔX¹ = X¹ − X⁰ with {x1} (G⁻: pairwise subtraction); acc starts at X⁰"
        return f"ΔX¹ = {g}(X¹, X⁰) with {x1} (G⁻ = {g}); acc starts at X⁰"
    if g == "sum":
        return "ΔX¹ = sum(X⁰ ∪ C) (G⁻: pairwise subtraction from the identity 0); acc starts at 0"
    return f"ΔX¹ = {g}(X⁰ ∪ C) = X¹ (G⁻ = {g}); acc starts at the identity of {g}"


# ---------------------------------------------------------------- the report


def _verdict(check_: _RuleCheck, outcome: _Outcome) -> RuleVerdict:
    rule = check_.rule
    aggregate = rule.head.aggregate
    f_primes = [a.value_map.text() for a in check_.alternatives if a.value_map is not None]
    reason = outcome.reason
    if check_.notes:
        reason += " (" + "; ".join(dict.fromkeys(check_.notes)) + ")"
    return RuleVerdict(
        relation=rule.head.relation,
        rule=rule,
        aggregate=aggregate.func if aggregate else None,
        eval_class=outcome.eval_class,
        properties=dict(check_.properties),
        counterexample=check_.counterexample,
        g=aggregate_text(aggregate),
        f_prime=" ; ".join(f_primes) if aggregate else "",
        constant=constant_text(rule, check_.alternatives) if aggregate else "",
        initial_delta=initial_delta(rule) if outcome.eval_class == "mra" else "",
        reason=reason,
    )


def check(analysis: Analysis, budget: smt.Budget = smt.DEFAULT_BUDGET) -> Report:
    """Decide the MRA conditions and the final class of every recursive stratum, giving Z3
    ``budget`` for each query (deterministic: the same program always gets the same
    classes)."""
    strata: list[Stratum] = []
    verdicts: list[RuleVerdict] = []
    mra: dict[str, MraSpec] = {}
    for stratum in analysis.strata:
        if not stratum.recursive:
            strata.append(stratum)
            continue
        outcome = _check_stratum(analysis, stratum, budget)
        log.debug("stratum %s: %s", stratum.relations, outcome.eval_class)
        strata.append(replace(stratum, eval_class=outcome.eval_class, reason=outcome.reason))
        verdicts += [_verdict(c, outcome) for c in outcome.checks]
        mra.update(outcome.mra)
    verdicts.sort(key=lambda v: (v.rule.span.line, v.rule.span.col))
    indexes = {relation: spec.index_pos for relation, spec in mra.items()}
    catalog = build_catalog(analysis.program, analysis.schemas, indexes)
    return Report(analysis, tuple(strata), tuple(verdicts), mra, analysis.diagnostics, catalog)


__all__ = ["check", "initial_delta", "number_text"]
