"""Keeping a checked program's relations current under EDB changes (one epoch per batch).

A ``Maintainer`` owns the current EDB and every IDB relation as cached DataFrames. Each
epoch takes the batch's net insertions and deletions per EDB relation and brings every
stratum up to date, stratum by stratum in evaluation order:

- a stratum none of whose inputs changed (and with no pending MRA deltas) is left alone;
- otherwise the first method of ``UPDATES`` (ordered cheapest first; each one's ``applies``
  and ``run`` live in its class module in ``fixflow.operators.strategies``) that applies
  runs; the bootstrap — re-evaluating the stratum from its current inputs with
  ``evaluate.Bootstrap`` — is always available and is the fallback;
- the elastic switch (PPDP'21): an update still running after ``switch_fraction`` × the
  last bootstrap of its stratum is abandoned between rounds and the stratum bootstrapped.

Each epoch reports, per output relation, the rows to upsert and the keys to delete so the
pipeline can commit only changed result rows, and, per stratum, which strategy ran.
Knows Spark, not Kafka or Delta.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from fixflow.checker import ast
from fixflow.checker.model import Report, Stratum
from fixflow.operators.compiler import join_on, minus, positional, spark_type
from fixflow.operators.core import (
    PARTITION_BOUND,
    EvalOptions,
    Frames,
    StratumRun,
    appended,
    compacted,
    extended,
    segments_full,
)
from fixflow.operators.engines.base import MraState
from fixflow.operators.engines.kernels import Batch, anti_join, distinct_rows
from fixflow.operators.engines.modes import engine_for
from fixflow.operators.epoch import (
    Abandon,
    Delta,
    Outcome,
    UpdateContext,
    changes_between,
    stored_delta,
)
from fixflow.operators.evaluate import Bootstrap, Input, StratumStats
from fixflow.operators.lazy_frame import deferred, renamed
from fixflow.operators.local import (
    LocalUnsupported,
    arrow_frame,
    empty_rows,
    table_rows,
    to_frame,
    to_table,
)
from fixflow.operators.local_update import (
    CHAIN_ROWS,
    HANDOVER_ROWS,
    ChangedSince,
    DriverCopies,
    hand_over,
)
from fixflow.operators.materialize import (
    Materializer,
    checkpoint_rdds,
    live_rdds,
    reading_checkpoints_of,
    release_frame,
)
from fixflow.operators.rounds import partitions_for, round_conf, session_conf
from fixflow.operators.strategies import aggregate_seminaive, dred, mra, nonrecursive, seminaive

log = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass(frozen=True)
class UpdateMethod:
    """An incremental update method: its name (``update:<name>`` in reports), when it
    applies to a stratum's epoch, and how it runs."""

    name: str
    applies: Callable[[UpdateContext], bool]
    run: Callable[[UpdateContext], Outcome]
    resumes: bool = False
    """It can carry an MRA relation's pending deltas on (async consistency)."""


UPDATES: tuple[UpdateMethod, ...] = (
    UpdateMethod("delta-rules", nonrecursive.delta_rules_applies, nonrecursive.delta_rules),
    UpdateMethod(
        "affected-groups", nonrecursive.affected_groups_applies, nonrecursive.affected_groups
    ),
    UpdateMethod("seminaive", seminaive.update_applies, seminaive.update),
    UpdateMethod("continuation", aggregate_seminaive.update_applies, aggregate_seminaive.update),
    UpdateMethod("dred", dred.set_applies, dred.update),
    UpdateMethod("dred-groups", dred.groups_applies, dred.update),
    UpdateMethod("mra-retract", mra.retract_applies, mra.retract, resumes=True),
    UpdateMethod("mra-improve", mra.improve_applies, mra.improve, resumes=True),
    UpdateMethod("mra-correction", mra.correction_applies, mra.correction, resumes=True),
)
"""Every update method, cheapest first: the first that applies runs."""


@dataclass(frozen=True)
class RelationChange:
    """How one relation changed in an epoch: ``upserts`` are whole new rows (new keys or
    changed values), ``deletes`` the keys (``key_columns``) that disappeared."""

    relation: str
    key_columns: tuple[str, ...]
    upserts: DataFrame
    deletes: DataFrame
    unchanged: bool = False
    """Known to be empty without running a job (the relation's rows are the published
    ones): the consumer need not collect ``upserts`` and ``deletes``."""
    tables: tuple[pa.Table, pa.Table] | None = None
    """``upserts`` and ``deletes`` as Arrow tables (result columns), when the driver made
    the change (``local_update``): the consumer need not collect them either."""

    @classmethod
    def nothing(cls, relation: str, keys: tuple[str, ...], rows: DataFrame) -> RelationChange:
        """No change of ``relation`` (whose current rows are ``rows``)."""
        key_schema = StructType([rows.schema[k] for k in keys])
        return cls(
            relation,
            keys,
            deferred(rows, lambda f: f.limit(0), rows.schema),
            deferred(rows, lambda f: f.select(*keys).limit(0), key_schema),
            unchanged=True,
        )

    @property
    def new_rows(self) -> bool:
        """No upserted key is among the rows published before, so the consumer may append
        them: true of a set relation's change (its key is the whole row, and the Maintainer
        never reports a published row as upserted); an aggregate's upserts may replace
        values."""
        return len(self.key_columns) == len(self.upserts.columns)


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
    jobs: int = 0
    """Spark jobs of the stratum's materializations in this epoch."""
    capped: bool = False
    """A round cap stopped the stratum before it converged this epoch."""
    cap: int | None = None
    """The stratum's round cap when it stopped there (``core.round_cap``)."""


LESSON_EPOCHS = 4
"""How many epochs that change a stratum an abandoned update's lesson lasts."""


@dataclass
class Lesson:
    """An update abandoned by the elastic switch: changes at least ``share`` of their input
    go straight to a bootstrap for the next ``epochs_left`` epochs of the stratum."""

    share: float
    epochs_left: int = LESSON_EPOCHS


@dataclass
class Epoch:
    changes: dict[str, RelationChange] = field(default_factory=dict)
    """Per output relation that changed."""
    strata: list[StratumEpoch] = field(default_factory=list)
    seconds: float = 0.0
    provisional: bool = False
    """Async consistency: some MRA relation still has pending deltas (its rows are not yet
    the fixpoint of the current facts); later epochs carry them on."""
    partial: list[StratumEpoch] = field(default_factory=list)
    """The strata whose rows are partial after this epoch (``Maintainer.partial``)."""

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
        self.catalog = report.catalog
        self.spark = spark
        self.options = options or EvalOptions()
        self.engine = engine_for(self.options.engine_options)
        """The MRA engine, looked up once: it may keep per-relation state across epochs."""
        self.materializer = Materializer(spark)
        self.switch_fraction = switch_fraction
        if round_budget is not None and round_budget < 1:
            raise ValueError(f"round_budget must be at least 1, not {round_budget}")
        self.round_budget = round_budget
        """Async consistency: propagation rounds (at least 1) an incremental MRA update may
        run per epoch, after merging its seed; the deltas still pending are carried into
        the next epoch. None: converge every epoch."""
        self.carried: dict[str, MraState] = {}
        """MRA relations with pending deltas: their engine states (async consistency)."""
        self.witnessed: dict[str, DataFrame] = {}
        """min/max MRA relations with ``EvalOptions.witness``: their rows with witnesses
        ``w0..`` (``frames`` holds a projection of them)."""
        self.outputs = tuple(report.analysis.program.outputs)
        self.frames: dict[str, DataFrame] = {}
        """Every relation's current rows, positional columns (IDB: result rows)."""
        self.published: dict[str, DataFrame] = {}
        """Per output relation, the rows the consumer holds: epochs report changes to it."""
        self._published_rows: dict[str, DataFrame] = {}
        """Per output relation, the ``frames`` entry that was published (when it was)."""
        self.bootstrap_seconds: dict[int, float] = {}
        self.lessons: dict[int, Lesson] = {}
        """Per stratum, what the elastic switch learned from an update it abandoned."""
        self.epochs = 0
        self._garbage: list[DataFrame] = []
        self.edb_rows: dict[str, int] = {}
        self.whole_program_only = self._reads_indexed_relation()
        limit = self.options.local_rows
        self.copies = DriverCopies(limit, self.materializer) if limit > 0 else None
        """The driver's copies of small relations (``local_update``): min/max retractions
        of at most ``EvalOptions.local_rows`` rows run there without a Spark job."""
        self._changed_since: dict[str, ChangedSince] = {}
        """Per input relation stored lazily (``_changed_later``), its changes since the
        last rows Spark stored."""
        self.partial: dict[int, StratumEpoch] = {}
        """Per stratum whose rows are partial, the epoch a round cap stopped it in. An
        update continues from partial rows and stays partial; a bootstrap that converges
        ends it."""

    # ------------------------------------------------------------ public

    @property
    def edb(self) -> dict[str, DataFrame]:
        """Every input relation's loaded facts, by its ``.input`` name."""
        return {rel: self.relation(stored) for rel, stored in self._loaded().items()}

    @property
    def relations(self) -> dict[str, DataFrame]:
        return {rel: self.relation(rel) for rel in sorted(self.report.analysis.idb)}

    def load(
        self,
        edb: Mapping[str, Input],
        published: Mapping[str, DataFrame] | None = None,
    ) -> Epoch:
        """Start from ``edb`` (input relations, declared columns; missing ones are empty):
        a full evaluation. ``published`` is what the consumer already holds of each output
        relation (e.g. the result tables); the next ``apply`` (or ``pending_changes``)
        reports changes relative to it. Without ``published`` the consumer holds nothing."""
        for user, rel in self._loaded().items():
            self.frames[rel], self.edb_rows[rel] = self._loaded_input(rel, edb.get(user))
        self.published = dict(published or {})
        self._published_rows = {}
        return self._bootstrap_all(publish=False)

    def _loaded_input(self, relation: str, given: Input | None) -> tuple[DataFrame, int]:
        """An input relation's loaded rows (a set) and their number. When the driver keeps
        copies, an Arrow table of up to ``HANDOVER_ROWS`` rows, or a missing input (no
        rows), becomes a local relation (no job) whose rows it holds; anything else is
        stored on Spark (one job)."""
        copies, types = self.copies, self.catalog[relation].types
        small = given is None or (isinstance(given, pa.Table) and given.num_rows <= HANDOVER_ROWS)
        if small and copies is not None and types:
            rows = (
                distinct_rows(self._arrow_rows(relation, given))
                if isinstance(given, pa.Table)
                else empty_rows(types)
            )
            frame = to_frame(self.spark, rows, types)
            copies.hold(frame, rows)
            return frame, rows.n
        positional_rows = self._positional_input(relation, given)
        frame, n = self.materializer.keep_counted(positional_rows.distinct())
        copy = None if copies is None else copies.held(positional_rows)
        if copy is not None and copies is not None:  # an Arrow input's rows
            copies.hold(frame, distinct_rows(copy))
        return frame, n

    @property
    def provisional(self) -> bool:
        """Some relation has pending deltas: an epoch without input would make progress."""
        return bool(self.carried)

    def pending_changes(self) -> Epoch:
        """An epoch holding only the differences between the current relations and what was
        published (none after a regular epoch)."""
        epoch = Epoch(strata=[self._unchanged(s) for s in self.report.strata])
        self._publish(epoch)
        self._track_partial(epoch)  # lists the strata still partial
        return epoch

    def apply(
        self,
        inserts: Mapping[str, Input],
        deletes: Mapping[str, Input],
        *,
        net_counts: Mapping[str, tuple[int, int]] | None = None,
    ) -> Epoch:
        """One epoch: insertions/deletions per EDB relation. Facts already present (or
        absent, for deletions) are found and dropped, at the cost of Spark jobs, unless the
        caller passes ``net_counts``: then the changes are net (inserted facts absent,
        deleted ones present, no duplicates, as the pipeline's normalization guarantees)
        with these (inserted, deleted) counts per relation, and are taken as they are.
        With no change at all it only carries pending deltas on (async consistency)."""
        started = time.monotonic()
        self._collect_garbage()
        if self.copies is not None:  # the epoch starts from the current frames
            self.copies.keep_only([*self.frames.values(), *self.witnessed.values()])
        inserts, deletes = self._stored(inserts), self._stored(deletes)
        net_counts = None if net_counts is None else self._stored(net_counts)
        old: dict[str, DataFrame] = {}
        deltas: dict[str, Delta] = {}
        for rel in {r for r in (*inserts, *deletes) if r in self._inputs()}:
            counts = net_counts.get(rel, (0, 0)) if net_counts is not None else None
            delta = self._edb_delta(rel, inserts.get(rel), deletes.get(rel), counts)
            if delta.empty:
                continue
            old[rel], deltas[rel] = self.frames[rel], delta
            self.edb_rows[rel] += delta.n_added - delta.n_removed
            self.frames[rel], deltas[rel] = self._changed(rel, old[rel], delta)
        if not deltas and not self.carried:
            unchanged = Epoch(strata=[self._unchanged(s) for s in self.report.strata])
            self._track_partial(unchanged)
            return unchanged
        if self.whole_program_only:
            epoch = self._bootstrap_all()
        else:
            epoch = Epoch(strata=[self._stratum(s, old, deltas) for s in self.report.strata])
            self._publish(epoch, old, deltas)
            self.epochs += 1
            self._track_partial(epoch)
        self._garbage += [*old.values(), *(f for d in deltas.values() for f in d.frames)]
        epoch.seconds = time.monotonic() - started
        epoch.provisional = self.provisional
        return epoch

    def _track_partial(self, epoch: Epoch) -> None:
        """Record the strata a cap stopped this epoch, forget those a bootstrap ran to
        convergence, and list in ``epoch`` every stratum still partial."""
        for stratum in epoch.strata:
            if stratum.capped:
                self.partial[stratum.stratum] = stratum
                log.warning(
                    "stratum %d %s stopped at its iteration cap (%s rounds) before converging: "
                    "its results are partial",
                    stratum.stratum,
                    ",".join(stratum.relations),
                    stratum.cap,
                )
            elif stratum.strategy.startswith("bootstrap"):
                self.partial.pop(stratum.stratum, None)
        epoch.partial = [self.partial[i] for i in sorted(self.partial)]

    def relation(self, name: str) -> DataFrame:
        """The current rows of ``name`` (EDB or IDB), with its result columns."""
        return renamed(self.frames[name], [a.name for a in self.catalog[name].result])

    def key_columns(self, relation: str) -> tuple[str, ...]:
        """Result rows are identified by their group-by columns for an aggregate relation
        (the aggregated value is updated in place), by all columns for a set relation."""
        return self.catalog[relation].key_names

    # ------------------------------------------------------------ one stratum

    def _stratum(
        self, stratum: Stratum, old: dict[str, DataFrame], deltas: dict[str, Delta]
    ) -> StratumEpoch:
        changed = {r: deltas[r] for r in _inputs_of(stratum) if r in deltas}
        carried = {r: self.carried[r] for r in stratum.relations if r in self.carried}
        if not changed and not carried:
            return self._unchanged(stratum)
        started, jobs = time.monotonic(), self.materializer.jobs
        partitions = self._partitions()
        with session_conf(self.spark, round_conf(partitions)):
            ctx = self._context(stratum, partitions, old, changed, carried, started)
            outgrown = "" if nonrecursive.copies_only(ctx) else self._outgrown(stratum, changed)
            method = self._choose(ctx) if not outgrown else None
            updated = self._update(method, ctx, old, deltas) if method is not None else None
            if isinstance(updated, StratumEpoch):
                result = updated
            else:
                result = self._bootstrap_stratum(stratum, old, deltas, partitions)
                if updated is not None and method is not None:  # the update was abandoned
                    result.strategy = "bootstrap:switched" if updated.switched else "bootstrap"
                    result.note = f"update:{method.name} abandoned: {updated}"
                    if updated.switched:
                        self._learn(stratum, changed)
                elif outgrown:
                    result.strategy, result.note = "bootstrap:switched", outgrown
                self._carry(stratum, {})
        if stratum.relations[0] in self.carried:
            result.note = (result.note + "; " if result.note else "") + "deltas pending"
        result.seconds = time.monotonic() - started
        result.jobs = self.materializer.jobs - jobs
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

    def _outgrown(self, stratum: Stratum, changed: Mapping[str, Delta]) -> str:
        """Why the elastic switch predicts that an update costs more than a bootstrap, or
        "". An input fact changed this epoch costs an update at least what a bootstrap
        pays per fact, so a change larger than ``switch_fraction`` x the inputs' facts
        before the epoch (a first batch into an empty EDB, a bulk load) goes to a bootstrap
        at once rather than after a first, wasted round. So does a change no smaller (as a
        share of its input) than one whose update this stratum abandoned lately: that
        update paid a whole budget before its bootstrap, which the prediction saves.
        (Not asked for a stratum of one-to-one copies, whose update maps the change and so
        costs less than a bootstrap of any size: ``nonrecursive.copies_only``.)"""
        lesson = self.lessons.get(stratum.index)
        if lesson is not None:
            lesson.epochs_left -= 1
            if lesson.epochs_left < 0:
                del self.lessons[stratum.index]  # forgotten: the next update is tried again
                lesson = None
        for rel, size, before in self._edb_changes(changed):
            name = self.report.analysis.input_relation(rel)
            if size > self.switch_fraction * max(before, 1):
                return f"the change of {name} ({size} facts) outgrows its {before} facts before"
            if lesson is not None and size / max(before, 1) >= lesson.share:
                return (
                    f"the change of {name} ({size} of {before} facts) is no smaller than "
                    f"one whose update was abandoned ({lesson.share:.2%} of its input)"
                )
        return ""

    def _learn(self, stratum: Stratum, changed: Mapping[str, Delta]) -> None:
        """An update of ``changed`` ran past its budget: predict the same of changes at
        least as large (relative to their inputs) for the next ``LESSON_EPOCHS`` epochs
        that change the stratum. Forgetting matters: one slow update (a cold JVM, a busy
        machine) must not send every later change of that size to a bootstrap."""
        shares = [size / max(before, 1) for _, size, before in self._edb_changes(changed)]
        if not shares:
            return  # only lower strata changed: no input share to compare with
        share = max(shares)
        known = self.lessons.get(stratum.index)
        self.lessons[stratum.index] = Lesson(min(share, known.share) if known else share)
        log.info(
            "stratum %d: the elastic switch bootstraps changes of %.2f%% of an input or more "
            "for the next %d epochs",
            stratum.index,
            100 * self.lessons[stratum.index].share,
            LESSON_EPOCHS,
        )

    def _edb_changes(self, changed: Mapping[str, Delta]) -> list[tuple[str, int, int]]:
        """(relation, facts changed, facts before the epoch) of each changed EDB input
        (a lower stratum's change is not counted: its size before is not known)."""
        return [
            (rel, d.n_added + d.n_removed, self.edb_rows[rel] - d.n_added + d.n_removed)
            for rel, d in changed.items()
            if rel in self.edb_rows
        ]

    def _context(
        self,
        stratum: Stratum,
        partitions: int,
        old: Mapping[str, DataFrame],
        changed: dict[str, Delta],
        carried: dict[str, MraState],
        started: float,
    ) -> UpdateContext:
        frames = Frames(self.spark, self.catalog)
        frames.full.update(self.frames)
        run = StratumRun(
            self.report,
            stratum,
            frames,
            self.materializer,
            options=self.options,
            engine=self.engine,
            partitions=partitions,
        )
        budget = self.switch_fraction * self.bootstrap_seconds.get(stratum.index, float("inf"))
        return UpdateContext(
            run,
            {r: old[r] for r in changed},
            changed,
            deadline=started + budget,
            carried=carried,
            round_budget=self.round_budget,
            witnessed={r: self.witnessed[r] for r in stratum.relations if r in self.witnessed},
            copies=self.copies,
        )

    def _choose(self, ctx: UpdateContext) -> UpdateMethod | None:
        """The cheapest exact update method for this stratum and change, or None."""
        if any(r in self.options.strategy for r in ctx.relations):
            return None  # a forced strategy is honoured by re-evaluation
        if any(e.index_pos is not None for e in ctx.entries()) or ctx.negates_changed():
            return None  # no method updates an iteration index or under a changed negation
        for method in UPDATES:
            # Pending deltas go with a bootstrap (which converges) unless the method
            # carries them on.
            if (method.resumes or not ctx.carried) and method.applies(ctx):
                return method
        return None

    def _update(
        self,
        method: UpdateMethod,
        ctx: UpdateContext,
        old: dict[str, DataFrame],
        deltas: dict[str, Delta],
    ) -> StratumEpoch | Abandon:
        """Run ``method``: the stratum's epoch, or why it was abandoned."""
        try:
            outcome = method.run(ctx)
        except Abandon as abandoned:
            return abandoned
        result = self._adopt(ctx.stratum, outcome.frames, outcome.deltas, old, deltas)
        result.strategy, result.rounds = f"update:{method.name}", outcome.rounds
        result.note = outcome.note
        result.capped, result.cap = outcome.capped, ctx.cap
        if outcome.capped:
            result.note = (result.note + "; " if result.note else "") + "hit the iteration cap"
        self._carry(ctx.stratum, outcome.carried)
        self._witness(ctx.stratum, outcome.witnessed)
        return result

    def _witness(self, stratum: Stratum, witnessed: Mapping[str, DataFrame]) -> None:
        """Record the stratum's relations kept with witnesses (the others lose theirs)."""
        for relation in stratum.relations:
            previous = self.witnessed.pop(relation, None)
            if previous is not None and previous is not witnessed.get(relation):
                self._garbage.append(previous)
        self.witnessed.update(witnessed)

    def _bootstrapped(self, driver: Bootstrap, relation: str) -> DataFrame:
        """A bootstrapped relation's rows, stored; with its witnesses when they are kept
        (the rows are then a projection of them)."""
        local = driver.witnessed.get(relation)
        if local is not None and self.copies is not None and _witnessed(self.report, relation):
            types, spec = self.catalog[relation].types, self.report.mra[relation]
            key_types = [types[p] for p in spec.key_positions]
            witnessed, rows = hand_over(
                self.spark, types, key_types, local, self.copies, self.materializer
            )
            self.witnessed[relation] = witnessed
            return rows
        result = driver.result(relation)
        state = driver.states.get(relation)
        if not self.options.witness or state is None or not _witnessed(self.report, relation):
            return self.materializer.keep(result)
        witnessed = self.materializer.keep(state.witnessed_rows())
        self.witnessed[relation] = witnessed
        return witnessed.select(*result.columns)

    def _carry(self, stratum: Stratum, left: dict[str, MraState]) -> None:
        """Record which of the stratum's MRA relations still have pending deltas."""
        for relation in stratum.relations:
            previous = self.carried.pop(relation, None)
            if previous is not None and previous is not left.get(relation):
                self._garbage.append(previous.rows())
        self.carried.update(left)

    def _partitions(self) -> int:
        """As a bootstrap's rounds: partitions by input size (read outside the rounds)."""
        return partitions_for(self.spark, self.options.partitions, sum(self.edb_rows.values()))

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
        self,
        stratum: Stratum,
        old: dict[str, DataFrame],
        deltas: dict[str, Delta],
        partitions: int,
    ) -> StratumEpoch:
        """Re-evaluate one stratum from its current inputs and diff against its old rows."""
        started = time.monotonic()
        driver = self._driver(partitions)
        driver.frames.full.update({rel: self.frames[rel] for rel in _inputs_of(stratum)})
        stats = driver.stratum(stratum)
        self._witness(stratum, {})
        new = {rel: self._bootstrapped(driver, rel) for rel in stratum.relations}
        for state in driver.states.values():
            state.release()  # the results are stored on their own
        changes = {rel: self._bootstrap_change(rel, new[rel]) for rel in stratum.relations}
        self._adopt(stratum, new, changes, old, deltas)
        # What switching to a bootstrap costs: the evaluation, storing and diffing.
        self.bootstrap_seconds[stratum.index] = time.monotonic() - started
        return self._epoch_of(stats)

    def _bootstrap_change(self, relation: str, new: DataFrame) -> Delta:
        """How a bootstrapped relation's rows differ from its current ones: in the driver
        when it holds both (no job), else on Spark."""
        old = self.frames[relation]
        copies = self.copies
        before, after = (None, None) if copies is None else (copies.held(old), copies.held(new))
        if copies is None or before is None or after is None:
            return changes_between(self.materializer, old, new)
        return copies.delta(self.spark, before, after, self.catalog[relation].types)

    def _driver(self, partitions: int = 1) -> Bootstrap:
        """A bootstrap over the current frames. With driver copies (``local_rows``) a
        stratum within the limit runs in the driver, reading the rows the copies hold, and
        a min/max MRA one keeps its witnesses there (``local.witnessed_rows``)."""
        copies = self.copies
        return Bootstrap(
            self.report,
            self.spark,
            self.options if copies is not None else replace(self.options, local_rows=0),
            self.engine,
            materializer=self.materializer,
            partitions=partitions,
            held=None if copies is None else copies.held,
        )

    # ------------------------------------------------------------ whole program

    def _bootstrap_all(self, publish: bool = True) -> Epoch:
        started = time.monotonic()
        self._garbage += [state.rows() for state in self.carried.values()]
        self.carried = {}
        self._garbage += self.witnessed.values()
        self.witnessed = {}
        driver = self._driver()
        evaluation = driver.run(
            {rel: self.frames[stored] for rel, stored in self._loaded().items()}
        )
        for rel in evaluation.relations:
            if rel in self.frames:
                self._garbage.append(self.frames[rel])
            self.frames[rel] = self._bootstrapped(driver, rel)
        for state in evaluation.states.values():
            state.release()  # the results are stored on their own
        epoch = Epoch(strata=[self._epoch_of(s) for s in evaluation.stats])
        epoch.seconds = time.monotonic() - started
        for stratum in epoch.strata:
            self.bootstrap_seconds[stratum.stratum] = stratum.seconds
        if publish:
            self._publish(epoch)
        self.epochs += 1
        self._track_partial(epoch)
        return epoch

    def _publish(
        self,
        epoch: Epoch,
        old: Mapping[str, DataFrame] | None = None,
        deltas: Mapping[str, Delta] | None = None,
    ) -> None:
        """Record in ``epoch`` how every output relation differs from what was published:
        nothing when its rows are the published ones, this epoch's ``deltas`` when it
        changed from the published rows (``old``), all its rows when nothing was
        published, else a diff of the whole relation."""
        for rel in self.outputs:
            rows, before = self.frames[rel], self._published_rows.get(rel)
            current = self.relation(rel)
            if before is rows:
                change = RelationChange.nothing(rel, self.key_columns(rel), current)
            elif before is not None and old is not None and old.get(rel) is before:
                assert deltas is not None
                change = self._delta_change(rel, deltas[rel])
            else:
                published = self.published.get(rel)
                fresh = self._all_rows(rel, rows) if published is None else None
                change = fresh or self._diff(rel, published, current)
            epoch.changes[rel] = change
            self.published[rel], self._published_rows[rel] = current, rows

    def _delta_change(self, relation: str, delta: Delta) -> RelationChange:
        """The change an epoch's exact ``delta`` makes: its added rows are upserted; its
        removed rows' keys are deleted unless a row was added under them (a new value)."""
        names = [a.name for a in self.catalog[relation].result]
        keys = self.key_columns(relation)
        tables = self._change_tables(relation, delta)
        if tables is not None:
            upserts, gone = (arrow_frame(self.spark, t) for t in tables)
            return RelationChange(relation, keys, upserts, gone, tables=tables)
        added, removed = delta.added.toDF(*names), delta.removed.toDF(*names)
        if not delta.n_removed:
            # Insertions only (the counts are exact): the added rows are the upserts as
            # they are (distinct, one per key) and no key goes. Skipping the two EXCEPTs
            # saves their shuffles: four jobs for a one-fact batch.
            return RelationChange(relation, keys, added, removed.select(*keys))
        gone = minus(removed.select(*keys), added.select(*keys))
        if len(keys) < len(names):
            return RelationChange(relation, keys, added, gone)
        # A set relation: a row both removed and added stays, so it is neither appended
        # nor deleted, and what is appended is surely new.
        return RelationChange(relation, keys, minus(added, removed), gone)

    def _change_tables(self, relation: str, delta: Delta) -> tuple[pa.Table, pa.Table] | None:
        """``_delta_change``'s upserts and deleted keys as Arrow tables, made in the driver
        when it holds both sides of ``delta`` (no job, no shuffle); None otherwise."""
        copies = self.copies
        if copies is None or not self._in_result_columns(relation):
            return None
        added, removed = copies.held(delta.added), copies.held(delta.removed)
        if added is None or removed is None:
            return None
        names = [a.name for a in self.catalog[relation].result]
        keys = list(self.key_columns(relation))
        columns = [f"c{i}" for i in range(len(names))]
        key_columns = tuple(columns[names.index(k)] for k in keys)
        gone = anti_join(removed, added, key_columns)
        if len(keys) == len(names):  # a set relation: a row removed and added stays
            added = anti_join(added, removed, tuple(columns))
        return self._result_table(relation, added), self._result_table(relation, gone).select(keys)

    def _in_result_columns(self, relation: str) -> bool:
        """The relation's rows are its result columns (not nullary, no iteration index), so
        driver rows of it convert to result rows as they are."""
        entry = self.catalog[relation]
        return bool(entry.types) and len(entry.result_positions) == len(entry.types)

    def _result_table(self, relation: str, rows: Batch) -> pa.Table:
        entry = self.catalog[relation]
        return to_table(rows, entry.types).rename_columns([a.name for a in entry.result])

    @staticmethod
    def _epoch_of(stats: StratumStats) -> StratumEpoch:
        note = "hit the iteration cap" if stats.capped else ("in the driver" if stats.local else "")
        return StratumEpoch(
            stats.stratum,
            stats.relations,
            "bootstrap",
            stats.rounds,
            stats.seconds,
            note,
            stats.jobs,
            stats.capped,
            stats.cap,
        )

    @staticmethod
    def _unchanged(stratum: Stratum) -> StratumEpoch:
        return StratumEpoch(stratum.index, stratum.relations, "unchanged")

    # ------------------------------------------------------------ helpers

    def _loaded(self) -> dict[str, str]:
        """``.input`` name → the EDB relation holding its facts (``Analysis.loaded``)."""
        return self.report.analysis.loaded

    def _inputs(self) -> tuple[str, ...]:
        """The EDB relations (for an input relation also defined by rules, its hidden
        loaded part)."""
        return tuple(self._loaded().values())

    def _stored(self, by_input: Mapping[str, _T]) -> dict[str, _T]:
        """``by_input`` keyed by EDB relations instead of ``.input`` names."""
        return {self.report.analysis.edb_relation(rel): v for rel, v in by_input.items()}

    def _reads_indexed_relation(self) -> bool:
        """A stratum reading another stratum's iteration-indexed relation needs its index
        column, which results drop: such programs are only re-evaluated as a whole."""
        indexed = self.catalog.indexed
        return any(rel in indexed for s in self.report.strata for rel in _inputs_of(s))

    def _edb_delta(
        self,
        relation: str,
        inserts: Input | None,
        deletes: Input | None,
        net_counts: tuple[int, int] | None = None,
    ) -> Delta:
        added = self._positional_input(relation, inserts)
        if net_counts is not None:  # net already: no job (the caller's rows are local)
            removed = self._positional_input(relation, deletes)
            return Delta(added, removed, *net_counts, stored=False)
        current = self.frames[relation]
        columns = current.columns
        # A batch is small beside the relation: it is broadcast, so finding which of its
        # facts are present streams the relation once and shuffles nothing.
        if inserts is not None:  # no join with the whole relation for an absent side
            present = join_on(current, F.broadcast(added.distinct()), columns, "left_semi")
            added = join_on(added.distinct(), present, columns, "left_anti")
        removed = self._positional_input(relation, deletes)
        if deletes is not None:
            removed = join_on(current, F.broadcast(removed.distinct()), columns, "left_semi")
        return stored_delta(self.materializer, added, removed)

    def _changed(self, relation: str, rows: DataFrame, delta: Delta) -> tuple[DataFrame, Delta]:
        """An input relation's rows after ``delta``, and the delta as the strata read it.
        When the driver holds a copy of the rows (a driver update read them), the change is
        applied to it too, and a small result is handed to Spark as a local relation (no
        job; ``local_update.HANDOVER_ROWS``), a larger one stored by the first job that
        reads it (``_changed_later``); otherwise it is made on Spark. So are more than
        ``CHAIN_ROWS`` insertions alone: the lazy rows would store the whole relation
        again, where Spark appends the added rows as a segment, stored once (500k facts
        into a 500k-row EDB: 2.7 s of a backlog batch's 5.8 s ``maintain``)."""
        copy = self._copy_after(relation, rows, delta)
        many_insertions = not delta.n_removed and delta.n_added > CHAIN_ROWS
        if copy is not None and copy.n <= HANDOVER_ROWS:
            frame = to_frame(self.spark, copy, self.catalog[relation].types)
        elif copy is not None and not many_insertions:
            frame = self._changed_later(relation, rows, delta, copy.n)
        else:
            frame, delta = self._changed_on_spark(rows, delta)
        if copy is not None and self.copies is not None:
            self.copies.hold(frame, copy)
        return frame, delta

    def _changed_on_spark(self, rows: DataFrame, delta: Delta) -> tuple[DataFrame, Delta]:
        """Under insertions only, the added rows become a new segment (``core.extended``),
        and the delta's added rows are that segment: stored once, so a rule that only copies
        them needs no job of its own; the caller's net rows are stored by the first job that
        reads them (``keep_later``), so that an epoch that only copies them runs no job at
        all. Removed rows are left out by a broadcast anti join (no shuffle of the
        relation) and the result stored whole."""
        if not delta.n_removed:
            if not delta.stored and not segments_full(rows):
                segment = self.materializer.keep_later(compacted(delta.added), delta.n_added)
                delta = replace(delta, added=segment, stored=True)
            return extended(self.materializer, rows, delta.added, stored=delta.stored), delta
        return self.materializer.keep(_with_removals(rows, delta)), delta

    def _changed_later(self, relation: str, rows: DataFrame, delta: Delta, n: int) -> DataFrame:
        """The new rows (``n`` of them) stored by the first job that reads them: the driver
        holds their copy, so a stratum updated there needs no job for them (storing a 1M-row
        relation after a deletion took 1 s of a 2 s epoch), and one on Spark computes them
        from the last rows Spark stored and the changes since, broadcast (``ChangedSince``:
        one step deep, whatever the number of epochs). When those changes outgrow
        ``CHAIN_ROWS`` the rows are stored now (one job) and become the next base."""
        assert self.copies is not None
        types = self.catalog[relation].types
        since = self._changed_since.pop(relation, None)
        if since is None or since.latest is not rows:
            since = ChangedSince(self._one_store(rows), types)
        since.apply(self.copies.side(delta, True, types), self.copies.side(delta, False, types))
        spark = self.spark
        net = Delta(
            to_frame(spark, since.added, types),
            to_frame(spark, since.removed, types),
            since.added.n,
            since.removed.n,
        )
        new = _with_removals(since.base, net)
        if since.rows > CHAIN_ROWS:
            log.info("%s: %d changed rows since it was stored: stored again", relation, since.rows)
            return self.materializer.keep(new)
        # The base's blocks must outlive the frames computed from it (garbage collection).
        later = self.materializer.keep_later(new, n)
        since.latest = reading_checkpoints_of(later, later, since.base)
        self._changed_since[relation] = since
        return since.latest

    def _one_store(self, rows: DataFrame) -> DataFrame:
        """``rows`` stored as one, if they are segments (insertions appended on Spark,
        ``core.extended``): every epoch's lazy rows are planned over their base, and over
        eight segments that planning took ~1.2 s of a 1M-edge deletion epoch (one job now,
        once)."""
        return self.materializer.keep(rows) if len(checkpoint_rdds(rows)) > 1 else rows

    def _copy_after(self, relation: str, rows: DataFrame, delta: Delta) -> Batch | None:
        """The driver's copy of ``rows`` with ``delta`` applied, when it holds one."""
        copies = self.copies
        held = None if copies is None else copies.held(rows)
        if copies is None or held is None or held.n + delta.n_added > copies.limit:
            return None
        try:
            return copies.after(held, delta, self.catalog[relation].types)
        except LocalUnsupported:
            return None

    def _positional_input(self, relation: str, frame: Input | None) -> DataFrame:
        """``frame`` with exactly the relation's declared columns and types (empty if None),
        in positional columns."""
        attributes = self.catalog[relation].attributes
        if isinstance(frame, pa.Table):
            return self._arrow_input(relation, frame)
        if frame is None:
            fields = [
                StructField(positional(i), spark_type(a.type)) for i, a in enumerate(attributes)
            ]
            return self.spark.createDataFrame([], StructType(fields))
        return frame.select(
            *(
                F.col(a.name).cast(spark_type(a.type)).alias(positional(i))
                for i, a in enumerate(attributes)
            )
        )

    def _arrow_input(self, relation: str, table: pa.Table) -> DataFrame:
        """An Arrow table's rows (declared columns) as a local relation in positional
        columns; the driver keeps their copy (``DriverCopies``), so a driver update reads
        the epoch's changes without collecting them."""
        batch = self._arrow_rows(relation, table)
        frame = to_frame(self.spark, batch, self.catalog[relation].types)
        if self.copies is not None:
            self.copies.hold(frame, batch)
        return frame

    def _arrow_rows(self, relation: str, table: pa.Table) -> Batch:
        """An Arrow table's declared columns as driver rows (positional, declared types)."""
        attributes = self.catalog[relation].attributes
        return table_rows(table.select([a.name for a in attributes]), [a.type for a in attributes])

    def _all_rows(self, relation: str, rows: DataFrame) -> RelationChange | None:
        """Every row of ``relation`` (``rows``) upserted, nothing deleted: the change from
        nothing published. As Arrow tables when the driver holds the rows (no job: a fresh
        stream's first batch collected its bootstrap's results in one, 0.5 s for SSSP on
        100k edges); None otherwise."""
        held = None if self.copies is None else self.copies.held(rows)
        if held is None or not self._in_result_columns(relation):
            return None
        keys = self.key_columns(relation)
        upserts = self._result_table(relation, held)
        tables = upserts, upserts.select(list(keys)).slice(0, 0)
        upserted, deleted = (arrow_frame(self.spark, t) for t in tables)
        return RelationChange(relation, keys, upserted, deleted, tables=tables)

    def _diff(self, relation: str, old: DataFrame | None, new: DataFrame) -> RelationChange:
        keys = self.key_columns(relation)
        if old is None:
            empty = new.select(*keys).limit(0)
            return RelationChange(relation, keys, new, empty)
        changed_or_new = minus(new, old)
        gone = minus(old.select(*keys), new.select(*keys))
        return RelationChange(relation, keys, changed_or_new, gone)

    def _collect_garbage(self) -> None:
        """Free the blocks of the previous epoch's replaced rows and deltas. Deferred to the
        next epoch: the consumer evaluates the reported changes, which read them."""
        carried = (s.rows() for s in self.carried.values())
        live = live_rdds([*self.frames.values(), *self.witnessed.values(), *carried])
        for frame in self._garbage:
            release_frame(frame, live)
        self._garbage = []


def _with_removals(rows: DataFrame, delta: Delta) -> DataFrame:
    """``rows`` after ``delta`` (not stored): the removed rows left out by a broadcast anti
    join (no shuffle of the relation), the added ones appended."""
    kept = join_on(rows, F.broadcast(delta.removed), rows.columns, "left_anti")
    kept = kept.select(*rows.columns)
    # A broadcast anti join keeps the partitions of ``rows``: said, ``appended`` need not
    # plan the join to count them (0.57 s of a 1M-edge deletion epoch).
    bound = rows.__dict__.get(PARTITION_BOUND)
    if bound is not None:
        kept.__dict__[PARTITION_BOUND] = bound
    return appended(kept, delta.added)


def _witnessed(report: Report, relation: str) -> bool:
    """A min/max MRA relation without an iteration index: the one kind with witnesses."""
    spec = report.mra.get(relation)
    return spec is not None and spec.aggregate in ("min", "max") and spec.index_pos is None


def _inputs_of(stratum: Stratum) -> list[str]:
    """Relations the stratum's rules read (negated ones too), outside the stratum."""
    names: list[str] = []
    for rule in stratum.rules:
        for body in rule.bodies:
            for lit in body.literals:
                atom = lit.atom if isinstance(lit, ast.Negation) else lit
                if not isinstance(atom, ast.Atom) or atom.relation in stratum.relations:
                    continue
                if atom.relation not in names:
                    names.append(atom.relation)
    return names
