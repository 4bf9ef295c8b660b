"""Shared fixtures: one SparkSession per test process (it takes ~8 s to start; `make test`
runs a few pytest-xdist workers, each with its own), and
the markers of the fast inner loop (`make test-fast` runs what is neither `spark`, `kafka`
nor `slow`).

``spark`` and ``kafka`` are applied here from what a test uses, so a new test is marked
without anyone remembering to: ``spark`` when it needs the session fixture (directly or
through other fixtures), ``kafka`` when it needs the broker fixture or its module drives
`fixflow run` subprocesses (tests/streams/cli.py, live.py). ``slow`` is a list of modules.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from ports import free_port

ROOT = Path(__file__).resolve().parent.parent

SLOW_MODULES = frozenset(
    {
        "tests/operators/test_scale.py",  # graphs checked against scipy (a 500-round SSSP)
        "tests/operators/test_maintain_property.py",  # hypothesis over incremental updates
        "tests/operators/test_maintain_deletions_property.py",  # 1,000 epochs of deletions
        "tests/pipeline/test_stream_crash.py",  # SIGKILL and restart of `fixflow run`
        "tests/pipeline/test_stream_property.py",  # hypothesis over the streaming pipeline
        "tests/pipeline/test_stream_golden.py",  # stream cases through the broker
        "tests/pipeline/test_stream_golden_memory.py",  # every stream case, in memory
    }
)
ONE_WORKER_GROUPS = {
    "tests/cluster/test_cluster_eval.py": "cluster",  # a standalone cluster per module:
    "tests/cluster/test_cluster_run.py": "cluster",  # one at a time, on one worker
    "tests/pipeline/test_stream_metrics.py": "live-run",  # streams/live.py's one live run,
    "tests/pipeline/test_run_cli.py": "live-run",  # shared by both modules
    "tests/pipeline/test_nullary.py": "nullary",  # one `fixflow eval` subprocess
    "tests/pipeline/test_demo.py": "demo",  # one `fixflow demo` (three programs, a broker)
}
"""Modules whose tests share a fixture that costs a JVM or a cluster: under pytest-xdist
(`make test` runs several workers) a group stays on one worker, so it is paid once."""
RUNS_FIXFLOW = frozenset({"streams.cli", "streams.live"})
"""Helper modules that start `fixflow run` (Spark and a broker in a subprocess)."""


# tryfirst: pytest-xdist reads the xdist_group marks in its own hook of the same name.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in markers_of(item, config.rootpath):
            item.add_marker(marker)
        group = ONE_WORKER_GROUPS.get(item.path.relative_to(config.rootpath).as_posix())
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def markers_of(item: pytest.Item, root: Path) -> list[str]:
    # fixturenames is the transitive closure: fixtures of fixtures count.
    fixtures = set(getattr(item, "fixturenames", ()))
    found = []
    if "spark" in fixtures:
        found.append("spark")
    if "broker" in fixtures or _runs_fixflow(getattr(item, "module", None)):
        found.append("kafka")
    if item.path.relative_to(root).as_posix() in SLOW_MODULES:
        found.append("slow")
    return found


def _runs_fixflow(module: ModuleType | None) -> bool:
    if module is None:
        return False
    return any(getattr(v, "__module__", None) in RUNS_FIXFLOW for v in vars(module).values())


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
    from dataclasses import replace

    from fixflow.pipeline.broker.embedded import start_broker, stop_broker
    from fixflow.pipeline.config import default_config

    port = free_port()
    base = default_config()
    config = replace(
        base,
        kafka=replace(base.kafka, bootstrap_servers=f"127.0.0.1:{port}"),
        lake=replace(base.lake, path=str(tmp_path_factory.mktemp("broker-lake"))),
    )
    start_broker(config)
    yield config
    stop_broker(config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many (golden, placement) pairs ran and passed: the goldens run on every
    placement a program admits (``placement.admitted_settings``) and record the property
    ``golden_placement`` (``reference.golden.GOLDEN_PLACEMENT``)."""
    outcomes = {"passed": 0, "failed": 0}
    for outcome in outcomes:
        for report in terminalreporter.stats.get(outcome, []):
            if report.when == "call" and any(
                k == "golden_placement" for k, _ in getattr(report, "user_properties", ())
            ):
                outcomes[outcome] += 1
    if any(outcomes.values()):
        terminalreporter.write_line(
            f"(golden, placement) pairs: {outcomes['passed']} passed, {outcomes['failed']} failed"
        )


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A SeaweedFS S3 server on loopback (credentials required, one bucket) for the
    object-store lake tests: ``s3server.S3Server``."""
    from s3server import s3_server

    with s3_server(tmp_path_factory.mktemp("s3")) as server:
        yield server
