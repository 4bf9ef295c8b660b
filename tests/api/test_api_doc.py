"""docs/api.md's examples run as written: every ``>>>`` line, from the repository root, on
the test process's SparkSession (``SparkSession.builder.getOrCreate()`` in the document
returns it), with what each prints compared."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "api.md"


def test_the_api_document_runs(spark: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    text = DOC.read_text(encoding="utf-8")
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, "api.md", str(DOC), 0)
    assert len(test.examples) >= 15, "the document lost its examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)
