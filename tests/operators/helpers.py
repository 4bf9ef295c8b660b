"""Small helpers shared by the operator tests: run a program text on facts with Spark."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from fixflow.checker import load
from fixflow.checker.model import Report
from fixflow.operators.evaluate import EvalOptions, Evaluation, evaluate_with_stats
from fixflow.operators.spark_backend import relation_struct

Row = tuple[object, ...]


def report_of(text: str) -> Report:
    return load(text, "test.dl")  # type: ignore[return-value]


def edb_frames(
    spark: SparkSession, report: Report, facts: Mapping[str, Sequence[Row]]
) -> dict[str, DataFrame]:
    return {
        rel: spark.createDataFrame(
            list(rows), relation_struct([a.type for a in report.analysis.schemas[rel]])
        )
        for rel, rows in facts.items()
    }


ON_SPARK = EvalOptions(local_rows=0)
"""Options that keep every stratum on Spark (``local_rows`` 0)."""


def run(
    spark: SparkSession,
    text: str,
    facts: Mapping[str, Sequence[Row]],
    **options: object,
) -> tuple[dict[str, set[Row]], Evaluation]:
    """Evaluate ``text`` on ``facts``; every IDB relation's rows as a set of tuples. On
    Spark, a job a round, unless ``local_rows`` or ``task_rows`` is given: these tests
    exercise the Spark strategies (the goldens run every placement,
    tests/operators/test_golden.py)."""
    options.setdefault("local_rows", 0)
    options.setdefault("task_rows", 0)
    report = report_of(text)
    evaluation = evaluate_with_stats(
        report,
        edb_frames(spark, report, facts),
        spark,
        EvalOptions(**options),  # type: ignore[arg-type]
    )
    rows = {rel: {tuple(r) for r in df.collect()} for rel, df in evaluation.relations.items()}
    return rows, evaluation


def close(actual: Mapping[object, float], expected: Mapping[object, float], tol: float) -> bool:
    """Same keys and every value within ``tol``."""
    if set(actual) != set(expected):
        return False
    return all(abs(actual[k] - expected[k]) <= tol for k in expected)


@contextmanager
def py4j_commands(spark: SparkSession) -> Iterator[list[str]]:
    """The py4j commands this thread sends to the JVM inside the block."""
    client = spark.sparkContext._gateway._gateway_client  # type: ignore[union-attr]
    original = type(client).send_command
    sent: list[str] = []

    def counting(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(command)
        return original(self, command, *args, **kwargs)

    type(client).send_command = counting  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        type(client).send_command = original  # type: ignore[method-assign]
