"""Reading input facts: ``<relation>.facts`` (tab-separated, no header; Soufflé) or
``<relation>.csv`` (comma-separated with a header row of attribute names).

Errors are one line, ``file:line: what is wrong``, raised as ``FactsError``; the CLI
prints them and exits 1.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa

from fixflow.checker.ast import Attribute
from fixflow.pipeline.lake import rows_to_arrow

log = logging.getLogger(__name__)

Value = int | float | str


class FactsError(Exception):
    """A missing or malformed facts file; the message is ``file:line: ...``."""


def input_path(directory: Path, relation: str) -> Path:
    """The facts file of ``relation`` in ``directory`` (``.facts`` preferred over ``.csv``)."""
    for suffix in (".facts", ".csv"):
        path = directory / f"{relation}{suffix}"
        if path.is_file():
            return path
    raise FactsError(
        f"{directory}: no input file for relation `{relation}` "
        f"(expected {relation}.facts or {relation}.csv)"
    )


def _convert(text: str, attribute: Attribute, where: str) -> Value:
    if attribute.type == "symbol":
        return text
    try:
        return int(text.strip()) if attribute.type == "number" else float(text.strip())
    except ValueError:
        raise FactsError(
            f"{where}: column `{attribute.name}` expects a {attribute.type}, found {text!r}"
        ) from None


def _records(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every non-empty record."""
    with path.open(newline="", encoding="utf-8") as handle:
        if path.suffix == ".csv":
            reader = csv.reader(handle)
            for fields in reader:
                if fields and any(f.strip() for f in fields):
                    yield reader.line_num, fields
        else:
            for number, line in enumerate(handle, start=1):
                line = line.rstrip("\r\n")
                if line.strip():
                    yield number, line.split("\t")


def read_rows(path: Path, attributes: Sequence[Attribute]) -> list[tuple[Value, ...]]:
    """Typed rows of one facts file, in declared column order."""
    records = _records(path)
    order = list(range(len(attributes)))
    if path.suffix == ".csv":
        header = next(records, None)
        if header is None:
            return []
        order = _header_order(path, header, attributes)
    rows = []
    for number, fields in records:
        where = f"{path}:{number}"
        if len(fields) != len(attributes):
            raise FactsError(f"{where}: expected {len(attributes)} fields, found {len(fields)}")
        rows.append(
            tuple(_convert(fields[i], a, where) for i, a in zip(order, attributes, strict=True))
        )
    return rows


def _header_order(
    path: Path, header: tuple[int, list[str]], attributes: Sequence[Attribute]
) -> list[int]:
    """Positions of the declared attributes in a CSV header (which names them all)."""
    number, names = header
    names = [n.strip() for n in names]
    declared = [a.name for a in attributes]
    if sorted(names) != sorted(declared):
        raise FactsError(
            f"{path}:{number}: header {','.join(names)} does not name the declared "
            f"attributes {','.join(declared)}"
        )
    return [names.index(name) for name in declared]


def read_table(path: Path, attributes: Sequence[Attribute]) -> pa.Table:
    """One facts file as a pyarrow table with the declared schema."""
    rows = read_rows(path, attributes)
    log.info("read %d facts from %s", len(rows), path)
    return rows_to_arrow(rows, attributes)


def load_inputs(
    directory: Path, relations: dict[str, tuple[Attribute, ...]]
) -> dict[str, pa.Table]:
    """Every input relation's facts from ``directory``; a missing file is an error."""
    if not directory.is_dir():
        raise FactsError(f"{directory}: facts directory does not exist")
    return {
        relation: read_table(input_path(directory, relation), attributes)
        for relation, attributes in relations.items()
    }
