"""Batch evaluation of a checked program on Spark: one strategy per stratum.

``evaluate(report, edb, spark, options) -> {relation: DataFrame}`` runs the strata of a
``Report`` in order. Every strategy builds its plans with the one compiler
(``fixflow.operators.compiler``) and materializes each round with a local checkpoint
(``fixflow.operators.materialize``), so long iterations keep a constant-size plan:

- non-recursive: direct evaluation (joins, filters, group-by aggregates, anti-joins);
- ``set``: semi-naive, one delta rule per occurrence of a stratum relation in a body;
  new = derived − all;
- ``mra``: the MonoTable (``fixflow.operators.monotable``);
- ``aggregate-seminaive``: semi-naive where each round keeps only tuples that improve their
  group's aggregate (min/max), or whose group's aggregate changed (count/sum/mean);
- ``naive``: X^{i+1} = G∘F(X^i) to a fixpoint, the termination clause, or the cap.

Relations are exchanged as DataFrames with the declared column names and types; indexed
relations (``rank(i+1, ...)``) are returned without their iteration index column.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.checker import ast
from fixflow.checker.model import EvalClass, Report, Stratum
from fixflow.operators.compiler import (
    RuleCompiler,
    SparkBackend,
    column_name,
    head_columns,
    positional,
    relation_struct,
    spark_type,
)
from fixflow.operators.materialize import Materializer, Stored
from fixflow.operators.monotable import (
    MonoTable,
    RoundInfo,
    clause_holds,
    measure_column,
)
from fixflow.operators.plan import (
    Aggregate,
    Cast,
    Col,
    Const,
    Fixpoint,
    Plan,
    Project,
    Union,
    Unit,
    Version,
)

log = logging.getLogger(__name__)

COMPACT_EVERY = 8
"""Semi-naive: rounds between materializations of the full relations."""
ROWS_PER_PARTITION = 250_000
"""Input rows per partition when choosing the number of partitions automatically."""

Strategy = Literal["nonrecursive", "set", "mra", "aggregate-seminaive", "naive"]


@dataclass(frozen=True)
class Progress:
    """One round of one stratum, for progress reporting."""

    stratum: int
    relations: tuple[str, ...]
    strategy: str
    round: int
    pending: int
    measure: float | None = None


@dataclass
class StratumStats:
    stratum: int
    relations: tuple[str, ...]
    strategy: str
    rounds: int = 0
    capped: bool = False
    seconds: float = 0.0
    jobs: int = 0


@dataclass
class EvalOptions:
    max_iterations: int = 1000
    """Round cap of every recursive stratum; hitting it logs a warning and is reported."""
    engine: str = "sync"
    partitions: int | None = None
    """Partitions of MonoTables and auxiliary tables (default: spark.sql.shuffle.partitions)."""
    progress: Callable[[Progress], None] | None = None
    strategy: Mapping[str, EvalClass] = field(default_factory=dict)
    """Force a strategy for the stratum holding a relation (tests compare MRA and naive)."""
    witness: bool = False
    """Keep, for min/max MonoTables, the key of the predecessor that gave each value
    (``wit0..``): what deleting by retraction needs. Off by default because it costs a
    second aggregate per round and nothing reads it yet (deletions re-evaluate)."""


@dataclass
class Evaluation:
    relations: dict[str, DataFrame]
    stats: list[StratumStats]
    monotables: dict[str, DataFrame] = field(default_factory=dict)
    """Final MonoTable of every MRA relation: key columns ``k0..``, ``acc``, ``delta``
    (null: none pending), ``chg`` and, for min/max with ``EvalOptions.witness``, ``wit0..``
    (the predecessor's key)."""

    @property
    def capped(self) -> list[StratumStats]:
        return [s for s in self.stats if s.capped]


class EvaluationError(Exception):
    """A program the engine cannot run (e.g. an unsupported shape)."""


def evaluate(
    report: Report,
    edb: Mapping[str, DataFrame],
    spark: SparkSession,
    options: EvalOptions | None = None,
) -> dict[str, DataFrame]:
    """Every IDB relation of ``report``'s program, with its declared schema (index dropped)."""
    return evaluate_with_stats(report, edb, spark, options).relations


def evaluate_with_stats(
    report: Report,
    edb: Mapping[str, DataFrame],
    spark: SparkSession,
    options: EvalOptions | None = None,
) -> Evaluation:
    options = options or EvalOptions()
    if options.engine != "sync":
        raise EvaluationError(f"engine `{options.engine}` is not available (use `sync`)")
    return _Engine(report, spark, options).run(edb)


# ---------------------------------------------------------------- relation metadata


@dataclass(frozen=True)
class RelationInfo:
    name: str
    types: tuple[ast.TypeName, ...]
    names: tuple[str, ...]
    aggregate: str | None
    value_pos: int | None
    index_pos: int | None

    @property
    def key_positions(self) -> tuple[int, ...]:
        skip = {self.value_pos, self.index_pos}
        return tuple(i for i in range(len(self.types)) if i not in skip)


def index_variable(head: ast.Head) -> str | None:
    """``i`` when the head's first argument is ``i+1`` (an iteration-indexed head)."""
    first = head.args[0] if head.args else None
    if (
        isinstance(first, ast.BinOp)
        and first.op == "+"
        and isinstance(first.left, ast.Var)
        and isinstance(first.right, ast.NumberLit)
        and first.right.value == 1
    ):
        return first.left.name
    return None


def relation_info(report: Report, relation: str) -> RelationInfo:
    attributes = report.analysis.schemas[relation]
    rules = [r for r in report.analysis.program.rules if r.head.relation == relation]
    aggregate = value_pos = None
    for rule in rules:
        for pos, arg in enumerate(rule.head.args):
            if isinstance(arg, ast.Aggregate):
                aggregate, value_pos = arg.func, pos
    spec = report.mra.get(relation)
    index_pos = spec.index_pos if spec is not None else None
    if index_pos is None and aggregate is not None and any(index_variable(r.head) for r in rules):
        index_pos = 0
    return RelationInfo(
        relation,
        tuple(a.type for a in attributes),
        tuple(a.name for a in attributes),
        aggregate,
        value_pos,
        index_pos,
    )


# ---------------------------------------------------------------- the engine


class _Engine:
    def __init__(self, report: Report, spark: SparkSession, options: EvalOptions) -> None:
        self.report = report
        self.spark = spark
        self.options = options
        self.partitions = options.partitions or int(
            spark.conf.get("spark.sql.shuffle.partitions") or 4
        )
        self.schemas = {
            rel: tuple(a.type for a in attrs) for rel, attrs in report.analysis.schemas.items()
        }
        self.full: dict[str, DataFrame] = {}
        self.delta: dict[str, DataFrame] = {}
        self.aux: dict[str, DataFrame] = {}
        self.monotables: dict[str, DataFrame] = {}
        self.backend = SparkBackend(spark, self._source)
        self.materializer = Materializer(spark)
        self.info = {rel: relation_info(report, rel) for rel in report.analysis.schemas}
        self.rules: dict[str, list[ast.Rule]] = {}
        for rule in report.analysis.program.rules:
            self.rules.setdefault(rule.head.relation, []).append(rule)

    # ------------------------------------------------------------ storage

    def _source(self, relation: str, version: Version) -> DataFrame:
        if version == "aux":
            return self.aux[relation]
        table = self.delta if version == "delta" else self.full
        if relation in table:
            return table[relation]
        return self._empty(relation)

    def _empty(self, relation: str) -> DataFrame:
        return self.spark.createDataFrame([], relation_struct(self.schemas[relation]))

    def _normalize_edb(self, relation: str, frame: DataFrame) -> DataFrame:
        types = self.schemas[relation]
        if len(frame.columns) != len(types):
            raise EvaluationError(
                f"input `{relation}` has {len(frame.columns)} columns, declared {len(types)}"
            )
        return frame.select(
            *(
                F.col(f"`{name}`").cast(spark_type(t)).alias(positional(i))
                for i, (name, t) in enumerate(zip(frame.columns, types, strict=True))
            )
        ).distinct()

    def _store(self, frame: DataFrame, metrics: list[Column] | None = None) -> Stored:
        return self.materializer.store(frame, metrics)

    # ------------------------------------------------------------ driver

    def run(self, edb: Mapping[str, DataFrame]) -> Evaluation:
        rows = 0
        for relation in self.report.analysis.edb:
            if relation in edb:
                stored = self._store(
                    self._normalize_edb(relation, edb[relation]), [F.count(F.lit(1)).alias("n")]
                )
                self.full[relation] = stored.frame
                rows += int(stored.metrics["n"])  # type: ignore[call-overload]
        if self.options.partitions is None:
            self.partitions = max(1, min(self.partitions, -(-rows // ROWS_PER_PARTITION)))
        stats = []
        with session_conf(self.spark, self._round_conf()):
            for stratum in self.report.strata:
                stats.append(self._stratum(stratum))
        idb = self.report.analysis.idb
        relations = {rel: self._declared(rel) for rel in sorted(idb)}
        return Evaluation(relations, stats, self.monotables)

    def _round_conf(self) -> dict[str, str]:
        """Session settings while rounds run: small per-round jobs pay dearly for adaptive
        re-planning and for broadcasting tiny tables, so both go when data is small."""
        conf = {
            "spark.sql.shuffle.partitions": str(self.partitions),
            "spark.sql.adaptive.enabled": "false",
        }
        if self.partitions == 1:
            conf["spark.sql.autoBroadcastJoinThreshold"] = "-1"
        return conf

    def _declared(self, relation: str) -> DataFrame:
        info = self.info[relation]
        frame = self._source(relation, "full")
        return frame.select(
            *(
                F.col(positional(i)).alias(name)
                for i, name in enumerate(info.names)
                if i != info.index_pos
            )
        )

    def _strategy(self, stratum: Stratum) -> Strategy:
        forced = {self.options.strategy[r] for r in stratum.relations if r in self.options.strategy}
        if forced:
            return forced.pop()
        if not stratum.recursive:
            return "nonrecursive"
        return stratum.eval_class or "naive"

    def _stratum(self, stratum: Stratum) -> StratumStats:
        strategy = self._strategy(stratum)
        stats = StratumStats(stratum.index, stratum.relations, strategy)
        started, jobs = time.perf_counter(), self.materializer.jobs
        log.info("stratum %d %s: %s", stratum.index, stratum.relations, strategy)
        if strategy == "nonrecursive":
            for relation in stratum.relations:
                self.full[relation] = self._store(self._derive(relation, recursive=False)).frame
            stats.rounds = 1
        elif strategy == "mra" and self._mra_supported(stratum):
            self._mra(stratum, stats)
        elif self._seminaive_applies(stratum, strategy):
            self._seminaive(stratum, stats)
        else:
            self._naive(stratum, stats)
        stats.seconds = time.perf_counter() - started
        stats.jobs = self.materializer.jobs - jobs
        if stats.capped:
            log.warning(
                "stratum %d %s hit the iteration cap (%d rounds) before converging",
                stratum.index,
                ", ".join(stratum.relations),
                self.options.max_iterations,
            )
        return stats

    def _seminaive_applies(self, stratum: Stratum, strategy: Strategy) -> bool:
        if strategy == "set" or (strategy == "mra" and not self._aggregated(stratum)):
            return True
        if strategy == "mra":  # MRA not applicable here: only min/max improve monotonically
            return all(self.info[r].aggregate in (None, "min", "max") for r in stratum.relations)
        return strategy == "aggregate-seminaive" and self._monotone(stratum)

    def _aggregated(self, stratum: Stratum) -> bool:
        return any(self.info[r].aggregate for r in stratum.relations)

    def _monotone(self, stratum: Stratum) -> bool:
        return all(
            self.info[r].index_pos is None
            and self.info[r].aggregate in (None, "min", "max", "count", "sum", "mean")
            for r in stratum.relations
        )

    def _mra_supported(self, stratum: Stratum) -> bool:
        specs = [self.report.mra.get(r) for r in stratum.relations]
        if len(stratum.relations) != 1 or specs[0] is None:
            log.warning(
                "stratum %s: MRA over several relations is not supported; "
                "falling back to another strategy",
                stratum.relations,
            )
            return False
        return True

    def _progress(self, stats: StratumStats, info: RoundInfo) -> None:
        stats.rounds = info.round
        log.info(
            "stratum %d %s round %d: %d pending deltas%s",
            stats.stratum,
            ",".join(stats.relations),
            info.round,
            info.pending,
            "" if info.measure is None else f", measure {info.measure:.3g}",
        )
        if self.options.progress is not None:
            self.options.progress(
                Progress(
                    stats.stratum,
                    stats.relations,
                    stats.strategy,
                    info.round,
                    info.pending,
                    info.measure,
                )
            )

    # ------------------------------------------------------------ deriving

    def _rule_rows(
        self,
        rule: ast.Rule,
        body: ast.Body,
        *,
        recursive: bool,
        versions: Mapping[int, Version] | None = None,
        iteration: int | None = None,
    ) -> Plan:
        return rule_rows(
            self.schemas,
            self.info[rule.head.relation],
            rule,
            body,
            recursive=recursive,
            versions=versions,
            iteration=iteration,
        )

    def _combine(self, relation: str, rows: list[Plan]) -> DataFrame:
        """G over all head rows of ``relation`` (or their distinct union), positional."""
        info = self.info[relation]
        if not rows:
            return self._empty(relation)
        frame = self.backend.run(combine_rows(info, rows))
        return frame.select(
            *(
                F.col(column_name(h)).alias(positional(i))
                for i, h in enumerate(head_columns(len(info.types)))
            )
        )

    def _derive(
        self,
        relation: str,
        *,
        recursive: bool,
        rules: list[ast.Rule] | None = None,
        iteration: int | None = None,
    ) -> DataFrame:
        rows = [
            self._rule_rows(rule, body, recursive=recursive, iteration=iteration)
            for rule in (rules if rules is not None else self.rules.get(relation, []))
            for body in rule.bodies
        ]
        return self._combine(relation, rows)

    # ------------------------------------------------------------ MRA

    def _mra(self, stratum: Stratum, stats: StratumStats) -> None:
        relation = stratum.relations[0]
        spec = self.report.mra[relation]
        table = MonoTable(
            spec,
            self.schemas,
            self.spark,
            self.backend,
            self.materializer,
            self.aux.__setitem__,
            self.partitions,
            self.options.witness,
        )

        def set_frontier(frame: DataFrame) -> None:
            self.delta[relation] = frame

        outcome = table.run(
            self.options.max_iterations, lambda info: self._progress(stats, info), set_frontier
        )
        # The rows are a projection of the stored MonoTable: no job of their own.
        self.full[relation] = outcome.rows
        self.monotables[relation] = outcome.stored.frame
        stats.rounds, stats.capped = outcome.rounds, outcome.capped
        for name in [n for n in self.aux if n.startswith(f"#aux:{relation}:")]:
            self.aux.pop(name).unpersist()
        self.delta.pop(relation, None)

    # ------------------------------------------------------------ semi-naive

    def _occurrences(self, body: ast.Body, stratum: Stratum) -> list[int]:
        return [
            i
            for i, lit in enumerate(body.literals)
            if isinstance(lit, ast.Atom) and lit.relation in stratum.relations
        ]

    def _seminaive(self, stratum: Stratum, stats: StratumStats) -> None:
        """Semi-naive for set relations, "keep only improved" for aggregated ones.

        Per round and relation one job materializes the new delta (and counts it); the
        full relation is the union of stored pieces, compacted every few rounds."""
        relations = stratum.relations
        count = [F.count(F.lit(1)).alias("n")]
        pending = 0
        # Round 1: rules with no atom of the stratum (the exit rules).
        for relation in relations:
            rows = [
                self._rule_rows(rule, body, recursive=True)
                for rule in self.rules.get(relation, [])
                for body in rule.bodies
                if not self._occurrences(body, stratum)
            ]
            stored = self._store(self._combine(relation, rows), count)
            self.full[relation] = self.delta[relation] = stored.frame
            pending += int(stored.metrics["n"])  # type: ignore[call-overload]
        self._progress(stats, RoundInfo(1, pending, None))
        rounds = 1
        while pending and rounds < self.options.max_iterations:
            # Every relation's derivation reads the previous round: build all, then update.
            derived = {r: self._combine(r, self._delta_rules(r, stratum)) for r in relations}
            updates = {r: self._improve(r, derived[r]) for r in relations}
            pending = 0
            for relation, (new_full, new_delta) in updates.items():
                stored_delta = self._store(new_delta, count)
                pending += int(stored_delta.metrics["n"])  # type: ignore[call-overload]
                self.delta[relation] = stored_delta.frame
                self.full[relation] = new_full(stored_delta.frame)
                if rounds % COMPACT_EVERY == 0:
                    self.full[relation] = self._store(self.full[relation]).frame
            rounds += 1
            self._progress(stats, RoundInfo(rounds, pending, None))
        for relation in relations:
            self.full[relation] = self._store(self.full[relation]).frame
            self.delta.pop(relation, None)
        stats.rounds, stats.capped = rounds, bool(pending)

    def _delta_rules(self, relation: str, stratum: Stratum) -> list[Plan]:
        info = self.info[relation]
        rules = self.rules.get(relation, [])
        if info.aggregate in ("count", "sum", "mean"):
            # Not idempotent: the aggregate is recomputed from the full relations and the
            # groups whose value changed form the delta.
            return [self._rule_rows(r, b, recursive=True) for r in rules for b in r.bodies]
        plans = []
        for rule in rules:
            for body in rule.bodies:
                occurrences = self._occurrences(body, stratum)
                for k in occurrences:
                    plans.append(self._rule_rows(rule, body, recursive=True, versions={k: "delta"}))
        return plans

    def _improve(
        self, relation: str, derived: DataFrame
    ) -> tuple[Callable[[DataFrame], DataFrame], DataFrame]:
        """(new full as a function of the stored delta, new delta) of one relation."""
        info = self.info[relation]
        old = self.full[relation]
        columns = [positional(i) for i in range(len(info.types))]
        if info.aggregate is None:
            new = derived.join(old, columns, "left_anti")
            return old.unionByName, new
        keys = [positional(i) for i in info.key_positions]
        value = positional(info.value_pos)  # type: ignore[arg-type]
        if info.aggregate in ("count", "sum", "mean"):
            # ``derived`` is the whole aggregate recomputed: a group changed when its row did.
            changed = derived.join(old, columns, "left_anti")
            return lambda delta: old.join(delta.select(*keys), keys, "left_anti").unionByName(
                delta
            ), changed
        better = F.col("n") < F.col("o") if info.aggregate == "min" else F.col("n") > F.col("o")
        candidates = derived.withColumnRenamed(value, "n").join(
            old.withColumnRenamed(value, "o"), keys, "left"
        )
        improved = candidates.where(F.col("o").isNull() | better).select(
            *keys, F.col("n").alias(value)
        )
        improved = improved.select(*columns)
        return lambda delta: old.join(delta.select(*keys), keys, "left_anti").unionByName(
            delta
        ), improved

    # ------------------------------------------------------------ naive

    def _naive(self, stratum: Stratum, stats: StratumStats) -> None:
        relations = stratum.relations
        indexed = [r for r in relations if self.info[r].index_pos is not None]
        if indexed and len(relations) > 1:
            raise EvaluationError(
                f"iteration-indexed mutual recursion is not supported: {', '.join(relations)}"
            )
        if indexed:
            self._naive_indexed(relations[0], stats)
            return
        clauses = {r: c for r in relations if (c := self._clause(r)) is not None}
        stored: dict[str, Stored] = {}
        for relation in relations:
            self.full[relation] = self._empty(relation)
        rounds, done = 0, False
        while not done and rounds < self.options.max_iterations:
            rounds += 1
            new = {r: self._derive(r, recursive=True) for r in relations}
            unchanged, holds, changed_total = set(), True, 0
            for relation in relations:
                result = self._store(new[relation], None)
                changed, measure = self._difference(relation, self.full[relation], result.frame)
                changed_total += changed
                if changed == 0:
                    unchanged.add(relation)
                if relation in clauses:
                    holds = holds and clause_holds(clauses[relation], measure)
                self.materializer.release(stored.get(relation))
                stored[relation] = result
                self.full[relation] = result.frame
            done = len(unchanged) == len(relations) or (
                bool(clauses)
                and holds
                and all(r in unchanged for r in relations if r not in clauses)
            )
            self._progress(stats, RoundInfo(rounds, changed_total, None))
        stats.rounds, stats.capped = rounds, not done

    def _naive_indexed(self, relation: str, stats: StratumStats) -> None:
        info = self.info[relation]
        rules = self.rules.get(relation, [])
        base = [r for r in rules if index_variable(r.head) is None]
        step = [r for r in rules if index_variable(r.head) is not None]
        clause = self._clause(relation)
        index = positional(info.index_pos)  # type: ignore[arg-type]
        current = self._store(
            self._derive(relation, recursive=True, rules=base).withColumn(
                index, F.lit(0).cast("long")
            )
        )
        self.full[relation] = current.frame
        rounds, done = 0, False
        while not done and rounds < self.options.max_iterations:
            produced = self._derive(relation, recursive=True, rules=step, iteration=rounds)
            nxt = self._store(produced.withColumn(index, F.lit(rounds + 1).cast("long")))
            changed, measure = self._difference(
                relation, current.frame.drop(index), nxt.frame.drop(index)
            )
            rounds += 1
            done = changed == 0 or (clause is not None and clause_holds(clause, measure))
            self.materializer.release(current)
            current = nxt
            self.full[relation] = current.frame
            self._progress(stats, RoundInfo(rounds, changed, measure))
        stats.rounds, stats.capped = rounds, not done

    def _clause(self, relation: str) -> ast.Termination | None:
        return next((r.termination for r in self.rules.get(relation, []) if r.termination), None)

    def _difference(self, relation: str, old: DataFrame, new: DataFrame) -> tuple[int, float]:
        """(rows that differ, the termination measure over |Δ| per key) in one job."""
        info = self.info[relation]
        if info.aggregate is None or info.value_pos is None:
            columns = old.columns
            gone = old.join(new, columns, "left_anti").count()
            added = new.join(old, columns, "left_anti").count()
            return gone + added, float(gone + added)
        keys = [positional(i) for i in info.key_positions]
        value = positional(info.value_pos)
        joined = old.select(*keys, F.col(value).alias("o")).join(
            new.select(*keys, F.col(value).alias("n")), keys, "full_outer"
        )
        change = F.abs(F.coalesce(F.col("n"), F.lit(0)) - F.coalesce(F.col("o"), F.lit(0)))
        differs = F.col("o").isNull() | F.col("n").isNull() | (F.col("o") != F.col("n"))
        clause = self._clause(relation)
        func = clause.func if clause is not None else "sum"
        row = joined.agg(
            F.count(F.when(differs, 1)).alias("changed"),
            measure_column(func, change.cast("double")).alias("m"),
        ).first()
        assert row is not None
        return int(row["changed"]), float(row["m"])


def rule_rows(
    schemas: Mapping[str, tuple[ast.TypeName, ...]],
    info: RelationInfo,
    rule: ast.Rule,
    body: ast.Body,
    *,
    recursive: bool,
    versions: Mapping[int, Version] | None = None,
    iteration: int | None = None,
) -> Plan:
    """Head rows ``h0..hn`` of one body (aggregate position: the contributed value);
    ``iteration`` binds the index variable of an iteration-indexed head."""
    compiler = RuleCompiler(schemas)
    start = None
    index_var = index_variable(rule.head)
    if iteration is not None and index_var is not None:
        seed = Project(Unit(), ((index_var, Const(iteration, "number")),))
        start = (seed, {index_var: "number"})
    compiled = compiler.body(body, versions, start=start)
    return compiler.head(
        rule, compiled, info.types, aggregated=info.aggregate is not None, recursive=recursive
    )


def combine_rows(info: RelationInfo, rows: list[Plan]) -> Plan:
    """G over the head rows of every rule of a relation, or their distinct union."""
    if info.aggregate is None:
        return Union(tuple(rows), distinct=True)
    return _aggregate(rows, len(info.types), info.value_pos, info.aggregate, info.types)


def program_plans(report: Report, max_iterations: int = 1000) -> list[Plan]:
    """One plan per stratum, for display (``explain``): a non-recursive stratum's plan, or a
    ``Fixpoint`` whose ``init`` are the exit rules and whose ``step`` are the delta rules
    (MRA: F′ reading the frontier)."""
    schemas = {rel: tuple(a.type for a in attrs) for rel, attrs in report.analysis.schemas.items()}
    infos = {rel: relation_info(report, rel) for rel in report.analysis.schemas}
    rules: dict[str, list[ast.Rule]] = {}
    for rule in report.analysis.program.rules:
        rules.setdefault(rule.head.relation, []).append(rule)
    plans: list[Plan] = []
    for stratum in report.strata:
        init: list[Plan] = []
        step: list[Plan] = []
        for relation in stratum.relations:
            for rule in rules.get(relation, []):
                for body in rule.bodies:
                    occurrences = [
                        i
                        for i, lit in enumerate(body.literals)
                        if isinstance(lit, ast.Atom) and lit.relation in stratum.relations
                    ]
                    if not stratum.recursive or not occurrences:
                        init.append(
                            rule_rows(
                                schemas, infos[relation], rule, body, recursive=True, iteration=0
                            )
                        )
                    for k in occurrences:
                        step.append(
                            rule_rows(
                                schemas,
                                infos[relation],
                                rule,
                                body,
                                recursive=True,
                                versions={k: "delta"},
                                iteration=0,
                            )
                        )
        if not stratum.recursive:
            plans += [combine_rows(infos[r], init) for r in stratum.relations if init]
        else:
            plans.append(
                Fixpoint(
                    stratum.eval_class or "naive",
                    stratum.relations,
                    tuple(init),
                    tuple(step),
                    max_iterations,
                )
            )
    return plans


@contextmanager
def session_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Set runtime SQL settings for the duration of an evaluation, then restore them."""
    previous = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _aggregate(
    rows: list[Plan],
    arity: int,
    value_pos: int | None,
    func: str,
    types: tuple[ast.TypeName, ...],
) -> Plan:
    assert value_pos is not None
    union = rows[0] if len(rows) == 1 else Union(tuple(rows), distinct=False)
    columns = head_columns(arity)
    keys = tuple(c for i, c in enumerate(columns) if i != value_pos)
    value = columns[value_pos]
    combine = "sum" if func == "count" else func
    declared = types[value_pos]
    value_type: ast.TypeName = "float" if func == "mean" else declared
    grouped = Aggregate(union, keys, combine, value, value, value_type)  # type: ignore[arg-type]
    schema = dict(grouped.schema)
    return Project(
        grouped,
        tuple(
            (c, Cast(Col(c, schema[c]), declared) if c == value else Col(c, schema[c]))
            for c in columns
        ),
    )
