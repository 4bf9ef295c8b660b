"""Semantic analysis: ``analyze(program) -> Analysis`` runs the passes in order —
declarations (``checker.declarations``), rules: arity, safety, types, iteration-index
shapes (``checker.rule_checks``), mutual recursion tagged as one relation
(``checker.mutual``), input/output roles (``checker.declarations``), strata and structural
classes (``checker.stratification``).

It collects every diagnostic it can in one run; the strata are computed even when there
are errors, so that later errors can still be found.
"""

from __future__ import annotations

import logging

from fixflow.checker.ast import NO_SPAN, Program, without_casts
from fixflow.checker.declarations import (
    Analyzer,
    check_declarations,
    empty_outputs,
    split_inputs,
    warn_empty_relations,
)
from fixflow.checker.diagnostics import Diagnostic
from fixflow.checker.model import Analysis
from fixflow.checker.mutual import tag_mutual_recursion
from fixflow.checker.rule_checks import check_rules
from fixflow.checker.stratification import (
    check_aggregates_in_recursion,
    check_terminations,
    stratify,
)
from fixflow.checker.subaggregates import lift_sub_aggregates

log = logging.getLogger(__name__)


def analyze(program: Program, source: str | None = None) -> Analysis:
    """Check a parsed program and compute its strata (see the module docstring)."""
    program, lifted, problems = lift_sub_aggregates(program)
    analyzer = Analyzer(program)
    analyzer.diagnostics.extend(problems)
    check_declarations(analyzer)
    check_rules(analyzer)
    # Types are checked: `as(x, T)` is `x` from here on, for the strata and the engine.
    program = analyzer.program = without_casts(program)
    tagged: dict[str, tuple[str, ...]] = {}
    if not any(d.severity == "error" for d in analyzer.diagnostics):
        # Mutual recursion of alike aggregated relations becomes one relation; its rules
        # were checked above as the user wrote them.
        program, tagged = tag_mutual_recursion(program, analyzer.schemas, analyzer.inputs)
        analyzer.program = program
    loaded, bridges = split_inputs(analyzer)
    rules = program.rules + bridges
    defined = frozenset(r.head.relation for r in rules)
    empty = empty_outputs(analyzer, defined)
    idb = defined | frozenset(empty)
    strata = stratify(analyzer, rules, idb, empty)
    check_terminations(analyzer, strata)
    check_aggregates_in_recursion(analyzer, strata, lifted)
    warn_empty_relations(analyzer, idb)
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
        tagged=tagged,
    )


def _diagnostic_order(diagnostic: Diagnostic) -> tuple[int, int, int]:
    span = diagnostic.span
    if span is NO_SPAN:
        return (1 << 30, 0, 0)
    return (span.line, span.col, 0 if diagnostic.severity == "error" else 1)
