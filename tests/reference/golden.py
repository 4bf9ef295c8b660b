"""Golden directories (tests/programs/<name>/): reading them and comparing results.

Layout: ``program.dl``; ``facts/<rel>.facts`` (tab-separated, Soufflé convention);
``expected/<rel>.csv`` (header = declared attribute names, iteration index dropped; rows
sorted); ``meta.toml`` with ``tolerance`` (absolute, for float columns) and
``how_expected``. Engines can reuse ``load_golden`` and ``compare_rows``.
"""

from __future__ import annotations

import csv
import gzip
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from fixflow.checker.ast import Program
from fixflow.checker.parser import parse

Row = tuple[int | float | str, ...]


@dataclass(frozen=True)
class GoldenCase:
    name: str
    directory: Path
    source: str
    program: Program
    facts: dict[str, list[Row]]
    expected: dict[str, list[Row]]
    """Output relation -> rows in declared column order (index dropped), typed."""
    tolerance: float
    how_expected: str


def column_types(program: Program, relation: str, indexed: bool = False) -> list[str]:
    decl = program.declaration(relation)
    if decl is None:
        raise KeyError(f"{relation} is not declared")
    types = [a.type for a in decl.attributes]
    return types[1:] if indexed else types


def convert(value: str, type_name: str) -> int | float | str:
    if type_name == "number":
        return int(value)
    if type_name == "float":
        return float(value)
    return value


def read_facts(directory: Path, program: Program) -> dict[str, list[Row]]:
    """Every ``.input`` relation's ``<rel>.facts`` or ``<rel>.facts.gz`` (gzip content is
    decompressed whatever the name; missing file: no facts)."""
    facts: dict[str, list[Row]] = {}
    for rel in program.inputs:
        # Soufflé's `.input r(filename=..., delimiter=...)`: every directive is read.
        rows: set[Row] = set()
        for options in program.input_directives(rel):
            rows.update(_read_file(directory, rel, options, column_types(program, rel)))
        facts[rel] = sorted(rows, key=repr)
    return facts


def _read_file(directory: Path, rel: str, options: dict[str, str], types: list[str]) -> list[Row]:
    path = directory / options.get("filename", f"{rel}.facts")
    if not path.exists():
        path = directory / f"{rel}.facts.gz"
    data = path.read_bytes() if path.exists() else b""
    lines = (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode().splitlines()
    if not types:  # Soufflé reads no field of a nullary relation's line: any line holds
        return [()] if lines else []
    delimiter = options.get("delimiter", "\t")
    return [
        tuple(convert(v, t) for v, t in zip(line.split(delimiter), types, strict=True))
        for line in lines
        if line or types == ["symbol"]  # Soufflé: a blank line there is the symbol ""
    ]


def read_expected(path: Path, program: Program) -> list[Row]:
    """Rows of ``expected/<rel>.csv``; the header must be the declared attribute names,
    without the first (iteration index) one when the file has one column less."""
    rel = path.stem
    decl = program.declaration(rel)
    assert decl is not None, f"{rel} is not declared"
    names = [a.name for a in decl.attributes]
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        indexed = len(header) == len(names) - 1
        assert header == (names[1:] if indexed else names), f"{path}: header {header} != {names}"
        types = column_types(program, rel, indexed)
        return [tuple(convert(v, t) for v, t in zip(row, types, strict=True)) for row in reader]


def load_golden(directory: Path) -> GoldenCase:
    source = (directory / "program.dl").read_text()
    program = parse(source, str(directory / "program.dl"))
    meta = tomllib.loads((directory / "meta.toml").read_text())
    expected = {
        p.stem: read_expected(p, program) for p in sorted((directory / "expected").glob("*.csv"))
    }
    return GoldenCase(
        name=directory.name,
        directory=directory,
        source=source,
        program=program,
        facts=read_facts(directory / "facts", program),
        expected=expected,
        tolerance=float(meta["tolerance"]),
        how_expected=str(meta["how_expected"]),
    )


def compare_rows(actual: set[Row] | list[Row], expected: list[Row], tolerance: float) -> list[str]:
    """Mismatches between result rows and expected rows. Float columns are values compared
    within ``tolerance``; all other columns form the key and must match exactly."""

    def split(row: Row) -> tuple[Row, tuple[float, ...]]:
        key = tuple(v for v in row if not isinstance(v, float))
        return key, tuple(float(v) for v in row if isinstance(v, float))

    # the reference may produce ints where a float column holds an integral value
    expected_by_key = dict(split(r) for r in expected)
    actual_by_key: dict[Row, tuple[float, ...]] = {}
    for row in actual:
        key, values = split(_floatify(row, expected))
        actual_by_key[key] = values
    problems = [f"missing {k}" for k in expected_by_key.keys() - actual_by_key.keys()]
    problems += [f"unexpected {k}" for k in actual_by_key.keys() - expected_by_key.keys()]
    for key in expected_by_key.keys() & actual_by_key.keys():
        want, got = expected_by_key[key], actual_by_key[key]
        if len(want) != len(got) or any(
            not math.isclose(w, g, rel_tol=0.0, abs_tol=tolerance)
            for w, g in zip(want, got, strict=True)
        ):
            problems.append(f"{key}: expected {want}, got {got}")
    return sorted(problems)


def _floatify(row: Row, expected: list[Row]) -> Row:
    """Make the columns that are floats in the expected rows floats in ``row`` too."""
    if not expected:
        return row
    sample = expected[0]
    return tuple(
        float(v) if isinstance(s, float) and isinstance(v, int) else v
        for v, s in zip(row, sample, strict=True)
    )


GOLDEN_PLACEMENT = "golden_placement"
"""The user property a golden test records, ``<case>@<setting>`` (``placement.SETTINGS``):
tests/conftest.py counts the pairs that ran."""
