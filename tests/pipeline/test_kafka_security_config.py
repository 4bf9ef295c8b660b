"""The ``[kafka]`` security keys without a broker: each wrong key is one line naming it,
and the settings both client libraries get (secrets read when a client is made, never kept
in the config or the streaming source's option). Against a listener:
``test_kafka_security.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixflow.pipeline.config import Config, ConfigError, default_config, parse_config
from fixflow.pipeline.kafka_security import (
    KafkaAccessError,
    from_option,
    kafka_python_settings,
    librdkafka_settings,
    to_option,
)

PASSWORD_ENV = "FIXFLOW_TEST_KAFKA_PASSWORD"


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
