"""`fixflow eval` on a Spark standalone cluster (a master and two workers on loopback)
gives the results of local mode: SSSP and CC exactly, PageRank within 1e-6.

Every evaluation is a `fixflow eval` subprocess (a second SparkContext cannot live in the
test process). ``ENGINES`` lists the MRA engines run this way. The local-mode references
run one after the other in a background thread, from before the cluster starts, so they
overlap the cluster's start and its (sequential: each app takes both workers) runs.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from .conftest import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
FIXFLOW = Path(sys.executable).parent / "fixflow"
ENGINES = ["async"]
"""The engine whose state passes through Python workers between stages, which is what a
cluster can break. The sync engine is Spark DataFrames and checkpoints only, the same calls
the async engine makes around its stages; running it here too cost three minutes of CI."""
ASYNC_SHARDS = 2
"""The async engine runs two shards here: one task each, so both workers hold a shard."""
ASYNC_TOLERANCE = 2e-5
"""Async stages flush by time and adaptive β, so a sum program's values may differ from
run to run within its termination tolerance (the golden directory's)."""
TIMEOUT = 300.0
PARTITIONS = 2
"""One partition per worker core (fewer tasks per round than the default 4)."""

CASES = {
    # name: (examples/<name>.dl with facts from tests/programs/<name>, output, float tolerance)
    "powerlog_p1_sssp": ("sssp", 0.0),
    "powerlog_p3_cc": ("cc", 0.0),
    "powerlog_p2b_pagerank": ("rank", 1e-6),
}


def fixflow_eval(
    name: str, engine: str, out: Path, master: str | None, env: dict[str, str] | None = None
) -> list[dict[str, str]]:
    """Rows of the output relation of `fixflow eval examples/<name>.dl` (its CSV)."""
    relation = CASES[name][0]
    command = [
        str(FIXFLOW) if FIXFLOW.exists() else sys.executable,
        *([] if FIXFLOW.exists() else ["-m", "fixflow.pipeline.cli"]),
        "eval",
        str(ROOT / "examples" / f"{name}.dl"),
        "-F",
        str(ROOT / "tests" / "programs" / name / "facts"),
        "-D",
        str(out),
        "--csv",
        "--engine",
        engine,
        "--partitions",
        str(PARTITIONS),
        *(["--shards", str(ASYNC_SHARDS)] if engine != "sync" else []),
    ]
    if master is not None:
        command += ["--master", master]
    started = time.monotonic()
    done = subprocess.run(
        command,
        env=env,
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    where = master or "local"
    assert done.returncode == 0, (
        f"fixflow eval {name} --engine {engine} on {where} exited {done.returncode} after "
        f"{time.monotonic() - started:.0f} s\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    with (out / f"{relation}.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def keyed(rows: list[dict[str, str]], value: str) -> dict[tuple[str, ...], str]:
    """Rows by their key columns (every column but ``value``)."""
    return {tuple(v for k, v in row.items() if k != value): row[value] for row in rows}


LocalRuns = dict[tuple[str, str], "Future[list[dict[str, str]]]"]


@pytest.fixture(scope="module")
def local_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalRuns]:
    """Every selected (name, engine) evaluated in local mode, in a background thread."""
    selected = [
        (str(item.callspec.params["name"]), str(item.callspec.params["engine"]))
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.module is request.module
        and hasattr(item, "callspec")
    ]
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONF_DIR"}
    directory = tmp_path_factory.mktemp("local")
    with ThreadPoolExecutor(max_workers=1) as pool:
        runs = {
            (name, engine): pool.submit(
                fixflow_eval, name, engine, directory / f"{name}-{engine}", None, env
            )
            for name, engine in selected
        }
        yield runs
        for future in runs.values():
            future.cancel()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", list(CASES))
def test_cluster_equals_local(
    local_runs: LocalRuns, standalone_cluster: Cluster, tmp_path: Path, name: str, engine: str
) -> None:
    relation, tolerance = CASES[name]
    if engine != "sync" and tolerance:
        tolerance = ASYNC_TOLERANCE
    on_cluster = fixflow_eval(
        name, engine, tmp_path / "cluster", standalone_cluster.master, standalone_cluster.env
    )
    apps = standalone_cluster.executors()
    latest = max(set.union(*apps))
    assert all(latest in worker for worker in apps), f"{latest} did not run on both workers"
    local = local_runs[name, engine].result(timeout=3 * TIMEOUT)
    assert local, f"{name}: local mode produced no rows"
    value = list(local[0])[-1]  # the value column is the last one of these relations
    expected, got = keyed(local, value), keyed(on_cluster, value)
    assert got.keys() == expected.keys()
    for key, want in expected.items():
        if tolerance == 0.0:
            assert got[key] == want, f"{relation}{key}: cluster {got[key]}, local {want}"
        else:
            assert abs(float(got[key]) - float(want)) <= tolerance, (
                f"{relation}{key}: cluster {got[key]}, local {want}"
            )
