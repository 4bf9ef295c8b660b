"""Prometheus metrics of the continuous pipeline.

Every metric lives in the ``Metrics`` object's own ``CollectorRegistry`` (never the global
default, so tests and several pipelines in one process do not collide), carries the
``fixflow_`` prefix and follows Prometheus naming: counters end in ``_total``, durations
are in seconds. ``start_metrics_server(metrics, port, host)`` serves ``/metrics`` over HTTP,
with the probes ``/ready`` and ``/healthz`` of the streaming query's ``Health``.
"""

from __future__ import annotations

import errno
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any, Literal, get_args
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from fixflow.pipeline.config import MetricsConfig
from fixflow.pipeline.kafka.messages import OPS, REASON_KINDS

log = logging.getLogger(__name__)

Strategy = Literal["update", "bootstrap"]
BATCH_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


@dataclass(eq=False)
class Metrics:
    """The pipeline's metrics; ``Metrics()`` registers them in a fresh registry."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.input_facts = Counter(
            "fixflow_input_facts",
            "Valid facts read from Kafka, by relation and operation",
            ["relation", "op"],
            registry=r,
        )
        self.noop_facts = Counter(
            "fixflow_noop_facts",
            "Operations without effect: insert of a present or delete of an absent fact",
            ["relation", "op"],
            registry=r,
        )
        self.dead_letters = Counter(
            "fixflow_dead_letters",
            "Messages sent to the dead-letter table, by reason",
            ["relation", "reason"],
            registry=r,
        )
        self.batch_duration = Histogram(
            "fixflow_batch_duration_seconds",
            "Wall time of one micro-batch",
            buckets=BATCH_SECONDS_BUCKETS,
            registry=r,
        )
        self.batches_committed = Counter(
            "fixflow_batches_committed", "Micro-batches committed to the lake", registry=r
        )
        self.batches_replayed = Counter(
            "fixflow_batches_replayed",
            "Micro-batches found already committed (replays after a restart)",
            registry=r,
        )
        self.rounds = Counter(
            "fixflow_rounds", "Evaluation rounds run, by stratum", ["stratum"], registry=r
        )
        self.deltas_propagated = Counter(
            "fixflow_deltas_propagated",
            "Delta tuples propagated, by stratum",
            ["stratum"],
            registry=r,
        )
        self.residual = Gauge(
            "fixflow_residual",
            "Termination-clause aggregate over the last round's deltas, by relation",
            ["relation"],
            registry=r,
        )
        self.strategy = Counter(
            "fixflow_strategy_chosen",
            "Maintenance strategy run per stratum and batch (update or bootstrap)",
            ["stratum", "strategy"],
            registry=r,
        )
        self.buffer_beta = Gauge(
            "fixflow_buffer_beta",
            "Current adaptive flush size beta of a buffer",
            ["buffer"],
            registry=r,
        )
        self.engine_stages = Counter(
            "fixflow_engine_stages",
            "Spark stages of the async/hybrid MRA engine, by relation",
            ["relation"],
            registry=r,
        )
        self.engine_local_iterations = Counter(
            "fixflow_engine_local_iterations",
            "Local iterations inside shards (the busiest shard of each stage), by relation",
            ["relation"],
            registry=r,
        )
        self.engine_messages = Counter(
            "fixflow_engine_messages",
            "Updates sent between shards at stage boundaries, by relation",
            ["relation"],
            registry=r,
        )
        self.engine_cut = Gauge(
            "fixflow_engine_shard_cut",
            "Links of the recursive rule whose endpoints are in different shards, by relation",
            ["relation"],
            registry=r,
        )
        self.kafka_lag = Gauge(
            "fixflow_kafka_lag_records",
            "Records published but not yet processed, by topic",
            ["topic"],
            registry=r,
        )
        self.result_rows = Gauge(
            "fixflow_result_rows", "Rows in a result table, by relation", ["relation"], registry=r
        )
        self.state_bytes = Gauge(
            "fixflow_state_bytes",
            "Bytes the memory model predicts for the rows the stream holds (105 bytes a row, "
            "docs/scale.md), by relation: an input's facts, an output's result rows",
            ["relation"],
            registry=r,
        )
        self.last_batch_id = Gauge(
            "fixflow_last_batch_id", "Id of the last committed micro-batch", registry=r
        )
        self.provisional = Gauge(
            "fixflow_provisional",
            "1 while the committed results are provisional (async consistency, deltas pending)",
            registry=r,
        )
        self.partial_strata = Gauge(
            "fixflow_partial_strata",
            "Strata whose results are partial: an iteration cap stopped them before they "
            "converged (their result commits carry fixflow.partial)",
            registry=r,
        )
        self.up = Gauge(
            "fixflow_up",
            "1 while the streaming query runs (what /ready answers), else 0",
            registry=r,
        )
        self.health = Health(self.up)

    def declare(self, inputs: Iterable[str], strata: Iterable[int | str]) -> None:
        """Create every labelled counter for its known label values at zero, so the first
        burst is an increase from 0 (Prometheus' ``increase()`` cannot see a series'
        first sample) and the dashboard shows 0 rather than "no data"."""
        strata = [str(s) for s in strata]
        for relation in inputs:
            for op in OPS:
                self.input_facts.labels(relation=relation, op=op)
                self.noop_facts.labels(relation=relation, op=op)
            for reason in REASON_KINDS:
                self.dead_letters.labels(relation=relation, reason=reason)
        for stratum in strata:
            self.rounds.labels(stratum=stratum)
            self.deltas_propagated.labels(stratum=stratum)
            for strategy in get_args(Strategy):
                self.strategy.labels(stratum=stratum, strategy=strategy)

    # Small helpers for the calls the pipeline makes most, so call sites stay one line.

    def engine_stage(self, relation: str, detail: Mapping[str, float]) -> None:
        """One stage of the async/hybrid engine: its local iterations, messages, cut and
        the smallest and largest β of its buffers (``fixflow_buffer_beta{buffer="R:min"}``)."""
        self.engine_stages.labels(relation=relation).inc()
        iterations = detail.get("local_iterations", 0.0)
        self.engine_local_iterations.labels(relation=relation).inc(iterations)
        self.engine_messages.labels(relation=relation).inc(detail.get("messages", 0.0))
        self.engine_cut.labels(relation=relation).set(detail.get("cut", 0.0))
        for bound in ("min", "max"):
            if f"beta_{bound}" in detail:
                beta = detail[f"beta_{bound}"]
                self.buffer_beta.labels(buffer=f"{relation}:{bound}").set(beta)

    def count_input(self, relation: str, op: str, n: int = 1) -> None:
        if n:
            self.input_facts.labels(relation=relation, op=op).inc(n)

    def count_noop(self, relation: str, op: str, n: int = 1) -> None:
        if n:
            self.noop_facts.labels(relation=relation, op=op).inc(n)

    def count_dead_letter(self, relation: str, reason: str, n: int = 1) -> None:
        if n:
            self.dead_letters.labels(relation=relation, reason=reason).inc(n)

    def choose_strategy(self, stratum: int | str, strategy: Strategy) -> None:
        self.strategy.labels(stratum=str(stratum), strategy=strategy).inc()

    def observe_lag(self, lags: dict[str, int]) -> None:
        """Set the lag gauge per topic (see ``batch_limit.lag_from_progress``)."""
        for topic, lag in lags.items():
            self.kafka_lag.labels(topic=topic).set(lag)

    def batch_committed(self, batch_id: int) -> None:
        self.batches_committed.inc()
        self.last_batch_id.set(batch_id)


HealthState = Literal["starting", "running", "waiting", "stopping", "stopped", "failed"]
"""``waiting``: the query is alive but the Kafka broker is unreachable (not ready)."""


class Health:
    """The streaming query's state, as the HTTP probes report it: ``/ready`` answers 200
    only while it runs, ``/healthz`` (liveness) 200 unless it failed. Set by the driver
    loop (`fixflow run`), read by the endpoint's threads."""

    def __init__(self, up: Gauge | None = None) -> None:
        self._up = up
        """``fixflow_up``; None for a stream without metrics (the state is then kept only)."""
        self._lock = threading.Lock()
        self.state: HealthState = "starting"
        self.detail = ""

    def set(self, state: HealthState, detail: str = "") -> None:
        with self._lock:
            self.state, self.detail = state, detail
        if self._up is not None:
            self._up.set(1 if state == "running" else 0)
        log.info("query %s%s", state, f": {detail}" if detail else "")

    def probe(self, path: str) -> tuple[bool, bytes]:
        """(healthy?, JSON body) for ``/ready`` or ``/healthz``."""
        with self._lock:
            state, detail = self.state, self.detail
        ok = state == "running" if path == READY_PATH else state != "failed"
        return ok, json.dumps({"state": state, "detail": detail}).encode()


READY_PATH, LIVE_PATH = "/ready", "/healthz"


@dataclass(frozen=True, slots=True)
class MetricsServer:
    port: int
    """The port actually bound (useful when asked for port 0 in tests)."""
    server: WSGIServer
    thread: threading.Thread

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class MetricsPortBusy(Exception):
    """The configured metrics address is taken (another `fixflow run` on this host?)."""


def serve_configured(metrics: Metrics, config: MetricsConfig) -> MetricsServer | None:
    """Start the endpoint as ``[metrics]`` says; None when it is disabled."""
    if not config.enabled:
        return None
    return start_metrics_server(metrics, config.port, config.host)


def start_metrics_server(metrics: Metrics, port: int, addr: str = "127.0.0.1") -> MetricsServer:
    """Serve ``/metrics``, ``/ready`` and ``/healthz`` at ``http://addr:port`` from a daemon
    thread; port 0 binds a free port (``MetricsServer.port`` says which)."""
    try:
        server = make_server(addr, port, _app(metrics), _Server, handler_class=_QuietHandler)
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        raise MetricsPortBusy(
            f"the metrics port {addr}:{port} is in use (another `fixflow run`?): set "
            "[metrics] port to a free port, or 0 to pick one",
        ) from None
    thread = threading.Thread(target=server.serve_forever, name="fixflow-metrics", daemon=True)
    thread.start()
    bound = server.server_address[1]
    log.info("Prometheus metrics at http://%s:%d/metrics", addr, bound)
    return MetricsServer(int(bound), server, thread)


def _app(metrics: Metrics) -> Callable[..., Iterable[bytes]]:
    prometheus = make_wsgi_app(metrics.registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in (READY_PATH, LIVE_PATH):
            return prometheus(environ, start_response)
        ok, body = metrics.health.probe(path)
        status = "200 OK" if ok else "503 Service Unavailable"
        start_response(status, [("Content-Type", "application/json")])
        return [body]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds would flood the console."""
