"""The checker: program text → AST → analysis → MRA condition report. Knows nothing of Spark.

Entry points are named after what they consume: ``parse(text) -> Program``,
``analyze(program) -> Analysis``, ``check(analysis) -> Report``. ``load`` runs all three.
"""

from __future__ import annotations

from fixflow.checker.diagnostics import CheckError, Diagnostic


def load(text: str, file: str = "<input>") -> object:
    """Parse, analyze and check ``text``; return the ``Report`` or raise ``CheckError``."""
    from fixflow.checker.parser import parse

    # Parse before importing the later stages, so that syntax errors are reported by
    # themselves (and even while a later stage is being worked on).
    program = parse(text, file)
    from fixflow.checker.analysis import analyze
    from fixflow.checker.check import check

    analysis = analyze(program, text)
    if analysis.errors:
        raise CheckError(list(analysis.diagnostics), text)
    report = check(analysis)
    if report.errors:
        raise CheckError(list(report.diagnostics), text)
    return report


def diagnose(text: str, file: str = "<input>") -> list[Diagnostic]:
    """Every diagnostic (errors and warnings) the checker reports for ``text``."""
    try:
        report = load(text, file)
    except CheckError as error:
        return error.diagnostics
    return list(report.diagnostics)  # type: ignore[attr-defined]


__all__ = ["CheckError", "Diagnostic", "diagnose", "load"]
