"""Prometheus metrics, scraped over real HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fixflow.pipeline.config import MetricsConfig
from fixflow.pipeline.kafka.messages import REASON_KINDS
from fixflow.pipeline.stream.metrics import (
    Metrics,
    MetricsPortBusy,
    serve_configured,
    start_metrics_server,
)
from streams.cli import probe, scrape

ROOT = Path(__file__).resolve().parents[2]
FIXFLOW = Path(sys.executable).parent / "fixflow"


def test_scrape_shows_pipeline_metrics() -> None:
    metrics = Metrics()
    server = start_metrics_server(metrics, 0, addr="127.0.0.1")
    try:
        metrics.count_input("edge", "insert", 5)
        metrics.count_input("edge", "delete", 2)
        metrics.count_dead_letter("edge", "wrong_type", 3)
        metrics.batch_duration.observe(0.3)
        metrics.choose_strategy(1, "bootstrap")
        metrics.buffer_beta.labels(buffer="shard-0").set(512)
        metrics.kafka_lag.labels(topic="edge").set(40)
        metrics.result_rows.labels(relation="sssp").set(7)
        metrics.batch_committed(4)
        samples = scrape(server.port)
    finally:
        server.stop()
    assert samples[("fixflow_input_facts_total", (("op", "insert"), ("relation", "edge")))] == 5
    assert samples[("fixflow_input_facts_total", (("op", "delete"), ("relation", "edge")))] == 2
    reason = (("reason", "wrong_type"), ("relation", "edge"))
    assert samples[("fixflow_dead_letters_total", reason)] == 3
    assert samples[("fixflow_batch_duration_seconds_count", ())] == 1
    assert samples[("fixflow_batch_duration_seconds_bucket", (("le", "0.5"),))] == 1
    assert samples[("fixflow_batch_duration_seconds_bucket", (("le", "0.25"),))] == 0
    strategy = (("strategy", "bootstrap"), ("stratum", "1"))
    assert samples[("fixflow_strategy_chosen_total", strategy)] == 1
    assert samples[("fixflow_buffer_beta", (("buffer", "shard-0"),))] == 512
    assert samples[("fixflow_kafka_lag_records", (("topic", "edge"),))] == 40
    assert samples[("fixflow_result_rows", (("relation", "sssp"),))] == 7
    assert samples[("fixflow_batches_committed_total", ())] == 1
    assert samples[("fixflow_last_batch_id", ())] == 4
    assert all(name.startswith("fixflow_") for name, _ in samples)


def test_registries_are_independent() -> None:
    first, second = Metrics(), Metrics()
    first.count_input("edge", "insert", 1)
    assert (
        second.registry.get_sample_value(
            "fixflow_input_facts_total", {"relation": "edge", "op": "insert"}
        )
        is None
    )
    assert (
        first.registry.get_sample_value(
            "fixflow_input_facts_total", {"relation": "edge", "op": "insert"}
        )
        == 1
    )


def test_the_config_disables_the_endpoint_or_binds_a_free_port_on_its_host() -> None:
    assert serve_configured(Metrics(), MetricsConfig(enabled=False)) is None
    server = serve_configured(Metrics(), MetricsConfig(port=0))
    assert server is not None
    try:
        assert server.port > 0
        assert server.server.server_address[0] == "127.0.0.1"  # the default host
        assert scrape(server.port)[("fixflow_up", ())] == 0
    finally:
        server.stop()


def test_a_busy_port_is_a_one_line_error_that_says_what_to_do() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortBusy) as caught:
            start_metrics_server(Metrics(), port)
    message = str(caught.value)
    assert f"127.0.0.1:{port} is in use" in message and "port to a free port, or 0" in message
    assert "\n" not in message


def test_probes_follow_the_query_state() -> None:
    """/ready is 200 only while the query runs, /healthz unless it failed; fixflow_up
    follows /ready."""
    metrics = Metrics()
    server = start_metrics_server(metrics, 0)
    seen = []
    try:
        for state in ("starting", "running", "stopping", "failed"):
            if state != "starting":
                metrics.health.set(state, "broker gone" if state == "failed" else "")
            up = scrape(server.port)[("fixflow_up", ())]
            seen.append(
                (state, probe(server.port, "/ready")[0], probe(server.port, "/healthz")[0], up)
            )
    finally:
        server.stop()
    assert seen == [
        ("starting", 503, 200, 0),
        ("running", 200, 200, 1),
        ("stopping", 503, 200, 0),
        ("failed", 503, 503, 0),
    ]


def test_declared_counters_are_exposed_at_zero() -> None:
    metrics = Metrics()
    metrics.declare(["edge", "node"], [0, 2])
    value = metrics.registry.get_sample_value
    for relation in ("edge", "node"):
        for op in ("insert", "delete"):
            assert value("fixflow_input_facts_total", {"relation": relation, "op": op}) == 0
        for reason in REASON_KINDS:
            labels = {"relation": relation, "reason": reason}
            assert value("fixflow_dead_letters_total", labels) == 0
    for stratum in ("0", "2"):
        assert value("fixflow_rounds_total", {"stratum": stratum}) == 0
        for strategy in ("update", "bootstrap"):
            labels = {"stratum": stratum, "strategy": strategy}
            assert value("fixflow_strategy_chosen_total", labels) == 0
    assert value("fixflow_rounds_total", {"stratum": "1"}) is None


def test_async_engine_stages_are_scraped() -> None:
    """Each async/hybrid stage's figures (from the engine's round detail) reach Prometheus:
    stages, local iterations and messages add up, the cut and β per bound are gauges."""
    metrics = Metrics()
    server = start_metrics_server(metrics, 0, addr="127.0.0.1")
    try:
        detail = {"local_iterations": 40.0, "messages": 12.0, "cut": 590.0}
        metrics.engine_stage("sssp", {**detail, "beta_min": 8.0, "beta_max": 300.0})
        metrics.engine_stage("sssp", {**detail, "messages": 3.0, "beta_min": 16.0})
        samples = scrape(server.port)
    finally:
        server.stop()
    relation = (("relation", "sssp"),)
    assert samples[("fixflow_engine_stages_total", relation)] == 2
    assert samples[("fixflow_engine_local_iterations_total", relation)] == 80
    assert samples[("fixflow_engine_messages_total", relation)] == 15
    assert samples[("fixflow_engine_shard_cut", relation)] == 590
    assert samples[("fixflow_buffer_beta", (("buffer", "sssp:min"),))] == 16
    assert samples[("fixflow_buffer_beta", (("buffer", "sssp:max"),))] == 300


def test_run_on_a_busy_metrics_port_fails_in_one_line_before_starting_anything(
    tmp_path: Path,
) -> None:
    """Two `fixflow run`s on one host: the second says which port and what to do, exits 1,
    and has started neither a broker nor Spark (the endpoint is bound first)."""
    conf = tmp_path / "run.toml"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf.write_text(f'[lake]\npath = "{tmp_path / "lake"}"\n\n[metrics]\nport = {port}\n')
        done = subprocess.run(
            [str(FIXFLOW), "run", str(ROOT / "examples" / "dcd_sssp.dl"), "--conf", str(conf)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"fixflow run: the metrics port 127.0.0.1:{port} is in use (another `fixflow run`?): "
        "set [metrics] port to a free port, or 0 to pick one"
    ]
    assert not (tmp_path / "lake").exists()
