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


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The embedded Tansu broker on a free port, for the whole test run.

    Yields the ``fixflow.pipeline.config.Config`` pointing at it (its lake path is a
    temporary directory holding the broker's pid and log files)."""
    import socket
    from dataclasses import replace

    from fixflow.pipeline.broker import start_broker, stop_broker
    from fixflow.pipeline.config import default_config

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = default_config()
    config = replace(
        base,
        kafka=replace(base.kafka, bootstrap_servers=f"127.0.0.1:{port}"),
        lake=replace(base.lake, path=str(tmp_path_factory.mktemp("broker-lake"))),
    )
    start_broker(config)
    yield config
    stop_broker(config)
