"""Rendering of a ``Report``: the human report of ``fixflow check`` and its JSON form."""

from __future__ import annotations

from fixflow.checker.ast import Declaration, Program, Rule
from fixflow.checker.diagnostics import Diagnostic
from fixflow.checker.hints import stratum_hints
from fixflow.checker.model import PROPERTY_NAMES, Report, RuleVerdict, Stratum
from fixflow.checker.mutual import tagged_title
from fixflow.checker.printer import pretty
from fixflow.checker.subaggregates import is_hidden
from fixflow.checker.unions import merged_lines

PROPERTY_LABELS = {
    "commutativity": "Property 1, commutative",
    "associativity": "Property 1, associative",
    "property2": "Property 2, G∘F′∘G = G∘F′",
    "convergence": "convergence (A3 eliminable)",
}


def to_json(report: Report | None, diagnostics: list[Diagnostic]) -> dict[str, object]:
    """One JSON object: errors, warnings, strata and one entry per recursive rule."""
    errors = [d.to_json() for d in diagnostics if d.severity == "error"]
    warnings = [d.to_json() for d in diagnostics if d.severity == "warning"]
    if report is None:
        return {"errors": errors, "warnings": warnings, "strata": [], "rules": []}
    return {
        "errors": errors,
        "warnings": warnings,
        "strata": [_stratum_json(s, report) for s in report.strata],
        "rules": [_verdict_json(v) for v in report.verdicts],
    }


def _stratum_json(stratum: Stratum, report: Report) -> dict[str, object]:
    spec = report.mra.get(stratum.relations[0]) if stratum.relations else None
    hidden = [r for r in stratum.relations if is_hidden(r)]
    return {
        "index": stratum.index,
        # As in the human report, a body aggregate's hidden relations are not the user's:
        # they are listed by where the aggregate was written.
        "relations": [r for r in stratum.relations if not is_hidden(r)],
        "body_aggregates": list(dict.fromkeys(_aggregate_position(stratum, r) for r in hidden)),
        # A tagged relation (checker.mutual) → the user's relations it holds, by tag.
        "tagged": {
            r: list(report.analysis.tagged[r])
            for r in stratum.relations
            if r in report.analysis.tagged
        },
        "recursive": stratum.recursive,
        "class": stratum.eval_class,
        "reason": stratum.reason,
        "hints": stratum_hints(stratum),
        "rewritten": pretty(spec.rewritten) if spec and spec.rewritten else None,
    }


def _verdict_json(verdict: RuleVerdict) -> dict[str, object]:
    return {
        "relation": verdict.relation,
        "line": verdict.line,
        "aggregate": verdict.aggregate,
        "class": verdict.eval_class,
        "properties": dict(verdict.properties),
        "counterexample": verdict.counterexample,
        "g": verdict.g,
        "f_prime": verdict.f_prime,
        "constant": verdict.constant,
        "initial_delta": verdict.initial_delta,
        "reason": verdict.reason,
    }


def human(report: Report) -> str:
    """The report as ``fixflow check`` prints it: per stratum, then per recursive rule."""
    file = report.analysis.program.file
    lines = [f"{file}: {len(report.strata)} strata, {len(report.verdicts)} recursive rules"]
    for stratum in report.strata:
        lines += ["", _stratum_title(stratum, report.analysis.tagged)]
        if not stratum.recursive:
            continue
        lines.append(f"  class: {stratum.eval_class} — {stratum.reason}")
        lines += [f"  {hint}" for hint in stratum_hints(stratum)]
        for verdict in report.verdicts:
            if verdict.relation in stratum.relations:
                lines += _verdict_lines(verdict, file, stratum.reason)
        spec = report.mra.get(stratum.relations[0])
        if spec is not None and spec.rewritten is not None:
            lines += ["  MRA form (iteration index dropped):"]
            lines += [f"    {line}" for line in _relevant(spec.rewritten, spec.relation)]
    return "\n".join(lines)


def _stratum_title(stratum: Stratum, tagged: dict[str, tuple[str, ...]]) -> str:
    kind = "recursive" if stratum.recursive else "non-recursive"
    names = ", ".join(
        tagged_title(relation, tagged[relation])
        if relation in tagged
        else _shown_name(stratum, relation)
        for relation in stratum.relations
    )
    return f"stratum {stratum.index} ({kind}): {names}"


def _shown_name(stratum: Stratum, relation: str) -> str:
    """A body aggregate's hidden relation is shown by where the user wrote the aggregate."""
    if not is_hidden(relation):
        return relation
    return f"body aggregate at {_aggregate_position(stratum, relation)}"


def _aggregate_position(stratum: Stratum, relation: str) -> str:
    """``line:col`` of the body aggregate a hidden relation was lifted from."""
    span = next(r.head.span for r in stratum.rules if r.head.relation == relation)
    return f"{span.line}:{span.col}"


def _verdict_lines(verdict: RuleVerdict, file: str, stratum_reason: str) -> list[str]:
    lines = [f"  rule `{verdict.relation}` at {file}:{verdict.line}"]
    others = merged_lines(verdict.rule)
    if others:
        where = ", ".join(f"{file}:{line}" for line in others)
        lines.append(f"    with the rules at {where} as alternatives (one union, as with `;`):")
        lines += [f"      {text}" for text in pretty(verdict.rule).splitlines()]
    if verdict.aggregate is None:
        lines.append("    no aggregate (properties n/a)")
        return lines
    lines += [
        f"    G:  {verdict.g}",
        f"    F′: {verdict.f_prime or '—'}",
        f"    C:  {verdict.constant}",
    ]
    for name in PROPERTY_NAMES:
        lines.append(f"    {PROPERTY_LABELS[name]:<30} {verdict.properties[name]}")
    if verdict.counterexample:
        lines.append(f"    counterexample: {verdict.counterexample}")
    if verdict.initial_delta:
        lines.append(f"    initial delta: {verdict.initial_delta}")
    # The stratum line already gives the reason; repeat only what is particular to the rule.
    extra = verdict.reason.removeprefix(stratum_reason).strip()
    if extra.startswith("(") and extra.endswith(")"):
        extra = extra[1:-1]
    lines.append(f"    class: {verdict.eval_class}" + (f" ({extra})" if extra else ""))
    return lines


def _relevant(program: Program, relation: str) -> list[str]:
    """The rewritten declaration and rules of ``relation`` only."""
    lines: list[str] = []
    for item in program.items:
        if isinstance(item, Declaration) and item.relation == relation:
            lines.append(pretty(item))
        elif isinstance(item, Rule) and item.head.relation == relation:
            lines += pretty(item).splitlines()
    return lines
