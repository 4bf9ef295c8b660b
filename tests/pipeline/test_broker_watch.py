"""BrokerWatch against real ports: one where nothing listens, then a real Tansu broker
started on it. The clock is the test's, so the back-off schedule is checked exactly."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest

from fixflow.pipeline.broker.embedded import start_broker, stop_broker
from fixflow.pipeline.broker.processes import port_open
from fixflow.pipeline.config import Config, default_config
from fixflow.pipeline.stream.broker_watch import (
    AVAILABLE_NOW_WAIT_S,
    BrokerUnavailable,
    BrokerWatch,
)
from fixflow.pipeline.stream.metrics import Health
from ports import free_port


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _config(tmp_path: Path, **kafka: object) -> Config:
    base = default_config()
    return replace(
        base,
        kafka=replace(base.kafka, bootstrap_servers=f"127.0.0.1:{free_port()}", **kafka),
        lake=replace(base.lake, path=str(tmp_path)),
    )


def test_an_outage_is_said_once_backs_off_and_ends_when_the_broker_answers(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, backoff_max_s=4.0)
    health, said, clock = Health(), [], Clock()
    health.set("running")
    watch = BrokerWatch(config.kafka, health, said.append, clock)
    probes = []
    for _ in range(40):  # 20 s of checks every half second
        before = watch._next_probe
        assert watch.check() is False
        if clock.now >= before:
            probes.append(clock.now - 1000.0)
        clock.now += 0.5
    assert probes == [0.0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5], "0.5 s doubling up to 4 s"
    assert len(said) == 1 and said[0].startswith("kafka: no broker answers at 127.0.0.1:")
    assert health.probe("/ready")[0] is False and health.state == "waiting"
    assert health.probe("/healthz")[0] is True, "alive: restarting would not bring Kafka back"
    start_broker(config)
    try:
        clock.now += 4.0
        assert watch.check() is True
        assert said[1].startswith(f"kafka: broker at {config.kafka.bootstrap_servers} answers")
        assert health.state == "running" and len(said) == 2
    finally:
        stop_broker(config)


def test_waiting_gives_up_after_wait_for_broker_s(tmp_path: Path) -> None:
    config = _config(tmp_path, wait_for_broker_s=1.0, backoff_max_s=0.2)
    said: list[str] = []
    watch = BrokerWatch(config.kafka, Health(), said.append)
    with pytest.raises(BrokerUnavailable, match=r"after 1 s \(\[kafka\] wait_for_broker_s\)"):
        watch.wait()
    assert len(said) == 1


def test_a_run_meant_to_end_gives_up_after_a_minute_a_continuous_one_never(
    tmp_path: Path,
) -> None:
    """``wait_for_broker_s = 0`` waits forever for a continuous run; `fixflow run
    --available-now` gives up after ``AVAILABLE_NOW_WAIT_S`` (checked mid-run as well)."""
    config = _config(tmp_path, backoff_max_s=1.0)
    clock = Clock()
    ending = BrokerWatch(config.kafka, Health(), [].append, clock, available_now=True)
    continuous = BrokerWatch(config.kafka, Health(), [].append, clock)
    while clock.now - 1000.0 <= AVAILABLE_NOW_WAIT_S:
        assert ending.check_or_give_up() is False
        assert continuous.check_or_give_up() is False
        clock.now += 1.0
    with pytest.raises(
        BrokerUnavailable,
        match=r"after 60 s \(--available-now.s limit; \[kafka\] wait_for_broker_s sets",
    ):
        ending.check_or_give_up()
    clock.now += 3600.0
    assert continuous.check_or_give_up() is False


def test_a_listener_that_does_not_speak_kafka_is_no_broker(tmp_path: Path) -> None:
    """The probe asks for the broker's API versions: a port another process listens on
    while the broker is down (or a connect that meets itself) does not count as a broker,
    so `fixflow run` waits instead of handing the port to kafka-python."""
    config = _config(tmp_path)
    host, port = config.kafka.bootstrap_servers.split(":")
    with socket.create_server((host, int(port))):
        watch = BrokerWatch(config.kafka, Health(), [].append)
        assert port_open(config.kafka.bootstrap_servers) is True
        assert watch.check() is False
    start_broker(config)
    try:
        assert watch.wait() is True
    finally:
        stop_broker(config)
