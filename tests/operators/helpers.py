"""Small helpers shared by the operator tests: run a program text on facts with Spark."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession

from fixflow.checker import load
from fixflow.checker.model import Report
from fixflow.operators.compiler import relation_struct
from fixflow.operators.evaluate import EvalOptions, Evaluation, evaluate_with_stats

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


def run(
    spark: SparkSession,
    text: str,
    facts: Mapping[str, Sequence[Row]],
    **options: object,
) -> tuple[dict[str, set[Row]], Evaluation]:
    """Evaluate ``text`` on ``facts``; every IDB relation's rows as a set of tuples."""
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
