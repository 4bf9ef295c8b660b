"""Batch evaluation of a checked program on Spark: the bootstrap of every stratum.

``evaluate(report, edb, spark, options) -> {relation: DataFrame}`` runs the strata of a
``Report`` in order. The ``Bootstrap`` driver loads the EDB, then places each stratum
(``placement.place``: in the driver over numpy kernels, ``operators.driver``; the same loop in
one Spark task, ``operators.task_stratum``; or on Spark)
and bootstraps it with the class module (``fixflow.operators.strategies``) that
``placement.bootstrap_method`` names:

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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TypeAlias, TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.checker.catalog import Catalog
from fixflow.checker.model import Report, Stratum
from fixflow.checker.stratification import dependency_edges
from fixflow.operators.compiler import combine_plan, rule_rows
from fixflow.operators.core import (
    Bootstrapped,
    EvalOptions,
    EvaluationError,
    Frames,
    Progress,
    StratumRun,
    atoms_over,
    result_rows,
    round_cap,
    strategy_of,
)
from fixflow.operators.driver.rows import local_rows, to_frame, to_table
from fixflow.operators.driver.stratum import run_locally
from fixflow.operators.engines.base import MraEngine, MraState, RoundInfo
from fixflow.operators.engines.batches import Batch, table_rows
from fixflow.operators.engines.kernels import distinct_rows
from fixflow.operators.engines.modes import UnknownEngine, engine_for
from fixflow.operators.materialize import Materializer
from fixflow.operators.placement import (
    Outgrown,
    Placement,
    Reached,
    bootstrap_method,
    log_placement,
    outgrown,
    place,
)
from fixflow.operators.plan import Fixpoint, Plan
from fixflow.operators.rounds import partitions_for, round_conf, session_conf
from fixflow.operators.spark_backend import positional, relation_struct, spark_type
from fixflow.operators.strategies import aggregate_seminaive, mra, naive, nonrecursive, seminaive
from fixflow.operators.strategies.aggregate_seminaive import growth_for
from fixflow.operators.task_stratum import run_in_task

log = logging.getLogger(__name__)

T = TypeVar("T")

Input: TypeAlias = DataFrame | pa.Table
"""An input relation's rows in its declared columns: a Spark frame, or an Arrow table (as
``fixflow eval`` reads facts files: held in the driver, or given to Spark, by size)."""


@dataclass(frozen=True)
class CountedFrame:
    """An input's rows as a Spark frame whose rows are counted already (a facts file read
    by Spark tasks, ``lake.task_facts``): more than ``local_rows`` go to Spark without the
    job that would collect up to ``local_rows`` of them to find out."""

    frame: DataFrame
    rows: int


EvalInput: TypeAlias = Input | CountedFrame
"""What a bootstrap reads an input from."""

BOOTSTRAPS: dict[str, Callable[[StratumRun], Bootstrapped]] = {
    "nonrecursive": nonrecursive.bootstrap,
    "mra": mra.bootstrap,
    "set": seminaive.bootstrap,
    "aggregate-seminaive": aggregate_seminaive.bootstrap,
    "naive": naive.bootstrap,
}
"""The Spark bootstrap of every evaluation class, by ``placement.bootstrap_method``."""

__all__ = [
    "BOOTSTRAPS",
    "Bootstrap",
    "CountedFrame",
    "EvalInput",
    "EvalOptions",
    "Evaluation",
    "EvaluationError",
    "Progress",
    "StratumStats",
    "evaluate",
    "evaluate_with_stats",
    "partial_relations",
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
    """A round cap stopped the stratum before it converged: its rows (and those of every
    later stratum reading them) are partial."""
    cap: int | None = None
    """The stratum's iteration cap (``core.round_cap``); None: none."""
    seconds: float = 0.0
    jobs: int = 0
    placement: Placement | None = None
    """Where the stratum ran and why (``placement.place``)."""

    @property
    def local(self) -> bool:
        """Whether the stratum ran in the driver (``fixflow.operators.driver``)."""
        return self.placement is not None and self.placement.in_driver


class Relations(Mapping[str, T]):
    """Results made when first read: a relation evaluated in the driver becomes a Spark
    frame only if someone asks for it."""

    def __init__(self, make: Callable[[str], T], names: Sequence[str]) -> None:
        self._make = make
        self._names = list(names)
        self._made: dict[str, T] = {}

    def __getitem__(self, relation: str) -> T:
        if relation not in self._names:
            raise KeyError(relation)
        if relation not in self._made:
            self._made[relation] = self._make(relation)
        return self._made[relation]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass
class Evaluation:
    relations: Mapping[str, DataFrame]
    stats: list[StratumStats]
    states: dict[str, MraState] = field(default_factory=dict)
    """The MRA engine's final state of every MRA relation."""
    tables: Mapping[str, pa.Table] = field(default_factory=dict)
    """The relations evaluated in the driver, as Arrow tables of their result rows in
    positional columns: written out without a Spark job."""

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
    edb: Mapping[str, EvalInput],
    spark: SparkSession,
    options: EvalOptions | None = None,
) -> dict[str, DataFrame]:
    """Every IDB relation of ``report``'s program, with its result schema."""
    return dict(evaluate_with_stats(report, edb, spark, options).relations)


def evaluate_with_stats(
    report: Report,
    edb: Mapping[str, EvalInput],
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
        held: Callable[[DataFrame], Batch | None] | None = None,
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
        self.held = held
        """The driver's rows of a frame when it holds them (the Maintainer's copies): a
        stratum in the driver reads them instead of collecting the frame. A frame of an
        input relation it holds is a set."""
        self.local: dict[str, Batch] | None = (
            {} if held is not None and options.local_rows > 0 else None
        )
        """The relations whose rows are in the driver, when small strata may run there
        (``run`` with ``EvalOptions.local_rows``, or a Maintainer's bootstrap)."""
        self.witnessed: dict[str, Batch] = {}
        """min/max MRA relations bootstrapped in the driver with ``EvalOptions.witness``:
        their rows with witnesses (``driver.stratum.witnessed_rows``)."""
        self.unshared: set[str] = set()
        """Relations in the driver that Spark has no frame of yet (``_share``)."""
        self._before_spark: Callable[[], None] | None = None
        """What ``run`` sets up before the first stratum on Spark (``_enter_rounds``)."""

    def run(self, edb: Mapping[str, EvalInput]) -> Evaluation:
        """Load ``edb`` (input relations, declared columns) and bootstrap every stratum."""
        self.local = {} if self.options.local_rows > 0 else None
        rows = self.load(edb)
        with ExitStack() as spark_rounds:
            self._before_spark = lambda: self._enter_rounds(spark_rounds, rows)
            stats = [self.stratum(stratum) for stratum in self.report.strata]
        self._before_spark = None
        idb = sorted(self.report.analysis.idb)
        local = [rel for rel in idb if self.local is not None and rel in self.local]
        return Evaluation(
            Relations(self.declared, idb), stats, dict(self.states), Relations(self.table, local)
        )

    def _enter_rounds(self, stack: ExitStack, rows: int) -> None:
        """Spark's round settings, set before the first stratum that runs on Spark: reading
        them would start Spark, which a run whose strata all stay in the driver never needs
        (``on_demand``)."""
        self._before_spark = None
        self.partitions = partitions_for(self.spark, self.options.partitions, rows)
        stack.enter_context(session_conf(self.spark, round_conf(self.partitions)))

    def load(self, edb: Mapping[str, EvalInput]) -> int:
        """Store the input relations (typed, deduplicated), keyed by the ``.input`` names,
        as their EDB relations (``Analysis.loaded``); their number of rows."""
        rows = 0
        for relation, stored in self.report.analysis.loaded.items():
            if relation in edb:
                rows += self._load_one(relation, stored, edb[relation])
        return rows

    def _load_one(self, relation: str, stored: str, rows: EvalInput) -> int:
        if isinstance(rows, CountedFrame):
            if self.local is not None and rows.rows <= self.options.local_rows:
                return self._load_one(relation, stored, rows.frame)
            frame = self._normalized(relation, rows.frame)
            self.frames.full[stored], n = self.materializer.keep_counted(frame)
            return n
        declared = len(self.report.catalog[relation].types)
        width = rows.num_columns if isinstance(rows, pa.Table) else len(rows.columns)
        if width != declared:
            raise EvaluationError(f"input `{relation}` has {width} columns, declared {declared}")
        batch = self._local_input(relation, rows)
        if batch is not None and self.local is not None:
            self.local[stored] = batch
            if isinstance(rows, DataFrame) and self._held(rows) is batch:
                self.frames.full[stored] = rows  # already Spark's: typed, positional, a set
            else:
                self.unshared.add(stored)
            return batch.n
        frame = self._spark_input(relation, rows) if isinstance(rows, pa.Table) else rows
        self.frames.full[stored], n = self.materializer.keep_counted(
            self._normalized(relation, frame)
        )
        return n

    def _normalized(self, relation: str, frame: DataFrame) -> DataFrame:
        types = self.report.catalog[relation].types
        return frame.select(
            *(
                F.col(f"`{name}`").cast(spark_type(t)).alias(positional(i))
                for i, (name, t) in enumerate(zip(frame.columns, types, strict=True))
            )
        ).distinct()

    def _local_input(self, relation: str, frame: DataFrame | pa.Table) -> Batch | None:
        """An input's rows, deduplicated, when the driver holds them in the declared types
        (``local_rows``); None otherwise (``_normalized`` then types them on Spark)."""
        if self.local is None:
            return None
        types = self.report.catalog[relation].types
        if isinstance(frame, pa.Table):
            if frame.num_rows > self.options.local_rows:
                return None
            return distinct_rows(table_rows(frame, types))
        if [f.dataType for f in frame.schema.fields] != [spark_type(t) for t in types]:
            return None
        known = self._held(frame)
        if known is not None:
            return known if known.n <= self.options.local_rows else None
        batch = local_rows(frame, self.options.local_rows)
        return None if batch is None else distinct_rows(batch)

    def _spark_input(self, relation: str, table: pa.Table) -> DataFrame:
        types = self.report.catalog[relation].types
        renamed = table.rename_columns([positional(i) for i in range(len(types))])
        return self.spark.createDataFrame(renamed, relation_struct(types))

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
        stats.cap = run.cap
        started, jobs = time.perf_counter(), self.materializer.jobs
        done, stats.placement = self._placed(run)
        self.states.update(done.states)
        stats.rounds, stats.capped = done.rounds, done.capped
        stats.seconds = time.perf_counter() - started
        stats.jobs = self.materializer.jobs - jobs
        if stats.capped:  # info: the caller warns once (`fixflow eval`, the Maintainer)
            log.info(
                "stratum %d %s hit the iteration cap (%d rounds) before converging",
                stratum.index,
                ", ".join(stratum.relations),
                run.max_iterations,
            )
        return stats

    def _placed(self, run: StratumRun) -> tuple[Bootstrapped, Placement]:
        """The stratum bootstrapped where ``place`` puts it: in the driver (its rows handed
        to Spark as local relations when Spark reads them), or on Spark."""
        placement = place(run, self._driver_size)
        reached = None
        if placement.in_driver:
            try:
                done = self._in_driver(run)
            except Outgrown as error:
                reached = error.reached
                rounds = None if reached is None else reached.rounds
                placement = outgrown(run, "the driver", str(error), rounds)
            else:
                log_placement(run, placement)
                return done, placement
        log_placement(run, placement)
        if self._before_spark is not None:
            self._before_spark()
            run.partitions = self.partitions
        self._share(*sorted(self.unshared))
        if reached is not None:
            return self._resumed(run, reached), placement
        if placement.where == "task":
            return self._in_task(run, placement)
        return BOOTSTRAPS[bootstrap_method(run)](run), placement

    def _in_task(self, run: StratumRun, placement: Placement) -> tuple[Bootstrapped, Placement]:
        """The stratum's loop in one Spark task (``task_stratum``); continued (semi-naive)
        or restarted (naive) on Spark when it outgrows ``task_rows``."""
        ended = run_in_task(run, self.options.task_rows)
        if ended.outgrown is None:
            run.round(RoundInfo(ended.rounds, 0, None))  # the task reports no rounds itself
            return Bootstrapped(ended.rounds, ended.capped), placement
        rounds = ended.rounds if ended.resumable else None
        placement = outgrown(run, "one task", ended.outgrown, rounds)
        log_placement(run, placement)
        if not ended.resumable:
            return BOOTSTRAPS[bootstrap_method(run)](run), placement
        growth = {r: growth_for(run.entry(r)) for r in run.relations}
        return seminaive.resumed(run, growth, ended.rounds), placement

    def _resumed(self, run: StratumRun, reached: Reached) -> Bootstrapped:
        """A semi-naive loop the driver began, continued on Spark from its rows."""
        for relation in run.relations:
            types = self.report.catalog[relation].types
            run.frames.full[relation] = to_frame(self.spark, reached.full[relation], types)
            run.frames.delta[relation] = to_frame(self.spark, reached.delta[relation], types)
        growth = {r: growth_for(run.entry(r)) for r in run.relations}
        return seminaive.resumed(run, growth, reached.rounds)

    def _in_driver(self, run: StratumRun) -> Bootstrapped:
        """The stratum bootstrapped in the driver (``fixflow.operators.driver``)."""
        assert self.local is not None, "placed in the driver only with local_rows > 0"
        done = run_locally(run, self._in_driver_rows, self.options.local_rows)
        self.local.update(done.rows)
        self.unshared.update(done.rows)
        self.witnessed.update(done.witnessed)
        return Bootstrapped(done.rounds, done.capped)

    def _driver_size(self, relation: str) -> int | None:
        """``placement.Sizes``: a relation's rows in the driver, collected from Spark when
        it has at most ``local_rows`` (one job; ``_in_driver_rows``)."""
        if self.local is None:
            return None
        batch = self._in_driver_rows(relation)
        return None if batch is None else batch.n

    def _in_driver_rows(self, relation: str) -> Batch | None:
        """A relation's rows for a stratum in the driver: held there, or collected from
        its Spark frame (one job, at most ``local_rows`` + 1 rows); None when larger."""
        assert self.local is not None
        if relation not in self.local:
            frame = self.frames.source(relation, "full")
            known = self._held(frame)
            if known is not None:
                if known.n > self.options.local_rows:
                    return None
                self.local[relation] = known
                return known
            if not frame.isLocal():
                self.materializer.jobs += 1  # the collect: counted with the stratum's jobs
            batch = local_rows(frame, self.options.local_rows)
            if batch is None:
                return None
            self.local[relation] = batch
        return self.local[relation]

    def _held(self, frame: DataFrame) -> Batch | None:
        return None if self.held is None else self.held(frame)

    def _share(self, *relations: str) -> None:
        """Give Spark a frame (a local relation: no job) of relations held in the driver."""
        for relation in relations:
            if relation in self.unshared and self.local is not None:
                types = self.report.catalog[relation].types
                self.frames.full[relation] = to_frame(self.spark, self.local[relation], types)
                self.unshared.discard(relation)

    def table(self, relation: str) -> pa.Table:
        """A relation held in the driver as an Arrow table of its result rows, in
        positional columns (iteration index dropped)."""
        assert self.local is not None and relation in self.local
        entry = self.report.catalog[relation]
        table = to_table(self.local[relation], entry.types)
        return table.select(list(entry.result_positions)).rename_columns(
            [positional(i) for i in range(len(entry.result_positions))]
        )

    def result(self, relation: str) -> DataFrame:
        """The relation's result rows in positional columns (iteration index dropped)."""
        self._share(relation)
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


def partial_relations(report: Report, capped: Iterable[int]) -> dict[str, frozenset[int]]:
    """Every relation whose rows are partial because the strata ``capped`` (indexes)
    stopped at a round cap: theirs, and those of every later stratum reading them (through
    a negation too: a missing row there may add one) → the capped strata they depend on."""
    stopped = set(capped)
    reached: dict[str, frozenset[int]] = {}
    idb = report.analysis.idb
    for stratum in report.strata:
        edges = dependency_edges(stratum.rules, idb)
        mine = frozenset().union(*(reached.get(e.body, frozenset()) for e in edges))
        if stratum.index in stopped:
            mine |= {stratum.index}
        if mine:
            reached.update(dict.fromkeys(stratum.relations, mine))
    return reached


# ---------------------------------------------------------------- display


def program_plans(report: Report, max_iterations: int | None = None) -> list[Plan]:
    """One plan per stratum, for display (``explain``): see ``stratum_plans``."""
    return [p for stratum in report.strata for p in stratum_plans(report, stratum, max_iterations)]


def stratum_plans(
    report: Report, stratum: Stratum, max_iterations: int | None = None
) -> list[Plan]:
    """A stratum's plans, for display: a non-recursive stratum's plan per relation, or a
    ``Fixpoint`` whose ``init`` are the exit rules and whose ``step`` are the delta rules
    (MRA: F′ reading the frontier), with its iteration cap (``round_cap``: the user's
    ``max_iterations``, else the default rule)."""
    catalog = report.catalog
    init, step = _stratum_plans(catalog, stratum)
    if not stratum.recursive:
        return [combine_plan(catalog[r], init) for r in stratum.relations if init]
    eval_class = stratum.eval_class or "naive"
    cap = round_cap(report, stratum, max_iterations)
    return [Fixpoint(eval_class, stratum.relations, tuple(init), tuple(step), cap)]


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
