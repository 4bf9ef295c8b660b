"""What the checker hands to later stages: the analysis and the condition report.

These types are the contract between ``checker/`` and ``operators/``:
``analyze(program) -> Analysis`` and ``check(analysis) -> Report``. The engine reads a
``Report``: its strata in evaluation order, each with its final evaluation class, and for
``mra`` strata an ``MraSpec`` saying how to run the MonoTable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from fixflow.checker.ast import (
    AggregateFunc,
    Attribute,
    Body,
    Program,
    Rule,
    Termination,
)
from fixflow.checker.catalog import Catalog
from fixflow.checker.diagnostics import Diagnostic

EvalClass: TypeAlias = Literal["set", "mra", "aggregate-seminaive", "naive"]
PropertyStatus: TypeAlias = Literal["holds", "fails", "unknown", "n/a"]

PROPERTY_NAMES: tuple[str, ...] = ("commutativity", "associativity", "property2", "convergence")
"""Keys of ``RuleVerdict.properties``: Property 1 split in its two halves, Property 2
(G∘F′∘G(X) = G∘F′(X)), and the A3 convergence ("eliminable") condition for sum programs
that reach a limit rather than a fixpoint."""


@dataclass(frozen=True, slots=True)
class Stratum:
    """A set of mutually recursive IDB relations evaluated together.

    ``eval_class`` is None for a non-recursive stratum. After ``analyze`` it is the
    structural class (``set`` for recursion without aggregates, otherwise the candidate
    the analysis could decide without Z3); ``check`` returns strata with the final class.
    """

    index: int
    relations: tuple[str, ...]
    rules: tuple[Rule, ...]
    recursive: bool
    eval_class: EvalClass | None
    reason: str


@dataclass(frozen=True, slots=True)
class Analysis:
    program: Program
    source: str | None
    schemas: dict[str, tuple[Attribute, ...]]
    """Every declared relation's attributes (iteration index included where declared)."""
    edb: frozenset[str]
    """The relations that hold loaded facts: ``.input`` relations, and for an input
    relation that rules or facts also define, its hidden loaded part (``loaded``)."""
    idb: frozenset[str]
    """Relations computed by strata: defined by rules or facts (an input relation that is
    also defined among them), and ``.output`` relations with no definition (always empty)."""
    strata: tuple[Stratum, ...]
    """In evaluation order: every stratum only reads EDB and earlier strata."""
    diagnostics: tuple[Diagnostic, ...] = ()
    loaded: dict[str, str] = field(default_factory=dict)
    """Every ``.input`` relation (the name facts files, topics and EDB tables use) → the
    EDB relation its facts are loaded into: itself, or for a relation that is also defined
    by rules or facts a hidden relation that one more rule unions into it (Soufflé's
    semantics: loaded and derived facts together)."""
    tagged: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Every relation that holds mutually recursive relations tagged by which one a row
    belongs to (``checker.mutual``) → those relations, in tag order."""

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    def edb_relation(self, relation: str) -> str:
        """The EDB relation that holds the loaded facts of input ``relation``."""
        return self.loaded.get(relation, relation)

    def input_relation(self, relation: str) -> str:
        """The user's name of EDB ``relation`` (the inverse of ``edb_relation``)."""
        return next((user for user, edb in self.loaded.items() if edb == relation), relation)


@dataclass(frozen=True, slots=True)
class MraSpec:
    """How the MRA engine runs one recursive aggregate relation (PowerLog §3, §5.2).

    Positions index the *declared* schema of ``relation``. For an iteration-indexed
    relation (``rank(i+1, Y, sum[r]) :- ... rank(i, X, rx) ...``) ``index_pos`` is the
    index column; results drop it.

    Semantics the engine implements, with G = ``aggregate`` (``count`` in a recursive
    rule combines counts by addition, i.e. acts as ``sum``):
    - not indexed: X = G(X⁰ ∪ C ∪ F′(X)); MonoTable starts acc = identity,
      ΔX¹ = G(X⁰ ∪ C), then ΔX ← G∘F′(ΔX), acc ← G(acc, ΔX).
    - indexed: X^{i+1} = G(C ∪ F′(X^i)); acc = X⁰, ΔX¹ = G⁻(G(C ∪ F′(X⁰)), X⁰)
      (sum: pairwise subtraction; min/max: G itself), then as above.
    X⁰ comes from ``init_rules``; C from ``constant_bodies``; F′ from ``recursive_bodies``
    (each has exactly one atom of ``relation``: ``recursive_atom_index`` into its literals).
    """

    relation: str
    aggregate: AggregateFunc
    key_positions: tuple[int, ...]
    value_pos: int
    index_pos: int | None
    head: Rule
    """The recursive rule as written."""
    init_rules: tuple[Rule, ...]
    constant_bodies: tuple[Body, ...]
    recursive_bodies: tuple[Body, ...]
    recursive_atom_index: tuple[int, ...]
    termination: Termination | None
    converges_to_limit: bool
    """True for sum programs that reach a mathematical limit (need the termination
    clause or the iteration cap); False for fixpoint programs."""
    rewritten: Program | None = None
    """The MRA form of an iteration-indexed rule (PowerLog Program 2 → 2.b), printable."""


@dataclass(frozen=True, slots=True)
class RuleVerdict:
    """The condition report for one recursive rule."""

    relation: str
    rule: Rule
    aggregate: AggregateFunc | None
    eval_class: EvalClass
    properties: dict[str, PropertyStatus]
    counterexample: str | None
    g: str
    """G, e.g. ``min``; empty for set rules."""
    f_prime: str
    """F′ as an expression in the program's variables, e.g. ``dy = dx + w``."""
    constant: str
    """C, e.g. ``r = 0.15``; ``∅`` when there is none."""
    initial_delta: str
    """How ΔX¹ is formed, e.g. ``ΔX¹ = X¹ − X⁰ (G⁻: pairwise subtraction)``."""
    reason: str

    @property
    def line(self) -> int:
        return self.rule.span.line


@dataclass(frozen=True, slots=True)
class Report:
    analysis: Analysis
    strata: tuple[Stratum, ...]
    """The analysis' strata with their final evaluation classes."""
    verdicts: tuple[RuleVerdict, ...]
    """One per recursive rule, in source order."""
    mra: dict[str, MraSpec] = field(default_factory=dict)
    """By relation, for every relation of an ``mra`` stratum."""
    diagnostics: tuple[Diagnostic, ...] = ()
    catalog: Catalog = field(default_factory=Catalog)
    """Every relation's attributes, aggregate, key/value/index positions and result schema
    (``fixflow.checker.catalog``), computed once by ``check``."""

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")
