"""The continuous pipeline of one program: Kafka → foreachBatch → maintenance → Delta.

``ProgramStream`` is the maintenance hook of ``ingest.batch_handler``. Per micro-batch:

1. ingest (validate, dead-letter, normalize) — ``fixflow.pipeline.ingest``;
2. on the first batch after a (re)start, load the EDB *as it was before this batch*
   (time travel by (query id, batch id)), so a replay after a crash — even one that
   committed some tables — starts from exactly the state the first run saw;
3. one epoch of the ``Maintainer``: every stratum brought up to date;
4. commit the changed result rows (one idempotent Delta commit per changed relation);
5. the EDB commit, made last by ``batch_handler``, marks the batch as applied.

Every Delta commit carries (query id, batch id) so a replayed batch changes nothing.

Consistency (``[stream] consistency``): ``converged`` runs every epoch to the fixpoint.
``async`` lets an incremental MRA update run ``async_rounds_per_batch`` propagation rounds,
commits, and carries the pending deltas on: into the next batch, and between batches
(``converge``: epochs without input while the query is idle, and to the end after an
``--available-now`` run). While deltas are pending, result commits carry
``fixflow.provisional = true`` and ``state/<relation>`` holds the pending deltas; the
commit that completes convergence says ``false``. A restart re-evaluates the EDB, which
converges, so nothing provisional survives a crash.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.checker import load
from fixflow.checker.model import Report
from fixflow.operators.evaluate import EvalOptions, Progress, partial_relations
from fixflow.operators.maintain import Epoch, Maintainer, RelationChange
from fixflow.pipeline.broker_watch import BrokerWatch
from fixflow.pipeline.config import Config
from fixflow.pipeline.engine_settings import engine_options
from fixflow.pipeline.ingest import IngestResult, Phases, start_ingest_query
from fixflow.pipeline.kafka_source import lag_from_progress, next_batch_limit, write_limit_file
from fixflow.pipeline.lake import (
    arrow_schema,
    declared_rows,
    table_keys,
    table_schema,
    with_table_columns,
)
from fixflow.pipeline.lakehouse import (
    BatchCommit,
    ProgramLake,
    append_rows,
    merge_changes,
    open_table,
    overwrite_rows,
    read_before_batch,
    record_program,
    table_rows,
)
from fixflow.pipeline.metrics import Health, Metrics, Strategy
from fixflow.pipeline.results import partial_metadata

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
    ) -> None:
        self.spark = spark
        self.config = config
        self.program_file = Path(program_file)
        text = self.program_file.read_text(encoding="utf-8")
        self.report: Report = load(text, str(program_file))
        self.program = self.report.analysis.program
        self.lake = ProgramLake.for_program(config.lake.path, self.program_file)
        record_program(self.lake, text)  # `fixflow publish` reads its declarations there
        self.metrics = metrics
        if metrics is not None:
            metrics.declare(self.program.inputs, (s.index for s in self.report.strata))
        self.on_batch = on_batch
        self.on_round = on_round
        """Called after every evaluation round (progress output of long batches)."""
        options = EvalOptions(
            max_iterations=config.engine.max_iterations or None,  # 0: the default rule
            engine_options=engine_options(config),
            progress=self._on_round,
            # Deletions retract min/max values along their witness chains (mra-retract).
            witness=True,
            local_rows=config.engine.local_rows,
        )
        self.async_mode = config.stream.consistency == "async"
        self.maintainer = Maintainer(
            self.report,
            spark,
            options,
            switch_fraction=config.elastic.switch_fraction,
            round_budget=config.stream.async_rounds_per_batch if self.async_mode else None,
        )
        self.lock = threading.Lock()
        """Held by each batch (``batch_handler``) and by ``converge`` between batches."""
        self._flagged: dict[str, bool] = {}
        """Per output relation, the ``provisional`` flag of its last result commit."""
        self._last_batch = -1
        self._state_rows: dict[str, int] = {}
        """Per MRA relation, the rows of ``state/<relation>`` this process last committed."""
        self.loaded = False
        self.beta = config.stream.max_records_per_trigger
        self.limit_file = str(Path(self.lake.checkpoints) / "max_records_per_trigger")
        self.reports: list[BatchReport] = []
        self._last_finished: float | None = None
        self._last_lag = 0
        self.result_rows: dict[str, int] = {}
        """Per output relation, the rows of its result table: counted once from the table's
        log, then kept up to date from what every commit added and removed (no Spark job)."""
        self.ensure_result_tables()

    # ------------------------------------------------------------ the hook

    def maintain(self, result: IngestResult) -> None:
        """``ingest.Maintain``: one epoch for this batch's changes, results committed."""
        started = time.monotonic()
        changes = result.changes.items()
        # Arrow tables: the Maintainer makes them local relations and, when it keeps copies
        # in the driver (``[engine] local_rows``), holds their rows without collecting.
        inserts = {r: c.inserts for r, c in changes if c.inserts.num_rows}
        deletes = {r: c.deletes for r, c in changes if c.deletes.num_rows}
        with result.phases.timed("maintain"):
            loaded = None
            if not self.loaded:
                loaded, inserts = self._load_before(result, inserts, deletes)
            epoch = self._epoch(result, loaded, inserts, deletes)
        with result.phases.timed("results"):
            changed_rows = self._commit_epoch(epoch, result.commit) if epoch else {}
        self._last_batch = result.batch_id
        seconds = time.monotonic() - started
        report = BatchReport(
            result.batch_id,
            result.records,
            result.dead_letters,
            {r: c.inserts.num_rows for r, c in changes},
            {r: c.deletes.num_rows for r, c in changes},
            epoch,
            seconds,
            result.replayed,
            changed_rows,
            phases=result.phases,
        )
        self._record(report)

    def _epoch(
        self,
        result: IngestResult,
        loaded: Epoch | None,
        inserts: dict[str, pa.Table],
        deletes: dict[str, pa.Table],
    ) -> Epoch | None:
        if inserts or deletes or self.maintainer.provisional:
            # (async: a batch of no-ops or dead letters still carries pending deltas on)
            counts = {
                r: (c.inserts.num_rows, c.deletes.num_rows) for r, c in result.changes.items()
            }
            return self.maintainer.apply(inserts, deletes, net_counts=counts)
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
        inserts: dict[str, pa.Table],
        deletes: dict[str, pa.Table],
    ) -> tuple[Epoch, dict[str, pa.Table]]:
        """Load the EDB and the result tables as they were before this batch and evaluate
        everything once; the batch's epoch then carries any difference to the results.
        Returns the load's epoch and the insertions still to apply.

        Bootstrap = update from empty: when no EDB table held a fact before the batch and
        the batch only inserts, the load takes the batch's facts themselves, so a fresh
        stream evaluates its first batch once (an evaluation of the empty EDB followed by
        an update that outgrows it, i.e. a second bootstrap, cost the SSSP stream's first
        batch two evaluations)."""
        edb = self._tables_before(self.lake.edb, self.program.inputs, result)
        taken = not edb and not deletes
        epoch = self.maintainer.load(
            inserts if taken else edb,
            self._tables_before(self.lake.results, self.program.outputs, result),
        )
        self.loaded = True
        log.info(
            "loaded the EDB %s batch %d and evaluated every stratum",
            "with" if taken else "before",
            result.batch_id,
        )
        return epoch, {} if taken else inserts

    def _tables_before(
        self, path_of: Callable[[str], str], relations: Sequence[str], result: IngestResult
    ) -> dict[str, DataFrame]:
        tables = {}
        for relation in relations:
            table = read_before_batch(path_of(relation), result.commit.query_id, result.batch_id)
            if table is None:
                continue
            rows = declared_rows(table, self.report.catalog[relation].result)
            # An empty table is left out: the Maintainer takes a missing relation as empty,
            # and a missing result table spares the first epoch diffing against nothing
            # (two EXCEPTs, i.e. shuffles, over everything the bootstrap derived).
            if rows.num_rows:
                tables[relation] = self._frame(rows)
        return tables

    # ------------------------------------------------------------ results

    def result_schema(self, relation: str) -> pa.Schema:
        """A result table's schema: the declared attributes, minus any iteration index
        (a nullary relation's: ``lake.table_schema``)."""
        return table_schema(self.report.catalog[relation].result)

    def _table_columns(self, relation: str, frame: DataFrame) -> DataFrame:
        return with_table_columns(frame, self.report.catalog[relation].result)

    def _table_keys(self, relation: str, change: RelationChange) -> list[str]:
        return list(table_keys(change.key_columns, self.report.catalog[relation].result))

    def ensure_result_tables(self) -> None:
        """Empty result tables with exactly the output relations' schemas, so analysts can
        query every output before the first batch."""
        for relation in self.program.outputs:
            if open_table(self.lake.results(relation)) is None:
                append_rows(self.lake.results(relation), self.result_schema(relation).empty_table())
            self.result_rows[relation] = table_rows(self.lake.results(relation))

    def _commit_epoch(self, epoch: Epoch, commit: BatchCommit | None) -> dict[str, int]:
        """Commit an epoch's changed result rows (and, async, the pending deltas)."""
        changed = {}
        metadata = self._metadata(epoch)
        partial = partial_relations(self.report, (s.stratum for s in epoch.partial))
        for relation, change in epoch.changes.items():
            upserts, deletes = self._arrow_change(relation, change)
            new_rows = change.new_rows  # appended: no scan of the result table
            if not (upserts.num_rows or deletes.num_rows) and self._flag_unchanged(relation, epoch):
                continue
            if not (upserts.num_rows or deletes.num_rows):
                # Only the flag changes (e.g. the last pending delta changed no row): commit
                # one unchanged row again so the newest commit tells the truth.
                one = self.maintainer.relation(relation).limit(1)
                upserts = _to_arrow(
                    self._table_columns(relation, one), self.result_schema(relation)
                )
                new_rows = False
            merged = merge_changes(
                self.lake.results(relation),
                self._table_keys(relation, change),
                upserts,
                deletes,
                commit,
                self._with_partial(metadata, epoch, partial.get(relation, frozenset())),
                new_rows=new_rows,
            )
            if merged is not None:
                changed[relation] = upserts.num_rows + deletes.num_rows
                self.result_rows[relation] += merged.rows_gained
            if self.async_mode:
                self._flagged[relation] = epoch.provisional
        if self.async_mode:
            self._commit_state(commit, metadata)
        return changed

    def _metadata(self, epoch: Epoch) -> dict[str, str] | None:
        if not self.async_mode:
            return None
        return {"fixflow.provisional": "true" if epoch.provisional else "false"}

    @staticmethod
    def _with_partial(
        metadata: dict[str, str] | None, epoch: Epoch, capped: frozenset[int]
    ) -> dict[str, str] | None:
        """A result commit's entries, with ``fixflow.partial`` when the relation depends
        on a stratum an iteration cap stopped (``Maintainer.partial``)."""
        entries = partial_metadata(
            (s.stratum, s.relations, s.cap, s.rounds) for s in epoch.partial if s.stratum in capped
        )
        return {**(metadata or {}), **entries} or None

    def _flag_unchanged(self, relation: str, epoch: Epoch) -> bool:
        return not self.async_mode or self._flagged.get(relation, False) == epoch.provisional

    def _commit_state(self, commit: BatchCommit | None, metadata: dict[str, str] | None) -> None:
        """``state/<relation>``: the pending deltas of every MRA relation (async)."""
        for relation in self.report.mra:
            rows = self._pending_rows(relation)
            if rows.num_rows == 0 and self._state_rows.get(relation) == 0:
                continue  # already committed empty: nothing to rewrite
            overwrite_rows(self.lake.state(relation), rows, commit, metadata)
            self._state_rows[relation] = rows.num_rows

    def _pending_rows(self, relation: str) -> pa.Table:
        entry = self.report.catalog[relation]
        keys = [entry.attributes[p] for p in entry.key_positions]
        assert entry.value_pos is not None, "MRA relations have an aggregated value"
        value = entry.attributes[entry.value_pos]
        schema = arrow_schema((*keys, value, replace(value, name="pending_delta")))
        state = self.maintainer.carried.pending.get(relation)
        if state is None:
            return schema.empty_table()
        rows = state.pending_rows().toDF(*entry.names, "pending_delta")
        frame = rows.select(*(a.name for a in keys), value.name, "pending_delta")
        return _to_arrow(frame, schema)

    # ------------------------------------------------------------ async: between batches

    def converge(self) -> BatchReport | None:
        """One epoch without input that carries pending deltas on (async consistency),
        its result changes committed outside any batch; None when nothing is pending."""
        with self.lock:
            if not self.maintainer.provisional:
                return None
            started = time.monotonic()
            epoch = self.maintainer.apply({}, {})
            changed_rows = self._commit_epoch(epoch, None)
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

    def settle(self) -> int:
        """Carry every pending delta on until the results are converged; the epochs run."""
        epochs = 0
        while self.converge() is not None:
            epochs += 1
        return epochs

    def _arrow_change(self, relation: str, change: RelationChange) -> tuple[pa.Table, pa.Table]:
        schema = self.result_schema(relation)
        keys = self._table_keys(relation, change)
        key_schema = pa.schema([schema.field(c) for c in keys])
        if change.unchanged:
            return schema.empty_table(), key_schema.empty_table()  # no job to collect nothing
        if change.tables is not None:  # made in the driver: nothing to collect
            upserts, deletes = change.tables
            return _conformed(upserts, schema), _conformed(deletes.select(keys), key_schema)
        tagged = self._table_columns(relation, _tagged_union(change))
        both = _to_arrow(tagged, schema.append(pa.field(UPSERT, pa.bool_())))
        is_upsert = both.column(UPSERT)
        upserts = both.filter(is_upsert).drop_columns([UPSERT])
        deletes = both.filter(pc.invert(is_upsert)).select(keys)
        return upserts, deletes

    # ------------------------------------------------------------ metrics and β

    def _on_round(self, progress: Progress) -> None:
        """Per evaluation round: deltas propagated and the termination residual."""
        if self.on_round is not None:
            self.on_round(progress)
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
        for relation, rows in self.result_rows.items():
            self.metrics.result_rows.labels(relation=relation).set(rows)

    def adapt_batch_size(self, report: BatchReport, lag: int) -> int:
        """PowerLog's β rule on the per-trigger record limit (docs/architecture.md §4).

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

    def run_available_now(self, timeout_s: float | None = None) -> Any:
        """One ``availableNow`` run to its end (the query, ended); a start that lost Spark's
        connect-back race (``missed_connect_back``) is started again, ``START_ATTEMPTS`` in
        all. A failed batch raises; so does a run still going after ``timeout_s`` (stopped
        first), a guard for tests."""
        for attempt in range(1, START_ATTEMPTS + 1):
            query = self.start(available_now=True)
            try:
                finished = query.awaitTermination(timeout_s)
            except Exception:
                if attempt < START_ATTEMPTS and missed_connect_back(query):
                    log.warning(START_AGAIN, attempt, START_ATTEMPTS)
                    continue
                raise
            if finished is False:  # None without a timeout
                query.stop()
                raise TimeoutError(f"the query did not finish within {timeout_s} s")
            return query
        raise AssertionError("unreachable: the last attempt returns or raises")

    def start(self, available_now: bool = False) -> Any:
        """Start the streaming query (see ``ingest.start_ingest_query``)."""
        write_limit_file(self.limit_file, self.beta)
        return start_ingest_query(
            self.spark,
            self.config,
            self.program,
            self.lake,
            self.metrics,
            self.maintain,
            available_now=available_now,
            limit_file=self.limit_file if self.config.stream.adaptive else None,
            lock=self.lock,
        )


UPSERT = "#upsert"

CONNECT_BACK = "Python worker failed to connect back"
START_ATTEMPTS = 3
START_AGAIN = (
    "the Kafka source's Python worker did not connect back to Spark within its fixed 10 s "
    "(a loaded machine): starting the query again on its checkpoint (attempt %d of %d failed)"
)


def missed_connect_back(query: Any) -> bool:
    """Whether ``query`` failed because a Python worker Spark started (the Kafka source's
    runner, a data source's planner) did not connect back in time: Spark 4.2 gives it a
    hard-coded 10 s (PythonWorkerFactory.createSimpleWorker), which a start on a loaded
    machine can miss. Those workers run while a micro-batch is planned, before Fixflow's
    batch function runs, so nothing was applied or committed: starting the query again on
    the same checkpoint reads the same offsets."""
    error = query.exception()
    return error is not None and CONNECT_BACK in str(error)


def _tagged_union(change: RelationChange) -> DataFrame:
    """A change's upserts and deletes in one frame, to be collected in ONE job: deleted keys
    padded with nulls, every row tagged by ``UPSERT``."""
    upserts = change.upserts
    types = dict(upserts.dtypes)
    padded = [
        F.col(c) if c in change.key_columns else F.lit(None).cast(types[c]).alias(c)
        for c in upserts.columns
    ]
    return upserts.withColumn(UPSERT, F.lit(True)).unionByName(
        change.deletes.select(*padded, F.lit(False).alias(UPSERT))
    )


def _to_arrow(frame: DataFrame, schema: pa.Schema) -> pa.Table:
    return _conformed(frame.toArrow(), schema)


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.table(
        {name: table.column(name).cast(schema.field(name).type) for name in schema.names},
        schema=schema,
    )


def run_until_stopped(
    stream: ProgramStream,
    query: Any,
    poll_s: float = 0.5,
    broker_watch: BrokerWatch | None = None,
) -> None:
    """Block until the query ends; SIGTERM/SIGINT stop it gracefully (the running batch
    finishes first, so nothing is half-committed). Adapts β between batches; with a
    ``broker_watch``, says when the broker goes away and comes back (health: waiting)."""
    stopping = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log.warning("signal %d: stopping after the current batch", signum)
        stopping.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    health = stream.metrics.health if stream.metrics is not None else Health()
    seen, attempt = 0, 1
    try:
        health.set("running")
        while True:
            while query.isActive and not stopping.is_set():
                time.sleep(poll_s)
                if broker_watch is not None:
                    broker_watch.check()
                if len(stream.reports) > seen:
                    seen = _after_batches(stream, query, seen)
                elif _idle(query) and stream.maintainer.provisional:
                    stream.converge()  # async: no input arrives, so carry pending deltas on
            if stopping.is_set() or attempt == START_ATTEMPTS or not missed_connect_back(query):
                break
            log.warning(START_AGAIN, attempt, START_ATTEMPTS)
            query, attempt = stream.start(), attempt + 1
        health.set("stopping")
        _stop_between_batches(query)
        query.awaitTermination()
        health.set("stopped")
    except BaseException as error:
        health.set("failed", (str(error).splitlines() or [type(error).__name__])[0])
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _idle(query: Any) -> bool:
    return query.isActive and not query.status.get("isTriggerActive", False)


def _stop_between_batches(query: Any, timeout_s: float = 3600.0) -> None:
    """Stop ``query`` once no trigger is running: ``stop()`` interrupts a running batch,
    which would then only be completed by the replay after the next start."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and time.monotonic() < deadline:
        if not query.status.get("isTriggerActive", False):
            break
        time.sleep(0.05)
    if query.isActive:
        query.stop()


def _after_batches(stream: ProgramStream, query: Any, seen: int) -> int:
    lags = lag_from_progress(query.lastProgress)
    if stream.metrics is not None:
        stream.metrics.observe_lag(lags)
    for report in stream.reports[seen:]:
        if stream.config.stream.adaptive and report.records:
            stream.adapt_batch_size(report, sum(lags.values()))
    return len(stream.reports)


FAILURE = re.compile(r"\b(DataLossError|TimeoutError|BrokerUnavailable|BrokerError): (.+)")
"""Fixflow's own failures raised inside Spark (the Kafka reader runs in a Python worker):
their message is what the user needs, not the JVM's trace around it."""


def failure_summary(error: BaseException) -> str:
    """One line saying why a streaming query stopped."""
    text = str(error)
    found = FAILURE.search(text)
    if found:
        return found.group(2).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
