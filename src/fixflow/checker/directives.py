"""Soufflé's declaration-level syntax beyond ``.decl``: what ``.type``, the options of
``.input``/``.output`` and ``.pragma`` accept, and resolving type names to base types.

Types are structural: a subtype (``.type T <: symbol``), an alias (``.type T = number``) or
a union (``.type U = A | B``) *is* its base type everywhere after parsing, so
``Attribute.type`` is always ``number``, ``float`` or ``symbol``. (Soufflé checks subtypes
nominally and rejects comparing two different subtypes of ``symbol``; Fixflow accepts
such programs and compares the values.) ``unsigned`` is ``number`` (int64); facts read
into an ``unsigned`` column must lie in 0..2**63-1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fixflow.checker.ast import Span, TypeDeclaration, TypeName
from fixflow.checker.diagnostics import Diagnostic

BASE_TYPES: dict[str, TypeName] = {
    "number": "number",
    "unsigned": "number",
    "float": "float",
    "symbol": "symbol",
}
"""Built-in type names and the base type each is stored as."""

IO_KEYS: dict[str, tuple[str, ...]] = {
    ".input": ("IO", "filename", "delimiter"),
    ".output": ("IO", "filename", "delimiter"),
}
IO_VALUES: dict[str, tuple[str, ...]] = {".input": ("file",), ".output": ("file", "stdout")}
IO_NOTE = (
    "the file options apply to `fixflow eval` only: a stream reads and writes the Kafka "
    "topic named after the relation"
)

PRAGMAS: dict[str, str] = {
    "jobs": "Spark decides the parallelism",
    "magic-transform": "an optimization that does not change the results",
    "magic-transform-exclude": "an optimization that does not change the results",
}
"""Soufflé pragmas Fixflow accepts, each harmless for the reason given (none changes what
a program computes); every other pragma is an error."""
PRAGMA_NOTE = (
    "Fixflow accepts the pragmas `jobs`, `magic-transform` and `magic-transform-exclude`, "
    "which do not change results; use `-F`/`-D` instead of `fact-dir`/`output-dir`"
)


@dataclass(frozen=True, slots=True)
class IOOption:
    """One ``key=value`` of an I/O directive with where each side was written."""

    key: str
    value: str
    key_span: Span
    value_span: Span


def check_io_options(directive: str, options: Sequence[IOOption]) -> list[Diagnostic]:
    """Unknown keys, unsupported values and duplicates of ``.input``/``.output`` options."""
    diagnostics: list[Diagnostic] = []
    seen: dict[str, Span] = {}
    keys = IO_KEYS[directive]
    for option in options:
        if option.key not in keys:
            listed = ", ".join(f"`{k}`" for k in keys)
            note = f"the options of `{directive}` are {listed}"
            diagnostics.append(
                _error(f"unknown {directive} option `{option.key}`", option.key_span, note, IO_NOTE)
            )
        elif option.key in seen:
            diagnostics.append(
                _error(
                    f"option `{option.key}` is given twice",
                    option.key_span,
                    f"first given at {seen[option.key]}",
                )
            )
        else:
            diagnostics.extend(_check_value(directive, option))
        seen.setdefault(option.key, option.key_span)
    values = {o.key: o for o in options}
    if "filename" in values and values.get("IO") and values["IO"].value == "stdout":
        diagnostics.append(
            _error("`filename` cannot be combined with `IO=stdout`", values["filename"].key_span)
        )
    return diagnostics


def _check_value(directive: str, option: IOOption) -> list[Diagnostic]:
    if option.key == "IO" and option.value not in IO_VALUES[directive]:
        allowed = " or ".join(f"`IO={v}`" for v in IO_VALUES[directive])
        message = f"unsupported {directive} option `IO={option.value}`"
        return [_error(message, option.value_span, f"Fixflow supports {allowed}", IO_NOTE)]
    if option.key in ("filename", "delimiter") and not option.value:
        return [_error(f"`{option.key}` must not be empty", option.value_span)]
    if option.key == "delimiter" and any(c in option.value for c in "\r\n"):
        return [_error("a delimiter cannot contain a line break", option.value_span)]
    return []


def _error(message: str, span: Span, *notes: str) -> Diagnostic:
    return Diagnostic(message, span, tuple(notes))


@dataclass
class TypeResolver:
    """The base type of every type name of a program, from its ``.type`` declarations.

    ``member_spans`` point at each ``(declared type, member name)`` as written, so that an
    unknown member is reported where it is.
    """

    declarations: Iterable[TypeDeclaration]
    member_spans: Mapping[tuple[str, str], Span] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    types: dict[str, TypeDeclaration] = field(default_factory=dict, init=False)
    bases: dict[str, TypeName | None] = field(default_factory=dict, init=False)
    resolving: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        for decl in self.declarations:
            if decl.name in BASE_TYPES:
                note = "declare a new name, e.g. `.type Id <: number`"
                self.diagnostics.append(
                    _error(f"`{decl.name}` is a built-in type", decl.span, note)
                )
            elif decl.name in self.types:
                first = f"first declared at {self.types[decl.name].span}"
                self.diagnostics.append(
                    _error(f"type `{decl.name}` is declared twice", decl.span, first)
                )
            else:
                self.types[decl.name] = decl
        for name in self.types:
            self.base(name)

    def known(self, name: str) -> bool:
        return name in BASE_TYPES or name in self.types

    def base(self, name: str) -> TypeName | None:
        """``name``'s base type; None for an unknown or broken type (already reported,
        except an unknown name, which the caller reports where it was written)."""
        if name in BASE_TYPES:
            return BASE_TYPES[name]
        if name in self.bases:
            return self.bases[name]
        decl = self.types.get(name)
        if decl is None:
            return None
        if name in self.resolving:
            self.diagnostics.append(
                _error(f"type `{name}` is defined in terms of itself", decl.span)
            )
            self.bases[name] = None
            return None
        self.resolving.add(name)
        base = self._resolve(decl)
        self.resolving.discard(name)
        self.bases[name] = base
        return base

    def _resolve(self, decl: TypeDeclaration) -> TypeName | None:
        bases: dict[TypeName, str] = {}
        broken = False
        for member in decl.members:
            base = self.base(member)
            if base is None:
                broken = True
                if not self.known(member):
                    span = self.member_spans.get((decl.name, member), decl.span)
                    note = (
                        "declare it with `.type` or use `number`, `unsigned`, `float` or `symbol`"
                    )
                    self.diagnostics.append(_error(f"unknown type `{member}`", span, note))
            else:
                bases.setdefault(base, member)
        if len(bases) > 1:
            shown = " and ".join(f"`{m}` ({b})" for b, m in bases.items())
            note = "the members of a union share one base type"
            self.diagnostics.append(
                _error(f"union type `{decl.name}` mixes {shown}", decl.span, note)
            )
            return None
        return None if broken or not bases else next(iter(bases))
