"""`fixflow run` on a Spark standalone cluster (a master and two workers on loopback) with
the embedded broker gives the results of local mode, through insertions and deletions.

The embedded Tansu broker (`fixflow broker start`, on a free port) serves the run. Per step
of the history, `fixflow publish` (deletions with ``--delete``) and then
`fixflow run --available-now` on the cluster's config, so the second run resumes from the
first one's checkpoint and applies only the second step. After every step the cluster's
result and EDB tables must equal the reference evaluator's on the net facts, which is what
local mode is held to on the same program and the same kind of history (a bridge deleted
from connected components) by tests/pipeline/test_stream_golden_memory.py (cases cc and
cc_bridge_deletion). A replay in local mode beside the cluster was dropped: its two
`fixflow run` JVMs doubled the module's cost on two cores.
"""

from __future__ import annotations

import csv
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fixflow.checker.parser import parse
from fixflow.pipeline.lake.lakehouse import ProgramLake
from ports import free_port
from streams.cli import BATCH_LINE, STOPPED_LINE
from streams.harness import Row, oracle, result_rows, table_rows

from .conftest import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[2]
FIXFLOW = Path(sys.executable).parent / "fixflow"
PROGRAM = ROOT / "examples" / "powerlog_p3_cc.dl"
"""Connected components by min-label propagation: a recursive MRA stratum whose labels a
deleted bridge changes (the stream re-derives them), compared exactly."""
RELATION = "cc"
TIMEOUT = 900.0
"""Seconds one `fixflow` command may take: a guard against a hang, not a speed test. On 2
cores beside the suite's other workers one `fixflow run` step (a JVM, the load's bootstrap
of every stratum, the epoch) measured more than 300 s; a clean-clone CI failed so."""
# The graph: GROUPS components, each two halves of HALF vertices joined by one bridge; a
# half is a ring with CHORDS random chords, so it stays connected when a ring edge goes.
GROUPS = 4
HALF = 12
CHORDS = 12

CONNECT_BACK = "Python worker failed to connect back"
"""Spark 4.2 gives the driver's Python streaming-source runner (fixflow-kafka is a Python
data source) 10 s to connect back, hard-coded in PythonWorkerFactory.createSimpleWorker;
while JVMs start on a loaded machine (the cluster's daemons and executors, the other
mode's driver) it can miss that, and the query fails before reading anything. A run that
read nothing can be started again on the same checkpoint."""

Edge = tuple[int, int]


@dataclass(frozen=True)
class Step:
    inserts: list[Edge]
    deletes: list[Edge]


def undirected(edges: set[Edge]) -> list[Edge]:
    """Both directions of every edge (labels flow along edges)."""
    return sorted(edges | {(b, a) for a, b in edges})


def history(seed: int = 12) -> list[Step]:
    """Four components, each two ring-with-chords halves joined by a bridge (344 directed
    edges, 8 rounds of label propagation); then two bridges deleted (their components
    split), a ring edge deleted (the labels stay), two groups joined and a tail of new
    vertices added to a split-off half."""
    rng = random.Random(seed)
    firsts = [1 + 2 * HALF * g + h * HALF for g in range(GROUPS) for h in (0, 1)]
    edges: set[Edge] = set()
    for first in firsts:
        vertices = range(first, first + HALF)
        edges |= {(v, first + (v - first + 1) % HALF) for v in vertices}
        edges |= {(a, b) for a, b in (rng.sample(vertices, 2) for _ in range(CHORDS))}
    bridges = [(rng.randrange(a, a + HALF), rng.randrange(b, b + HALF)) for a, b in pairs(firsts)]
    edges |= set(bridges)
    last = 2 * HALF * GROUPS
    join = (rng.randrange(firsts[6], firsts[6] + HALF), rng.randrange(firsts[4], firsts[5]))
    tail = {(firsts[1], last + 1)} | {(last + i, last + i + 1) for i in range(1, 5)}
    ring_edge = (firsts[4], firsts[4] + 1)
    return [
        Step(undirected(edges), []),
        Step(undirected({join} | tail), undirected({bridges[0], bridges[1], ring_edge})),
    ]


def pairs(firsts: list[int]) -> list[Edge]:
    """The first vertices of the two halves of every group."""
    return list(zip(firsts[::2], firsts[1::2], strict=True))


STEPS = history()


def call(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FIXFLOW), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def succeeded(done: subprocess.CompletedProcess[str]) -> str:
    """The output of a `fixflow` command that must succeed."""
    assert done.returncode == 0, (
        f"{' '.join(done.args)} exited {done.returncode}\n"
        f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )
    return done.stdout


def fixflow(*args: str, env: dict[str, str], cwd: Path) -> str:
    return succeeded(call(*args, env=env, cwd=cwd))


def run_available_now(conf: Path, env: dict[str, str], cwd: Path) -> str:
    """The output of `fixflow run --available-now`, started once more if Spark failed the
    query before its first batch because the driver's Python streaming-source runner did
    not connect back in time (``CONNECT_BACK``)."""
    args = ("run", str(PROGRAM), "--available-now", "--conf", str(conf))
    done = call(*args, env=env, cwd=cwd)
    if done.returncode != 0 and CONNECT_BACK in done.stderr and not BATCH_LINE.search(done.stdout):
        done = call(*args, env=env, cwd=cwd)
    return succeeded(done)


def write_conf(path: Path, port: int, lake: Path, prefix: str, master: str) -> Path:
    """A config on the embedded broker at 127.0.0.1:PORT (`fixflow run` finds it running),
    with topics ``PREFIX<relation>``, the lake at ``lake`` and Spark at ``master``."""
    path.write_text(f"""
[kafka]
bootstrap_servers = "127.0.0.1:{port}"
embedded = true
topic_prefix = "{prefix}"
partitions = 2

[lake]
path = "{lake}"

[spark]
master = "{master}"

[spark.conf]
"spark.ui.enabled" = false
"spark.sql.shuffle.partitions" = 2
"spark.default.parallelism" = 2

[stream]
adaptive = false

[metrics]
enabled = false
""")
    return path


@dataclass(frozen=True)
class Broker:
    directory: Path
    port: int


@dataclass(frozen=True)
class Outcome:
    """What the tables held after one step's `fixflow run --available-now`."""

    records: int
    """Kafka records the run's batches read (from its ``batch N: R records`` lines)."""
    results: set[Row]
    edb: set[Row]


@pytest.fixture(scope="module")
def embedded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """`fixflow broker start` on a free port (its pid and log files in a lake of its own),
    stopped with `fixflow broker stop` after the module."""
    directory = tmp_path_factory.mktemp("cluster-run")
    port = free_port()
    conf = write_conf(directory / "broker.toml", port, directory / "broker", "", "local[1]")
    fixflow("broker", "start", "--conf", str(conf), env=dict(os.environ), cwd=directory)
    try:
        yield Broker(directory, port)
    finally:
        fixflow("broker", "stop", "--conf", str(conf), env=dict(os.environ), cwd=directory)


def replay(broker: Broker, mode: str, master: str, env: dict[str, str]) -> list[Outcome]:
    """Every step of the history published to ``mode``'s topics and run to completion with
    `fixflow run --available-now` on ``mode``'s config (one checkpoint for all steps)."""
    directory = broker.directory / mode
    directory.mkdir()
    lake = directory / "lake"
    conf = write_conf(directory / "run.toml", broker.port, lake, f"{mode}.", master)
    tables = ProgramLake.for_program(lake, PROGRAM)
    outcomes = []
    for number, step in enumerate(STEPS, start=1):
        publish(conf, directory / f"step{number}", step, env)
        output = run_available_now(conf, env, directory)
        batches = [int(records) for _, records in BATCH_LINE.findall(output)]
        assert STOPPED_LINE.findall(output) == [str(len(batches))], f"{mode}:\n{output}"
        outcomes.append(
            Outcome(sum(batches), result_rows(tables, RELATION), table_rows(tables.edb("edge")))
        )
    return outcomes


def publish(conf: Path, stem: Path, step: Step, env: dict[str, str]) -> None:
    """The step's deletions (`fixflow publish --delete`), then its insertions, from CSV."""
    for flags, edges in ((["--delete"], step.deletes), ([], step.inserts)):
        if edges:
            facts = stem.with_name(f"{stem.name}-{'delete' if flags else 'insert'}.csv")
            with facts.open("w", newline="") as handle:
                csv.writer(handle).writerows([("src", "dst"), *edges])
            program = ["--program", str(PROGRAM), "--conf", str(conf)]
            fixflow("publish", "edge", str(facts), *program, *flags, env=env, cwd=stem.parent)


def test_run_on_the_cluster_equals_local_mode(
    embedded_broker: Broker, standalone_cluster: Cluster
) -> None:
    """Step by step, the cluster's tables equal the reference's on the net facts (as local
    mode's do); and the cluster really ran on both workers (each `fixflow run` had an
    executor on each)."""
    before = standalone_cluster.executors()
    on_cluster = replay(
        embedded_broker, "cluster", standalone_cluster.master, standalone_cluster.env
    )
    apps = [now - then for now, then in zip(standalone_cluster.executors(), before, strict=True)]
    assert len(apps[0]) >= len(STEPS) and apps[0] == apps[1], (
        f"each `fixflow run` should have had an executor on both workers: {apps}"
    )
    program = parse(PROGRAM.read_text(), str(PROGRAM))
    facts: set[Row] = set()
    for number, (step, got) in enumerate(zip(STEPS, on_cluster, strict=True), 1):
        facts = facts - set(step.deletes) | set(step.inserts)
        published = len(step.inserts) + len(step.deletes)
        assert got.records == published, f"step {number}: records read"
        assert got.edb == facts, f"step {number}: EDB"
        assert got.results, f"step {number}: no {RELATION} rows on the cluster"
        want = oracle(program, {"edge": facts})[RELATION]
        assert got.results == want, (
            f"step {number}: cluster-only {sorted(got.results - want)[:8]}, "
            f"reference-only {sorted(want - got.results)[:8]}"
        )
    split = 1 + HALF  # the second half of the first group, cut off by its bridge's deletion
    assert (split, split) in on_cluster[1].results - on_cluster[0].results
