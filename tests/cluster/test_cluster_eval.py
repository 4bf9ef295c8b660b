"""`fixflow eval` on a Spark standalone cluster (a master and two workers on loopback) gives
the results of local mode: SSSP and CC exactly, PageRank within the golden's tolerance.

Every evaluation is a `fixflow eval` subprocess (a second SparkContext cannot live in the
test process). ``ENGINES`` lists the MRA engines run this way. Local mode's results are the
golden directory's expected files (computed independently, with networkx and numpy): the
same engine in local mode is held to them by tests/operators/test_async_engine.py (and the
sync engine by test_golden.py). Comparing with them rather than with a local `fixflow eval`
per case saves three JVMs running beside the cluster's on two cores.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from reference.golden import compare_rows, load_golden

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
TIMEOUT = 300.0
PARTITIONS = 2
"""One partition per worker core (fewer tasks per round than the default 4)."""

CASES = {
    # name: its output relation (examples/<name>.dl, facts and expected rows from
    # tests/programs/<name>)
    "powerlog_p1_sssp": "sssp",
    "powerlog_p3_cc": "cc",
    "powerlog_p2b_pagerank": "rank",
}


def fixflow_eval(
    name: str, engine: str, out: Path, master: str | None, env: dict[str, str] | None = None
) -> list[dict[str, str]]:
    """Rows of the output relation of `fixflow eval examples/<name>.dl` (its CSV)."""
    relation = CASES[name]
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


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", list(CASES))
def test_cluster_equals_local(
    standalone_cluster: Cluster, tmp_path: Path, name: str, engine: str
) -> None:
    relation = CASES[name]
    on_cluster = fixflow_eval(
        name, engine, tmp_path / "cluster", standalone_cluster.master, standalone_cluster.env
    )
    apps = standalone_cluster.executors()
    latest = max(set.union(*apps))
    assert all(latest in worker for worker in apps), f"{latest} did not run on both workers"
    golden = load_golden(ROOT / "tests" / "programs" / name)
    types = [a.type for a in golden.program.declaration(relation).attributes]
    rows = [_typed(row.values(), types) for row in on_cluster]
    assert rows, f"{name}: the cluster produced no rows"
    assert compare_rows(rows, golden.expected[relation], golden.tolerance) == []


def _typed(values: Iterable[str], types: list[str]) -> tuple[object, ...]:
    """A CSV row with its declared types (numbers as int, floats as float)."""
    cast = {"number": int, "float": float}
    return tuple(cast.get(t, str)(v) for v, t in zip(values, types, strict=True))
