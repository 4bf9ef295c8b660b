"""A sharded MRA run as one Spark barrier job (engines.shard_run, engines.shard_exchange):
its stages in one job, a killed Python worker survived with the oracle's result, stream
updates resumed on it with pending deltas carried between epochs, shard counts within
Spark's task slots, and the pieces the tasks agree with (the stop rule, the clause's
measure from per-shard partials, a lost peer)."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from fixflow.checker import ast, load
from fixflow.checker.model import Report
from fixflow.operators.change import by_relation
from fixflow.operators.core import EvalOptions
from fixflow.operators.driver.stratum import _measure as driver_measure
from fixflow.operators.engines.base import BufferOptions, EngineOptions
from fixflow.operators.engines.mra_bootstrap import Stage, StageRule, Stop
from fixflow.operators.engines.shard_exchange import (
    FRAME,
    HELLO,
    SIZE,
    Inbox,
    PeerLost,
    Rendezvous,
    _met_at,
)
from fixflow.operators.engines.shard_map import InsufficientSlots, require_slots, task_slots
from fixflow.operators.engines.shard_run import change_partials, measure_of
from fixflow.operators.evaluate import evaluate_with_stats
from fixflow.operators.maintain import Epoch, Maintainer
from python_workers import WorkerKiller, gone

from .helpers import Row, edb_frames
from .test_maintain import declared
from .test_sharding import permuted_grid

SSSP = """
.decl edge(src: number, dst: number, w: float)
.input edge
.decl sssp(node: number, dist: float)
.output sssp
sssp(X, d) :- X = {source}, d = 0.0.
sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
"""

SIDE = 24
KILL_SIDES = (160, 320, 640)
"""Grids for the kill test, smallest first (a task must live past the finder's poll)."""


def _grid_sssp(
    spark: SparkSession,
    mode: str,
    shards: int,
    buffer: BufferOptions | None = None,
    side: int = SIDE,
) -> tuple[dict[int, float], dict[int, float], int, int]:
    """(Fixflow's distances, scipy's, stages, jobs) of SSSP on a permuted grid."""
    src, dst, nodes = permuted_grid(side)
    weights = 1.0 + (src * 7 + dst * 3) % 5
    source = int(src[0])
    edges = spark.createDataFrame(pa.table({"src": src, "dst": dst, "w": weights}))
    report = load(SSSP.format(source=source), "sssp.dl")
    options = EvalOptions(
        engine_options=EngineOptions(
            mode=mode, shards=shards, buffer=buffer or BufferOptions(), check_interval_ms=0
        ),
        local_rows=0,  # on Spark: the driver's loop has no shards
    )
    evaluation = evaluate_with_stats(report, {"edge": edges}, spark, options)
    got = {int(r[0]): float(r[1]) for r in evaluation.relations["sssp"].collect()}
    matrix = csr_matrix((weights, (src, dst)), shape=(nodes, nodes))
    distances = dijkstra(matrix, indices=source)
    expected = {n: float(d) for n, d in enumerate(distances) if np.isfinite(d)}
    stats = evaluation.stats[-1]
    return got, expected, stats.rounds, stats.jobs


def test_a_sharded_run_is_one_job_however_many_stages(spark: SparkSession) -> None:
    """Two hybrid shards of a grid cross their cut back and forth: several stages, and
    fewer jobs than stages (those preparing the run and the one running it; a stage was a
    job of its own before)."""
    got, expected, stages, jobs = _grid_sssp(spark, "hybrid", 2)
    assert got == expected
    assert stages >= 5, stages
    assert jobs < stages, (jobs, stages)


def test_every_stage_reports_the_cpu_seconds_of_its_loops(spark: SparkSession) -> None:
    """Besides the busiest loop's wall time, a stage's detail has the CPU seconds of all its
    shards' loops: what the loops cost, whatever else the machine runs."""
    src, dst, _ = permuted_grid(SIDE)
    edges = spark.createDataFrame(pa.table({"src": src, "dst": dst, "w": np.ones(len(src))}))
    details: list[object] = []
    options = EvalOptions(
        engine_options=EngineOptions(mode="hybrid", shards=2),
        local_rows=0,
        progress=details.append,
    )
    report = load(SSSP.format(source=int(src[0])), "sssp.dl")
    evaluate_with_stats(report, {"edge": edges}, spark, options)
    stages = [dict(getattr(d, "detail", {}) or {}) for d in details]
    assert len(stages) > 1 and all("cpu_s" in s for s in stages), stages
    assert sum(s["cpu_s"] for s in stages) > 0


def test_a_killed_python_worker_is_survived_with_the_oracle_result(spark: SparkSession) -> None:
    """The first shard task seen running (a Python worker of this process's JVM holding
    its peers' listening socket, ``python_workers``) is killed with SIGKILL mid-job. Spark
    runs the barrier stage again from its stored inputs (local[2] included: a failed
    barrier task fails its stage, which is retried whole) and the distances are scipy's.
    A shard task lives as long as its job, which on a fast machine can be shorter than
    the finder needs to see it: an 80x80 grid's lived 0.06-0.3 s here, a 240x240 grid's
    1.2 s. So the grid grows until a task is killed; the killed run is the one checked."""
    for side in KILL_SIDES:
        killer = WorkerKiller(os.getpid(), after_s=0.1).start()
        try:
            got, expected, stages, _ = _grid_sssp(spark, "hybrid", 2, side=side)
        finally:
            killer.stop()
        if killer.killed:
            break
    assert killer.killed, f"no shard task was seen running on grids of sides {KILL_SIDES}"
    assert gone(killer.killed[0])  # that worker is gone
    assert stages > 1
    assert got == expected


def test_stream_updates_resume_the_shards_with_their_pending_deltas(spark: SparkSession) -> None:
    """Two hybrid shards and 2 stages an epoch: a light arc from the source to the far
    corner improves the far shard over several epochs, each resuming the run the last one
    left pending (its messages in flight included); drained, the distances are scipy's."""
    src, dst, nodes = permuted_grid(SIDE)
    weights = 1.0 + (src * 7 + dst * 3) % 5
    source = int(src[0])
    report = load(SSSP.format(source=source), "sssp.dl")
    options = EvalOptions(engine_options=EngineOptions(mode="hybrid", shards=2), local_rows=0)
    maintainer = Maintainer(report, spark, options, switch_fraction=1e6, round_budget=2)
    edges = [(int(a), int(b), float(w)) for a, b, w in zip(src, dst, weights, strict=True)]
    maintainer.load(declared(report, edb_frames(spark, report, {"edge": edges})))
    before = _distances(src, dst, weights, nodes, source)
    far = max(before, key=before.__getitem__)
    shortcut = (source, far, 0.5)
    epochs = [_epoch(spark, maintainer, report, [shortcut])]
    while maintainer.provisional and len(epochs) < 50:
        epochs.append(_epoch(spark, maintainer, report, []))
    assert epochs[0].provisional and not epochs[-1].provisional, [e.provisional for e in epochs]
    assert maintainer.engine.sharded.shard_maps["sssp"].shards == 2  # type: ignore[attr-defined]
    got = {int(r[0]): float(r[1]) for r in maintainer.relation("sssp").collect()}
    grown = (np.r_[src, source], np.r_[dst, far], np.r_[weights, 0.5])
    assert got == _distances(*grown, nodes, source)


def _epoch(spark: SparkSession, maintainer: Maintainer, report: Report, rows: list[Row]) -> Epoch:
    inserts = declared(report, edb_frames(spark, report, {"edge": rows}))
    return maintainer.apply(
        by_relation(inserts, declared(report, edb_frames(spark, report, {"edge": []})))
    )


def _distances(
    src: np.ndarray, dst: np.ndarray, weights: np.ndarray, nodes: int, source: int
) -> dict[int, float]:
    distances = dijkstra(csr_matrix((weights, (src, dst)), shape=(nodes, nodes)), indices=source)
    return {n: float(d) for n, d in enumerate(distances) if np.isfinite(d)}


def test_more_shards_than_task_slots_run_on_as_many_slots(
    spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    """A barrier stage needs all its tasks at once: ``shards`` above the slots (local[2]:
    2) runs on as many shards as there are slots, and says so."""
    slots = task_slots(spark)
    with caplog.at_level(logging.WARNING, "fixflow.operators.engines.shard_map"):
        got, expected, _, _ = _grid_sssp(spark, "hybrid", slots + 1)
    assert got == expected
    assert f"[engine] shards = {slots + 1}, but Spark has {slots} task slot(s)" in caplog.text


def test_a_run_needing_more_slots_than_spark_has_fails_in_one_line(spark: SparkSession) -> None:
    slots = task_slots(spark)
    require_slots(spark, slots)
    with pytest.raises(InsufficientSlots, match=f"needs {slots + 1} Spark task slots at once"):
        require_slots(spark, slots + 1)


@pytest.mark.parametrize("func", ["sum", "count", "max", "min", "avg"])
def test_the_clause_measure_from_shard_partials_is_the_measure_of_all(func: str) -> None:
    rng = np.random.default_rng(7)
    change = np.abs(rng.normal(size=50)) * (rng.random(50) > 0.3)
    parts = [change[:0], change[:20], change[20:21], change[21:]]
    combined = measure_of(func, [change_partials(p) for p in parts])
    assert combined == pytest.approx(driver_measure(func, change))
    assert measure_of(func, [change_partials(change[:0])]) == 0.0
    assert measure_of(None, [change_partials(change)]) is None


def test_a_peer_that_closes_before_its_frame_fails_the_waiting_task() -> None:
    """A dead task closes its links: the task waiting for its frame fails at once (Spark
    then runs the barrier stage again) rather than waiting for ever."""
    inbox = Inbox(senders=1)
    ours, theirs = socket.socketpair()
    reader = threading.Thread(target=inbox.drain, args=(ours,), daemon=True)
    reader.start()
    theirs.sendall(HELLO.pack(1) + FRAME.pack(1, 2, 0) + b"{}")  # superstep 1: no rows
    assert inbox.take(1) == {1: (b"{}", b"")}
    theirs.close()  # gone before superstep 2
    with pytest.raises(PeerLost, match=r"superstep 2: task\(s\) \[1\]"):
        inbox.take(2)
    reader.join(timeout=5)


def test_the_stop_rule_consults_the_clause_by_the_stages_clock_and_knows_the_cap() -> None:
    """The tasks and the driver's replay decide alike: the clause is consulted when
    ``check_interval_ms`` has passed on the clock the stages carry, not the caller's."""
    termination = ast.Termination("sum", "v", "<", ast.FloatLit(0.5))  # sum[Δv] < 0.5
    rule = StageRule("r", "sum", termination, 1000.0, max_stages=3, round_order=False)

    def stage(measure: float, at: float) -> Stage:
        return Stage(5, measure, {}, 0.5, 0, at)

    stop, checked = rule.after(1, stage(1.0, 0.0), -float("inf"))
    assert stop is None and checked == 0.0
    stop, checked = rule.after(2, stage(0.1, 0.5), checked)  # holds, but not due yet
    assert stop is None and checked == 0.0
    stop, checked = rule.after(2, stage(0.1, 1.2), checked)
    assert stop == Stop(capped=False) and checked == 1.2
    stop, _ = rule.after(3, stage(1.0, 1.5), 1.2)  # the cap, the clause not met
    assert stop == Stop(capped=True)
    assert rule.after(1, Stage(0, 1.0, {}, 0.5, 0, 0.0), -float("inf"))[0] == Stop(capped=False)


def test_the_rendezvous_answers_every_task_with_every_port_and_a_retry_meets_afresh() -> None:
    """The driver's rendezvous (instead of allGather, which answers after a second at the
    soonest): each task gets every task's port by index; the waiting task of a failed
    attempt, killed before its peers came, does not count, and a task of an index already
    waiting replaces it."""
    rendezvous = Rendezvous("127.0.0.1")

    def said(index: int, port: int) -> socket.socket:
        link = socket.create_connection(rendezvous.address)
        body = json.dumps({"index": index, "tasks": 2, "port": port}).encode("utf-8")
        link.sendall(SIZE.pack(len(body)) + body)
        return link

    try:
        said(0, 1).close()  # attempt 0's task 0, killed while it waited
        time.sleep(0.2)
        replaced = said(1, 2)
        time.sleep(0.2)
        got: dict[int, list[int]] = {}

        def meet(index: int, port: int) -> None:
            got[index] = _met_at(rendezvous.address, index, 2, port)

        threads = [threading.Thread(target=meet, args=(i, 100 + i)) for i in (1, 0)]
        for thread in threads:
            thread.start()
            time.sleep(0.2)
        for thread in threads:
            thread.join(10)
        assert got == {0: [100, 101], 1: [100, 101]}
        replaced.settimeout(5)
        assert replaced.recv(1) == b""  # closed without an answer
        replaced.close()
    finally:
        rendezvous.close()
