"""Golden error files: every ``tests/errors/<case>/program.dl`` is rejected with exactly the
diagnostics rendered in ``tests/errors/<case>/expected.err``.

Set ``FIXFLOW_UPDATE_GOLDEN=1`` to (re)write the expected files; review the diff by eye.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixflow.checker import diagnose
from fixflow.checker.diagnostics import render_all

ERRORS_DIR = Path(__file__).resolve().parent.parent / "errors"
CASES = sorted(p.name for p in ERRORS_DIR.iterdir() if (p / "program.dl").exists())


def test_there_are_golden_error_cases() -> None:
    assert len(CASES) >= 8


@pytest.mark.parametrize("case", CASES)
def test_golden_error(case: str) -> None:
    case_dir = ERRORS_DIR / case
    source = (case_dir / "program.dl").read_text()
    diagnostics = diagnose(source, "program.dl")
    errors = [d for d in diagnostics if d.severity == "error"]
    assert errors, f"{case}: the program was accepted"
    rendered = render_all(diagnostics, source) + "\n"
    expected_file = case_dir / "expected.err"
    if os.environ.get("FIXFLOW_UPDATE_GOLDEN"):
        expected_file.write_text(rendered)
    assert rendered == expected_file.read_text()
