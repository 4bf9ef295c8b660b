"""What every round of every strategy and engine shares, below both.

- the session settings while rounds run: shuffle partitions by input size
  (``partitions_for``), no adaptive re-planning and, on one partition, no broadcasts
  (``round_conf``), set and restored by ``session_conf``;
- the min/max "keep only improved" test (``improves``): the semi-naive growth of
  ``aggregate-seminaive`` and the sync engine's fused merge both use it;
- the termination clause: its bound (``constant_value``), its measure over a round's
  changes (``measure_column``) and whether it holds (``clause_holds``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from fixflow.checker import ast

ROWS_PER_PARTITION = 250_000
"""Input rows per partition when choosing the number of partitions automatically."""


def partitions_for(spark: SparkSession, requested: int | None, rows: int) -> int:
    """Shuffle partitions of a run: as requested, else Spark's default capped by the input
    size (``ROWS_PER_PARTITION``). Read outside ``session_conf``."""
    if requested:
        return requested
    default = int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    return max(1, min(default, -(-rows // ROWS_PER_PARTITION)))


def round_conf(partitions: int) -> dict[str, str]:
    """Session settings while rounds run: small per-round jobs pay dearly for adaptive
    re-planning and for broadcasting tiny tables, so both go when data is small."""
    conf = {
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.sql.adaptive.enabled": "false",
    }
    if partitions == 1:
        conf["spark.sql.autoBroadcastJoinThreshold"] = "-1"
    return conf


@contextmanager
def session_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Set runtime SQL settings for the duration of a run, then restore them."""
    previous = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


# ---------------------------------------------------------------- termination


def constant_value(expr: ast.Expr) -> float:
    """The value of a constant expression (a termination bound such as ``1e-6``)."""
    match expr:
        case ast.NumberLit(value=value) | ast.FloatLit(value=value):
            return float(value)
        case ast.Neg(operand=operand):
            return -constant_value(operand)
        case ast.BinOp(op=op, left=left, right=right):
            a, b = constant_value(left), constant_value(right)
            return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else float("inf")}[op]
    raise ValueError(f"termination bound is not a constant: {expr!r}")


def clause_holds(termination: ast.Termination, measure: float) -> bool:
    bound = constant_value(termination.bound)
    return {
        "<": measure < bound,
        "<=": measure <= bound,
        ">": measure > bound,
        ">=": measure >= bound,
        "=": measure == bound,
        "!=": measure != bound,
    }[termination.op]


def measure_column(func: str, change: Column) -> Column:
    """The termination clause's aggregate over the round's |Δ| of every key."""
    value = F.coalesce(change, F.lit(0.0))
    match func:
        case "sum":
            return F.coalesce(F.sum(value), F.lit(0.0))
        case "max":
            return F.coalesce(F.max(value), F.lit(0.0))
        case "min":
            return F.coalesce(F.min(value), F.lit(0.0))
        case "count":
            return F.count(F.when(value != 0, 1)).cast("double")
        case _:
            return F.coalesce(F.avg(value), F.lit(0.0))


# ---------------------------------------------------------------- improvement


def improves(g: str, new: Column, old: Column) -> Column:
    """The one "keep only improved" test: ``new`` is a better ``g`` (min/max) than ``old``."""
    return new < old if g == "min" else new > old
