"""A semi-naive or naive loop in one Spark task (``operators.task_stratum``): one job where
Spark ran one a round, the same rows, and past ``task_rows`` the loop continued on Spark
from the rounds the task ran (or, naive, restarted there)."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

from fixflow.operators.evaluate import Progress, StratumStats
from fixflow.operators.placement import Placement
from python_workers import BusyWorkers, WorkerKiller, gone

from .helpers import run

COUNTER = """
.decl n(x: number)
.output n
n(0).
n(x + 1) :- n(x), x < 300.
"""
TC = """
.decl edge(x: number, y: number)
.input edge
.decl path(x: number, y: number)
.output path
path(X, Y) :- edge(X, Y).
path(X, Z) :- path(X, Y), edge(Y, Z).
"""
TASK_WHY = "local_rows is 0: every stratum runs on Spark; its loop runs in one Spark task"
CHAIN = [(i, i + 1) for i in range(40)]
CLOSURE = {(i, j) for i in range(41) for j in range(i + 1, 41)}


def _only(stats: list[StratumStats]) -> StratumStats:
    (found,) = [s for s in stats if s.placement is not None and s.placement.where != "driver"]
    return found


def test_a_counter_of_300_rounds_is_one_task_and_two_jobs(spark: SparkSession) -> None:
    rows, evaluation = run(spark, COUNTER, {}, task_rows=1_000)
    assert rows["n"] == {(i,) for i in range(301)}
    stats = _only(evaluation.stats)
    assert stats.placement is not None and stats.placement.where == "task"
    assert stats.rounds == 302 and not stats.capped
    assert stats.jobs <= 2, stats.jobs  # the task's job and its relation stored


def test_a_loop_in_a_task_reports_its_rounds_while_it_runs(spark: SparkSession) -> None:
    """The task sends its rounds to the driver as it runs them (``task_progress``); the
    driver adds the last one when the job ends. Rounds before the last can only have come
    from the task."""
    seen: list[Progress] = []
    counter = COUNTER.replace("300", "5000")
    rows, evaluation = run(spark, counter, {}, task_rows=10_000, progress=seen.append)
    assert len(rows["n"]) == 5_001
    assert _only(evaluation.stats).placement.where == "task"  # type: ignore[union-attr]
    rounds = [p.round for p in seen if p.relations == ("n",)]
    assert rounds[-1] == 5_002, rounds
    from_task = rounds[:-1]
    assert len(from_task) >= 2, rounds  # the first round at once, then one every 0.25 s
    assert from_task == sorted(from_task) and from_task[0] < 100, rounds


def test_a_loop_past_task_rows_continues_on_spark_from_its_rounds(spark: SparkSession) -> None:
    """40 rows fit, the closure's 820 do not: the task stops at a round past 40 rows and
    Spark continues from it; the rounds count both, as one loop's."""
    rows, evaluation = run(spark, TC, {"edge": CHAIN}, task_rows=100)
    assert rows["path"] == CLOSURE
    stats = _only(evaluation.stats)
    assert stats.placement is not None and stats.placement.where == "spark"
    assert "outgrew one task" in stats.placement.why and "continued" in stats.placement.why
    assert stats.rounds == 41  # 40 rounds add paths, the 41st finds none
    whole, _ = run(spark, TC, {"edge": CHAIN}, task_rows=10_000)
    assert whole == rows


def test_the_cap_stops_a_loop_in_a_task_as_on_spark(spark: SparkSession) -> None:
    capped, evaluation = run(spark, COUNTER, {}, task_rows=1_000, max_iterations=10)
    on_spark, spark_run = run(spark, COUNTER, {}, max_iterations=10)
    assert capped == on_spark and len(capped["n"]) == 10
    assert _only(evaluation.stats).capped and _only(spark_run.stats).capped


def test_a_killed_loop_task_is_run_again_with_the_same_rows(spark: SparkSession) -> None:
    """The Python worker running the loop (the one busy for 0.5 s: packing tasks are
    short, reused workers idle) is SIGKILLed mid-loop; Spark runs the task again from the
    stored blocks of its inputs, and the counter still counts to 4,000 once."""
    killer = WorkerKiller(os.getpid(), after_s=0.5, finder=BusyWorkers()).start()
    try:
        rows, evaluation = run(spark, COUNTER.replace("300", "4000"), {}, task_rows=10_000)
    finally:
        killer.stop()
    assert killer.killed, "no busy Python worker was seen"
    assert gone(killer.killed[0])
    assert rows["n"] == {(i,) for i in range(4001)}
    stats = _only(evaluation.stats)
    assert stats.placement is not None and stats.placement.where == "task"
    assert stats.rounds == 4002


def test_a_naive_loop_past_task_rows_restarts_on_spark(spark: SparkSession) -> None:
    """A naive loop (the closure, forced naive) cannot continue on Spark from a task's
    rows: past ``task_rows`` it restarts there from its inputs."""
    naive = {"path": "naive"}
    restarted, evaluation = run(spark, TC, {"edge": CHAIN}, task_rows=100, strategy=naive)
    assert restarted["path"] == CLOSURE
    stats = _only(evaluation.stats)
    assert stats.placement is not None and stats.placement.where == "spark"
    assert "outgrew one task" in stats.placement.why and "restarted" in stats.placement.why
    whole, in_task = run(spark, TC, {"edge": CHAIN}, task_rows=10_000, strategy=naive)
    assert whole == restarted
    assert _only(in_task.stats).placement == Placement("task", None, 1, TASK_WHY)
