"""Shared fixtures: one SparkSession for the whole test run (it takes ~8 s to start)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from fixflow.pipeline.spark import make_session

    session = make_session(app_name="fixflow-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return ROOT / "examples"


@pytest.fixture(scope="session")
def programs_dir() -> Path:
    return ROOT / "tests" / "programs"
