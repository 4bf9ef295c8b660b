"""``naive`` strata (e.g. GCN-forward): X^{i+1} = G∘F(X^i) to a fixpoint, the termination
clause, or the cap. Also every recursive stratum no other class can run.

Iteration-indexed relations (``r(i+1, ...) :- ... r(i, ...)``) run their base rules once
(index 0) and then their step rules with the index variable bound to the round. Each round
materializes the new relations (one job each) and releases the previous round's blocks.

No incremental update: the Maintainer bootstraps a naive stratum whose inputs changed.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fixflow.checker import ast
from fixflow.checker.catalog import index_var
from fixflow.operators.core import Bootstrapped, EvaluationError, StratumRun
from fixflow.operators.engines.base import RoundInfo
from fixflow.operators.materialize import Stored
from fixflow.operators.rounds import clause_holds, measure_column
from fixflow.operators.spark_backend import join_on, positional

R = TypeVar("R")
"""A backend's rows: a Spark frame, or a numpy batch."""


class NaiveBackend(Protocol[R]):
    """A backend's side of the naive loops: Spark frames here (``SparkNaive``), numpy
    batches in the driver (``driver.stratum.LocalStratum``)."""

    def derive(
        self, relation: str, rules: list[ast.Rule] | None = None, iteration: int | None = None
    ) -> R:
        """G∘F over the current relations: ``rules`` (default all of the relation's)."""
        ...

    def replace(
        self, relation: str, new: R, index: int | None = None, compare: bool = True
    ) -> tuple[int, float]:
        """``new`` becomes the relation's rows (with the iteration index ``index`` when it
        is indexed); with ``compare``, the rows that differ from the previous ones and the
        termination measure over |Δ| per key (index ignored), else (0, 0.0)."""
        ...


def bootstrap(run: StratumRun) -> Bootstrapped:
    return bootstrap_on(run, SparkNaive(run))


def bootstrap_on(run: StratumRun, backend: NaiveBackend[R]) -> Bootstrapped:
    """The naive loops, once for both backends."""
    relations = run.relations
    indexed = [e.name for e in run.entries() if e.index_pos is not None]
    if indexed and len(relations) > 1:
        raise EvaluationError(
            f"iteration-indexed mutual recursion is not supported: {', '.join(relations)}"
        )
    if indexed:
        return _indexed(run, relations[0], backend)
    return _plain(run, backend)


def _plain(run: StratumRun, backend: NaiveBackend[R]) -> Bootstrapped:
    relations = run.relations
    clauses = {r: c for r in relations if (c := clause_of(run, r)) is not None}
    rounds, done = 0, False
    while not done and rounds < run.max_iterations:
        rounds += 1
        new = {r: backend.derive(r) for r in relations}
        unchanged, holds, changed_total = set(), True, 0
        for relation in relations:
            changed, measure = backend.replace(relation, new[relation])
            changed_total += changed
            if changed == 0:
                unchanged.add(relation)
            if relation in clauses:
                holds = holds and clause_holds(clauses[relation], measure)
        done = len(unchanged) == len(relations) or (
            bool(clauses) and holds and all(r in unchanged for r in relations if r not in clauses)
        )
        run.round(RoundInfo(rounds, changed_total, None))
    return Bootstrapped(rounds, capped=not done)


def _indexed(run: StratumRun, relation: str, backend: NaiveBackend[R]) -> Bootstrapped:
    rules = run.rules(relation)
    base = [r for r in rules if index_var(r) is None]
    step = [r for r in rules if index_var(r) is not None]
    clause = clause_of(run, relation)
    backend.replace(relation, backend.derive(relation, base), index=0, compare=False)
    rounds, done = 0, False
    while not done and rounds < run.max_iterations:
        produced = backend.derive(relation, step, iteration=rounds)
        changed, measure = backend.replace(relation, produced, index=rounds + 1)
        rounds += 1
        done = changed == 0 or (clause is not None and clause_holds(clause, measure))
        run.round(RoundInfo(rounds, changed, measure))
    return Bootstrapped(rounds, capped=not done)


class SparkNaive:
    """The naive loops' Spark side: each round's relation stored (one job) and compared
    with the previous one (one job), whose blocks are then released."""

    def __init__(self, run: StratumRun) -> None:
        self.run = run
        self.stored: dict[str, Stored] = {}
        for relation in run.relations:
            if run.entry(relation).index_pos is None:
                run.frames.full[relation] = run.frames.empty(relation)

    def derive(
        self, relation: str, rules: list[ast.Rule] | None = None, iteration: int | None = None
    ) -> DataFrame:
        return self.run.derive(relation, rules, iteration=iteration)

    def replace(
        self, relation: str, new: DataFrame, index: int | None = None, compare: bool = True
    ) -> tuple[int, float]:
        run, entry = self.run, self.run.entry(relation)
        column = None if entry.index_pos is None else positional(entry.index_pos)
        if column is not None:
            new = new.withColumn(column, F.lit(index).cast("long"))
        result = run.materializer.store(new)
        found = (0, 0.0)
        if compare:
            old = run.frames.full[relation]
            before, after = (
                (old, result.frame)
                if column is None
                else (
                    old.drop(column),
                    result.frame.drop(column),
                )
            )
            found = _difference(run, relation, before, after)
        run.materializer.release(self.stored.get(relation))
        self.stored[relation] = result
        run.frames.full[relation] = result.frame
        return found


def clause_of(run: StratumRun, relation: str) -> ast.Termination | None:
    return next((r.termination for r in run.rules(relation) if r.termination), None)


def _difference(
    run: StratumRun, relation: str, old: DataFrame, new: DataFrame
) -> tuple[int, float]:
    """(rows that differ, the termination measure over |Δ| per key) in one job."""
    entry = run.entry(relation)
    if entry.aggregate is None or entry.value_pos is None:
        columns = old.columns
        gone = join_on(old, new, columns, "left_anti").count()
        added = join_on(new, old, columns, "left_anti").count()
        return gone + added, float(gone + added)
    keys = [positional(i) for i in entry.key_positions]
    value = positional(entry.value_pos)
    joined = old.select(*keys, F.col(value).alias("o")).join(
        new.select(*keys, F.col(value).alias("n")), keys, "full_outer"
    )
    change = F.abs(F.coalesce(F.col("n"), F.lit(0)) - F.coalesce(F.col("o"), F.lit(0)))
    differs = F.col("o").isNull() | F.col("n").isNull() | (F.col("o") != F.col("n"))
    clause = clause_of(run, relation)
    func = clause.func if clause is not None else "sum"
    row = joined.agg(
        F.count(F.when(differs, 1)).alias("changed"),
        measure_column(func, change.cast("double")).alias("m"),
    ).first()
    assert row is not None
    return int(row["changed"]), float(row["m"])
