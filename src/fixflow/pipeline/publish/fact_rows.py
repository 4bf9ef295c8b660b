"""Fact files read one row at a time: the reference reader of ``fixflow publish``.

Files: ``.csv`` with a header row naming the attributes, or ``.facts``/``.tsv``
(tab-separated, no header, Soufflé's format) whose attribute names come from the program.
With a program, values are typed per the relation's declaration and a bad value is an error
at ``file:line``; without one (CSV only), values that read as integers or floats are typed
as numbers and the rest as strings.

``fact_columns`` reads and encodes a column at a time (what ``files.publish_facts`` uses)
and falls back to this reader to report an error at its ``file:line``. It is the first
stage of publishing, so ``PublishError`` lives here too: every later stage raises it.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from fixflow.checker.ast import Attribute
from fixflow.pipeline.kafka.messages import Value, is_one_symbol

TAB_SEPARATED = (".facts", ".tsv")


class PublishError(ValueError):
    """A file or relation that cannot be published; the message says where and why."""


@dataclass(frozen=True, slots=True)
class FactFile:
    attributes: tuple[Attribute, ...]
    facts: list[tuple[Value, ...]]


def read_fact_file(path: Path, attributes: Sequence[Attribute] | None) -> FactFile:
    """The facts of a .csv or .facts/.tsv file, typed by ``attributes`` when given."""
    if not path.is_file():
        raise PublishError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv(path, attributes)
    if suffix in TAB_SEPARATED:
        if attributes is None:
            raise PublishError(
                f"{path}: a {suffix} file has no header and no program run on the lake "
                "declares its relation; pass --program PROG.dl so the attribute names "
                "come from its .decl"
            )
        rows = _tsv_rows(path, is_one_symbol(attributes))
        return FactFile(tuple(attributes), list(_typed_rows(path, rows, attributes)))
    raise PublishError(
        f"{path}: unknown file type {suffix or '(none)'!r} (expected .csv, .facts or .tsv)"
    )


def _tsv_rows(path: Path, one_symbol: bool) -> Iterator[tuple[int, list[str]]]:
    """Blank lines are skipped, except for one ``symbol`` column: there they are ""."""
    with path.open(encoding="utf-8", newline="") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if line or one_symbol:
                yield number, line.split("\t")


def _read_csv(path: Path, attributes: Sequence[Attribute] | None) -> FactFile:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise PublishError(f"{path}:1: empty file: expected a header row naming the attributes")
        header = [name.strip() for name in header]
        rows = [(reader.line_num, row) for row in reader if row]
    if attributes is None:
        inferred = tuple(Attribute(name, "symbol") for name in header)
        return FactFile(
            inferred,
            [tuple(guess_value(v) for v in row) for row in _checked_width(path, rows, inferred)],
        )
    order = _header_order(path, header, attributes)
    reordered = [
        (n, [row[i] for i in order]) if len(row) == len(header) else (n, row) for n, row in rows
    ]
    return FactFile(tuple(attributes), list(_typed_rows(path, reordered, attributes)))


def _header_order(path: Path, header: list[str], attributes: Sequence[Attribute]) -> list[int]:
    names = [a.name for a in attributes]
    if sorted(header) != sorted(names) or len(set(header)) != len(header):
        raise PublishError(
            f"{path}:1: header {', '.join(header)} does not name the declared "
            f"attributes {', '.join(names)}"
        )
    return [header.index(name) for name in names]


def _checked_width(
    path: Path, rows: list[tuple[int, list[str]]], attributes: Sequence[Attribute]
) -> Iterator[list[str]]:
    for number, row in rows:
        _check_width(path, number, row, attributes)
        yield row


def _check_width(path: Path, number: int, row: list[str], attributes: Sequence[Attribute]) -> None:
    if len(row) != len(attributes):
        names = ", ".join(a.name for a in attributes)
        raise PublishError(
            f"{path}:{number}: expected {len(attributes)} values ({names}), got {len(row)}"
        )


def _typed_rows(
    path: Path, rows: Iterable[tuple[int, list[str]]], attributes: Sequence[Attribute]
) -> Iterator[tuple[Value, ...]]:
    for number, row in rows:
        _check_width(path, number, row, attributes)
        yield tuple(_typed(path, number, a, text) for a, text in zip(attributes, row, strict=True))


def _typed(path: Path, line: int, attribute: Attribute, text: str) -> Value:
    value = parse_value(text, attribute.type)
    if value is None:
        raise PublishError(
            f"{path}:{line}: value {text!r} of attribute {attribute.name!r} is "
            f"not a {attribute.type}"
        )
    return value


def parse_value(text: str, type_name: str) -> Value | None:
    """``text`` as declared type ``type_name``, or None when it is not one."""
    if type_name == "symbol":
        return text
    text = text.strip()
    try:
        if type_name == "number":
            number = int(text)
            return number if -(2**63) <= number < 2**63 else None
        real = float(text)
        return real if math.isfinite(real) else None
    except ValueError:
        return None


def guess_value(text: str) -> Value:
    """A value of a CSV read without a program: an integer, else a float, else the text."""
    for type_name in ("number", "float"):
        value = parse_value(text, type_name)
        if value is not None:
            return value
    return text
