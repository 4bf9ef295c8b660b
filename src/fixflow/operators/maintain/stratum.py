"""One stratum's epoch: the first update method that applies (``updates.chosen``), unless
the elastic switch predicts or finds it costs more than a bootstrap; else a bootstrap,
re-evaluating the stratum from its current inputs and diffing against its old rows."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace

from pyspark.sql import DataFrame

from fixflow.checker.model import Report, Stratum
from fixflow.operators.change import Change
from fixflow.operators.core import Frames, StratumRun
from fixflow.operators.driver.copies import hand_over
from fixflow.operators.engines.base import MraState
from fixflow.operators.epoch import Abandon, UpdateContext, changes_between
from fixflow.operators.evaluate import Bootstrap
from fixflow.operators.maintain.carried import CarriedState
from fixflow.operators.maintain.elastic import ElasticSwitch
from fixflow.operators.maintain.epoch_report import (
    StratumEpoch,
    bootstrap_epoch,
    unchanged_epoch,
)
from fixflow.operators.maintain.inputs import Inputs
from fixflow.operators.maintain.setting import Setting, inputs_of
from fixflow.operators.maintain.updates import UpdateMethod, chosen
from fixflow.operators.materialize import reading_checkpoints_of
from fixflow.operators.relation import Relation
from fixflow.operators.rounds import partitions_for, round_conf, session_conf
from fixflow.operators.strategies import nonrecursive

log = logging.getLogger(__name__)


class StratumUpdater:
    """Brings one stratum up to date in an epoch. The relations' rows (``current``) and
    the epoch's changes so far (``old``, ``deltas``) are the Maintainer's, passed in: the
    stratum's new rows and changes are installed there for the strata after it."""

    def __init__(
        self,
        setting: Setting,
        inputs: Inputs,
        elastic: ElasticSwitch,
        carried: CarriedState,
        round_budget: int | None,
    ) -> None:
        self.setting, self.inputs, self.elastic, self.carried = setting, inputs, elastic, carried
        self.spark, self.materializer = setting.spark, setting.materializer
        self.round_budget = round_budget
        """Async consistency: propagation rounds (at least 1) an incremental MRA update may
        run per epoch, after merging its seed; the deltas still pending are carried into
        the next epoch. None: converge every epoch."""

    def epoch(
        self,
        stratum: Stratum,
        current: dict[str, DataFrame],
        old: dict[str, DataFrame],
        deltas: dict[str, Change[DataFrame]],
        number: int,
    ) -> StratumEpoch:
        """The stratum's part of epoch ``number``."""
        changed = {r: deltas[r] for r in inputs_of(stratum) if r in deltas}
        carried = self.carried.pending_of(stratum)
        if not changed and not carried:
            return unchanged_epoch(stratum)
        started, jobs = time.monotonic(), self.materializer.jobs
        partitions = self._partitions()
        with session_conf(self.spark, round_conf(partitions)):
            ctx = self.context(stratum, current, partitions, old, changed, carried, started)
            outgrown = (
                ""
                if nonrecursive.copies_only(ctx)
                else self.elastic.outgrown(stratum, self.inputs.changes_of(changed))
            )
            method = chosen(ctx, self.setting.options) if not outgrown else None
            updated = (
                self._update(method, ctx, current, old, deltas) if method is not None else None
            )
            if isinstance(updated, StratumEpoch):
                result = updated
            else:
                result = self.bootstrap(stratum, current, old, deltas, partitions)
                if updated is not None and method is not None:  # the update was abandoned
                    result.strategy = "bootstrap:switched" if updated.switched else "bootstrap"
                    result.note = f"update:{method.name} abandoned: {updated}"
                    if updated.switched:
                        self.elastic.learn(stratum, self.inputs.changes_of(changed))
                elif outgrown:
                    result.strategy, result.note = "bootstrap:switched", outgrown
                self.carried.carry(stratum, {})
        if stratum.relations[0] in self.carried.pending:
            result.note = (result.note + "; " if result.note else "") + "deltas pending"
        result.seconds = time.monotonic() - started
        result.jobs = self.materializer.jobs - jobs
        log.info(
            "epoch %d stratum %d %s: %s, %d round(s), %.3f s%s",
            number,
            stratum.index,
            ",".join(stratum.relations),
            result.strategy,
            result.rounds,
            result.seconds,
            f" ({result.note})" if result.note else "",
        )
        return result

    def context(
        self,
        stratum: Stratum,
        current: Mapping[str, DataFrame],
        partitions: int,
        old: Mapping[str, DataFrame],
        changed: dict[str, Change[DataFrame]],
        carried: dict[str, MraState],
        started: float,
    ) -> UpdateContext:
        """What an update method of ``stratum`` reads: the relations' rows, the changes of
        its inputs, its pending deltas and witnesses, and its deadline."""
        setting = self.setting
        frames = Frames(self.spark, setting.catalog)
        frames.full.update(current)
        run = StratumRun(
            setting.report,
            stratum,
            frames,
            self.materializer,
            options=setting.options,
            engine=setting.engine,
            partitions=partitions,
        )
        return UpdateContext(
            run,
            {r: old[r] for r in changed},
            changed,
            deadline=self.elastic.deadline(stratum, started),
            carried=carried,
            round_budget=self.round_budget,
            witnessed=self.carried.witnessed_of(stratum),
            copies=setting.copies,
        )

    def _update(
        self,
        method: UpdateMethod,
        ctx: UpdateContext,
        current: dict[str, DataFrame],
        old: dict[str, DataFrame],
        deltas: dict[str, Change[DataFrame]],
    ) -> StratumEpoch | Abandon:
        """Run ``method``: the stratum's epoch, or why it was abandoned."""
        try:
            outcome = method.run(ctx)
        except Abandon as abandoned:
            return abandoned
        result = self._adopt(ctx.stratum, current, outcome.frames, outcome.deltas, old, deltas)
        result.strategy, result.rounds = f"update:{method.name}", outcome.rounds
        result.note = outcome.note
        result.capped, result.cap = outcome.capped, ctx.cap
        if outcome.capped:
            result.note = (result.note + "; " if result.note else "") + "hit the iteration cap"
        self.carried.carry(ctx.stratum, outcome.carried)
        self.carried.witness(ctx.stratum, outcome.witnessed)
        return result

    def _partitions(self) -> int:
        """As a bootstrap's rounds: partitions by input size (read outside the rounds)."""
        total = sum(self.inputs.facts.values())
        return partitions_for(self.spark, self.setting.options.partitions, total)

    def _adopt(
        self,
        stratum: Stratum,
        current: dict[str, DataFrame],
        frames: dict[str, DataFrame],
        changes: dict[str, Change[DataFrame]],
        old: dict[str, DataFrame],
        deltas: dict[str, Change[DataFrame]],
    ) -> StratumEpoch:
        """Install a stratum's new rows and record its relations' changes for later strata."""
        garbage = self.carried.garbage
        for rel in stratum.relations:
            change = changes[rel]
            if change.empty:
                garbage.add(change.frames)
                if frames[rel] is not current[rel]:
                    garbage.add([frames[rel]])
            else:
                old[rel], deltas[rel] = current[rel], change
                # A Relation: what later epochs learn of it (driver rows, checkpoints) stays.
                current[rel] = Relation.of(frames[rel])
        return StratumEpoch(stratum.index, stratum.relations, "update")

    def bootstrap(
        self,
        stratum: Stratum,
        current: dict[str, DataFrame],
        old: dict[str, DataFrame],
        deltas: dict[str, Change[DataFrame]],
        partitions: int,
    ) -> StratumEpoch:
        """Re-evaluate one stratum from its current inputs and diff against its old rows."""
        started = time.monotonic()
        driver = bootstrap_run(self.setting, partitions)
        driver.frames.full.update({rel: current[rel] for rel in inputs_of(stratum)})
        stats = driver.stratum(stratum)
        self.carried.witness(stratum, {})
        new = {
            rel: stored_result(self.setting, self.carried, driver, rel) for rel in stratum.relations
        }
        for state in driver.states.values():
            state.release()  # the results are stored on their own
        changes = {
            rel: self._bootstrap_change(rel, current[rel], new[rel]) for rel in stratum.relations
        }
        self._adopt(stratum, current, new, changes, old, deltas)
        # What switching to a bootstrap costs: the evaluation, storing and diffing.
        self.elastic.measured(stratum.index, time.monotonic() - started)
        return bootstrap_epoch(stats)

    def _bootstrap_change(self, relation: str, old: DataFrame, new: DataFrame) -> Change[DataFrame]:
        """How a bootstrapped relation's rows differ from its current ones (``old``): in
        the driver when it holds both (no job), else on Spark."""
        copies = self.setting.copies
        before, after = (None, None) if copies is None else (copies.held(old), copies.held(new))
        if copies is None or before is None or after is None:
            return changes_between(self.materializer, old, new)
        return copies.delta(self.spark, before, after, self.setting.catalog[relation].types)


def bootstrap_run(setting: Setting, partitions: int = 1) -> Bootstrap:
    """A bootstrap over the current frames. With driver copies (``local_rows``) a
    stratum within the limit runs in the driver, reading the rows the copies hold, and
    a min/max MRA one keeps its witnesses there (``driver.stratum.witnessed_rows``)."""
    copies, options = setting.copies, setting.options
    return Bootstrap(
        setting.report,
        setting.spark,
        options if copies is not None else replace(options, local_rows=0),
        setting.engine,
        materializer=setting.materializer,
        partitions=partitions,
        held=None if copies is None else copies.held,
    )


def stored_result(
    setting: Setting, carried: CarriedState, driver: Bootstrap, relation: str
) -> DataFrame:
    """A bootstrapped relation's rows, stored; with its witnesses when they are kept
    (the rows are then a projection of them, and ``carried`` holds them)."""
    report, copies, materializer = setting.report, setting.copies, setting.materializer
    local = driver.witnessed.get(relation)
    if local is not None and copies is not None and _witnessed(report, relation):
        types, spec = setting.catalog[relation].types, report.mra[relation]
        key_types = [types[p] for p in spec.key_positions]
        witnessed, rows = hand_over(setting.spark, types, key_types, local, copies, materializer)
        carried.witnessed[relation] = witnessed
        return rows
    result = driver.result(relation)
    state = driver.states.get(relation)
    if not setting.options.witness or state is None or not _witnessed(report, relation):
        return materializer.keep(result)
    witnessed = materializer.keep(state.witnessed_rows())
    carried.witnessed[relation] = witnessed
    # A projection of the store: it reads its checkpoints, said so that no epoch walks it.
    return reading_checkpoints_of(witnessed.select(*result.columns), witnessed)


def _witnessed(report: Report, relation: str) -> bool:
    """A min/max MRA relation without an iteration index: the one kind with witnesses."""
    spec = report.mra.get(relation)
    return spec is not None and spec.aggregate in ("min", "max") and spec.index_pos is None
