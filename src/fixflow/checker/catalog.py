"""The relation catalog: what later stages need to know about every relation, computed once.

``build_catalog(...)`` runs inside ``check`` and the result is ``Report.catalog``.
For every declared relation an entry says its attributes, its head aggregate and where the
aggregated value sits, whether its first attribute is an iteration index (``rank(i+1, ...)``),
its key positions (neither value nor index), and the schema of its results: the declared
attributes without the iteration index. This is the one place the index is dropped; the
engine, the maintainer and the pipeline all read ``RelationEntry.result``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from fixflow.checker.ast import (
    Aggregate,
    AggregateFunc,
    Attribute,
    BinOp,
    NumberLit,
    Program,
    Rule,
    TypeName,
    Var,
    body_atoms,
)


def index_var(rule: Rule) -> str | None:
    """``i`` when the rule is iteration-indexed: aggregate head ``r(i+1, ...)`` with a body
    atom of ``r`` (PowerLog Programs 2, 4–7). The one definition of "iteration-indexed"."""
    head = rule.head
    if head.aggregate is None or not head.args:
        return None
    first = head.args[0]
    if not (
        isinstance(first, BinOp)
        and first.op == "+"
        and isinstance(first.left, Var)
        and isinstance(first.right, NumberLit)
        and first.right.value == 1
    ):
        return None
    recursive = any(a.relation == head.relation for b in rule.bodies for a in body_atoms(b))
    return first.left.name if recursive else None


@dataclass(frozen=True, slots=True)
class RelationEntry:
    """One relation as every stage after the checker sees it."""

    name: str
    attributes: tuple[Attribute, ...]
    """As declared (the iteration index included)."""
    aggregate: AggregateFunc | None
    """The head aggregate of the relation's rules; None for a set relation."""
    value_pos: int | None
    """Position of the aggregated value in ``attributes``."""
    index_pos: int | None
    """Position of the iteration index in ``attributes`` (iteration-indexed relations)."""
    is_input: bool
    is_output: bool
    key_positions: tuple[int, ...] = field(init=False)
    """Positions that are neither the value nor the index: the group of an aggregate."""
    result_positions: tuple[int, ...] = field(init=False)
    """Positions of ``attributes`` a result row has: all but the iteration index."""

    def __post_init__(self) -> None:
        arity = len(self.attributes)
        results = tuple(i for i in range(arity) if i != self.index_pos)
        keys = tuple(i for i in results if i != self.value_pos)
        object.__setattr__(self, "result_positions", results)
        object.__setattr__(self, "key_positions", keys)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def types(self) -> tuple[TypeName, ...]:
        return tuple(a.type for a in self.attributes)

    @property
    def result(self) -> tuple[Attribute, ...]:
        """The schema of the relation's results (tables, DataFrames handed out)."""
        return tuple(self.attributes[i] for i in self.result_positions)

    @property
    def result_value_pos(self) -> int | None:
        """Position of the value in a result row (``result``)."""
        return None if self.value_pos is None else self.result_positions.index(self.value_pos)

    @property
    def key_names(self) -> tuple[str, ...]:
        """What identifies a result row: the group of an aggregate, every column of a set."""
        return tuple(self.attributes[i].name for i in self.key_positions)


@dataclass(frozen=True, slots=True)
class Catalog:
    """Every declared relation's entry, by name."""

    relations: Mapping[str, RelationEntry] = field(default_factory=dict)

    def __getitem__(self, relation: str) -> RelationEntry:
        return self.relations[relation]

    def __contains__(self, relation: object) -> bool:
        return relation in self.relations

    def __iter__(self) -> Iterator[str]:
        return iter(self.relations)

    @property
    def types(self) -> dict[str, tuple[TypeName, ...]]:
        """Every relation's declared attribute types (what the rule compiler reads)."""
        return {name: entry.types for name, entry in self.relations.items()}

    @property
    def indexed(self) -> frozenset[str]:
        return frozenset(n for n, e in self.relations.items() if e.index_pos is not None)


def build_catalog(
    program: Program,
    schemas: Mapping[str, tuple[Attribute, ...]],
    index_positions: Mapping[str, int | None],
) -> Catalog:
    """The catalog of a checked program: ``schemas`` are the declared relations'
    attributes, ``index_positions`` the index positions the MRA specs chose."""
    rules: dict[str, list[Rule]] = {}
    for rule in program.rules:
        rules.setdefault(rule.head.relation, []).append(rule)
    inputs, outputs = set(program.inputs), set(program.outputs)
    entries = {}
    for relation, attributes in schemas.items():
        own = rules.get(relation, [])
        aggregate: AggregateFunc | None = None
        value_pos = None
        for rule in own:
            for pos, arg in enumerate(rule.head.args):
                if isinstance(arg, Aggregate):
                    aggregate, value_pos = arg.func, pos
        index_pos = index_positions.get(relation)
        if index_pos is None and any(index_var(r) is not None for r in own):
            index_pos = 0
        entries[relation] = RelationEntry(
            relation,
            attributes,
            aggregate,
            value_pos,
            index_pos,
            relation in inputs,
            relation in outputs,
        )
    return Catalog(entries)
