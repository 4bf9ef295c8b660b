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
from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.checker import ast
from fixflow.checker.model import Report, Stratum
from fixflow.operators import update
from fixflow.operators.compiler import positional
from fixflow.operators.evaluate import (
    ROWS_PER_PARTITION,
    EvalOptions,
    StratumStats,
    evaluate_with_stats,
    relation_info,
    session_conf,
)
from fixflow.operators.update import Abandon, Delta, UpdateContext

log = logging.getLogger(__name__)

UPDATES = {
    "delta-rules": update.delta_rules,
    "affected-groups": update.affected_groups,
    "seminaive": update.continuation,
    "mra-improve": update.mra_improve,
    "continuation": update.continuation,
    "mra-correction": update.mra_correction,
}


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
    provisional: bool = False
    """Async consistency: some MRA relation still has pending deltas (its rows are not yet
    the fixpoint of the current facts); later epochs carry them on."""

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
        switch_fraction: float = 1.0,
        round_budget: int | None = None,
    ) -> None:
        self.report = report
        self.spark = spark
        self.options = options or EvalOptions()
        self.switch_fraction = switch_fraction
        if round_budget is not None and round_budget < 1:
            raise ValueError(f"round_budget must be at least 1, not {round_budget}")
        self.round_budget = round_budget
        """Async consistency: propagation rounds (at least 1) an incremental MRA update may
        run per epoch, after merging its seed; the deltas still pending are carried into
        the next epoch. None: converge every epoch."""
        self.carried: dict[str, DataFrame] = {}
        """MRA relations with pending deltas: their MonoTables (async consistency)."""
        self.schemas = report.analysis.schemas
        self.outputs = tuple(report.analysis.program.outputs)
        self.frames: dict[str, DataFrame] = {}
        """Every relation's current rows, positional columns (IDB: index dropped)."""
        self.published: dict[str, DataFrame] = {}
        """Per output relation, the rows the consumer holds: epochs report changes to it."""
        self.bootstrap_seconds: dict[int, float] = {}
        self.epochs = 0
        self._garbage: list[DataFrame] = []
        self.edb_rows: dict[str, int] = {}
        self.whole_program_only = self._reads_indexed_relation()

    # ------------------------------------------------------------ public

    @property
    def edb(self) -> dict[str, DataFrame]:
        return {rel: self.relation(rel) for rel in self._inputs()}

    @property
    def relations(self) -> dict[str, DataFrame]:
        return {rel: self.relation(rel) for rel in sorted(self.report.analysis.idb)}

    def load(
        self,
        edb: Mapping[str, DataFrame],
        published: Mapping[str, DataFrame] | None = None,
    ) -> Epoch:
        """Start from ``edb`` (input relations, declared columns; missing ones are empty):
        a full evaluation. ``published`` is what the consumer already holds of each output
        relation (e.g. the result tables); the next ``apply`` (or ``pending_changes``)
        reports changes relative to it. Without ``published`` the consumer holds nothing."""
        for rel in self._inputs():
            self.frames[rel] = _store(self._positional_input(rel, edb.get(rel)).distinct())
            self.edb_rows[rel] = self.frames[rel].count()
        self.published = dict(published or {})
        return self._bootstrap_all(publish=False)

    @property
    def provisional(self) -> bool:
        """Some relation has pending deltas: an epoch without input would make progress."""
        return bool(self.carried)

    def pending_changes(self) -> Epoch:
        """An epoch holding only the differences between the current relations and what was
        published (none after a regular epoch)."""
        epoch = Epoch(strata=[self._unchanged(s) for s in self.report.strata])
        self._publish(epoch)
        return epoch

    def apply(self, inserts: Mapping[str, DataFrame], deletes: Mapping[str, DataFrame]) -> Epoch:
        """One epoch: net insertions/deletions per EDB relation (inserted facts are absent
        and deleted facts present beforehand, as the pipeline's normalization guarantees).
        With no change at all it only carries pending deltas on (async consistency)."""
        started = time.monotonic()
        self._collect_garbage()
        old: dict[str, DataFrame] = {}
        deltas: dict[str, Delta] = {}
        for rel in {r for r in (*inserts, *deletes) if r in self._inputs()}:
            delta = self._edb_delta(rel, inserts.get(rel), deletes.get(rel))
            if delta.empty:
                continue
            old[rel], deltas[rel] = self.frames[rel], delta
            self.edb_rows[rel] += delta.n_added - delta.n_removed
            # Insert-only (the common case) needs no shuffle of the whole relation.
            kept = self.frames[rel].subtract(delta.removed) if delta.n_removed else old[rel]
            self.frames[rel] = _store(kept.unionByName(delta.added))
        if not deltas and not self.carried:
            return Epoch(strata=[self._unchanged(s) for s in self.report.strata])
        if self.whole_program_only:
            epoch = self._bootstrap_all()
        else:
            epoch = Epoch(strata=[self._stratum(s, old, deltas) for s in self.report.strata])
            self._publish(epoch)
            self.epochs += 1
        self._garbage += [*old.values(), *(f for d in deltas.values() for f in d.frames)]
        epoch.seconds = time.monotonic() - started
        epoch.provisional = self.provisional
        return epoch

    def relation(self, name: str) -> DataFrame:
        """The current rows of ``name`` (EDB or IDB), with its declared columns."""
        return self.frames[name].toDF(*self._declared(name))

    # ------------------------------------------------------------ one stratum

    def _stratum(
        self, stratum: Stratum, old: dict[str, DataFrame], deltas: dict[str, Delta]
    ) -> StratumEpoch:
        inputs = _inputs_of(stratum)
        changed = {r: deltas[r] for r in inputs if r in deltas}
        carried = {r: self.carried[r] for r in stratum.relations if r in self.carried}
        if not changed and not carried:
            return self._unchanged(stratum)
        started = time.monotonic()
        method = self._choose(stratum, changed)
        result: StratumEpoch | None = None
        note = ""
        if carried and method not in ("mra-improve", "mra-correction"):
            method = None  # the bootstrap converges, and the carried deltas go with it
        if method is not None:
            budget = self.switch_fraction * self.bootstrap_seconds.get(stratum.index, float("inf"))
            context = UpdateContext(
                self.report,
                stratum,
                self.spark,
                dict(self.frames),
                {r: old[r] for r in changed},
                changed,
                started + budget,
                self.options.max_iterations,
                carried=carried,
                round_budget=self.round_budget,
            )
            try:
                with session_conf(self.spark, self._round_conf()):
                    outcome = UPDATES[method](context)
                result = self._adopt(stratum, outcome.frames, outcome.deltas, old, deltas)
                result.strategy, result.rounds = f"update:{method}", outcome.rounds
                self._carry(stratum, outcome.carried)
            except Abandon as abandoned:
                note = f"update:{method} abandoned: {abandoned}"
                strategy = "bootstrap:switched" if abandoned.switched else "bootstrap"
            if result is None:
                result = self._bootstrap_stratum(stratum, old, deltas)
                result.strategy, result.note = strategy, note
                self._carry(stratum, {})
        else:
            result = self._bootstrap_stratum(stratum, old, deltas)
            self._carry(stratum, {})
        if stratum.relations[0] in self.carried:
            result.note = (result.note + "; " if result.note else "") + "deltas pending"
        result.seconds = time.monotonic() - started
        log.info(
            "epoch %d stratum %d %s: %s, %d round(s), %.3f s%s",
            self.epochs + 1,
            stratum.index,
            ",".join(stratum.relations),
            result.strategy,
            result.rounds,
            result.seconds,
            f" ({result.note})" if result.note else "",
        )
        return result

    def _carry(self, stratum: Stratum, left: dict[str, DataFrame]) -> None:
        """Record which of the stratum's MonoTables still have pending deltas."""
        for relation in stratum.relations:
            previous = self.carried.pop(relation, None)
            if previous is not None and previous is not left.get(relation):
                self._garbage.append(previous)
        self.carried.update(left)

    def _choose(self, stratum: Stratum, changed: dict[str, Delta]) -> str | None:
        """The cheapest exact update method for this stratum and change, or None."""
        if any(r in self.options.strategy for r in stratum.relations):
            return None  # a forced strategy is honoured by re-evaluation
        insert_only = all(d.n_removed == 0 for d in changed.values())
        negated = any(
            isinstance(lit, ast.Negation) and lit.atom.relation in changed
            for rule in stratum.rules
            for body in rule.bodies
            for lit in body.literals
        )
        infos = [relation_info(self.report, r) for r in stratum.relations]
        if any(i.index_pos is not None for i in infos) or negated:
            return None
        if not stratum.recursive:
            if insert_only and all(i.aggregate is None for i in infos):
                return "delta-rules"
            return "affected-groups" if self._keys_are_variables(stratum) else None
        aggregates = {i.aggregate for i in infos}
        if stratum.eval_class == "mra" and aggregates <= {"sum", "count"} and len(infos) == 1:
            context = UpdateContext(self.report, stratum, self.spark, self.frames, {}, {}, 0.0, 0)
            context.deltas = changed  # only the counts and current rows are consulted
            return "mra-correction" if update.correction_applies(context) else None
        if not insert_only or not aggregates <= {None, "min", "max"}:
            return None
        return {
            "set": "seminaive",
            "mra": "mra-improve",
            "aggregate-seminaive": "continuation",
        }.get(stratum.eval_class or "")

    def _round_conf(self) -> dict[str, str]:
        """As the engine's rounds: partitions by input size, no adaptive re-planning, and no
        broadcasts when everything fits one partition (small jobs pay dearly for both)."""
        default = int(self.spark.conf.get("spark.sql.shuffle.partitions") or 4)
        rows = sum(self.edb_rows.values())
        partitions = self.options.partitions or max(1, min(default, -(-rows // ROWS_PER_PARTITION)))
        conf = {
            "spark.sql.shuffle.partitions": str(partitions),
            "spark.sql.adaptive.enabled": "false",
        }
        if partitions == 1:
            conf["spark.sql.autoBroadcastJoinThreshold"] = "-1"
        return conf

    def _keys_are_variables(self, stratum: Stratum) -> bool:
        for rule in stratum.rules:
            info = relation_info(self.report, rule.head.relation)
            keys = [rule.head.args[i] for i in info.key_positions]
            names = [k.name for k in keys if isinstance(k, ast.Var)]
            if len(names) != len(keys) or len(set(names)) != len(names):
                return False
        return True

    def _adopt(
        self,
        stratum: Stratum,
        frames: dict[str, DataFrame],
        changes: dict[str, Delta],
        old: dict[str, DataFrame],
        deltas: dict[str, Delta],
    ) -> StratumEpoch:
        """Install a stratum's new rows and record its relations' changes for later strata."""
        for rel in stratum.relations:
            change = changes[rel]
            if change.empty:
                self._garbage += change.frames
                if frames[rel] is not self.frames[rel]:
                    self._garbage.append(frames[rel])
            else:
                old[rel], deltas[rel] = self.frames[rel], change
                self.frames[rel] = frames[rel]
        return StratumEpoch(stratum.index, stratum.relations, "update")

    def _bootstrap_stratum(
        self, stratum: Stratum, old: dict[str, DataFrame], deltas: dict[str, Delta]
    ) -> StratumEpoch:
        """Re-evaluate one stratum from its current inputs and diff against its old rows."""
        inputs = _inputs_of(stratum)
        analysis = replace(
            self.report.analysis,
            edb=frozenset(inputs),
            idb=frozenset(stratum.relations),
            strata=(stratum,),
        )
        sub = replace(self.report, analysis=analysis, strata=(stratum,))
        frames = {rel: self.frames[rel] for rel in inputs}
        evaluation = evaluate_with_stats(sub, frames, self.spark, self.options)
        stats = evaluation.stats[0]
        self.bootstrap_seconds[stratum.index] = stats.seconds
        new = {rel: _store(self._evaluated(rel, df)) for rel, df in evaluation.relations.items()}
        changes = {}
        for rel in stratum.relations:
            before = self.frames[rel]
            changes[rel] = update.changes_between(before, new[rel])
        self._adopt(stratum, new, changes, old, deltas)
        return self._epoch_of(stats)

    # ------------------------------------------------------------ whole program

    def _bootstrap_all(self, publish: bool = True) -> Epoch:
        started = time.monotonic()
        self._garbage += self.carried.values()
        self.carried = {}
        edb = {rel: self.frames[rel] for rel in self._inputs()}
        evaluation = evaluate_with_stats(self.report, edb, self.spark, self.options)
        for rel, df in evaluation.relations.items():
            if rel in self.frames:
                self._garbage.append(self.frames[rel])
            self.frames[rel] = _store(self._evaluated(rel, df))
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
            current = self.relation(rel)
            epoch.changes[rel] = self._diff(rel, self.published.get(rel), current)
            self.published[rel] = current

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

    def _declared(self, relation: str) -> list[str]:
        names = [a.name for a in self.schemas[relation]]
        if relation in self.report.analysis.idb:
            info = relation_info(self.report, relation)
            return [n for i, n in enumerate(names) if i != info.index_pos]
        return names

    def _evaluated(self, relation: str, frame: DataFrame) -> DataFrame:
        """An evaluated relation in positional columns. A group-less aggregate over no
        bindings has no row (docs and oracle); Spark's global aggregate yields a null one."""
        frame = frame.toDF(*(positional(i) for i in range(len(frame.columns))))
        info = relation_info(self.report, relation)
        if info.value_pos is not None and not self.key_columns(relation):
            value = info.value_pos - (1 if info.index_pos is not None else 0)
            frame = frame.where(F.col(positional(value)).isNotNull())
        return frame

    def _reads_indexed_relation(self) -> bool:
        """A stratum reading another stratum's iteration-indexed relation needs its index
        column, which results drop: such programs are only re-evaluated as a whole."""
        indexed = {
            rel
            for rel in self.report.analysis.idb
            if relation_info(self.report, rel).index_pos is not None
        }
        return any(rel in indexed for s in self.report.strata for rel in _inputs_of(s))

    def _edb_delta(
        self, relation: str, inserts: DataFrame | None, deletes: DataFrame | None
    ) -> Delta:
        current = self.frames[relation]
        columns = current.columns
        added = self._positional_input(relation, inserts)
        if inserts is not None:  # no join with the whole relation for an absent side
            added = added.distinct().join(current, columns, "left_anti")
        removed = self._positional_input(relation, deletes)
        if deletes is not None:
            removed = removed.distinct().join(current, columns, "left_semi")
        return update.stored_delta(added, removed)

    def _positional_input(self, relation: str, frame: DataFrame | None) -> DataFrame:
        conformed = self._conform(relation, frame)
        return conformed.toDF(*(positional(i) for i in range(len(conformed.columns))))

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

    def _collect_garbage(self) -> None:
        """Free the blocks of the previous epoch's replaced rows and deltas. Deferred to the
        next epoch: the consumer evaluates the reported changes, which read them."""
        live = set()
        for frame in [*self.frames.values(), *self.carried.values()]:
            rdd = update.checkpoint_rdd(frame)
            if rdd is not None:
                live.add(rdd.id())  # type: ignore[attr-defined]
        for frame in self._garbage:
            update.release(frame, keep=live)
        self._garbage = []


def _inputs_of(stratum: Stratum) -> list[str]:
    """Relations the stratum's rules read (negated ones too), outside the stratum."""
    names: list[str] = []
    for rule in stratum.rules:
        for body in rule.bodies:
            for lit in body.literals:
                atom = lit.atom if isinstance(lit, ast.Negation) else lit
                outside = isinstance(atom, ast.Atom) and atom.relation not in stratum.relations
                if outside and atom.relation not in names:  # type: ignore[union-attr]
                    names.append(atom.relation)  # type: ignore[union-attr]
    return names


def _store(frame: DataFrame) -> DataFrame:
    # A local checkpoint cuts the lineage: epochs must not grow the plan without bound.
    return frame.localCheckpoint(eager=True)
