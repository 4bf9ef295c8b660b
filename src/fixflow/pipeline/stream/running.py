"""A program's streaming query while it runs: ``RunningStream`` (what ``Program.stream`` and
``ProgramStream.run`` return) does Fixflow's work around the query — start it again after a
missed connect-back, carry pending deltas on while idle (async), adapt the per-trigger limit —
and `fixflow run`'s loop (``run_until_stopped``) adds signals, the broker watch and health;
``failure_summary`` says in one line why a query stopped."""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming import StreamingQuery

from fixflow.pipeline.kafka.batch_limit import lag_from_progress
from fixflow.pipeline.lake import lease
from fixflow.pipeline.stream.broker_watch import BrokerWatch
from fixflow.pipeline.stream.metrics import Health, MetricsServer
from fixflow.pipeline.stream.query import (
    START_AGAIN,
    START_ATTEMPTS,
    StopRequested,
    missed_connect_back,
)

if TYPE_CHECKING:
    from fixflow.pipeline.stream.program import BatchReport, ProgramStream

log = logging.getLogger(__name__)


WATCH_S = 0.2
"""How long the watcher waits on the query between its looks at the stream: the most an idle
async stream waits before carrying its deltas on."""

COMMIT_WAIT_S = 30.0
"""How long ``RunningStream.stop`` waits for Spark to commit the last batch it ran."""
COMMIT_LATE = (
    "batch %d: Spark had not committed it %.0f s after its lake commits; stopping anyway (the "
    "next start runs it again, committing nothing twice)"
)


class RunningStream(StreamingQuery):
    """A program's running streaming query: pyspark's ``StreamingQuery`` (``isActive``,
    ``stop``, ``lastProgress``, ...), with Fixflow's work around it done by a watcher thread:

    - a start that missed Spark's connect-back (``query.missed_connect_back``) is made again
      on the same checkpoint, ``START_ATTEMPTS`` starts in all;
    - async consistency: while no batch runs, pending deltas are carried on
      (``ProgramStream.converge``); after an ``available_now`` run, to convergence when
      ``settle`` (unless stopped);
    - with the Kafka topics as the source (``kafka``): the lag observed after each batch, and
      the per-trigger limit adapted (``[stream] adaptive``);
    - a metrics endpoint handed over (``server``) is stopped when all is done.

    The stream holds its lake's lease (``lake.lease``) from before the query starts until
    all is done: a second writer of the same lake is refused (``LakeBusy``), and a stream
    whose lease was taken over stops.

    ``awaitTermination`` returns once the query has ended and that work is done, and raises
    the query's failure or the work's (the query is stopped first)."""

    def __init__(
        self,
        stream: ProgramStream,
        start: Callable[[], StreamingQuery],
        *,
        available_now: bool = False,
        settle: bool = True,
        kafka: bool = False,
        server: MetricsServer | None = None,
    ) -> None:
        stream.gate.closed.clear()
        stream.gate.finished = None  # a batch of an earlier query: this one reports none
        self._lease = lease.take(stream.lake)
        try:
            if stream.mirror is not None:  # under the lease: no other writer changes it
                stream.mirror.restore()
            # pyspark's StreamingQuery wraps the JVM's query (``_jsq``); a start again swaps it.
            super().__init__(start()._jsq)
        except BaseException:
            self._lease.release()
            raise
        self.stream = stream
        self._start = start
        self._starts = 1
        self._settle = available_now and settle
        self._kafka = kafka
        self._server = server
        self._stopping = False
        self._failure: BaseException | None = None
        self._seen = 0
        self._done = threading.Event()
        self._lease.on_lost = self._lost
        name = f"fixflow-{stream.lake.program}-watch"
        self._watcher = threading.Thread(target=self._watch, name=name, daemon=True)
        self._watcher.start()

    @property
    def reports(self) -> list[BatchReport]:
        """What each batch (and each epoch between batches) did, in order."""
        return self.stream.reports

    def stop(self) -> None:
        """Stop the query between batches: the batch in flight, if any, finishes and
        commits, and no batch starts after it (one that Spark starts raises
        ``query.StopRequested`` before reading anything: the next start runs it). Returns
        once the query has stopped and the lake's lease is released, so that a stream of
        the same lake may start at once; pending async deltas stay pending. (Not from an
        ``on_batch`` callback: the batch in flight is the one it waits for.)"""
        self.close()
        with self.stream.lock:  # held by the batch in flight (and by a converge)
            pass
        self._await_spark_commit(self.stream.gate.finished)
        super().stop()
        if threading.current_thread() is not self._watcher:
            self._done.wait()

    def _await_spark_commit(self, batch_id: int | None) -> None:
        """Spark writes a batch's commit log after the ``foreachBatch`` function returns,
        which is after the batch's lake commits: a query stopped in between runs that
        batch again at its next start (committing nothing twice). So wait, at most
        ``COMMIT_WAIT_S``, until the query reports progress for ``batch_id`` (Spark reports
        a batch's progress after its commit log) or has ended."""
        if batch_id is None:
            return
        deadline = time.monotonic() + COMMIT_WAIT_S
        while self.isActive and time.monotonic() < deadline:
            progress = self.lastProgress
            if progress is not None and progress["batchId"] >= batch_id:
                return
            time.sleep(WATCH_S / 4)
        if self.isActive:
            log.warning(COMMIT_LATE, batch_id, COMMIT_WAIT_S)

    def close(self) -> int | None:
        """Let no batch start from now on (``stop`` then ends the query): the id of the
        batch in flight, which finishes and commits, or None."""
        self._stopping = True
        self.stream.gate.closed.set()
        return self.stream.gate.in_flight

    def exception(self) -> StreamingQueryException | None:
        """Why the query failed; None when it did not, or ended because it was stopped."""
        error = super().exception()
        return None if error is not None and self._stopped_by_request(error) else error

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        """Wait until the query has ended and the work around it is done (pyspark's
        contract: None without a timeout, else whether it ended in time)."""
        if not self._done.wait(timeout):
            return False
        if self._failure is not None:
            raise self._failure
        try:
            super().awaitTermination()  # ended: raises the query's failure, if any
        except Exception as error:
            if not self._stopped_by_request(error):
                raise
        return None if timeout is None else True

    def _lost(self, why: str) -> None:
        """The lease was taken over: this stream must write no more."""
        self._failure = lease.LakeBusy(why)
        self.close()
        super().stop()

    def _stopped_by_request(self, error: BaseException) -> bool:
        return self._stopping and StopRequested.__name__ in str(error)

    def _watch(self) -> None:
        try:
            while self._running() or self._started_again():
                pass
            if self._settle and self.exception() is None:
                self.stream.settle(stopped=lambda: self._stopping)
        except BaseException as error:  # raised to whoever awaits the query
            self._failure = error
            with contextlib.suppress(Exception):
                super().stop()
        finally:
            self._push_checkpoint()
            self._lease.release()
            if self._server is not None:
                self._server.stop()
            self._done.set()

    def _push_checkpoint(self) -> None:
        """The last batch's commit log into an object-store lake (else the next start
        replays that batch, committing nothing twice)."""
        if self.stream.mirror is None or self._lease.lost:
            return
        try:
            self.stream.mirror.push()
        except Exception:
            log.warning("could not copy the last checkpoint files into the lake", exc_info=True)

    def _running(self) -> bool:
        """Wait a moment on the query; while it runs, observe new batches or, idle, carry
        pending deltas on. False once it has ended."""
        try:
            ended = self._jsq.awaitTermination(int(WATCH_S * 1000))
        except Exception:  # it failed: ``exception()`` says why
            return False
        if ended:
            return False
        if len(self.stream.reports) > self._seen:
            self._after_batches()
        elif _idle(self) and self.stream.maintainer.provisional and not self._stopping:
            self.stream.converge()
        return True

    def _started_again(self) -> bool:
        if self._stopping or self._starts == START_ATTEMPTS or not missed_connect_back(self):
            return False
        log.warning(START_AGAIN, self._starts, START_ATTEMPTS)
        self._jsq = self._start()._jsq
        self._starts += 1
        return True

    def _after_batches(self) -> None:
        stream, seen = self.stream, self._seen
        self._seen = len(stream.reports)
        if not self._kafka:
            return
        lags = lag_from_progress(self.lastProgress)
        if stream.metrics is not None:
            stream.metrics.observe_lag(lags)
        for report in stream.reports[seen : self._seen]:
            if stream.config.stream.adaptive and report.records:
                stream.adapt_batch_size(report, sum(lags.values()))


def run_until_stopped(
    query: RunningStream, poll_s: float = 0.5, broker_watch: BrokerWatch | None = None
) -> None:
    """`fixflow run`'s loop: block until the query ends; SIGTERM/SIGINT stop it between
    batches (``RunningStream.stop``: the batch in flight commits, no other starts); with a
    ``broker_watch``, say when the broker goes away and comes back (health: waiting), and
    give up after ``[kafka] wait_for_broker_s``."""
    stopping = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        in_flight = query.close()
        after = "no batch in flight" if in_flight is None else f"batch {in_flight} in flight"
        log.warning("signal %d: stopping (%s; no batch starts after it)", signum, after)
        stopping.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    metrics = query.stream.metrics
    health = metrics.health if metrics is not None else Health()
    try:
        health.set("running")
        while not stopping.is_set() and query.awaitTermination(poll_s) is False:
            if broker_watch is not None:
                broker_watch.check_or_give_up()
        health.set("stopping")
        query.stop()  # after the batch in flight
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
