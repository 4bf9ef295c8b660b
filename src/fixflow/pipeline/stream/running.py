"""`fixflow run`'s loop around a running streaming query: stop on a signal between batches,
adapt the per-trigger limit, carry pending deltas on while idle (async), start again after a
missed connect-back, and say in one line why a query stopped."""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from fixflow.pipeline.kafka.batch_limit import lag_from_progress
from fixflow.pipeline.stream.broker_watch import BrokerWatch
from fixflow.pipeline.stream.metrics import Health
from fixflow.pipeline.stream.query import START_AGAIN, START_ATTEMPTS, missed_connect_back

if TYPE_CHECKING:
    from fixflow.pipeline.stream.program import ProgramStream

log = logging.getLogger(__name__)


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
