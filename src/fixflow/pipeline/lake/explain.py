"""``fixflow explain``: the derivation of one result row of a program's lake.

The rows come from the lake's Delta tables as they are now (``results/<relation>`` of the
``.output`` relations, ``edb/<relation>`` of the inputs), read with delta-rs through
DataFusion: no JVM. The rules are the program's own, as the lake keeps its source
(``program.dl``). The walk itself is ``operators.derivation``: one rule instance per
derived fact, found with the rule-body compiler and the numpy kernels.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from fixflow.checker import CheckError, load
from fixflow.checker.catalog import RelationEntry
from fixflow.checker.model import Report
from fixflow.checker.parser import parse
from fixflow.operators.derivation import (
    Derivations,
    ExplainError,
    Fact,
    Value,
    python_value,
    render,
)
from fixflow.operators.engines.batches import Batch, table_rows
from fixflow.pipeline.errors import UserFacingError
from fixflow.pipeline.lake.lakehouse import (
    ProgramLake,
    join_path,
    last_batch,
    program_sources,
    read_as_of_batch,
    read_table,
    read_text,
)

log = logging.getLogger(__name__)


class ExplainFailed(UserFacingError):
    """A row that cannot be explained from the lake; the message says why."""


class Tables(Protocol):
    """Where a program's tables are: a stream's ``ProgramLake``, or ``EvalTables``."""

    @property
    def program(self) -> str: ...

    def results(self, relation: str) -> str: ...

    def edb(self, relation: str) -> str: ...


@dataclass(frozen=True)
class EvalTables:
    """The output directory of ``fixflow eval --explainable``: ``<relation>`` per
    ``.output``, ``edb/<relation>`` per ``.input``, and ``program.dl``."""

    base: str

    @property
    def program(self) -> str:
        return Path(self.base).name

    @property
    def source(self) -> str:
        return join_path(self.base, PROGRAM_FILE)

    def results(self, relation: str) -> str:
        return join_path(self.base, relation)

    def edb(self, relation: str) -> str:
        return join_path(self.base, "edb", relation)


PROGRAM_FILE = "program.dl"


@dataclass(frozen=True)
class Explanation:
    """One derivation of a result row: ``lines`` as ``fixflow explain`` prints them."""

    fact: str
    lines: tuple[str, ...]
    seconds: float
    snapshot: str = ""
    """Which state of the lake it was read from (``batch 3 of query ...``); empty for
    tables no stream wrote."""

    def __str__(self) -> str:
        return "\n".join(self.lines)


def explain_in_lake(
    lake_root: str, program: str | None, relation: str, key: Sequence[str | Value]
) -> Explanation:
    """Explain ``relation``'s row with ``key`` in the lake of ``program`` (a stem; None:
    the one program of the lake that has the relation)."""
    sources = program_sources(lake_root)
    stem = _program(sources, lake_root, program, relation)
    try:
        report = load(sources[stem], f"{stem}.dl")
    except CheckError as error:
        raise ExplainFailed(f"the program kept in the lake does not check: {error}") from None
    return explain_row(report, sources[stem], ProgramLake(lake_root, stem), relation, key)


def explain_in_output(directory: str, relation: str, key: Sequence[str | Value]) -> Explanation:
    """Explain a row of the tables ``fixflow eval --explainable`` wrote to ``directory``."""
    tables = EvalTables(directory)
    text = read_text(tables.source)
    if text is None:
        raise ExplainFailed(
            f"{directory} has no {PROGRAM_FILE}: run `fixflow eval` with --explainable to "
            "keep the program and its inputs beside the results"
        )
    try:
        report = load(text, tables.source)
    except CheckError as error:
        raise ExplainFailed(f"{tables.source} does not check: {error}") from None
    return explain_row(report, text, tables, relation, key)


def _program(sources: dict[str, str], lake_root: str, program: str | None, relation: str) -> str:
    if program is not None:
        if program not in sources:
            known = ", ".join(sorted(sources)) or "none"
            raise ExplainFailed(
                f"no program `{program}` in the lake {lake_root} (programs: {known})"
            )
        return program
    having = [s for s in sorted(sources) if read_table(ProgramLake(lake_root, s).results(relation))]
    if not having:
        raise ExplainFailed(f"no program in the lake {lake_root} has results of `{relation}`")
    if len(having) > 1:
        raise ExplainFailed(
            f"programs {', '.join(having)} of {lake_root} have results of `{relation}`: "
            "name one with --program"
        )
    return having[0]


def explain_row(
    report: Report, text: str, lake: Tables, relation: str, key: Sequence[str | Value]
) -> Explanation:
    """The derivation of ``relation``'s row with ``key`` over ``lake``'s current tables."""
    started = time.monotonic()
    program = report.analysis.program
    if relation not in program.outputs:
        raise ExplainFailed(f"`{relation}` is not an .output relation of {lake.program}")
    entry = report.catalog[relation]
    # The tables as the last applied batch left them: its EDB commit comes last, so a batch
    # still being committed is not half read.
    snapshot = last_batch([lake.edb(r) for r in program.inputs])

    def rows(name: str) -> Batch | None:
        return _stored_rows(report, lake, name, snapshot)

    derivations = Derivations(parse(text, f"{lake.program}.dl").rules, report.catalog, rows)
    stored = derivations.batch(relation)
    if stored is None:
        raise ExplainFailed(f"the lake has no results of `{relation}` yet")
    fact = Fact(relation, _row(entry, stored, _key_values(entry, key)))
    try:
        steps = derivations.explain(fact)
    except ExplainError as error:
        raise ExplainFailed(str(error)) from None
    seconds = time.monotonic() - started
    log.info("explained %s in %.3f s (%d steps)", fact, seconds, len(steps))
    where = "" if snapshot is None else f"batch {snapshot[1]} of query {snapshot[0]}"
    return Explanation(str(fact), tuple(render(steps)), seconds, where)


def _stored_rows(
    report: Report, lake: Tables, relation: str, snapshot: tuple[str, int] | None
) -> Batch | None:
    """A relation's rows as the lake holds them (as of ``snapshot``, a query's batch):
    results of outputs, EDB of inputs."""
    program = report.analysis.program
    if relation not in report.catalog or report.catalog[relation].index_pos is not None:
        return None
    if relation in program.outputs:
        path = lake.results(relation)
    elif relation in program.inputs:
        path = lake.edb(relation)
    else:
        return None
    table = read_table(path) if snapshot is None else read_as_of_batch(path, *snapshot)
    return None if table is None else table_rows(table, report.catalog[relation].types)


def _key_values(entry: RelationEntry, key: Sequence[str | Value]) -> list[Value]:
    """The key (every column but the aggregated value) in its declared types."""
    positions = entry.key_positions
    if len(key) != len(positions):
        names = ", ".join(entry.attributes[p].name for p in positions)
        raise ExplainFailed(
            f"`{entry.name}` is keyed by {len(positions)} column(s) ({names}); {len(key)} given"
        )
    values: list[Value] = []
    for position, given in zip(positions, key, strict=True):
        attribute = entry.attributes[position]
        try:
            values.append(_typed(attribute.type, given))
        except ValueError:
            raise ExplainFailed(
                f"`{entry.name}`: {attribute.name} must be a {attribute.type}, not {given!r}"
            ) from None
    return values


def _typed(type_name: str, given: str | Value) -> Value:
    if type_name == "number":
        return int(given)
    if type_name == "float":
        return float(given)
    return str(given)


def _row(entry: RelationEntry, stored: Batch, key: Sequence[Value]) -> tuple[Value, ...]:
    """The stored row with ``key``, all its columns."""
    match = np.ones(stored.n, bool)
    for position, value in zip(entry.key_positions, key, strict=True):
        match &= stored.cols[f"c{position}"] == value
    found = np.flatnonzero(match)
    if not len(found):
        described = ", ".join(
            f"{entry.attributes[p].name} = {v!r}"
            for p, v in zip(entry.key_positions, key, strict=True)
        )
        raise ExplainFailed(f"`{entry.name}` has no row with {described}")
    row = int(found[0])
    values = (stored.cols[f"c{i}"][row] for i in range(len(entry.attributes)))
    return tuple(python_value(v) for v in values)
