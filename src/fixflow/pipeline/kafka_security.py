"""How every Kafka client of Fixflow connects: the ``[kafka]`` security keys as each
library's settings, one function per library (``librdkafka_settings`` for confluent-kafka,
``kafka_python_settings`` for kafka-python), and ``check_access``, the check `fixflow run`
and `publish` make before anything else starts.

Secrets (``sasl_password``, ``ssl_key_password``) are never in the config: it names an
environment variable or a file, read here when a client is made, so a config's repr, the
Spark plan, its checkpoint and the logs carry the name only. The streaming source's tasks
run in Spark's Python workers: they get the non-secret keys as one data source option
(``to_option``) and read the secret where they run (a local master's workers inherit
Fixflow's environment; a cluster's executors need the variable or file too).

A module of ``pipeline/`` itself, not of ``pipeline/kafka/``: the embedded broker's admin
client (``broker/``, an earlier tier) uses it too.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass, fields, replace
from typing import Any

from fixflow.pipeline.config import KafkaConfig, named_secret
from fixflow.pipeline.errors import UserFacingError

log = logging.getLogger(__name__)

SECURITY_KEYS = tuple(
    f.name
    for f in fields(KafkaConfig)
    if f.name == "security_protocol" or f.name.startswith(("sasl_", "ssl_"))
)
"""The ``[kafka]`` keys a client's connection depends on (none of them a secret)."""
ACCESS_TIMEOUT_S = 15.0


class QuietLog(logging.LoggerAdapter):
    """librdkafka's own log lines at DEBUG (for every librdkafka client: the producer,
    the range reader, ``check_access``): the errors that matter reach the caller as one
    line (a PublishError, the reader's wait for the broker, a KafkaAccessError), not as a
    burst of connection messages."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        self.logger.debug(msg, *args, **kwargs)


class KafkaAccessError(UserFacingError):
    """The broker refused the configured security settings (or a secret is missing)."""


def secured(kafka: KafkaConfig) -> bool:
    return kafka.security_protocol != "PLAINTEXT"


def secret(kafka: KafkaConfig, name: str) -> str:
    """The secret ``name`` (``sasl_password``, ``ssl_key_password``) from the environment
    variable or file the config names; "" when it names neither."""
    return named_secret(kafka, "[kafka]", name, KafkaAccessError, required=True) or ""


@dataclass(frozen=True)
class ClientKeys:
    """What one Kafka library calls each connection setting."""

    bootstrap: str
    protocol: str
    mechanism: str
    username: str
    password: str
    ca_file: str
    cert_file: str
    key_file: str
    key_password: str
    tls_defaults: tuple[tuple[str, Any], ...] = ()
    """Settings the library needs to verify the broker as the other does by default."""


LIBRDKAFKA = ClientKeys(
    "bootstrap.servers", "security.protocol", "sasl.mechanisms", "sasl.username",
    "sasl.password", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
    "ssl.key.password",
)  # fmt: skip
"""confluent-kafka (librdkafka): it verifies the certificate and host name by default."""
KAFKA_PYTHON = ClientKeys(
    "bootstrap_servers", "security_protocol", "sasl_mechanism", "sasl_plain_username",
    "sasl_plain_password", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password",
    tls_defaults=(("ssl_check_hostname", True),),
)  # fmt: skip


def client_settings(kafka: KafkaConfig, keys: ClientKeys) -> dict[str, Any]:
    """The brokers and the security keys, as the library of ``keys`` names them."""
    settings: dict[str, Any] = {
        keys.bootstrap: kafka.bootstrap_servers,
        keys.protocol: kafka.security_protocol,
    }
    if kafka.security_protocol.startswith("SASL_"):
        settings[keys.mechanism] = kafka.sasl_mechanism
        settings[keys.username] = kafka.sasl_username
        settings[keys.password] = secret(kafka, "sasl_password")
    if kafka.security_protocol.endswith("SSL"):
        settings.update(keys.tls_defaults)
        optional = {
            keys.ca_file: kafka.ssl_ca_file,
            keys.cert_file: kafka.ssl_cert_file,
            keys.key_file: kafka.ssl_key_file,
            keys.key_password: secret(kafka, "ssl_key_password"),
        }
        settings.update({key: value for key, value in optional.items() if value})
    return settings


def librdkafka_settings(kafka: KafkaConfig) -> dict[str, Any]:
    """confluent-kafka (librdkafka) settings: the brokers and the security keys."""
    return client_settings(kafka, LIBRDKAFKA)


def kafka_python_settings(kafka: KafkaConfig) -> dict[str, Any]:
    """kafka-python settings: the brokers and the security keys."""
    return client_settings(kafka, KAFKA_PYTHON)


def spark_kafka_options(kafka: KafkaConfig) -> dict[str, str]:
    """Options of Spark's built-in ``kafka`` source (the Java client, ``[kafka] source =
    "native"``). The JAAS line holds the password: Spark redacts option values that match
    ``spark.redaction.regex`` ("password" does) in plans and the UI. Not run here: no
    spark-sql-kafka jar in this environment."""
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "kafka.security.protocol": kafka.security_protocol,
    }
    if kafka.security_protocol.startswith("SASL_"):
        module = (
            "plain.PlainLoginModule"
            if kafka.sasl_mechanism == "PLAIN"
            else "scram.ScramLoginModule"
        )
        options["kafka.sasl.mechanism"] = kafka.sasl_mechanism
        options["kafka.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.{module} required "
            f"username={json.dumps(kafka.sasl_username)} "
            f"password={json.dumps(secret(kafka, 'sasl_password'))};"
        )
    if kafka.security_protocol.endswith("SSL") and kafka.ssl_ca_file:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = kafka.ssl_ca_file
    if kafka.security_protocol.endswith("SSL") and kafka.ssl_cert_file:
        # The Java client reads a PEM key store as one file: key and certificate chain.
        raise KafkaAccessError(
            '[kafka] ssl_cert_file: not supported with source = "native" (the Java client '
            'wants key and certificate in one key store); use source = "python"'
        )
    return options


def to_option(kafka: KafkaConfig) -> str:
    """The security keys as one string (a Spark data source option): the names of
    secrets, never their values."""
    return json.dumps({key: getattr(kafka, key) for key in SECURITY_KEYS}, sort_keys=True)


def from_option(bootstrap_servers: str, option: str) -> KafkaConfig:
    """The brokers with the security keys ``to_option`` wrote ("": PLAINTEXT); the other
    keys at their defaults."""
    values = json.loads(option) if option else {}
    known = {key: values[key] for key in SECURITY_KEYS if key in values}
    return replace(KafkaConfig(), bootstrap_servers=bootstrap_servers, **known)


def check_access(kafka: KafkaConfig, timeout_s: float = ACCESS_TIMEOUT_S) -> None:
    """Raise KafkaAccessError unless the broker answers a metadata request made with the
    configured security settings (TLS handshake, SASL authentication) within
    ``timeout_s``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    failed = threading.Event()

    def on_error(error: Any) -> None:
        errors.append(error)
        if _fatal(error):
            failed.set()

    settings = {**librdkafka_settings(kafka), "error_cb": on_error}
    try:
        admin = AdminClient(settings, logger=QuietLog(log, {}))
    except KafkaException as error:  # a certificate or key librdkafka cannot load
        raise KafkaAccessError(
            f"Kafka at {kafka.bootstrap_servers}: the client settings were refused "
            f"({error.args[0].str()}): check [kafka] ssl_cert_file, ssl_key_file and the "
            "key's password (ssl_key_password_env or ssl_key_password_file)"
        ) from None
    # A daemon thread: after an early failure, the request runs out its timeout unseen.
    request = threading.Thread(target=_list_topics, args=(admin, timeout_s, errors), daemon=True)
    request.start()
    # poll() serves error_cb; an authentication or TLS error ends the wait at once (the
    # metadata request would retry until its timeout).
    while request.is_alive() and not failed.is_set():
        admin.poll(0.05)
    if failed.is_set() or any(isinstance(e, KafkaException) for e in errors):
        raise KafkaAccessError(_access_message(kafka, errors))


def _list_topics(admin: Any, timeout_s: float, errors: list[Any]) -> None:
    from confluent_kafka import KafkaException

    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as error:
        errors.append(error)


def _fatal(error: Any) -> bool:
    from confluent_kafka import KafkaError

    return error.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL)


def _access_message(kafka: KafkaConfig, errors: list[Any]) -> str:
    """One line: what failed (the most telling of librdkafka's errors) and what to do."""
    from confluent_kafka import KafkaError, KafkaException

    codes = [e.args[0] if isinstance(e, KafkaException) else e for e in errors]
    fatal = [e for e in codes if _fatal(e)]
    error = (fatal or codes)[-1]
    where = f"Kafka at {kafka.bootstrap_servers} ({kafka.security_protocol})"
    reason = _bare(error.str())
    if error.code() == KafkaError._AUTHENTICATION:
        return (
            f"{where}: authentication failed for user {kafka.sasl_username!r} "
            f"({kafka.sasl_mechanism}: {reason}): check [kafka] sasl_username and the "
            f"password in {_password_source(kafka)}"
        )
    if error.code() == KafkaError._SSL:
        return (
            f"{where}: TLS handshake failed ({reason}): check [kafka] ssl_ca_file (the CA "
            "that signed the broker's certificate), the broker's host name in "
            "bootstrap_servers and ssl_cert_file/ssl_key_file"
        )
    return (
        f"{where}: no answer with these security settings ({reason}): check "
        "security_protocol and bootstrap_servers (a listener of that protocol)"
    )


def _bare(reason: str) -> str:
    """librdkafka's reason without the broker's name and the state it was in (the message
    names the brokers already)."""
    reason = re.sub(r"^\S+://\S+: ", "", reason)
    return re.sub(r" \(after \d+ms in state \w+\)$", "", reason)


def _password_source(kafka: KafkaConfig) -> str:
    if kafka.sasl_password_env:
        return f"the environment variable {kafka.sasl_password_env} (sasl_password_env)"
    return f"{kafka.sasl_password_file} (sasl_password_file)"
