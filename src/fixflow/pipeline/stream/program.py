"""The continuous pipeline of one program: Kafka → foreachBatch → maintenance → Delta.

``ProgramStream`` is the maintenance hook of ``query.BatchPipeline`` (the Kafka query's
``batch_handler``, or ``memory_source``). Per micro-batch:

1. ingest (validate, dead-letter, normalize) — ``fixflow.pipeline.stream.ingest``;
2. on the first batch after a (re)start, load the EDB *as it was before this batch*
   (time travel by (query id, batch id)), so a replay after a crash — even one that
   committed some tables — starts from exactly the state the first run saw;
3. one epoch of the ``Maintainer``: every stratum brought up to date;
4. commit the changed result rows (one idempotent Delta commit per changed relation:
   ``commits.ResultCommits``);
5. the EDB commit, made last by ``BatchPipeline.run``, marks the batch as applied.

Every Delta commit carries (query id, batch id) so a replayed batch changes nothing.

Consistency (``[stream] consistency``): ``converged`` runs every epoch to the fixpoint.
``async`` lets an incremental MRA update run ``async_rounds_per_batch`` propagation rounds,
commits, and carries the pending deltas on: into the next batch, and between batches
(``converge``: epochs without input while the query is idle, and to the end after an
``--available-now`` run). While deltas are pending, result commits carry
``fixflow.provisional = true`` and ``state/<relation>`` holds the pending deltas; the
commit that completes convergence says ``false``. A restart re-evaluates the EDB, which
converges, so nothing provisional survives a crash.

``run`` starts the query watched (``running.RunningStream``); ``running.run_until_stopped``
is `fixflow run`'s loop around it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from fixflow.checker import load
from fixflow.checker.model import Report
from fixflow.operators.change import Change
from fixflow.operators.evaluate import Progress
from fixflow.operators.maintain import Epoch, Maintainer
from fixflow.operators.memory_model import driver_bytes
from fixflow.pipeline.config import Config
from fixflow.pipeline.engine_settings import eval_options
from fixflow.pipeline.kafka.batch_limit import next_batch_limit, write_limit_file
from fixflow.pipeline.lake.checkpoint_mirror import CheckpointMirror
from fixflow.pipeline.lake.delta import declared_rows
from fixflow.pipeline.lake.lakehouse import (
    ProgramLake,
    open_table,
    read_table,
    record_program,
    version_before_batch,
)
from fixflow.pipeline.lake.task_read import read_frame, readable_by_tasks, version_rows
from fixflow.pipeline.stream.commits import ResultCommits
from fixflow.pipeline.stream.ingest import IngestResult, Phases, ensure_edb_tables
from fixflow.pipeline.stream.metrics import Metrics, MetricsServer, Strategy
from fixflow.pipeline.stream.query import BatchGate, BatchPipeline, start_ingest_query
from fixflow.pipeline.stream.running import RunningStream

log = logging.getLogger(__name__)


@dataclass
class BatchReport:
    """What one micro-batch did, for the CLI and the demo."""

    batch_id: int
    records: int
    dead_letters: int
    inserted: dict[str, int]
    deleted: dict[str, int]
    epoch: Epoch | None
    seconds: float
    replayed: bool = False
    changed_rows: dict[str, int] = field(default_factory=dict)
    finished_at: float = field(default_factory=time.monotonic)
    between_batches: bool = False
    """An epoch without input carrying pending deltas on (async), after ``batch_id``."""
    phases: Phases = field(default_factory=Phases)
    """Seconds per phase and Spark jobs (the EDB commit is added when the batch ends)."""

    @property
    def provisional(self) -> bool:
        return self.epoch is not None and self.epoch.provisional

    @property
    def started_at(self) -> float:
        return self.finished_at - self.seconds


class ProgramStream:
    """One program's streaming state: the checked program, its lake and its maintainer."""

    def __init__(
        self,
        spark: SparkSession,
        config: Config,
        program_file: str | Path,
        metrics: Metrics | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
        on_round: Callable[[Progress], None] | None = None,
        *,
        text: str | None = None,
        name: str | None = None,
    ) -> None:
        """``text``: the program, when it is not read from ``program_file`` (then only its
        name in messages); ``name``: the program's directory in the lake (default: the
        file's stem)."""
        self.spark = spark
        self.config = config
        self.program_file = Path(program_file)
        if text is None:
            text = self.program_file.read_text(encoding="utf-8")
        self.report: Report = load(text, str(program_file))
        self.program = self.report.analysis.program
        self.lake = ProgramLake.of(config.lake, name or self.program_file.stem)
        self.mirror = CheckpointMirror.of(self.lake)
        """An object-store lake's copy of Spark's local checkpoint (None on a local disk)."""
        record_program(self.lake, text)  # `fixflow publish` reads its declarations there
        self.metrics = metrics
        if metrics is not None:
            metrics.declare(self.program.inputs, (s.index for s in self.report.strata))
        self.on_batch = on_batch
        self.on_round = on_round
        """Called after every evaluation round (progress output of long batches)."""
        # Deletions retract min/max values along their witness chains (mra-retract).
        options = eval_options(config, progress=self._on_round, witness=True)
        self.async_mode = config.stream.consistency == "async"
        self.maintainer = Maintainer(
            self.report,
            spark,
            options,
            switch_fraction=config.elastic.switch_fraction,
            round_budget=config.stream.async_rounds_per_batch if self.async_mode else None,
        )
        self.lock = threading.Lock()
        """Held by each batch (``BatchPipeline``) and by ``converge`` between batches."""
        self.gate = BatchGate()
        """The batch in flight; closed by ``RunningStream.stop``, after which a batch that
        starts raises ``query.StopRequested``."""
        self.residuals: dict[str, float] = {}
        """The termination measure each relation's stratum reached in the running epoch
        (a ``sum`` relation's result commit records it)."""
        self._last_batch = -1
        self.loaded = False
        self.beta = config.stream.max_records_per_trigger
        self.limit_file = str(Path(self.lake.checkpoints) / "max_records_per_trigger")
        self.reports: list[BatchReport] = []
        self._last_finished: float | None = None
        self._last_lag = 0
        self.results = ResultCommits(
            self.report,
            self.lake,
            self.maintainer,
            self.async_mode,
            config.lake.task_io_rows,
        )
        self.results.ensure_result_tables()

    # ------------------------------------------------------------ the hook

    def maintain(self, result: IngestResult) -> None:
        """``query.Maintain``: one epoch for this batch's changes, results committed."""
        started = time.monotonic()
        # Arrow tables, net and counted: the Maintainer takes them as they are, makes them
        # local relations and, when it keeps copies in the driver (``[engine] local_rows``),
        # holds their rows without collecting.
        self.residuals.clear()
        changes = {r: c.change for r, c in result.changes.items() if not c.empty}
        with result.phases.timed("maintain"):
            loaded = None
            if not self.loaded:
                loaded, changes = self._load_before(result, changes)
            epoch = self._epoch(loaded, changes)
        with result.phases.timed("results"):
            changed_rows = (
                self.results.commit_epoch(epoch, result.commit, self.residuals) if epoch else {}
            )
        self._last_batch = result.batch_id
        seconds = time.monotonic() - started
        report = BatchReport(
            result.batch_id,
            result.records,
            result.dead_letters,
            {r: c.change.n_added for r, c in result.changes.items()},
            {r: c.change.n_removed for r, c in result.changes.items()},
            epoch,
            seconds,
            result.replayed,
            changed_rows,
            phases=result.phases,
        )
        self._record(report)

    def _epoch(self, loaded: Epoch | None, changes: dict[str, Change[pa.Table]]) -> Epoch | None:
        if changes or self.maintainer.provisional:
            # (async: a batch of no-ops or dead letters still carries pending deltas on)
            return self.maintainer.apply(changes)
        if loaded is not None:
            # Nothing changed in this batch (or the load took its facts), but the results
            # may lag the EDB they were loaded with: commit that difference.
            epoch = self.maintainer.pending_changes()
            epoch.strata = loaded.strata  # what ran: the load's bootstrap
            return epoch
        return None

    def _record(self, report: BatchReport) -> None:
        self._observe(report)
        self.reports.append(report)
        if self.on_batch is not None:
            self.on_batch(report)

    def _load_before(
        self,
        result: IngestResult,
        changes: dict[str, Change[pa.Table]],
    ) -> tuple[Epoch, dict[str, Change[pa.Table]]]:
        """Load the EDB and the result tables as they were before this batch and evaluate
        everything once; the batch's epoch then carries any difference to the results.
        Returns the load's epoch and the changes still to apply.

        Bootstrap = update from empty: when no EDB table held a fact before the batch and
        the batch only inserts, the load takes the batch's facts themselves, so a fresh
        stream evaluates its first batch once (an evaluation of the empty EDB followed by
        an update that outgrows it, i.e. a second bootstrap, cost the SSSP stream's first
        batch two evaluations)."""
        edb = self._tables_before(self.lake.edb, self.program.inputs, result)
        taken = not edb and not any(c.n_removed for c in changes.values())
        epoch = self.maintainer.load(
            {r: c.added for r, c in changes.items()} if taken else edb,
            self._tables_before(self.lake.results, self.program.outputs, result),
        )
        self.loaded = True
        log.info(
            "loaded the EDB %s batch %d and evaluated every stratum",
            "with" if taken else "before",
            result.batch_id,
        )
        return epoch, {} if taken else changes

    def _tables_before(
        self, path_of: Callable[[str], str], relations: Sequence[str], result: IngestResult
    ) -> dict[str, DataFrame]:
        """Each relation's table as it was before the batch, as a frame: read by Spark
        tasks when it holds more than ``[lake] task_io_rows`` rows (``lake.task_read``),
        else through the driver."""
        tables = {}
        for relation in relations:
            path = path_of(relation)
            version = version_before_batch(path, result.commit.query_id, result.batch_id)
            if version is None:
                continue
            delta = open_table(path, version)
            assert delta is not None, "the version was found in the table"
            attributes = self.report.catalog[relation].result
            rows = version_rows(delta)
            # An empty table is left out: the Maintainer takes a missing relation as empty,
            # and a missing result table spares the first epoch diffing against nothing
            # (two EXCEPTs, i.e. shuffles, over everything the bootstrap derived).
            if rows == 0:
                continue
            large = rows is None or rows > self.config.lake.task_io_rows
            if attributes and large and readable_by_tasks(delta):
                tables[relation] = read_frame(self.spark, delta)
                continue
            table = read_table(path, version)
            declared = None if table is None else declared_rows(table, attributes)
            if declared is not None and declared.num_rows:
                tables[relation] = self._frame(declared)
        return tables

    # ------------------------------------------------------------ async: between batches

    def converge(self) -> BatchReport | None:
        """One epoch without input that carries pending deltas on (async consistency),
        its result changes committed outside any batch; None when nothing is pending."""
        with self.lock:
            if not self.maintainer.provisional:
                return None
            started = time.monotonic()
            self.residuals.clear()
            epoch = self.maintainer.apply({})
            changed_rows = self.results.commit_epoch(epoch, None, self.residuals)
            report = BatchReport(
                self._last_batch,
                0,
                0,
                {},
                {},
                epoch,
                time.monotonic() - started,
                changed_rows=changed_rows,
                between_batches=True,
            )
        self._record(report)
        return report

    def settle(self, stopped: Callable[[], bool] = lambda: False) -> int:
        """Carry every pending delta on until the results are converged, or ``stopped()``
        says to stop; the epochs run."""
        epochs = 0
        while not stopped() and self.converge() is not None:
            epochs += 1
        return epochs

    # ------------------------------------------------------------ metrics and β

    def _on_round(self, progress: Progress) -> None:
        """Per evaluation round: deltas propagated and the termination residual."""
        if self.on_round is not None:
            self.on_round(progress)
        if progress.measure is not None:
            self.residuals.update(dict.fromkeys(progress.relations, progress.measure))
        if self.metrics is None:
            return
        stratum = str(progress.stratum)
        # Sync: this round's frontier, propagated next round. Async: what the stage's
        # local iterations propagated (its pending deltas after the stage may be none).
        propagated = progress.detail.get("propagated", max(progress.pending, 0))
        self.metrics.deltas_propagated.labels(stratum=stratum).inc(propagated)
        if progress.measure is not None:
            for relation in progress.relations:
                self.metrics.residual.labels(relation=relation).set(progress.measure)
        if progress.detail:
            for relation in progress.relations:
                self.metrics.engine_stage(relation, progress.detail)

    def _observe(self, report: BatchReport) -> None:
        if self.metrics is None:
            return
        self.metrics.provisional.set(1 if report.provisional else 0)
        if report.epoch is not None:
            self.metrics.partial_strata.set(len(report.epoch.partial))
        if report.epoch is not None:
            for stratum in report.epoch.strata:
                if stratum.strategy != "unchanged":
                    kind: Strategy = (
                        "bootstrap" if stratum.strategy.startswith("bootstrap") else "update"
                    )
                    self.metrics.choose_strategy(stratum.stratum, kind)
                    self.metrics.rounds.labels(stratum=str(stratum.stratum)).inc(stratum.rounds)
        for relation, rows in self.results.result_rows.items():
            self.metrics.result_rows.labels(relation=relation).set(rows)
        # The model's bytes of what the stream holds (an output that is also an input: its
        # result rows, which include its facts); the fixed 0.6 GB is not a relation's.
        held = {**self.maintainer.held_facts(), **self.results.result_rows}
        for relation, rows in held.items():
            self.metrics.state_bytes.labels(relation=relation).set(driver_bytes(rows))

    def adapt_batch_size(self, report: BatchReport, lag: int) -> int:
        """PowerLog's β rule on the per-trigger record limit (docs/architecture.md, micro-batch).

        The arrival rate |B|/ΔT is what arrived since the previous batch ended (the batch's
        records plus the growth of the backlog) over that wall time; τ is what one batch
        takes (at least the trigger interval). β then tracks the records that arrive while
        one batch runs, within [``[buffer] initial``, ``max_records_per_trigger``]; a
        backlog larger than β is read at the cap so the stream catches up.
        """
        cap = self.config.stream.max_records_per_trigger
        interval = report.finished_at - (self._last_finished or report.started_at)
        arrived = report.records + max(0, lag - self._last_lag)
        self._last_finished, self._last_lag = report.finished_at, lag
        tau = max(report.seconds, self.config.stream.trigger_ms / 1000.0)
        buffer = self.config.buffer
        beta = next_batch_limit(
            self.beta, arrived, max(interval, 1e-3), tau, buffer.alpha, buffer.r, cap
        )
        if lag > beta:
            beta = cap
        self.beta = max(beta, min(buffer.initial, cap))
        write_limit_file(self.limit_file, self.beta)
        if self.metrics is not None:
            self.metrics.buffer_beta.labels(buffer="micro_batch").set(self.beta)
        return self.beta

    # ------------------------------------------------------------ helpers

    def _frame(self, table: pa.Table) -> DataFrame:
        return self.spark.createDataFrame(table)

    def run(
        self,
        available_now: bool = False,
        *,
        processing_time: str | None = None,
        settle: bool = True,
        server: MetricsServer | None = None,
    ) -> RunningStream:
        """Start the streaming query over the program's Kafka topics (``start``), watched
        (``running.RunningStream``: started again after a missed connect-back, async deltas
        carried on while idle and, with ``settle``, to the end of an ``available_now`` run;
        β adapted)."""
        return RunningStream(
            self,
            lambda: self.start(available_now, processing_time),
            available_now=available_now,
            settle=settle,
            kafka=True,
            server=server,
        )

    def run_available_now(self, timeout_s: float | None = None) -> RunningStream:
        """One ``availableNow`` run to its end (the query, ended), pending async deltas left
        pending (``settle`` carries them on). A failed batch raises; so does a run still
        going after ``timeout_s`` (stopped first), a guard for tests."""
        query = self.run(available_now=True, settle=False)
        if query.awaitTermination(timeout_s) is False:
            query.stop()
            raise TimeoutError(f"the query did not finish within {timeout_s} s")
        return query

    def batch_pipeline(self) -> BatchPipeline:
        """What each micro-batch of this stream runs (ingest → ``maintain`` → EDB commit),
        for a source that hands over its records itself (``memory_source.MemorySource``);
        ``start`` runs the same through the Kafka query. The EDB tables are made first, as
        ``start`` makes them."""
        ensure_edb_tables(self.program, self.lake)
        return BatchPipeline(
            self.program,
            self.lake,
            self.metrics,
            self.maintain,
            topic_prefix=self.config.kafka.topic_prefix,
            lock=self.lock,
            spark=self.spark,
            gate=self.gate,
            mirror=self.mirror,
        )

    def start(self, available_now: bool = False, processing_time: str | None = None) -> Any:
        """Start the streaming query over the Kafka topics (``query.start_ingest_query``),
        unwatched: ``run`` watches it."""
        write_limit_file(self.limit_file, self.beta)
        return start_ingest_query(
            self.spark,
            self.config,
            self.program,
            self.lake,
            self.metrics,
            self.maintain,
            available_now=available_now,
            processing_time=processing_time,
            limit_file=self.limit_file if self.config.stream.adaptive else None,
            lock=self.lock,
            gate=self.gate,
            mirror=self.mirror,
        )
