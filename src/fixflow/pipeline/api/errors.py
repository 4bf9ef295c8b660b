"""The exceptions of the Python API: each message is one line a user can act on."""

from __future__ import annotations

from collections.abc import Sequence

from fixflow.checker.diagnostics import Diagnostic


class FixflowError(Exception):
    """The base of every error the API raises about what a user gave it (a program, an input,
    a setting); its message is one line."""


class ProgramError(FixflowError):
    """A program that cannot be read or does not check. The message is the first error as a
    compiler prints it on one line (``sp.dl:3:14: error: ...``); ``diagnostics`` holds every
    error and warning, and ``render()`` prints them with the source lines and carets."""

    def __init__(
        self, message: str, diagnostics: Sequence[Diagnostic] = (), source: str | None = None
    ) -> None:
        super().__init__(message)
        self.diagnostics = tuple(diagnostics)
        self.source = source

    @classmethod
    def from_diagnostics(cls, diagnostics: Sequence[Diagnostic], source: str) -> ProgramError:
        errors = [d for d in diagnostics if d.severity == "error"]
        first = errors[0] if errors else diagnostics[0]
        more = len(errors) - 1
        suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more > 0 else ""
        return cls(one_line(first) + suffix, diagnostics, source)

    def render(self) -> str:
        """Every diagnostic with its source line, as ``fixflow check`` prints them."""
        return "\n\n".join(d.render(self.source) for d in self.diagnostics) or str(self)


class InputError(FixflowError):
    """An input DataFrame that does not match its relation's ``.decl`` (columns, types, a
    null), or an input the program does not read."""


def one_line(diagnostic: Diagnostic) -> str:
    """``file:line:col: error: message`` (the file alone when the span has no line)."""
    span = diagnostic.span
    where = str(span) if span.line > 0 else span.file
    return f"{where}: {diagnostic.severity}: {diagnostic.message}"
