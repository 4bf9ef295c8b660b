"""Compiler-style diagnostics shared by the parser, the analysis and the condition checker.

Rendered form::

    error: undeclared relation `edge`
     --> sssp.dl:7:24
      |
    7 | sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
      |                                  ^^^^
      = note: declare it with `.decl edge(...)`
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fixflow.checker.ast import NO_SPAN, Span

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Diagnostic:
    message: str
    span: Span = NO_SPAN
    notes: tuple[str, ...] = ()
    severity: Severity = "error"

    def render(self, source: str | None) -> str:
        """The diagnostic as a compiler would print it; ``source`` is the file's text."""
        lines = [f"{self.severity}: {self.message}"]
        if self.span is not NO_SPAN and self.span.line > 0:
            lines.append(f" --> {self.span}")
            source_lines = source.splitlines() if source is not None else []
            if 0 < self.span.line <= len(source_lines):
                text = source_lines[self.span.line - 1]
                gutter = " " * len(str(self.span.line))
                width = 1
                if self.span.end_line == self.span.line and self.span.end_col > self.span.col:
                    width = self.span.end_col - self.span.col
                caret = " " * (self.span.col - 1) + "^" * width
                lines += [f"{gutter} |", f"{self.span.line} | {text}", f"{gutter} | {caret}"]
        lines += [f"  = note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {
            "severity": self.severity,
            "message": self.message,
            "file": self.span.file,
            "line": self.span.line,
            "col": self.span.col,
            "notes": list(self.notes),
        }


@dataclass
class CheckError(Exception):
    """Raised when a program has errors; carries every diagnostic found."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    source: str | None = None

    def __str__(self) -> str:
        return render_all(self.diagnostics, self.source)


def render_all(diagnostics: list[Diagnostic] | tuple[Diagnostic, ...], source: str | None) -> str:
    return "\n\n".join(d.render(source) for d in diagnostics)
