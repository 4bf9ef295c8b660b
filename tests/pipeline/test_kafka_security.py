"""Kafka security (``[kafka] security_protocol``, ``sasl_*``, ``ssl_*``) against a listener
on loopback that requires TLS, a client certificate and SASL (tests/streams/secured.py says
what it is made of and why): `fixflow publish` + `fixflow run` equal the oracle, refused
credentials and an untrusted certificate are one line before Spark starts, the password is
in no output or lake file. The keys without a broker: ``test_kafka_security_config.py``."""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fixflow.checker.parser import parse
from fixflow.pipeline.config import Config, default_config, parse_config
from fixflow.pipeline.kafka_security import KafkaAccessError, check_access
from fixflow.pipeline.lake.lakehouse import ProgramLake
from reference.golden import compare_rows
from streams.cli import FIXFLOW, STOPPED_LINE, FixflowRun, write_conf
from streams.harness import oracle, result_rows
from streams.secured import KEY_PASSWORD, PASSWORD, USER, SecuredBroker

PROGRAM = Path(__file__).resolve().parent.parent / "streams" / "sssp" / "program.dl"
PASSWORD_ENV = "FIXFLOW_TEST_KAFKA_PASSWORD"


# ---------------------------------------------------------------- against the listener


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    with SecuredBroker(tmp_path_factory.mktemp("secured-broker")) as broker:
        yield broker


def _client(broker: SecuredBroker, lake: Path, **keys: object) -> Config:
    text = f'[kafka]\nbootstrap_servers = "{broker.address}"\nembedded = false\n'
    return parse_config(text + broker.kafka_keys(**keys) + f'\n[lake]\npath = "{lake}"\n')  # type: ignore[arg-type]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_the_other_mechanisms_log_in(
    secured: SecuredBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mechanism: str
) -> None:
    from fixflow.pipeline.broker.embedded import ensure_topics

    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    assert secured.gate is not None
    logins = secured.gate.logins
    config = _client(secured, tmp_path, mechanism=mechanism)
    check_access(config.kafka, timeout_s=10)  # librdkafka
    assert secured.gate.logins > logins
    topic = f"mechanism-{mechanism}"
    assert ensure_topics(config, [topic], timeout=20) == [topic]  # kafka-python


def test_an_untrusted_broker_certificate_is_one_line(
    secured: SecuredBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    config = _client(secured, tmp_path, ca=secured.certs.other_ca)
    with pytest.raises(KafkaAccessError) as caught:
        check_access(config.kafka, timeout_s=10)
    assert "TLS handshake failed" in str(caught.value)
    assert "certificate verify failed" in str(caught.value)
    assert "ssl_ca_file" in str(caught.value)


def test_the_python_api_refuses_a_wrong_password_at_once(
    secured: SecuredBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: Any
) -> None:
    from fixflow import Program

    monkeypatch.setenv(PASSWORD_ENV, "not-the-password")
    config = replace(
        _client(secured, tmp_path / "lake"),
        metrics=replace(default_config().metrics, enabled=False),
    )
    started = time.monotonic()
    with pytest.raises(KafkaAccessError, match=f"authentication failed for user {USER!r}"):
        Program.from_file(PROGRAM).stream(spark, config)
    assert time.monotonic() - started < 10
    assert not (tmp_path / "lake").exists()


def test_a_wrong_key_password_is_one_line(
    secured: SecuredBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    kafka = _client(secured, tmp_path).kafka
    wrong = tmp_path / "wrong-key-password"
    wrong.write_text("not-it\n")
    with pytest.raises(KafkaAccessError) as caught:
        check_access(replace(kafka, ssl_key_password_file=str(wrong)), timeout_s=10)
    assert "the client settings were refused" in str(caught.value)
    assert "ssl_key_password_file" in str(caught.value) and "\n" not in str(caught.value)


def test_ssl_alone_and_sasl_alone_reach_the_broker(
    secured: SecuredBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSL (TLS and a client certificate, no SASL) through both libraries; SASL_PLAINTEXT
    (the gate without TLS) through the access check."""
    from fixflow.pipeline.broker.embedded import ensure_topics
    from fixflow.pipeline.kafka.broker_view import broker_view

    with SecuredBroker(tmp_path / "tls-only", sasl=False) as tls:
        config = _client(tls, tmp_path, protocol="SSL")
        check_access(config.kafka, timeout_s=10)  # librdkafka
        assert ensure_topics(config, ["ssl-only"]) == ["ssl-only"]  # kafka-python
        assert broker_view(config.kafka, ["ssl-only"]).ends == {"ssl-only": {"0": 0, "1": 0}}
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    assert secured.gate is not None
    text = f'[kafka]\nbootstrap_servers = "127.0.0.1:{secured.gate.port}"\nembedded = false\n'
    plain = parse_config(text + secured.kafka_keys(protocol="SASL_PLAINTEXT"))
    logins = secured.gate.logins
    check_access(plain.kafka, timeout_s=10)
    assert secured.gate.logins > logins


def _edges(count: int = 300, nodes: int = 60, seed: int = 7) -> set[tuple[int, int, float]]:
    rng = random.Random(seed)
    return {
        (rng.randrange(1, nodes), rng.randrange(1, nodes), round(rng.uniform(0.1, 5.0), 3))
        for _ in range(count)
    }


def _conf(secured: SecuredBroker, base: Path) -> Path:
    config = default_config()
    config = replace(
        config,
        kafka=replace(config.kafka, bootstrap_servers=secured.address, topic_prefix="sec."),
        lake=replace(config.lake, path=str(base / "lake")),
    )
    # driver_read_max_records = 0: every batch is read by Spark tasks (in Python workers,
    # which get the settings through the source's option and read the secret themselves).
    stream = "driver_read_max_records = 0"
    return write_conf(
        base / "run.toml", config, kafka_keys=secured.kafka_keys(), stream_keys=stream
    )


def _fixflow(*args: str, cwd: Path, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FIXFLOW), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout_s
    )


def test_publish_and_run_over_sasl_ssl_equal_the_oracle_and_keep_the_password_out(
    secured: SecuredBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    conf = _conf(secured, tmp_path)
    program_file = tmp_path / "sssp.dl"
    program_file.write_text(PROGRAM.read_text())
    edges = _edges()
    facts = tmp_path / "edges.facts"
    facts.write_text("".join(f"{a}\t{b}\t{w}\n" for a, b, w in sorted(edges)))
    # -v: the debug logs of both client libraries are in the output checked below
    published = _fixflow("-v", "publish", "edge", str(facts), "--program", str(program_file),
                         "--conf", str(conf), cwd=tmp_path)  # fmt: skip
    assert published.returncode == 0, published.stderr[-3000:]
    assert f"{len(edges)}" in published.stdout
    run = FixflowRun.start(program_file, conf, tmp_path / "run.out", available_now=True)
    try:
        code = run.process.wait(timeout=240)  # a hang guard: ~35 s on an idle machine
    finally:
        run.kill_if_running()
    assert code == 0, run.output[-3000:]
    assert STOPPED_LINE.search(run.output), run.output[-2000:]
    program = parse(program_file.read_text(), str(program_file))
    lake = ProgramLake.for_program(tmp_path / "lake", program_file)
    expected = sorted(oracle(program, {"edge": edges})["sssp"])
    assert len(expected) > 10
    assert not compare_rows(sorted(result_rows(lake, "sssp")), expected, 1e-9)
    assert secured.gate is not None and secured.gate.logins > 0
    outputs = published.stdout + published.stderr + run.output
    for secret in (PASSWORD, KEY_PASSWORD):
        assert secret not in outputs
        leaked = [p for p in (tmp_path / "lake").rglob("*") if p.is_file()
                  and secret.encode() in p.read_bytes()]  # fmt: skip
        assert not leaked, leaked


def test_a_wrong_password_stops_run_and_publish_in_one_line_before_spark(
    secured: SecuredBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, "not-the-password")
    conf = _conf(secured, tmp_path)
    program_file = tmp_path / "sssp.dl"
    program_file.write_text(PROGRAM.read_text())
    facts = tmp_path / "edges.facts"
    facts.write_text("1\t2\t0.5\n")
    for args in (
        ["run", str(program_file), "--conf", str(conf)],
        ["publish", "edge", str(facts), "--program", str(program_file), "--conf", str(conf)],
    ):
        started = time.monotonic()
        done = _fixflow(*args, cwd=tmp_path, timeout_s=60)
        seconds = time.monotonic() - started
        assert done.returncode == 1, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert f"authentication failed for user {USER!r}" in lines[0]
        assert f"the environment variable {PASSWORD_ENV}" in lines[0]
        assert "Spark" not in done.stdout + done.stderr and seconds < 20, (seconds, done)
    assert not (tmp_path / "lake" / "sssp" / "_checkpoints").exists()
