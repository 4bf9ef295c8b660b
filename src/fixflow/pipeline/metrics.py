"""Prometheus metrics of the continuous pipeline.

Every metric lives in the ``Metrics`` object's own ``CollectorRegistry`` (never the global
default, so tests and several pipelines in one process do not collide), carries the
``fixflow_`` prefix and follows Prometheus naming: counters end in ``_total``, durations
are in seconds. ``start_metrics_server(metrics, port)`` serves ``/metrics`` over HTTP.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

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
        self.last_batch_id = Gauge(
            "fixflow_last_batch_id", "Id of the last committed micro-batch", registry=r
        )

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
        """Set the lag gauge per topic (see ``kafka_source.lag_from_progress``)."""
        for topic, lag in lags.items():
            self.kafka_lag.labels(topic=topic).set(lag)

    def batch_committed(self, batch_id: int) -> None:
        self.batches_committed.inc()
        self.last_batch_id.set(batch_id)


@dataclass(frozen=True, slots=True)
class MetricsServer:
    port: int
    """The port actually bound (useful when asked for port 0 in tests)."""
    server: WSGIServer
    thread: threading.Thread

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_configured(metrics: Metrics, port: int) -> MetricsServer | None:
    """Start the endpoint on the config's ``[metrics] port``; None when it is 0 (disabled)."""
    return start_metrics_server(metrics, port) if port else None


def start_metrics_server(metrics: Metrics, port: int, addr: str = "0.0.0.0") -> MetricsServer:
    """Serve ``metrics`` at ``http://addr:port/metrics`` from a daemon thread.

    The config's ``[metrics] port = 0`` means "disabled": callers check it before calling;
    here port 0 binds a free port (what tests want).
    """
    server, thread = start_http_server(port, addr=addr, registry=metrics.registry)
    bound = server.server_address[1]
    log.info("Prometheus metrics at http://%s:%d/metrics", addr, bound)
    return MetricsServer(bound, server, thread)
