"""The checker: program text → AST → analysis → MRA condition report. Knows nothing of Spark.

Entry points are named after what they consume: ``parse(text) -> Program``,
``analyze(program) -> Analysis``, ``check(analysis) -> Report``. ``load`` runs all three.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fixflow.checker.diagnostics import CheckError, Diagnostic

if TYPE_CHECKING:
    # Only for annotations: importing the later stages here would defeat ``load``'s order.
    from fixflow.checker.model import Report
    from fixflow.checker.smt import Budget


def load(text: str, file: str = "<input>", budget: Budget | None = None) -> Report:
    """Parse, analyze and check ``text``; return the ``Report`` or raise ``CheckError``.
    ``budget`` is Z3's work limit per query (``smt.DEFAULT_BUDGET`` when ``None``)."""
    from fixflow.checker.parser import parse

    # Parse before importing the later stages, so that syntax errors are reported by
    # themselves (and even while a later stage is being worked on).
    program = parse(text, file)
    from fixflow.checker.analysis import analyze
    from fixflow.checker.check import check
    from fixflow.checker.smt import DEFAULT_BUDGET

    analysis = analyze(program, text)
    if analysis.errors:
        raise CheckError(list(analysis.diagnostics), text)
    report = check(analysis, budget or DEFAULT_BUDGET)
    if report.errors:
        raise CheckError(list(report.diagnostics), text)
    return report


def diagnose(text: str, file: str = "<input>") -> list[Diagnostic]:
    """Every diagnostic (errors and warnings) the checker reports for ``text``."""
    try:
        report = load(text, file)
    except CheckError as error:
        return error.diagnostics
    return list(report.diagnostics)


__all__ = ["CheckError", "Diagnostic", "diagnose", "load"]
