"""Prometheus metrics, scraped over real HTTP."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from fixflow.pipeline.metrics import Metrics, start_metrics_server


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


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
        samples = _scrape(server.port)
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


def test_port_zero_in_the_config_disables_the_endpoint() -> None:
    from fixflow.pipeline.metrics import serve_configured

    assert serve_configured(Metrics(), 0) is None


def test_async_engine_stages_are_scraped() -> None:
    """Each async/hybrid stage's figures (from the engine's round detail) reach Prometheus:
    stages, local iterations and messages add up, the cut and β per bound are gauges."""
    metrics = Metrics()
    server = start_metrics_server(metrics, 0, addr="127.0.0.1")
    try:
        detail = {"local_iterations": 40.0, "messages": 12.0, "cut": 590.0}
        metrics.engine_stage("sssp", {**detail, "beta_min": 8.0, "beta_max": 300.0})
        metrics.engine_stage("sssp", {**detail, "messages": 3.0, "beta_min": 16.0})
        samples = _scrape(server.port)
    finally:
        server.stop()
    relation = (("relation", "sssp"),)
    assert samples[("fixflow_engine_stages_total", relation)] == 2
    assert samples[("fixflow_engine_local_iterations_total", relation)] == 80
    assert samples[("fixflow_engine_messages_total", relation)] == 15
    assert samples[("fixflow_engine_shard_cut", relation)] == 590
    assert samples[("fixflow_buffer_beta", (("buffer", "sssp:min"),))] == 16
    assert samples[("fixflow_buffer_beta", (("buffer", "sssp:max"),))] == 300
