"""The ``Maintainer``: a program's relations kept current epoch by epoch. It owns the
relations' rows and the epoch loop; the jobs are its parts': ``inputs`` (the EDB side),
``strata`` (one stratum's update or bootstrap), ``elastic`` (when an update costs more
than a bootstrap), ``carried`` (pending MRA deltas and witnesses) and ``publisher`` (the
changes reported to the consumer)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession

from fixflow.checker.model import Report
from fixflow.operators.change import Change
from fixflow.operators.core import EvalOptions
from fixflow.operators.driver.copies import DriverCopies
from fixflow.operators.engines.modes import engine_for
from fixflow.operators.evaluate import Input
from fixflow.operators.maintain.carried import CarriedState
from fixflow.operators.maintain.elastic import ElasticSwitch
from fixflow.operators.maintain.epoch_report import (
    Epoch,
    StratumEpoch,
    bootstrap_epoch,
    unchanged_epoch,
)
from fixflow.operators.maintain.garbage import Garbage
from fixflow.operators.maintain.inputs import Inputs
from fixflow.operators.maintain.publish import Publisher
from fixflow.operators.maintain.setting import Setting, reads_indexed_relation
from fixflow.operators.maintain.stratum import StratumUpdater, bootstrap_run, stored_result
from fixflow.operators.materialize import Materializer

log = logging.getLogger(__name__)


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
        options = options or EvalOptions()
        self.engine = engine_for(options.engine_options)
        """The MRA engine, looked up once: it may keep per-relation state across epochs."""
        self.materializer = Materializer(spark)
        if round_budget is not None and round_budget < 1:
            raise ValueError(f"round_budget must be at least 1, not {round_budget}")
        limit = options.local_rows
        copies = DriverCopies(limit, self.materializer) if limit > 0 else None
        self.setting = Setting(report, spark, options, self.engine, self.materializer, copies)
        self.garbage = Garbage()
        self.carried = CarriedState(self.garbage)
        self.elastic = ElasticSwitch(report.analysis, switch_fraction)
        self.inputs = Inputs(self.setting)
        self.publisher = Publisher(self.setting, tuple(report.analysis.program.outputs))
        self.strata = StratumUpdater(
            self.setting, self.inputs, self.elastic, self.carried, round_budget
        )
        self.frames: dict[str, DataFrame] = {}
        """Every relation's current rows, positional columns (IDB: result rows): each a
        ``Relation``, which keeps its driver rows, checkpoints and partition bound."""
        self.epochs = 0
        self.partial: dict[int, StratumEpoch] = {}
        """Per stratum whose rows are partial, the epoch a round cap stopped it in. An
        update continues from partial rows and stays partial; a bootstrap that converges
        ends it."""
        self.whole_program_only = reads_indexed_relation(report)

    @property
    def edb(self) -> dict[str, DataFrame]:
        """Every input relation's loaded facts, by its ``.input`` name."""
        return {rel: self.relation(stored) for rel, stored in self.setting.loaded().items()}

    @property
    def relations(self) -> dict[str, DataFrame]:
        return {rel: self.relation(rel) for rel in sorted(self.report.analysis.idb)}

    def held_facts(self) -> dict[str, int]:
        """Per ``.input`` relation, the facts it holds now (counted as they change: no job)."""
        facts = self.inputs.facts
        return {user: facts.get(edb, 0) for user, edb in self.setting.loaded().items()}

    @property
    def provisional(self) -> bool:
        """Some relation has pending deltas: an epoch without input would make progress."""
        return bool(self.carried.pending)

    def relation(self, name: str) -> DataFrame:
        """The current rows of ``name`` (EDB or IDB), with its result columns."""
        return self.setting.result_frame(name, self.frames[name])

    def key_columns(self, relation: str) -> tuple[str, ...]:
        """The columns identifying ``relation``'s result rows (``Setting.key_columns``)."""
        return self.setting.key_columns(relation)

    def load(
        self,
        edb: Mapping[str, Input],
        published: Mapping[str, DataFrame] | None = None,
    ) -> Epoch:
        """Start from ``edb`` (input relations, declared columns; missing ones are empty):
        a full evaluation. ``published`` is what the consumer already holds of each output
        relation (e.g. the result tables); the next ``apply`` (or ``pending_changes``)
        reports changes relative to it. Without ``published`` the consumer holds nothing."""
        self.frames.update(self.inputs.load(edb))
        self.publisher.start(published)
        return self._bootstrap_all(publish=False)

    def pending_changes(self) -> Epoch:
        """An epoch holding only the differences between the current relations and what was
        published (none after a regular epoch)."""
        epoch = Epoch(strata=[unchanged_epoch(s) for s in self.report.strata])
        epoch.changes.update(self.publisher.changes(self.frames))
        self._track_partial(epoch)  # lists the strata still partial
        return epoch

    def apply(self, changes: Mapping[str, Change[Input | None]]) -> Epoch:
        """One epoch: per EDB relation, the facts it inserts (``added``) and deletes
        (``removed``; a side without facts may be None). An uncounted change is made net:
        facts already present (or absent, for deletions) are found and dropped, at the
        cost of Spark jobs. A counted one is net already (inserted facts absent, deleted
        ones present, no duplicates, as the pipeline's normalization guarantees) and is
        taken as it is. With no change at all it only carries pending deltas on (async
        consistency)."""
        started = time.monotonic()
        self.garbage.collect([*self.frames.values(), *self.carried.live_frames()])
        old, deltas = self._changed_inputs(changes)
        if not deltas and not self.carried.pending:
            unchanged = Epoch(strata=[unchanged_epoch(s) for s in self.report.strata])
            self._track_partial(unchanged)
            return unchanged
        if self.whole_program_only:
            epoch = self._bootstrap_all()
        else:
            number = self.epochs + 1
            epoch = Epoch(
                strata=[
                    self.strata.epoch(s, self.frames, old, deltas, number)
                    for s in self.report.strata
                ]
            )
            epoch.changes.update(self.publisher.changes(self.frames, old, deltas))
            self.epochs += 1
            self._track_partial(epoch)
        self.garbage.add([*old.values(), *(f for d in deltas.values() for f in d.frames)])
        epoch.seconds = time.monotonic() - started
        epoch.provisional = self.provisional
        return epoch

    def _changed_inputs(
        self, changes: Mapping[str, Change[Input | None]]
    ) -> tuple[dict[str, DataFrame], dict[str, Change[DataFrame]]]:
        """Install the EDB relations' rows after the epoch's changes: their rows before
        and their deltas, for those that changed."""
        old: dict[str, DataFrame] = {}
        deltas: dict[str, Change[DataFrame]] = {}
        for rel, change in self.setting.stored(changes).items():
            if rel not in self.setting.inputs():
                continue
            rows = self.frames[rel]
            changed = self.inputs.change(rel, rows, change)
            if changed is None:
                continue
            old[rel] = rows
            self.frames[rel], deltas[rel] = changed
        return old, deltas

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

    def _bootstrap_all(self, publish: bool = True) -> Epoch:
        started = time.monotonic()
        self.carried.drop_all()
        driver = bootstrap_run(self.setting)
        evaluation = driver.run(
            {rel: self.frames[stored] for rel, stored in self.setting.loaded().items()}
        )
        for rel in evaluation.relations:
            if rel in self.frames:
                self.garbage.add([self.frames[rel]])
            self.frames[rel] = stored_result(self.setting, self.carried, driver, rel)
        for state in evaluation.states.values():
            state.release()  # the results are stored on their own
        epoch = Epoch(strata=[bootstrap_epoch(s) for s in evaluation.stats])
        epoch.seconds = time.monotonic() - started
        for stratum in epoch.strata:
            self.elastic.measured(stratum.stratum, stratum.seconds)
        if publish:
            epoch.changes.update(self.publisher.changes(self.frames))
        self.epochs += 1
        self._track_partial(epoch)
        return epoch
