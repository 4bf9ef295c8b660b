"""A semi-naive round costs the same whatever its number (issue #13): with the recursive
relation twice in a body, each round used to square the optimizer's size estimate of the
stored relation (carried by every checkpoint), and planning stalled after ~20 rounds."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from pyspark.sql import SparkSession

from fixflow.operators.engines.modes import engine_for
from fixflow.operators.evaluate import Bootstrap, EvalOptions, Progress

from .helpers import report_of

ROUNDS = 44

NONLINEAR = f"""
.decl n(x: number)
.output n
n(0).
n(x + 1) :- n(x), n(y), y = 0, x < {ROUNDS}.
"""


@dataclass
class RoundCost:
    round: int
    jobs: int
    plan_nodes: int
    estimate_bits: int
    """Bits of the optimizer's size estimate of the stored relation (at most 64)."""


def test_round_cost_does_not_grow_with_rounds(spark: SparkSession) -> None:
    options = EvalOptions(local_rows=0, task_rows=0)  # the rounds on Spark are measured
    bootstrap = Bootstrap(report_of(NONLINEAR), spark, options, engine_for(options.engine_options))
    tracker = spark.sparkContext.statusTracker()
    costs: list[RoundCost] = []
    last_job = [max(tracker.getJobIdsForGroup(), default=-1)]

    def on_round(progress: Progress) -> None:
        job = max(tracker.getJobIdsForGroup(), default=-1)
        plan = bootstrap.frames.full["n"]._jdf.queryExecution().optimizedPlan()
        bits = int(plan.stats().sizeInBytes()).bit_length()
        # The estimate was squared every round (thousands of digits by round 10): fail
        # here, the evaluation would not end.
        assert bits <= 64, f"round {progress.round}: a size estimate of {bits} bits"
        nodes = plan.treeString().count("\n")
        costs.append(RoundCost(progress.round, job - last_job[0], nodes, bits))
        last_job[0] = job

    options.progress = on_round
    digits = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # py4j reads a huge estimate through its digits
    try:
        evaluation = bootstrap.run({})
    finally:
        sys.set_int_max_str_digits(digits)
    assert sorted(r[0] for r in evaluation.relations["n"].collect()) == list(range(ROUNDS + 1))
    assert len(costs) >= 40
    later = costs[2:]  # round 1 has nothing stored yet, round 2 no earlier recent rows
    # One job per round stores the new rows (with a broadcast or two while it runs) and
    # every few rounds one compacts: never more as rounds go by.
    assert max(c.jobs for c in later) == max(c.jobs for c in later[:10])
    assert max(c.plan_nodes for c in later) == max(c.plan_nodes for c in later[:10])
