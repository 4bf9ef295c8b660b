"""Keeping a checked program's relations current under EDB changes (one epoch per batch).

A ``Maintainer`` owns the current EDB and every IDB relation as cached DataFrames. Each
epoch takes the batch's net insertions and deletions per EDB relation and brings every
stratum up to date, stratum by stratum in evaluation order:

- a stratum none of whose inputs changed is left alone;
- otherwise the cheapest exact method that applies runs (see ``fixflow.operators.update``
  for the incremental ones); ``bootstrap`` — re-evaluating the stratum from its current
  inputs — is always available and is the fallback (PPDP'21's elastic switch: when an
  incremental update runs longer than ``switch_fraction`` × the last bootstrap of that
  stratum, it is abandoned and the stratum is bootstrapped).

Each epoch reports, per output relation, the rows to upsert and the keys to delete so the
pipeline can commit only changed result rows, and, per stratum, which strategy ran.
Knows Spark, not Kafka or Delta.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.checker.model import Report, Stratum
from fixflow.operators.evaluate import (
    EvalOptions,
    StratumStats,
    evaluate_with_stats,
    relation_info,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RelationChange:
    """How one relation changed in an epoch: ``upserts`` are whole new rows (new keys or
    changed values), ``deletes`` the keys (``key_columns``) that disappeared."""

    relation: str
    key_columns: tuple[str, ...]
    upserts: DataFrame
    deletes: DataFrame


@dataclass
class StratumEpoch:
    """What one stratum did in one epoch."""

    stratum: int
    relations: tuple[str, ...]
    strategy: str
    """``unchanged``, ``bootstrap`` or the name of an incremental update method."""
    rounds: int = 0
    seconds: float = 0.0
    note: str = ""


@dataclass
class Epoch:
    changes: dict[str, RelationChange] = field(default_factory=dict)
    """Per output relation that changed."""
    strata: list[StratumEpoch] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rounds(self) -> int:
        return sum(s.rounds for s in self.strata)


class Maintainer:
    """The current state of a program's relations, maintained epoch by epoch."""

    def __init__(
        self,
        report: Report,
        spark: SparkSession,
        options: EvalOptions | None = None,
        *,
        switch_fraction: float = 0.2,
    ) -> None:
        self.report = report
        self.spark = spark
        self.options = options or EvalOptions()
        self.switch_fraction = switch_fraction
        self.schemas = report.analysis.schemas
        self.outputs = tuple(report.analysis.program.outputs)
        self.edb: dict[str, DataFrame] = {}
        self.relations: dict[str, DataFrame] = {}
        self.published: dict[str, DataFrame] = {}
        """Per output relation, the rows the consumer holds: epochs report changes to it."""
        self.bootstrap_seconds: dict[int, float] = {}
        self.epochs = 0

    # ------------------------------------------------------------ public

    def load(
        self,
        edb: Mapping[str, DataFrame],
        published: Mapping[str, DataFrame] | None = None,
    ) -> Epoch:
        """Start from ``edb`` (input relations, declared columns; missing ones are empty):
        a full evaluation. ``published`` is what the consumer already holds of each output
        relation (e.g. the result tables); the next ``apply`` (or ``pending_changes``)
        reports changes relative to it. Without ``published`` the consumer holds nothing."""
        self.edb = {rel: self._cache(self._conform(rel, edb.get(rel))) for rel in self._inputs()}
        self.published = dict(published or {})
        return self._bootstrap_all(publish=False)

    def pending_changes(self) -> Epoch:
        """An epoch holding only the differences between the current relations and what was
        published (none after a regular epoch)."""
        epoch = Epoch(strata=[self._unchanged(s) for s in self.report.strata])
        self._publish(epoch)
        return epoch

    def apply(self, inserts: Mapping[str, DataFrame], deletes: Mapping[str, DataFrame]) -> Epoch:
        """One epoch: net insertions/deletions per EDB relation (inserted facts are absent
        and deleted facts present beforehand, as the pipeline's normalization guarantees)."""
        changed = {rel for rel in (*inserts, *deletes) if rel in self.edb}
        for rel in changed:
            frame = self.edb[rel]
            if rel in deletes:
                frame = frame.subtract(self._conform(rel, deletes[rel]))
            if rel in inserts:
                frame = frame.unionByName(self._conform(rel, inserts[rel])).distinct()
            self.edb[rel] = self._cache(frame)
        if not changed:
            return Epoch(strata=[self._unchanged(s) for s in self.report.strata])
        return self._bootstrap_all()

    def relation(self, name: str) -> DataFrame:
        """The current rows of ``name`` (EDB or IDB), with its declared columns."""
        if name in self.edb:
            return self.edb[name]
        return self.relations[name]

    # ------------------------------------------------------------ strategies

    def _bootstrap_all(self, publish: bool = True) -> Epoch:
        started = time.monotonic()
        evaluation = evaluate_with_stats(self.report, self.edb, self.spark, self.options)
        self.relations = {rel: self._cache(df) for rel, df in evaluation.relations.items()}
        epoch = Epoch(strata=[self._epoch_of(s) for s in evaluation.stats])
        epoch.seconds = time.monotonic() - started
        for stratum in epoch.strata:
            self.bootstrap_seconds[stratum.stratum] = stratum.seconds
        if publish:
            self._publish(epoch)
        self.epochs += 1
        return epoch

    def _publish(self, epoch: Epoch) -> None:
        """Record in ``epoch`` how every output relation differs from what was published."""
        for rel in self.outputs:
            epoch.changes[rel] = self._diff(rel, self.published.get(rel), self.relations[rel])
            self.published[rel] = self.relations[rel]

    @staticmethod
    def _epoch_of(stats: StratumStats) -> StratumEpoch:
        note = "hit the iteration cap" if stats.capped else ""
        return StratumEpoch(
            stats.stratum, stats.relations, "bootstrap", stats.rounds, stats.seconds, note
        )

    @staticmethod
    def _unchanged(stratum: Stratum) -> StratumEpoch:
        return StratumEpoch(stratum.index, stratum.relations, "unchanged")

    # ------------------------------------------------------------ helpers

    def _inputs(self) -> tuple[str, ...]:
        return tuple(self.report.analysis.program.inputs)

    def _columns(self, relation: str) -> list[str]:
        return [a.name for a in self.schemas[relation]]

    def _conform(self, relation: str, frame: DataFrame | None) -> DataFrame:
        """``frame`` with exactly the relation's declared columns and types (empty if None)."""
        from fixflow.operators.compiler import spark_type

        attributes = self.schemas[relation]
        if frame is None:
            from pyspark.sql.types import StructField, StructType

            schema = StructType([StructField(a.name, spark_type(a.type), True) for a in attributes])
            return self.spark.createDataFrame([], schema)
        return frame.select(*(F.col(a.name).cast(spark_type(a.type)) for a in attributes))

    def key_columns(self, relation: str) -> tuple[str, ...]:
        """Result rows are identified by their group-by columns for an aggregate relation
        (the aggregated value is updated in place), by all columns for a set relation."""
        info = relation_info(self.report, relation)
        return tuple(
            name for i, name in enumerate(info.names) if i not in (info.index_pos, info.value_pos)
        )

    def _diff(self, relation: str, old: DataFrame | None, new: DataFrame) -> RelationChange:
        keys = self.key_columns(relation)
        if old is None:
            empty = new.select(*keys).limit(0)
            return RelationChange(relation, keys, new, empty)
        changed_or_new = new.subtract(old)
        gone = old.select(*keys).subtract(new.select(*keys))
        return RelationChange(relation, keys, changed_or_new, gone)

    def _cache(self, frame: DataFrame) -> DataFrame:
        # A local checkpoint cuts the lineage: epochs must not grow the plan without bound.
        return frame.localCheckpoint(eager=True)
