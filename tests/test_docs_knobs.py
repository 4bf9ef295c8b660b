"""Every config key is documented: the knob table of docs/architecture.md (between
``<!-- knobs:begin -->`` and ``<!-- knobs:end -->``) names each field of each section of
``pipeline/config.py`` as ``[section] key``, so a new knob cannot go undocumented, and the
table names no key that is gone."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest

from fixflow.pipeline.config import SECTIONS

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
BEGIN, END = "<!-- knobs:begin -->", "<!-- knobs:end -->"
CONFIG_KEY = re.compile(r"^\|\s*`\[([\w.]+)\] (\w+)`\s*\|")
"""A table row whose first cell is a config key: | `[engine] mode` | ..."""


def table_rows(text: str) -> list[str]:
    """The lines between the knob markers; an error if the markers are missing."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise AssertionError(f"docs/architecture.md needs exactly one {BEGIN} and one {END}")
    inside = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return [line for line in inside.splitlines() if line.startswith("|")]


def documented_keys(text: str) -> list[tuple[str, str]]:
    """The ``(section, key)`` of every config-key row of the knob table."""
    found = (CONFIG_KEY.match(line) for line in table_rows(text))
    return [(m[1], m[2]) for m in found if m is not None]


def section_fields(section: str, cls: type) -> list[tuple[str, Any]]:
    """``(section, field)`` of every key, a section within a section (``[lake.storage]``)
    by its own dotted name."""
    found: list[tuple[str, Any]] = []
    for f in fields(cls):
        default = f.default if f.default_factory is MISSING else f.default_factory()
        if is_dataclass(default):
            found.extend(section_fields(f"{section}.{f.name}", type(default)))
        else:
            found.append((section, f))
    return found


def all_fields() -> list[tuple[str, Any]]:
    return [key for section, cls in SECTIONS.items() for key in section_fields(section, cls)]


def config_keys() -> set[tuple[str, str]]:
    return {(section, f.name) for section, f in all_fields()}


def documented_defaults(text: str) -> dict[tuple[str, str], str]:
    """The default cell of every config-key row, as written (backticks and commas dropped)."""
    defaults = {}
    for line in table_rows(text):
        if (m := CONFIG_KEY.match(line)) is not None:
            cell = line.split("|")[2].strip().replace("`", "").replace(",", "")
            defaults[(m[1], m[2])] = cell
    return defaults


def written(value: Any) -> str:
    """A default as the table writes it: TOML's booleans, ``""`` for an empty string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    return str(value)


def config_defaults() -> dict[tuple[str, str], str]:
    defaults = {}
    for section, f in all_fields():
        value = f.default if f.default_factory is MISSING else f.default_factory()
        defaults[(section, f.name)] = written(value)
    return defaults


@pytest.fixture(scope="module")
def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def test_every_config_key_is_in_the_knob_table(doc_text: str) -> None:
    missing = sorted(config_keys() - set(documented_keys(doc_text)))
    assert not missing, "undocumented config keys (add a row to the knob table): " + ", ".join(
        f"[{section}] {key}" for section, key in missing
    )


def test_the_knob_table_names_no_key_that_is_gone(doc_text: str) -> None:
    stale = sorted(set(documented_keys(doc_text)) - config_keys())
    assert not stale, "knob table rows for keys config.py does not have: " + ", ".join(
        f"[{section}] {key}" for section, key in stale
    )


def test_the_knob_table_gives_each_key_its_default(doc_text: str) -> None:
    actual = config_defaults()
    wrong = sorted(
        f"[{section}] {key}: table {cell}, config.py {actual[(section, key)]}"
        for (section, key), cell in documented_defaults(doc_text).items()
        if (section, key) in actual and cell != actual[(section, key)]
    )
    assert not wrong, f"knob table defaults that differ from config.py: {wrong}"


def test_each_key_has_one_row(doc_text: str) -> None:
    keys = documented_keys(doc_text)
    twice = sorted({key for key in keys if keys.count(key) > 1})
    assert not twice, f"keys with more than one row: {twice}"


def test_the_reader_finds_keys_only_between_the_markers() -> None:
    text = (
        "| `[engine] mode` | outside |\n"
        f"{BEGIN}\n| knob | default |\n| --- | --- |\n| `[stream] trigger_ms` | 1000 |\n"
        "| `HANDOVER_ROWS` | 200,000 |\n"
        f"{END}\n"
    )
    assert documented_keys(text) == [("stream", "trigger_ms")]
    assert documented_defaults(text) == {("stream", "trigger_ms"): "1000"}
    with pytest.raises(AssertionError, match="needs exactly one"):
        documented_keys("no markers here")
