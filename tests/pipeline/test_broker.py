"""The embedded Tansu broker: start/stop/status, failures, topic creation."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from fixflow.pipeline.broker import (
    BrokerError,
    broker_status,
    ensure_topics,
    start_broker,
)
from fixflow.pipeline.cli import main
from fixflow.pipeline.config import Config


def _conf_file(config: Config, directory: Path) -> Path:
    path = directory / "test.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{config.kafka.bootstrap_servers}"\n'
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
