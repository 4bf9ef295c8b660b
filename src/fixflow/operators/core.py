"""The core every evaluation class shares, bootstrap and update alike.

A ``StratumRun`` is one stratum being bootstrapped (``fixflow.operators.evaluate``) or
updated (``fixflow.operators.epoch.UpdateContext``, a ``StratumRun`` with the epoch's
changes). It holds the stratum's rules, the ``Frames`` its plans read and write, the
``Materializer`` that counts its jobs, the MRA engine, and offers the few operations every
strategy in ``fixflow.operators.strategies`` is built from:

- ``rule_rows``: one rule body's head rows as a plan (columns ``h0..``), any atom reading
  another version or stored name of its relation;
- ``combine``: G over the head rows of a relation's rules (or their distinct union), run
  on Spark, in positional columns;
- ``round``: called after every round (progress for a bootstrap, the elastic deadline for
  an update).

Also here: ``EvalOptions``, and the conversion of relation rows to result rows
(``result_rows``, via the catalog's ``result_positions``). What rounds share with the MRA
engines (session settings, the min/max "improves" test, the termination measure) is one
level lower, in ``fixflow.operators.rounds``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.checker import ast
from fixflow.checker.catalog import Catalog, RelationEntry
from fixflow.checker.model import EvalClass, MraSpec, Report, Stratum
from fixflow.operators.compiler import combine_plan, head_columns, rule_rows
from fixflow.operators.engines.base import EngineEnv, EngineOptions, MraEngine, MraState, RoundInfo
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.materialize import Materializer, checkpoint_rdds, reading_checkpoints_of
from fixflow.operators.memory_model import resolved_local_rows
from fixflow.operators.plan import (
    Plan,
    Version,
)
from fixflow.operators.relation import partition_bound, with_partition_bound
from fixflow.operators.spark_backend import (
    SparkBackend,
    column_name,
    positional,
    relation_struct,
    spark_type,
)
from fixflow.operators.thresholds import LOCAL_ROWS, TASK_LOOP_ROWS


class EvaluationError(Exception):
    """A program the engine cannot run (e.g. an unsupported shape)."""


def strategy_of(stratum: Stratum, forced: Mapping[str, EvalClass]) -> str:
    """How a stratum is evaluated: a strategy forced for one of its relations, else
    ``nonrecursive`` or the checker's evaluation class."""
    chosen = {forced[r] for r in stratum.relations if r in forced}
    if chosen:
        return chosen.pop()
    if not stratum.recursive:
        return "nonrecursive"
    return stratum.eval_class or "naive"


LIMIT_CAP = 1000
"""The round cap of a stratum that converges to a limit rather than a fixpoint, when the
user sets none (``round_cap``)."""

NO_CAP = sys.maxsize
"""``StratumRun.max_iterations`` of an uncapped stratum: loops compare with it as a cap."""


def reaches_fixpoint(report: Report, stratum: Stratum) -> bool:
    """Whether the stratum's evaluation ends when a round changes nothing, as every
    Soufflé stratum does: recursion without aggregates (``set``, arithmetic included),
    monotone min/max/count semi-naive, min/max MRA. Sum/count MRA (a limit, or a
    convergence the checker could not prove) and ``naive`` strata (iteration-indexed,
    ``mean``, non-monotone) may approach a limit for ever."""
    match stratum.eval_class:
        case "set" | "aggregate-seminaive":
            return True
        case "mra":
            specs = [report.mra[r] for r in stratum.relations if r in report.mra]
            return bool(specs) and all(s.aggregate in ("min", "max") for s in specs)
    return False


def round_cap(report: Report, stratum: Stratum, user_cap: int | None) -> int | None:
    """The stratum's round cap: the user's (``--max-iterations``, ``[engine]
    max_iterations``) on every stratum; else none where the stratum reaches a fixpoint,
    ``LIMIT_CAP`` where it may only approach a limit. None: no cap."""
    if user_cap is not None:
        return user_cap
    return None if reaches_fixpoint(report, stratum) else LIMIT_CAP


@dataclass
class EvalOptions:
    max_iterations: int | None = None
    """The round cap the user set, on every recursive stratum; None: ``round_cap``'s
    default rule. A stratum stopped by a cap is reported (``StratumStats.capped``): its
    results are partial."""
    engine_options: EngineOptions = field(default_factory=EngineOptions)
    """The MRA engine and its knobs (``[engine]``, ``[buffer]``)."""
    partitions: int | None = None
    """Partitions of MonoTables and auxiliary tables (default: spark.sql.shuffle.partitions)."""
    progress: Callable[[Progress], None] | None = None
    strategy: Mapping[str, EvalClass] = field(default_factory=dict)
    """Force a strategy for the stratum holding a relation (tests compare MRA and naive)."""
    local_rows: int = field(default_factory=lambda: resolved_local_rows(LOCAL_ROWS))
    """Strata whose inputs the driver holds (at most this many rows together) and that stay
    that small run there, without Spark jobs (``placement.place``): batch evaluation's
    strata (``driver.stratum``) and the Maintainer's min/max retractions
    (``driver.retraction``); 0: every stratum runs on Spark. One default everywhere
    (``thresholds.LOCAL_ROWS``, ``auto``: by the driver's memory), which ``[engine]
    local_rows`` and ``--local-rows`` set."""
    task_rows: int = TASK_LOOP_ROWS
    """A ``set``, ``aggregate-seminaive`` or ``naive`` stratum placed on Spark whose plans
    the numpy kernels run is run by one Spark task, one job in all, while its relations
    hold at most this many rows (``operators.task_stratum``); past it, Spark continues the
    loop a job a round. 0: always a job a round."""
    witness: bool = False
    """Keep, for min/max MRA relations, the key of the predecessor that gave each value:
    what the ``mra-retract`` update needs to handle deletions without re-evaluating. The
    stream pipeline turns it on; off for batch evaluation, where nothing reads it and the
    sync engine pays a second aggregate per round for it."""

    @property
    def engine(self) -> str:
        """The MRA engine's mode."""
        return self.engine_options.mode


@dataclass(frozen=True)
class Progress:
    """One round of one stratum, for progress reporting."""

    stratum: int
    relations: tuple[str, ...]
    strategy: str
    round: int
    pending: int
    measure: float | None = None
    detail: Mapping[str, float] = field(default_factory=dict)
    """Engine figures of the round (async: stages' local iterations, messages, β, cut)."""


# ---------------------------------------------------------------- G


def result_rows(entry: RelationEntry, frame: DataFrame) -> DataFrame:
    """A relation's positional rows as positional result rows (iteration index dropped)."""
    return frame.select(
        *(F.col(positional(p)).alias(positional(i)) for i, p in enumerate(entry.result_positions))
    )


# ---------------------------------------------------------------- frames


class Frames:
    """The DataFrames a run reads and writes, in positional columns ``c0..``.

    ``full``: every relation's current rows; ``delta``: a round's new rows of a stratum
    relation (what ``Scan(relation, "delta")`` reads); ``named``: frames under derived
    names (an update's ``R@add``, ``R@del``, ``R@old``), read through ``relation_of``."""

    def __init__(self, spark: SparkSession, catalog: Catalog) -> None:
        self.spark = spark
        self.catalog = catalog
        self.full: dict[str, DataFrame] = {}
        self.delta: dict[str, DataFrame] = {}
        self.named: dict[str, DataFrame] = {}
        self._empty: dict[str, DataFrame] = {}

    def source(self, relation: str, version: Version) -> DataFrame:
        if version == "aux":
            raise KeyError(f"`{relation}`: auxiliary tables belong to an MRA engine")
        table = self.delta if version == "delta" else self.full
        frame = self.named.get(relation) if version == "full" else None
        if frame is None:
            frame = table.get(relation)
        return frame if frame is not None else self.empty(relation)

    def empty(self, relation: str) -> DataFrame:
        if relation not in self._empty:
            struct = relation_struct(self.catalog[relation].types)
            self._empty[relation] = self.spark.createDataFrame([], struct)
        return self._empty[relation]


# ---------------------------------------------------------------- one stratum


@dataclass
class Bootstrapped:
    """What bootstrapping a stratum did."""

    rounds: int
    capped: bool = False
    states: dict[str, MraState] = field(default_factory=dict)
    """The MRA engine's state of each MRA relation."""


class StratumView:
    """One stratum of a checked program under ``options``: its class, relations, rules and
    their plans; no Spark (what ``placement`` decides from)."""

    def __init__(self, report: Report, stratum: Stratum, options: EvalOptions) -> None:
        self.report = report
        self.catalog = report.catalog
        self.stratum = stratum
        self.options = options
        self.strategy = strategy_of(stratum, options.strategy)
        """The evaluation class this run follows (forced or the checker's)."""

    @property
    def cap(self) -> int | None:
        """The stratum's iteration cap (``round_cap``); None: it runs until nothing changes."""
        return round_cap(self.report, self.stratum, self.options.max_iterations)

    @property
    def max_iterations(self) -> int:
        """The round cap as a bound loops compare with (``NO_CAP`` when uncapped)."""
        cap = self.cap
        return NO_CAP if cap is None else cap

    @property
    def relations(self) -> tuple[str, ...]:
        return self.stratum.relations

    def entry(self, relation: str) -> RelationEntry:
        return self.catalog[relation]

    def entries(self) -> list[RelationEntry]:
        return [self.catalog[r] for r in self.stratum.relations]

    def mra_spec(self) -> MraSpec | None:
        """The spec of the stratum's one MRA relation; None when the MRA engine cannot run
        the stratum (several relations, or no spec)."""
        if len(self.stratum.relations) != 1:
            return None
        return self.report.mra.get(self.stratum.relations[0])

    @cached_property
    def mra_program(self) -> MraProgram:
        """The stratum's one MRA relation compiled (``mra_spec`` must be known): compiled
        once, as placement's rules and the driver's loop each read it."""
        spec = self.mra_spec()
        assert spec is not None, "an MRA program needs the stratum's MraSpec"
        return MraProgram(spec, self.catalog.types)

    def rules(self, relation: str) -> list[ast.Rule]:
        return [r for r in self.stratum.rules if r.head.relation == relation]

    def occurrences(self, body: ast.Body) -> list[int]:
        """Literal indexes of the body's atoms over a relation of this stratum."""
        return atoms_over(body, set(self.stratum.relations))

    def rule_rows(
        self,
        rule: ast.Rule,
        body: ast.Body,
        *,
        versions: Mapping[int, Version] | None = None,
        relation_of: Mapping[int, str] | None = None,
        start: tuple[Plan, Mapping[str, ast.TypeName]] | None = None,
        iteration: int | None = None,
    ) -> Plan:
        return rule_rows(
            self.catalog,
            rule,
            body,
            recursive=self.stratum.recursive,
            versions=versions,
            relation_of=relation_of,
            start=start,
            iteration=iteration,
        )

    def body_plans(
        self, relation: str, rules: Sequence[ast.Rule] | None = None, iteration: int | None = None
    ) -> list[Plan]:
        """The head rows of every body of ``rules`` (default: all the relation's rules)."""
        chosen = self.rules(relation) if rules is None else rules
        return [self.rule_rows(r, b, iteration=iteration) for r in chosen for b in r.bodies]


class StratumRun(StratumView):
    """One stratum being bootstrapped or updated, and the Spark plumbing for it."""

    def __init__(
        self,
        report: Report,
        stratum: Stratum,
        frames: Frames,
        materializer: Materializer,
        *,
        options: EvalOptions,
        engine: MraEngine,
        partitions: int,
        on_round: Callable[[RoundInfo], None] | None = None,
    ) -> None:
        super().__init__(report, stratum, options)
        self.spark = frames.spark
        self.frames = frames
        self.materializer = materializer
        self.engine = engine
        self.partitions = partitions
        self._on_round = on_round
        self.backend = SparkBackend(self.spark, frames.source)

    def combine(self, relation: str, rows: Sequence[Plan]) -> DataFrame:
        """G over head rows (distinct union for a set relation), positional columns. An
        aggregate without a group over no bindings is no row (Spark's global aggregate
        would yield a null one)."""
        entry = self.catalog[relation]
        if not rows:
            return self.frames.empty(relation)
        frame = self.head_rows(relation, combine_plan(entry, rows))
        if entry.value_pos is not None and not entry.key_positions:
            frame = frame.where(F.col(positional(entry.value_pos)).isNotNull())
        return frame

    def head_rows(self, relation: str, plan: Plan) -> DataFrame:
        """A plan of head rows ``h0..`` run, in the relation's positional columns."""
        types = self.catalog[relation].types
        heads = head_columns(len(types))
        return self.backend.run(plan).select(
            *(
                F.col(column_name(h)).cast(spark_type(t)).alias(positional(i))
                for i, (h, t) in enumerate(zip(heads, types, strict=True))
            )
        )

    def derive(
        self, relation: str, rules: Sequence[ast.Rule] | None = None, iteration: int | None = None
    ) -> DataFrame:
        """G over every body of ``rules`` (default: all the relation's rules), full inputs."""
        return self.combine(relation, self.body_plans(relation, rules, iteration))

    def keep(self, frame: DataFrame) -> DataFrame:
        return self.materializer.keep(frame)

    def round(self, info: RoundInfo) -> None:
        """After every round: progress (bootstrap) or the deadline (update)."""
        if self._on_round is not None:
            self._on_round(info)

    def engine_env(self) -> EngineEnv:
        return EngineEnv(
            self.spark,
            self.frames.source,
            self.materializer,
            self.partitions,
            self.options.witness,
            self.options.engine_options,
        )


SEGMENTS = 8
"""A relation that only grows (an input relation under insertions, a non-recursive
relation under delta rules) is kept as a union of at most this many stored segments: an
epoch stores only its added rows, instead of storing the whole relation again (a job that
grows with the relation, not with the change); the epoch that would exceed it stores the
union as one segment again. Scans read the segments' blocks as they would one store's."""


def extended(
    materializer: Materializer, rows: DataFrame, added: DataFrame, *, stored: bool = False
) -> DataFrame:
    """``rows`` ∪ ``added`` (``appended``) as a segmented relation (``SEGMENTS``): only
    ``added`` is stored, unless ``stored`` says it is already a projection of a store of
    ``materializer`` (no job then); at the segment limit, the whole union is stored."""
    if segments_full(rows):
        return materializer.keep(appended(rows, added))
    segment = added if stored else materializer.keep(compacted(added))
    return reading_checkpoints_of(appended(rows, segment), rows, segment)


def segments_full(rows: DataFrame) -> bool:
    """Whether extending ``rows`` stores the whole union again (``SEGMENTS``)."""
    return len(checkpoint_rdds(rows)) >= SEGMENTS


def appended(rows: DataFrame, added: DataFrame) -> DataFrame:
    """``rows`` ∪ ``added`` in no more partitions than ``rows`` had (at least the default
    parallelism). A union's partitions are its inputs' together: a relation stored again
    after every epoch or round would otherwise gain partitions each time, and one whose
    delta is read from the relation itself (the EDB's removed rows) doubles them."""
    return bounded(rows.unionByName(added), rows)


def bounded(frame: DataFrame, like: DataFrame) -> DataFrame:
    """``frame`` in no more partitions than ``like`` has (at least the default parallelism);
    asking for ``like``'s partitions plans it, so lazily merged frames bound once, when
    they are stored. The result keeps the bound (``Relation.partition_bound``): a segmented
    relation extended every epoch is bounded by it without being planned again (two
    planning round trips, ~0.1 s, per relation and epoch)."""
    known = partition_bound(like)
    partitions = known if known is not None else like.rdd.getNumPartitions()
    bound = max(partitions, _parallelism(frame))
    return with_partition_bound(frame.coalesce(bound), bound)


def bounded_to(frame: DataFrame, partitions: int) -> DataFrame:
    """``frame`` in no more than ``partitions`` partitions (at least the default
    parallelism), without planning it: a union stored every round keeps its size."""
    return frame.coalesce(max(partitions, _parallelism(frame)))


def compacted(frame: DataFrame) -> DataFrame:
    """``frame`` in at most the default parallelism's partitions (a small change set
    would otherwise keep the partitions of every relation it was read from)."""
    return frame.coalesce(_parallelism(frame))


def _parallelism(frame: DataFrame) -> int:
    return int(frame.sparkSession.sparkContext.defaultParallelism)


def union_by_name(frames: Sequence[DataFrame]) -> DataFrame:
    """The union (by column name, duplicates kept) of one or more frames."""
    union = frames[0]
    for other in frames[1:]:
        union = union.unionByName(other)
    return union


def atoms_over(body: ast.Body, relations: Mapping[str, object] | set[str]) -> list[int]:
    """Literal indexes of the body's positive atoms over one of ``relations``."""
    return [
        i
        for i, lit in enumerate(body.literals)
        if isinstance(lit, ast.Atom) and lit.relation in relations
    ]
