"""The embedded Tansu broker: start/stop/status, failures, topic creation."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from fixflow.pipeline.broker.embedded import broker_status, ensure_topics, start_broker
from fixflow.pipeline.broker.processes import BrokerError
from fixflow.pipeline.cli import main
from fixflow.pipeline.config import Config


def _conf_file(config: Config, directory: Path, kafka_keys: str = "") -> Path:
    path = directory / "test.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{config.kafka.bootstrap_servers}"\n{kafka_keys}'
        f'[lake]\npath = "{config.lake.path}"\n'
    )
    return path


def test_status_and_idempotent_start_through_the_cli(
    broker: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _conf_file(broker, tmp_path)
    assert main(["broker", "status", "--conf", str(conf)]) == 0
    status = broker_status(broker)
    assert status.running and status.pid is not None
    assert f"broker running at {broker.kafka.bootstrap_servers}" in capsys.readouterr().out
    assert main(["broker", "start", "--conf", str(conf)]) == 0
    assert "already running" in capsys.readouterr().out
    assert broker_status(broker).pid == status.pid


def test_stopped_broker_reports_not_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "down.toml"
    conf.write_text(f'[kafka]\nbootstrap_servers = "127.0.0.1:9"\n[lake]\npath = "{tmp_path}"\n')
    assert main(["broker", "status", "--conf", str(conf)]) == 3
    assert "no broker running at 127.0.0.1:9" in capsys.readouterr().out
    assert main(["broker", "stop", "--conf", str(conf)]) == 0


def test_start_failure_shows_the_log_tail(broker: Config, tmp_path: Path) -> None:
    # An address this machine does not have: Tansu cannot bind and exits.
    bad = replace(
        broker,
        kafka=replace(broker.kafka, bootstrap_servers="192.0.2.1:19999"),
        lake=replace(broker.lake, path=str(tmp_path)),
    )
    with pytest.raises(BrokerError) as error:
        start_broker(bad, timeout=8)
    message = str(error.value)
    assert "not ready" in message and "tansu.log" in message
    assert "tansu broker" in message  # a line of the broker's own log
    assert not (tmp_path / "_broker" / "tansu.pid").exists()


def test_ensure_topics_creates_only_missing_topics(broker: Config) -> None:
    from kafka import KafkaConsumer

    names = [f"ensure-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    assert ensure_topics(broker, names) == sorted(names)
    assert ensure_topics(broker, names) == []
    consumer = KafkaConsumer(bootstrap_servers=broker.kafka.bootstrap_servers)
    try:
        assert consumer.partitions_for_topic(names[0]) == set(range(broker.kafka.partitions))
    finally:
        consumer.close()


def test_bad_config_is_reported_by_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text('[stream]\nconsistency = "fast"\n')
    assert main(["broker", "status", "--conf", str(conf)]) == 1
    assert 'consistency must be "converged" or "async", got "fast"' in capsys.readouterr().err


def test_durable_storage_keeps_records_and_cluster_id_across_restarts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """[kafka] storage = "durable": a stopped and restarted broker (and its store) has every
    record and the same cluster id, so a reader's offsets still count; new records go on
    from the old ends. Tansu's ListOffsets on this engine understates the ends; the probe's
    fetch high watermark is exact."""
    from fixflow.pipeline.broker.embedded import stop_broker
    from fixflow.pipeline.kafka.broker_view import broker_view

    config = _durable_config(tmp_path)
    conf = _conf_file(config, tmp_path, 'storage = "durable"\n')
    facts = tmp_path / "edges.csv"
    facts.write_text("src,dst,w\n" + "".join(f"{i},{i + 1},0.5\n" for i in range(3000)))
    servers = config.kafka.bootstrap_servers
    try:
        assert main(["broker", "start", "--conf", str(conf)]) == 0
        assert "durable storage in" in capsys.readouterr().out
        assert main(["publish", "edge", str(facts), "--conf", str(conf)]) == 0
        before = broker_view(config.kafka, ["edge"])
        assert sum(before.ends["edge"].values()) == 3000
        for _ in range(2):
            stop_broker(config)
            assert not broker_status(config).running
            start_broker(config)
            after = broker_view(config.kafka, ["edge"])
            assert (after.cluster, after.ends) == (before.cluster, before.ends)
        assert after.cluster is not None and after.cluster.startswith("fixflow-durable-")
        assert _read_all(servers, "edge") == 3000
        assert main(["publish", "edge", str(facts), "--conf", str(conf)]) == 0
        assert sum(broker_view(config.kafka, ["edge"]).ends["edge"].values()) == 6000
    finally:
        stop_broker(config)
    assert not (tmp_path / "lake" / "_broker" / "store.pid").exists()


def _durable_config(tmp_path: Path) -> Config:
    from fixflow.pipeline.config import default_config
    from ports import free_port

    defaults = default_config()
    kafka = replace(defaults.kafka, bootstrap_servers=f"127.0.0.1:{free_port()}", storage="durable")
    return replace(defaults, kafka=kafka, lake=replace(defaults.lake, path=str(tmp_path / "lake")))


def _read_all(servers: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        seen = 0
        while batch := consumer.poll(timeout_ms=3000):
            seen += sum(len(records) for records in batch.values())
        return seen
    finally:
        consumer.close()


def test_store_ports_never_land_on_another_servers_grpc_port() -> None:
    """The durable store's four servers each take a port and its gRPC port (+10000); a
    candidate that is another server's gRPC port (or whose gRPC port is another's port) is
    skipped, as in the CI run where the volume server got the master's gRPC port."""
    from fixflow.pipeline.broker.store import _distinct_pairs

    candidates = iter([40649, 50649, 30649, 40649, 41000, 42000, 43000])
    ports = _distinct_pairs(candidates, 4, lambda port: True)
    assert ports == [40649, 41000, 42000, 43000]  # 50649 and 30649 overlap 40649's pair
    claimed = ports + [port + 10000 for port in ports]
    assert len(set(claimed)) == len(claimed)
    assert _distinct_pairs(iter([40000, 41000]), 2, lambda port: port != 50000) == [41000]
