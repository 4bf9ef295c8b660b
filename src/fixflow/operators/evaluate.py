"""Batch evaluation of a checked program on Spark: the bootstrap of every stratum.

``evaluate(report, edb, spark, options) -> {relation: DataFrame}`` runs the strata of a
``Report`` in order. The ``Bootstrap`` driver loads the EDB, then bootstraps each stratum
with the first class module (``fixflow.operators.strategies``) whose ``bootstrap_applies``
holds, in the order of ``BOOTSTRAPS``:

- non-recursive: direct evaluation (joins, filters, group-by aggregates, anti-joins);
- ``mra``: the MRA engine of ``EvalOptions.engine`` (one relation per stratum);
- ``set``: semi-naive (new = derived − all);
- ``aggregate-seminaive``: semi-naive keeping only improved groups (min/max) or changed ones
  (count/sum/mean); also an ``mra`` stratum the engine cannot run;
- ``naive``: X^{i+1} = G∘F(X^i) to a fixpoint, the termination clause, or the cap.

Every round is materialized by a local checkpoint (``fixflow.operators.materialize``), so
long iterations keep a constant-size plan. The Maintainer uses the same driver to bootstrap
one stratum (``Bootstrap.stratum``). Relations are handed out with their result schema
(``RelationEntry.result``: the declared columns, iteration index dropped).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.checker.catalog import Catalog
from fixflow.checker.model import Report, Stratum
from fixflow.operators.compiler import positional, spark_type
from fixflow.operators.core import (
    Bootstrapped,
    EvalOptions,
    EvaluationError,
    Frames,
    Progress,
    StratumRun,
    atoms_over,
    combine_plan,
    result_rows,
    rule_rows,
    strategy_of,
)
from fixflow.operators.engines import UnknownEngine, engine_for
from fixflow.operators.engines.base import MraEngine, MraState, RoundInfo
from fixflow.operators.materialize import Materializer
from fixflow.operators.plan import Fixpoint, Plan
from fixflow.operators.rounds import partitions_for, round_conf, session_conf
from fixflow.operators.strategies import aggregate_seminaive, mra, naive, nonrecursive, seminaive

log = logging.getLogger(__name__)

BOOTSTRAPS: tuple[
    tuple[str, Callable[[StratumRun], bool], Callable[[StratumRun], Bootstrapped]], ...
] = (
    ("nonrecursive", nonrecursive.bootstrap_applies, nonrecursive.bootstrap),
    ("mra", mra.bootstrap_applies, mra.bootstrap),
    ("set", seminaive.bootstrap_applies, seminaive.bootstrap),
    ("aggregate-seminaive", aggregate_seminaive.bootstrap_applies, aggregate_seminaive.bootstrap),
    ("naive", naive.bootstrap_applies, naive.bootstrap),
)
"""The bootstrap of every evaluation class, in the order they are tried."""

__all__ = [
    "BOOTSTRAPS",
    "Bootstrap",
    "EvalOptions",
    "Evaluation",
    "EvaluationError",
    "Progress",
    "StratumStats",
    "evaluate",
    "evaluate_with_stats",
    "program_plans",
    "session_conf",
]


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
class Evaluation:
    relations: dict[str, DataFrame]
    stats: list[StratumStats]
    states: dict[str, MraState] = field(default_factory=dict)
    """The MRA engine's final state of every MRA relation."""

    @property
    def capped(self) -> list[StratumStats]:
        return [s for s in self.stats if s.capped]

    @property
    def monotables(self) -> dict[str, DataFrame]:
        """Every MRA relation's MonoTable as the engine stores it (its columns are the
        engine's own: for inspection and tests)."""
        return {relation: state.frame for relation, state in self.states.items()}


def evaluate(
    report: Report,
    edb: Mapping[str, DataFrame],
    spark: SparkSession,
    options: EvalOptions | None = None,
) -> dict[str, DataFrame]:
    """Every IDB relation of ``report``'s program, with its result schema."""
    return evaluate_with_stats(report, edb, spark, options).relations


def evaluate_with_stats(
    report: Report,
    edb: Mapping[str, DataFrame],
    spark: SparkSession,
    options: EvalOptions | None = None,
    engine: MraEngine | None = None,
) -> Evaluation:
    """``evaluate`` with per-stratum statistics; ``engine`` overrides the options' mode."""
    options = options or EvalOptions()
    try:
        chosen = engine if engine is not None else engine_for(options.engine_options)
    except UnknownEngine as error:
        raise EvaluationError(str(error)) from None
    return Bootstrap(report, spark, options, chosen).run(edb)


class Bootstrap:
    """Bootstraps strata in order over one set of frames."""

    def __init__(
        self,
        report: Report,
        spark: SparkSession,
        options: EvalOptions,
        engine: MraEngine,
        *,
        materializer: Materializer | None = None,
        partitions: int = 1,
    ) -> None:
        self.report = report
        self.spark = spark
        self.options = options
        self.engine = engine
        self.frames = Frames(spark, report.catalog)
        """Every relation's rows (positional; an indexed relation with its index)."""
        self.materializer = materializer or Materializer(spark)
        self.partitions = partitions
        self.states: dict[str, MraState] = {}

    def run(self, edb: Mapping[str, DataFrame]) -> Evaluation:
        """Load ``edb`` (input relations, declared columns) and bootstrap every stratum."""
        rows = self.load(edb)
        self.partitions = partitions_for(self.spark, self.options.partitions, rows)
        with session_conf(self.spark, round_conf(self.partitions)):
            stats = [self.stratum(stratum) for stratum in self.report.strata]
        idb = sorted(self.report.analysis.idb)
        return Evaluation({rel: self.declared(rel) for rel in idb}, stats, dict(self.states))

    def load(self, edb: Mapping[str, DataFrame]) -> int:
        """Store the input relations (typed, deduplicated), keyed by the ``.input`` names,
        as their EDB relations (``Analysis.loaded``); their number of rows."""
        rows = 0
        for relation, stored in self.report.analysis.loaded.items():
            if relation in edb:
                normalized = self._normalized(relation, edb[relation])
                self.frames.full[stored], n = self.materializer.keep_counted(normalized)
                rows += n
        return rows

    def _normalized(self, relation: str, frame: DataFrame) -> DataFrame:
        types = self.report.catalog[relation].types
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

    def stratum(self, stratum: Stratum) -> StratumStats:
        """Bootstrap one stratum from the current frames of its inputs."""
        stats = StratumStats(
            stratum.index, stratum.relations, strategy_of(stratum, self.options.strategy)
        )
        run = StratumRun(
            self.report,
            stratum,
            self.frames,
            self.materializer,
            options=self.options,
            engine=self.engine,
            partitions=self.partitions,
            on_round=lambda info: self._progress(stats, info),
        )
        started, jobs = time.perf_counter(), self.materializer.jobs
        log.info("stratum %d %s: %s", stratum.index, stratum.relations, run.strategy)
        bootstrap = next(method for _, applies, method in BOOTSTRAPS if applies(run))
        done = bootstrap(run)
        self.states.update(done.states)
        stats.rounds, stats.capped = done.rounds, done.capped
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

    def result(self, relation: str) -> DataFrame:
        """The relation's result rows in positional columns (iteration index dropped)."""
        entry = self.report.catalog[relation]
        return result_rows(entry, self.frames.source(relation, "full"))

    def declared(self, relation: str) -> DataFrame:
        """The relation's result rows with their declared column names."""
        entry = self.report.catalog[relation]
        return self.result(relation).toDF(*(a.name for a in entry.result))

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
                    info.detail,
                )
            )


# ---------------------------------------------------------------- display


def program_plans(report: Report, max_iterations: int = 1000) -> list[Plan]:
    """One plan per stratum, for display (``explain``): a non-recursive stratum's plan, or a
    ``Fixpoint`` whose ``init`` are the exit rules and whose ``step`` are the delta rules
    (MRA: F′ reading the frontier)."""
    catalog = report.catalog
    plans: list[Plan] = []
    for stratum in report.strata:
        init, step = _stratum_plans(catalog, stratum)
        if not stratum.recursive:
            plans += [combine_plan(catalog[r], init) for r in stratum.relations if init]
            continue
        eval_class = stratum.eval_class or "naive"
        plans.append(
            Fixpoint(eval_class, stratum.relations, tuple(init), tuple(step), max_iterations)
        )
    return plans


def _stratum_plans(catalog: Catalog, stratum: Stratum) -> tuple[list[Plan], list[Plan]]:
    """(exit rules, delta rules) of a stratum as head-row plans (index variable at 0)."""
    init: list[Plan] = []
    step: list[Plan] = []
    members, recursive = set(stratum.relations), stratum.recursive
    for relation in stratum.relations:
        for rule in (r for r in stratum.rules if r.head.relation == relation):
            for body in rule.bodies:
                occurrences = atoms_over(body, members)
                if not recursive or not occurrences:
                    init.append(rule_rows(catalog, rule, body, recursive=recursive, iteration=0))
                step += [
                    rule_rows(
                        catalog, rule, body, recursive=recursive, versions={k: "delta"}, iteration=0
                    )
                    for k in occurrences
                ]
    return init, step
