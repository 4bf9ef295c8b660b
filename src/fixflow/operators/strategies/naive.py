"""``naive`` strata (e.g. GCN-forward): X^{i+1} = G∘F(X^i) to a fixpoint, the termination
clause, or the cap. Also every recursive stratum no other class can run.

Iteration-indexed relations (``r(i+1, ...) :- ... r(i, ...)``) run their base rules once
(index 0) and then their step rules with the index variable bound to the round. Each round
materializes the new relations (one job each) and releases the previous round's blocks.

No incremental update: the Maintainer bootstraps a naive stratum whose inputs changed.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fixflow.checker import ast
from fixflow.checker.catalog import index_var
from fixflow.operators.core import Bootstrapped, EvaluationError, StratumRun
from fixflow.operators.engines.base import RoundInfo
from fixflow.operators.materialize import Stored
from fixflow.operators.rounds import clause_holds, measure_column
from fixflow.operators.spark_backend import join_on, positional


def bootstrap(run: StratumRun) -> Bootstrapped:
    relations = run.relations
    indexed = [e.name for e in run.entries() if e.index_pos is not None]
    if indexed and len(relations) > 1:
        raise EvaluationError(
            f"iteration-indexed mutual recursion is not supported: {', '.join(relations)}"
        )
    if indexed:
        return _indexed(run, relations[0])
    return _plain(run)


def _plain(run: StratumRun) -> Bootstrapped:
    relations = run.relations
    clauses = {r: c for r in relations if (c := _clause(run, r)) is not None}
    stored: dict[str, Stored] = {}
    for relation in relations:
        run.frames.full[relation] = run.frames.empty(relation)
    rounds, done = 0, False
    while not done and rounds < run.max_iterations:
        rounds += 1
        new = {r: run.derive(r) for r in relations}
        unchanged, holds, changed_total = set(), True, 0
        for relation in relations:
            result = run.materializer.store(new[relation])
            changed, measure = _difference(run, relation, run.frames.full[relation], result.frame)
            changed_total += changed
            if changed == 0:
                unchanged.add(relation)
            if relation in clauses:
                holds = holds and clause_holds(clauses[relation], measure)
            run.materializer.release(stored.get(relation))
            stored[relation] = result
            run.frames.full[relation] = result.frame
        done = len(unchanged) == len(relations) or (
            bool(clauses) and holds and all(r in unchanged for r in relations if r not in clauses)
        )
        run.round(RoundInfo(rounds, changed_total, None))
    return Bootstrapped(rounds, capped=not done)


def _indexed(run: StratumRun, relation: str) -> Bootstrapped:
    entry = run.entry(relation)
    assert entry.index_pos is not None
    rules = run.rules(relation)
    base = [r for r in rules if index_var(r) is None]
    step = [r for r in rules if index_var(r) is not None]
    clause = _clause(run, relation)
    index = positional(entry.index_pos)
    current = run.materializer.store(
        run.derive(relation, base).withColumn(index, F.lit(0).cast("long"))
    )
    run.frames.full[relation] = current.frame
    rounds, done = 0, False
    while not done and rounds < run.max_iterations:
        produced = run.derive(relation, step, iteration=rounds)
        nxt = run.materializer.store(produced.withColumn(index, F.lit(rounds + 1).cast("long")))
        changed, measure = _difference(
            run, relation, current.frame.drop(index), nxt.frame.drop(index)
        )
        rounds += 1
        done = changed == 0 or (clause is not None and clause_holds(clause, measure))
        run.materializer.release(current)
        current = nxt
        run.frames.full[relation] = current.frame
        run.round(RoundInfo(rounds, changed, measure))
    return Bootstrapped(rounds, capped=not done)


def _clause(run: StratumRun, relation: str) -> ast.Termination | None:
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
    clause = _clause(run, relation)
    func = clause.func if clause is not None else "sum"
    row = joined.agg(
        F.count(F.when(differs, 1)).alias("changed"),
        measure_column(func, change.cast("double")).alias("m"),
    ).first()
    assert row is not None
    return int(row["changed"]), float(row["m"])
