"""The declarations pass of ``analyze``, the state every pass of it shares, and which
declared relations are loaded, derived or always empty.

``Analyzer`` holds what the program declares (each relation's attributes and where it is
declared, its input and printsize directives) and the diagnostics found so far: each pass
adds to one list, so that one run reports every problem it can find. The roles follow
Soufflé's semantics of ``.input`` and ``.output``: an input relation that rules also
define gets a hidden EDB relation of its own; a relation never fed nor defined is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fixflow.checker.ast import (
    Atom,
    Attribute,
    Body,
    Declaration,
    Head,
    InputDirective,
    Negation,
    OutputDirective,
    Pragma,
    PrintSizeDirective,
    Program,
    Rule,
    Span,
    Var,
)
from fixflow.checker.diagnostics import Diagnostic
from fixflow.checker.directives import PRAGMAS


@dataclass
class Analyzer:
    """One run of ``analyze``: the declarations read so far and every diagnostic found."""

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


def check_declarations(analyzer: Analyzer) -> None:
    """Record every ``.decl``, then check the directives against them: a directive may
    name a relation declared further down."""
    for item in analyzer.program.items:
        if isinstance(item, Declaration):
            _declare(analyzer, item)
    for item in analyzer.program.items:
        if isinstance(item, InputDirective | OutputDirective | PrintSizeDirective):
            _directive(analyzer, item)
        elif isinstance(item, Pragma):  # the parser let through only harmless ones
            analyzer.warning(
                f'`.pragma "{item.key}"` has no effect in Fixflow',
                item.span,
                f"{PRAGMAS[item.key]}; the pragma is accepted so Soufflé programs run",
            )


def _declare(analyzer: Analyzer, decl: Declaration) -> None:
    if decl.relation in analyzer.schemas:
        analyzer.error(
            f"relation `{decl.relation}` is declared twice",
            decl.span,
            f"first declared at {analyzer.decl_spans[decl.relation]}",
        )
        return
    names: set[str] = set()
    for attribute in decl.attributes:
        if attribute.name in names:
            analyzer.error(
                f"attribute `{attribute.name}` of `{decl.relation}` is declared twice",
                attribute.span,
            )
        names.add(attribute.name)
    analyzer.schemas[decl.relation] = decl.attributes
    analyzer.decl_spans[decl.relation] = decl.span


def _directive(
    analyzer: Analyzer, item: InputDirective | OutputDirective | PrintSizeDirective
) -> None:
    kind = type(item).__name__.removesuffix("Directive").lower()  # input, output, printsize
    if item.relation not in analyzer.schemas:
        analyzer.error(
            f"undeclared {kind} relation `{item.relation}`",
            item.span,
            f"declare it with `.decl {item.relation}(...)` before `.{kind} {item.relation}`",
        )
    if isinstance(item, InputDirective):
        analyzer.inputs.setdefault(item.relation, item.span)
    if isinstance(item, PrintSizeDirective):
        first = analyzer.printsizes.setdefault(item.relation, item.span)
        if first is not item.span:  # Soufflé: "Redefinition of printsize directives"
            analyzer.error(
                f"`.printsize {item.relation}` is given twice",
                item.span,
                f"first given at {first}; Soufflé rejects a second one too",
            )


# ---------------------------------------------------------------- relation roles


def warn_empty_relations(analyzer: Analyzer, idb: frozenset[str]) -> None:
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


def split_inputs(analyzer: Analyzer) -> tuple[dict[str, str], tuple[Rule, ...]]:
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


def empty_outputs(analyzer: Analyzer, defined: frozenset[str]) -> tuple[str, ...]:
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
