"""Kafka security (``[kafka] security_protocol``, ``sasl_*``, ``ssl_*``): the keys'
validation, the settings each client library gets, and `fixflow publish` + `fixflow run`
against a listener that requires TLS, a client certificate and SASL (tests/streams/secured.py
says what it is made of and why): results equal to the oracle, refused credentials and an
untrusted certificate in one line before Spark starts, the password nowhere in outputs or
the lake."""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from fixflow.checker.parser import parse
from fixflow.pipeline.config import Config, ConfigError, default_config, parse_config
from fixflow.pipeline.kafka_security import (
    KafkaAccessError,
    check_access,
    from_option,
    kafka_python_settings,
    librdkafka_settings,
    to_option,
)
from fixflow.pipeline.lake.lakehouse import ProgramLake
from reference.golden import compare_rows
from streams.cli import FIXFLOW, STOPPED_LINE, FixflowRun, write_conf
from streams.harness import oracle, result_rows
from streams.secured import KEY_PASSWORD, PASSWORD, USER, SecuredBroker

PROGRAM = Path(__file__).resolve().parent.parent / "streams" / "sssp" / "program.dl"
PASSWORD_ENV = "FIXFLOW_TEST_KAFKA_PASSWORD"


# ---------------------------------------------------------------- validation


def _kafka(lines: str) -> str:
    return f"[kafka]\nembedded = false\n{lines}\n"


SASL = 'security_protocol = "SASL_SSL"\nsasl_mechanism = "SCRAM-SHA-512"\nsasl_username = "u"\n'


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ('sasl_password = "hunter2"', "sasl_password is never written in a config file"),
        ('ssl_key_password = "x"', "set ssl_key_password_env"),
        ('security_protocol = "TLS"', 'security_protocol must be "PLAINTEXT" or "SSL"'),
        (
            'security_protocol = "SASL_SSL"\nsasl_mechanism = "GSSAPI"',
            'sasl_mechanism must be "" or "PLAIN"',
        ),
        ('sasl_mechanism = "PLAIN"', "sasl_mechanism needs security_protocol = "),
        ('security_protocol = "SSL"\nsasl_username = "u"', "sasl_username needs security_pro"),
        ('security_protocol = "SASL_PLAINTEXT"\nssl_ca_file = "ca.pem"', "ssl_ca_file needs"),
        ('security_protocol = "SASL_SSL"', "needs sasl_mechanism (PLAIN, SCRAM-SHA-256"),
        ('security_protocol = "SASL_SSL"\nsasl_mechanism = "PLAIN"', "needs sasl_username"),
        (SASL, "needs sasl_password_env or sasl_password_file"),
        (
            SASL + 'sasl_password_env = "A"\nsasl_password_file = "f"',
            "sasl_password_env and sasl_password_file are two sources of one secret",
        ),
        (
            SASL + 'sasl_password_env = "FIXFLOW_TEST_UNSET_VARIABLE"',
            "sasl_password_env: the environment variable FIXFLOW_TEST_UNSET_VARIABLE is not set",
        ),
        (
            SASL + 'sasl_password_file = "/nonexistent/pw"',
            "sasl_password_file: /nonexistent/pw: no such file",
        ),
        ('security_protocol = "SSL"\nssl_ca_file = "/nonexistent/ca.pem"', "ssl_ca_file: /nonex"),
        ('security_protocol = "SSL"\nssl_cert_file = "c.pem"', "ssl_cert_file and ssl_key_file"),
    ],
)
def test_each_wrong_security_key_is_one_line_naming_it(lines: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_kafka(lines), "x.toml")
    text = str(caught.value)
    assert "\n" not in text and text.startswith("x.toml: [kafka] "), text
    assert message in text


def test_a_secured_protocol_needs_an_external_broker() -> None:
    with pytest.raises(ConfigError, match="needs embedded = false"):
        parse_config('[kafka]\nsecurity_protocol = "SSL"\n', "x.toml")


def _secured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setenv(PASSWORD_ENV, "s3cret-value")
    key_password = tmp_path / "key-password"
    key_password.write_text("key-s3cret\n")
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n")
    return parse_config(
        _kafka(
            SASL + f'sasl_password_env = "{PASSWORD_ENV}"\n'
            f'ssl_ca_file = "{tmp_path}/ca.pem"\nssl_cert_file = "{tmp_path}/client.pem"\n'
            f'ssl_key_file = "{tmp_path}/client.key"\nssl_key_password_file = "{key_password}"'
        )
    )


def test_both_libraries_get_every_setting_and_only_names_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _secured(tmp_path, monkeypatch)
    assert "s3cret" not in repr(config) and "s3cret" not in to_option(config.kafka)
    assert librdkafka_settings(config.kafka) == {
        "bootstrap.servers": "127.0.0.1:19092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "u",
        "sasl.password": "s3cret-value",
        "ssl.ca.location": f"{tmp_path}/ca.pem",
        "ssl.certificate.location": f"{tmp_path}/client.pem",
        "ssl.key.location": f"{tmp_path}/client.key",
        "ssl.key.password": "key-s3cret",  # the file's trailing newline dropped
    }
    assert kafka_python_settings(config.kafka) == {
        "bootstrap_servers": "127.0.0.1:19092",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "u",
        "sasl_plain_password": "s3cret-value",
        "ssl_check_hostname": True,
        "ssl_cafile": f"{tmp_path}/ca.pem",
        "ssl_certfile": f"{tmp_path}/client.pem",
        "ssl_keyfile": f"{tmp_path}/client.key",
        "ssl_password": "key-s3cret",
    }
    # What the streaming source's tasks rebuild from its option: the same settings.
    rebuilt = from_option(config.kafka.bootstrap_servers, to_option(config.kafka))
    assert librdkafka_settings(rebuilt) == librdkafka_settings(config.kafka)
    # The secret is read when a client is made: a variable gone by then is one line.
    monkeypatch.delenv(PASSWORD_ENV)
    with pytest.raises(KafkaAccessError, match=f"variable {PASSWORD_ENV} is not set"):
        librdkafka_settings(config.kafka)


def test_plaintext_settings_are_the_brokers_only() -> None:
    kafka = default_config().kafka
    assert librdkafka_settings(kafka) == {
        "bootstrap.servers": kafka.bootstrap_servers,
        "security.protocol": "PLAINTEXT",
    }
    assert set(kafka_python_settings(kafka)) == {"bootstrap_servers", "security_protocol"}


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
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    logins = secured.gate.logins if secured.gate else 0
    check_access(_client(secured, tmp_path, mechanism=mechanism).kafka, timeout_s=10)
    assert secured.gate is not None and secured.gate.logins > logins


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
