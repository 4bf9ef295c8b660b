"""A Python worker killed mid-run (SIGKILL of a shard task of a barrier job) is survived by
`fixflow eval` and by `fixflow run`, whole processes: exit 0, results equal to scipy's, and
for the stream nothing committed twice (each batch once per table, each Kafka offset in
one EDB commit). The worker is found from outside (``python_workers``): no hook in the
library. Spark retries the failed barrier stage (local masters are ``local[N,F]``,
``pipeline/spark.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from fixflow.checker.parser import parse
from fixflow.pipeline.config import Config
from fixflow.pipeline.lake.lakehouse import ProgramLake, batch_commits, open_table, read_table
from operators.test_sharding import permuted_grid
from python_workers import WorkerKiller, descendants, gone, listens, shard_tasks
from streams.cli import FIXFLOW, FixflowRun, write_conf
from streams.harness import edb_mismatches, isolated_config, publish_raw, raw_messages

SIDE = 80
KILL_ATTEMPTS = 3
"""Runs of `fixflow eval` until the killer catches a shard task (a short run may end first)."""
CRASHED = "Python worker exited unexpectedly"
"""What Spark's executor logs (at ERROR, so even without -v) when a task's worker dies."""

SSSP = """\
.decl edge(src: number, dst: number, w: float)
.input edge
.decl sssp(node: number, dist: float)
.output sssp
sssp(X, d) :- X = {source}, d = 0.0.
sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
"""

Edge = tuple[int, int, float]


def grid_edges() -> tuple[list[Edge], int, int]:
    """(edges, nodes, source) of a permuted grid: both directions of each link."""
    src, dst, nodes = permuted_grid(SIDE)
    weights = 1.0 + (src * 7 + dst * 3) % 5
    edges = [(int(a), int(b), float(w)) for a, b, w in zip(src, dst, weights, strict=True)]
    return edges, nodes, int(src[0])


def scipy_distances(edges: list[Edge], nodes: int, source: int) -> dict[int, float]:
    """The oracle: scipy's Dijkstra (parallel edges: the lightest)."""
    best: dict[tuple[int, int], float] = {}
    for a, b, w in edges:
        best[(a, b)] = min(w, best.get((a, b), w))
    (src, dst), weights = zip(*best.keys(), strict=True), list(best.values())
    matrix = csr_matrix((weights, (src, dst)), shape=(nodes, nodes))
    distances = dijkstra(matrix, indices=source)
    return {n: float(d) for n, d in enumerate(distances) if np.isfinite(d)}


def table_distances(path: str) -> dict[int, float]:
    table = read_table(path)
    assert table is not None, f"{path}: no Delta table"
    return {int(row["node"]): float(row["dist"]) for row in table.to_pylist()}


@pytest.mark.spark  # the `fixflow eval` subprocess starts Spark of its own
@pytest.mark.slow
def test_eval_survives_a_killed_shard_worker(tmp_path: Path) -> None:
    """`fixflow eval --shards 2` on Spark: the first shard task seen running is SIGKILLed;
    the command exits 0 and its table is scipy's, written once."""
    edges, nodes, source = grid_edges()
    program = tmp_path / "sssp.dl"
    program.write_text(SSSP.format(source=source))
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "edge.csv").write_text("src,dst,w\n" + "".join(f"{a},{b},{w}\n" for a, b, w in edges))
    # The shard run of this small grid can end before the killer sees a task: a run that
    # no kill reached must still be right, and is run again (a fresh output directory).
    for attempt in range(KILL_ATTEMPTS):
        out = tmp_path / f"out{attempt}"
        args = [str(FIXFLOW), "eval", str(program), "-F", str(facts), "-D", str(out)]
        args += ["--shards", "2", "--local-rows", "0", "--engine", "hybrid"]
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        killer = WorkerKiller(process.pid, after_s=0.1).start()
        try:
            stdout, stderr = process.communicate(timeout=300)
        finally:
            killer.stop()
            if process.poll() is None:
                process.kill()
        assert process.returncode == 0, stderr[-3000:]
        if killer.killed:
            break
        assert table_distances(str(out / "sssp")) == scipy_distances(edges, nodes, source)
    assert killer.killed, (
        f"no shard task was seen running in {KILL_ATTEMPTS} runs:\n{stderr[-3000:]}"
    )
    assert gone(killer.killed[0])
    assert CRASHED in stderr, f"Spark saw no task fail:\n{stderr[-4000:]}"
    assert process.returncode == 0, stderr[-3000:]
    assert table_distances(str(out / "sssp")) == scipy_distances(edges, nodes, source)
    table = open_table(str(out / "sssp"))
    assert table is not None and table.version() == 0, "the result was committed more than once"
    assert f"sssp: {nodes} rows" in stdout


def offset_problems(table: str, published: list[tuple[str, int, int]]) -> list[str]:
    """How the EDB table's commits fail to hold every published offset exactly once
    (``fixflow.offsets``: ``{topic: {partition: [first, last]}}`` per batch)."""
    held: Counter[tuple[str, int, int]] = Counter()
    for info in batch_commits(table):
        for topic, partitions in json.loads(info["fixflow.offsets"]).items():
            for partition, (first, last) in partitions.items():
                held.update((topic, int(partition), o) for o in range(first, last + 1))
    twice = sorted(k for k, n in held.items() if n > 1)
    missing = sorted(set(published) - set(held))
    extra = sorted(set(held) - set(published))
    problems = [f"{len(twice)} offsets committed twice, e.g. {twice[:3]}"] if twice else []
    if missing:
        problems.append(f"{len(missing)} published offsets in no commit, e.g. {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} offsets never published, e.g. {extra[:3]}")
    return problems


def duplicate_batches(table: str) -> list[tuple[str, str]]:
    seen = Counter((h["fixflow.query_id"], h["fixflow.batch_id"]) for h in batch_commits(table))
    return [key for key, count in seen.items() if count > 1]


@pytest.mark.spark
@pytest.mark.slow
def test_run_survives_a_killed_shard_worker_and_commits_each_batch_once(
    broker: Config, tmp_path: Path
) -> None:
    """`fixflow run --available-now` over two waves (the grid, then shortcuts from the
    source) with every MRA epoch on two Spark shards: the first shard task seen running
    is SIGKILLed mid-epoch; the run exits 0, the results are scipy's on every edge, the EDB
    holds every edge, no batch is committed twice to a table, and each Kafka offset is in
    exactly one EDB commit."""
    edges, nodes, source = grid_edges()
    config = isolated_config(broker, tmp_path / "lake")
    program_file = tmp_path / "sssp.dl"
    program_file.write_text(SSSP.format(source=source))
    program = parse(program_file.read_text(), str(program_file))
    far = sorted(scipy_distances(edges, nodes, source).items(), key=lambda kv: -kv[1])
    shortcuts = [(source, node, 1.5) for node, _ in far[:3]]
    conf = write_conf(
        tmp_path / "run.toml",
        config,
        trigger_ms=100,
        max_records_per_trigger=len(edges),
        adaptive=False,
        sections='[engine]\nmode = "hybrid"\nshards = 2\nlocal_rows = 0\n',
    )
    published = []
    for wave in (edges, shortcuts):
        messages = [("edge", row, "insert") for row in wave]
        published += publish_raw(config, raw_messages(config, program, messages))
    run = FixflowRun.start(program_file, conf, tmp_path / "run.out", available_now=True)
    killer = WorkerKiller(run.process.pid, after_s=0.1).start()
    try:
        code = run.process.wait(timeout=400)
    finally:
        killer.stop()
        run.kill_if_running()
    output = run.output
    assert killer.killed, f"no shard task was seen running:\n{output[-3000:]}"
    assert gone(killer.killed[0])
    assert CRASHED in output, f"Spark saw no task fail:\n{output[-4000:]}"
    assert code == 0, output[-3000:]
    assert sum(n for _, n in run.batches()) == len(published), output[-3000:]
    lake = ProgramLake.for_program(config.lake.path, program_file)
    every = edges + shortcuts
    assert table_distances(lake.results("sssp")) == scipy_distances(every, nodes, source)
    assert not edb_mismatches(program, lake, {"edge": set(every)})
    for table in (lake.edb("edge"), lake.results("sssp")):
        assert not duplicate_batches(table), f"{table}: a batch committed twice"
    assert not offset_problems(lake.edb("edge"), published)


def test_the_worker_finder_tells_a_shard_task_from_another_listener() -> None:
    """The finder's negative: a plain Python child holding a listening socket is seen to
    listen, but it is no shard task (no pyspark.daemon forked it)."""
    code = "import socket, time; s = socket.create_server(('', 0)); print(1, flush=True)"
    code += "; time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "1"
        assert listens(child.pid)
        assert child.pid in descendants(os.getpid())
        assert shard_tasks(os.getpid()) == []
    finally:
        child.kill()
        child.wait(timeout=10)
