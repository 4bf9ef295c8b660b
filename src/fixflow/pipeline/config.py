"""Fixflow's configuration: TOML files (``conf/local.toml``, ``conf/cluster.toml``) loaded
into frozen dataclasses and validated on load.

The dataclass defaults *are* the embedded settings of ``conf/local.toml`` (a test keeps the
two equal), so every command works from any directory without a config file. Unknown
sections and keys are errors, missing keys take their defaults, and every message names
the file, the section and the key: ``conf/x.toml: [stream] consistency must be
"converged" or "async", got "fast"``.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from fixflow.operators.thresholds import LOCAL_ROWS, TASK_IO_ROWS, TASK_LOOP_ROWS

DEFAULT_SOURCE = "<embedded conf/local.toml>"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message says where and why."""


def _key(
    default: Any,
    *,
    choices: tuple[Any, ...] = (),
    minimum: float | None = None,
    maximum: float | None = None,
    positive: bool = False,
    integer: bool = False,
) -> Any:
    """A config key with its default and the constraints checked on load; ``integer``: a
    string key that also takes an integer (``local_rows = "auto"`` or ``= 5``)."""
    meta = {"choices": choices, "minimum": minimum, "maximum": maximum, "positive": positive}
    meta["integer"] = integer
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    bootstrap_servers: str = "127.0.0.1:19092"
    embedded: bool = True
    topic_prefix: str = ""
    partitions: int = _key(2, positive=True)
    replication_factor: int = _key(1, positive=True)
    source: str = _key("python", choices=("python", "native"))
    storage: str = _key("memory", choices=("memory", "durable"))
    """Where the embedded broker keeps topics: in memory (lost when it stops), or durable:
    on an S3 store Fixflow runs on loopback, its data under <lake>/_broker/store."""
    on_data_loss: str = _key("fail", choices=("fail", "resume"))
    """What `fixflow run` does when records it has not read are gone from the broker (a
    restarted in-memory broker, retention): stop with an error, or resume from the start of
    what the broker holds now, logging which offsets were skipped."""
    backoff_max_s: float = _key(30.0, positive=True)
    """Longest pause between two attempts to reach an unreachable broker (the pauses double
    from 0.5 s up to this)."""
    wait_for_broker_s: float = _key(0.0, minimum=0.0)
    """How long `fixflow run` waits for an unreachable broker before giving up with an
    error; 0 = as long as it takes (a service waits)."""
    security_protocol: str = _key("PLAINTEXT", choices=SECURITY_PROTOCOLS)
    """How every Kafka client of Fixflow connects: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT
    or SASL_SSL (SASL over TLS). Not PLAINTEXT: `fixflow run` and `publish` check that the
    broker accepts these settings before anything else starts."""
    sasl_mechanism: str = _key("", choices=("", *SASL_MECHANISMS))
    """With a SASL_* protocol: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."""
    sasl_username: str = ""
    sasl_password_env: str = ""
    """The name of the environment variable holding the SASL password (read when a client
    connects, never stored, printed or logged)."""
    sasl_password_file: str = ""
    """Or a file holding the SASL password (one trailing newline is dropped)."""
    ssl_ca_file: str = ""
    """PEM file of the CA(s) that signed the broker's certificate; empty = the system's."""
    ssl_cert_file: str = ""
    """PEM client certificate, for brokers that require one (with ssl_key_file)."""
    ssl_key_file: str = ""
    """PEM private key of ssl_cert_file."""
    ssl_key_password_env: str = ""
    """The name of the environment variable holding the password of an encrypted key."""
    ssl_key_password_file: str = ""
    """Or a file holding it."""

    REFUSED: ClassVar[dict[str, str]] = {
        name: f"{name} is never written in a config file: set {name}_env (the name of an "
        f"environment variable holding it) or {name}_file (a file holding it)"
        for name in ("sasl_password", "ssl_key_password")
    }

    @property
    def first_server(self) -> tuple[str, int]:
        """Host and port of the first bootstrap server (where the embedded broker listens)."""
        return parse_host_port(self.bootstrap_servers.split(",")[0])

    def topic(self, relation: str) -> str:
        return f"{self.topic_prefix}{relation}"


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """``[lake.storage]``: how to reach an object-store lake (``s3://`` / ``s3a://``). Every
    key is optional: what is not set comes from the standard ``AWS_*`` environment
    variables, as the AWS tools read them. Secrets are never keys of their own: a key names
    the environment variable or the file that holds one."""

    endpoint: str = ""
    """The S3 endpoint URL (``http://127.0.0.1:8333`` for MinIO or SeaweedFS); empty: AWS's
    endpoint for the region. An ``http://`` endpoint allows plain HTTP."""
    region: str = ""
    """The bucket's region (empty: ``AWS_REGION``, else us-east-1)."""
    access_key_id_env: str = "AWS_ACCESS_KEY_ID"
    access_key_id_file: str = ""
    """A file holding the access key id, in place of the environment variable."""
    secret_access_key_env: str = "AWS_SECRET_ACCESS_KEY"
    secret_access_key_file: str = ""
    """A file holding the secret access key, in place of the environment variable."""
    session_token_env: str = "AWS_SESSION_TOKEN"
    path_style: bool = True
    """Address buckets as ``endpoint/bucket/key`` (MinIO, SeaweedFS, most S3 servers);
    false: as ``bucket.endpoint/key`` (virtual-hosted, AWS's preference)."""
    local_dir: str = ""
    """A local directory for what cannot live in the object store: the Spark streaming
    checkpoint's working copy (mirrored to the lake after every batch) and the embedded
    broker's files. Empty: ``~/.cache/fixflow/lakes/<bucket>/<path>``."""


OBJECT_STORE_SCHEMES = ("s3://", "s3a://")


@dataclass(frozen=True, slots=True)
class LakeConfig:
    path: str = "./lake"
    task_io_rows: int = _key(TASK_IO_ROWS, minimum=0)
    """A relation on Spark of more than this many rows is written into its Delta table by
    Spark tasks and committed by the driver, and a stream's EDB or result table that large
    is read back by tasks; smaller ones pass through the driver
    (``operators.thresholds.TASK_IO_ROWS``: the default and its reason)."""
    storage: StorageConfig = field(default_factory=StorageConfig)

    @property
    def remote(self) -> bool:
        """Whether the lake lives in an object store rather than on a local disk."""
        return is_object_store(self.path)

    def local_root(self) -> Path:
        """Where this lake keeps what must be on a local disk: the lake itself when it is
        local, else ``[lake.storage] local_dir``."""
        if not self.remote:
            return Path(self.path)
        if self.storage.local_dir:
            return Path(self.storage.local_dir).expanduser()
        bucket_and_key = self.path.split("://", 1)[1].strip("/")
        return Path("~/.cache/fixflow/lakes").expanduser() / bucket_and_key


def is_object_store(location: str) -> bool:
    return location.startswith(OBJECT_STORE_SCHEMES)


@dataclass(frozen=True, slots=True)
class SparkConfig:
    master: str = "local[2]"
    conf: dict[str, str] = field(default_factory=dict)
    """Free-form Spark settings (``[spark.conf]``), passed to the session builder."""


@dataclass(frozen=True, slots=True)
class StreamConfig:
    trigger_ms: int = _key(1000, minimum=0)
    consistency: str = _key("converged", choices=("converged", "async"))
    max_records_per_trigger: int = _key(500_000, positive=True)
    adaptive: bool = True
    async_rounds_per_batch: int = _key(10, positive=True)
    """With consistency = "async": rounds of work per batch before committing."""
    driver_read_max_records: int = _key(200_000, minimum=0)
    """``[kafka] source = "python"``: a batch of at most this many records is read by the
    driver itself, not by a Spark job (``driver_read.DriverRead``; 100k records take
    ~0.2 s there, 0.4-0.6 s as a job on local[2]); 0 = always Spark."""
    read_ahead: bool = True
    """With driver reads: a thread fetches and decodes the records after each batch while
    the stream waits for its next trigger, up to ``driver_read_max_records`` of them
    (``read_ahead.ReadAhead``); the next batch takes them from there. false = every batch
    reads its records at its trigger."""


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = _key(9464, minimum=0, maximum=65535)
    """0 binds a free port (printed at start-up)."""


@dataclass(frozen=True, slots=True)
class BufferConfig:
    initial: int = _key(1024, positive=True)
    interval_ms: int = _key(100, positive=True)
    alpha: float = _key(0.8, positive=True, maximum=1.0)
    r: float = _key(2.0, minimum=1.0)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    mode: str = _key("hybrid", choices=("sync", "async", "hybrid"))
    shards: int = _key(0, minimum=0)
    """MonoTable shards of the async/hybrid engine; 0 = one per 20M auxiliary rows (as many
    as one Python worker holds; a second shard was never faster where measured), at most one
    per Spark task slot."""
    max_iterations: int = _key(0, minimum=0)
    """Round (sync) or stage (async/hybrid) cap of every recursive stratum; 0 = the default
    rule (``operators.core.round_cap``): none where a stratum reaches a fixpoint, 1000
    where it may only approach a limit. Results a capped stratum reaches are committed
    with ``fixflow.partial``."""
    priority: bool = True
    """async/hybrid: a local iteration propagates the best ``schedule_portion`` of the
    pending deltas by G's order (A3). On a permuted 1M-edge grid it cut SSSP's relaxations
    from 4.5M to 0.28M. The sync engine's rounds propagate every pending delta."""
    schedule_portion: float = _key(0.5, positive=True, maximum=1.0)
    check_interval_ms: int = _key(1000, positive=True)
    local_rows: int | str = _key(LOCAL_ROWS, choices=("auto",), minimum=0, integer=True)
    """Strata whose inputs hold at most this many rows together, and min/max retractions of
    relations that small, run in the driver without Spark jobs (``placement.place``); 0:
    always on Spark; ``auto``: as many rows as half of ``memory`` (the machine's) holds by the
    memory model (``thresholds.DRIVER_BYTES_PER_ROW``). The default and its reason:
    ``operators.thresholds.LOCAL_ROWS``."""
    task_rows: int = _key(TASK_LOOP_ROWS, minimum=0)
    """A ``set``, ``aggregate-seminaive`` or ``naive`` stratum off the driver runs its loop in
    one Spark task, one job, while its relations hold at most this many rows; past it Spark
    continues the loop a job a round (``operators.task_stratum``); 0: always a job a round.
    The default and its reason: ``operators.thresholds.TASK_LOOP_ROWS``."""
    memory: int | str = _key("auto", choices=("auto",), minimum=1, integer=True)
    """The bytes the driver may use by the memory model (docs/scale.md): ``auto``, the
    machine's physical memory. ``local_rows = "auto"`` takes half of it, and a run whose
    driver strata it cannot hold (``operators.memory_check``) is refused before it
    starts."""


@dataclass(frozen=True, slots=True)
class ElasticConfig:
    switch_fraction: float = _key(1.0, positive=True)
    """Abandon an incremental update that has run this fraction of the last bootstrap of
    its stratum. PPDP'21 used 0.2; on Spark an update is round-bound like a bootstrap (each
    round pays the per-job overhead), and at 100k edges updates take 0.2-0.7 of a bootstrap
    (bench/STREAM_RESULTS.md), so 0.2 abandoned nearly every one of them."""


@dataclass(frozen=True, slots=True)
class Config:
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    lake: LakeConfig = field(default_factory=LakeConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    elastic: ElasticConfig = field(default_factory=ElasticConfig)
    source: str = field(default=DEFAULT_SOURCE, compare=False)
    """Where the settings came from, for messages."""


SECTIONS: dict[str, type] = {
    f.name: type(f.default_factory()) for f in fields(Config) if f.default_factory is not MISSING
}


def named_secret(
    section: Any, where: str, name: str, error: type[Exception], *, required: bool
) -> str | None:
    """The secret ``name`` a config section names but never holds: read from the file
    ``<name>_file`` when it is set (one trailing newline dropped: files written by `echo`
    or an editor end in one), else from the environment variable ``<name>_env``. None when
    neither holds one; an unset variable is an ``error`` when ``required``. ``where`` is
    the section as messages write it (``[kafka]``)."""
    path = getattr(section, f"{name}_file", "")
    if path:
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8")
        except OSError as failure:
            raise error(f"{where} {name}_file: cannot read {path}: {failure.strerror}") from None
        return text[:-1] if text.endswith("\n") else text
    variable = getattr(section, f"{name}_env", "")
    value = os.environ.get(variable) if variable else None
    if value is None and variable and required:
        raise error(f"{where} {name}_env: the environment variable {variable} is not set")
    return value


def parse_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"expected HOST:PORT, got {address!r}")
    return host, int(port)


def default_config() -> Config:
    """The embedded settings (the same as ``conf/local.toml``)."""
    return Config()


def load_config(path: str | Path | None = None, base: Config | None = None) -> Config:
    """Load and validate a TOML config; ``None`` gives the embedded defaults. A key the
    file does not set keeps its value in ``base`` (default: the embedded settings)."""
    if path is None:
        return base or default_config()
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{name}: cannot read config file: {error.strerror}") from error
    return parse_config(text, name, base)


def parse_config(text: str, source: str = "<string>", base: Config | None = None) -> Config:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: not valid TOML: {error}") from error
    return config_from_mapping(document, source, base)


def config_from_mapping(
    document: Mapping[str, Any], source: str = "<mapping>", base: Config | None = None
) -> Config:
    """Settings from sections as a TOML file would hold them (``{"engine": {"mode":
    "sync"}}``), validated as a file is."""
    unknown = sorted(set(document) - set(SECTIONS))
    if unknown:
        raise ConfigError(
            f"{source}: unknown section [{unknown[0]}] (known: {', '.join(SECTIONS)})"
        )
    sections = {}
    for name, cls in SECTIONS.items():
        table = document.get(name, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: {name} must be a [{name}] section")
        default = cls() if base is None else getattr(base, name)
        sections[name] = _load_section(default, table, f"{source}: [{name}]")
    config = Config(**sections, source=source)
    _check_cross_section(config)
    return config


def _load_section(default: Any, table: dict[str, Any], where: str) -> Any:
    """The section's keys from ``table`` over ``default`` (the section without a file)."""
    if isinstance(default, SparkConfig):
        return _load_spark(default, table, where)
    known = {f.name: f for f in fields(default)}
    refused = getattr(type(default), "REFUSED", {})
    for key in table:
        if key in refused:
            raise ConfigError(f"{where} {refused[key]}")
        if key not in known:
            raise ConfigError(f"{where} unknown key {key!r} (known: {', '.join(known)})")
    values = {
        key: _load_subsection(getattr(default, key), value, f"{where[:-1]}.{key}]")
        if is_dataclass(getattr(default, key))
        else _check_value(known[key], value, where)
        for key, value in table.items()
    }
    return replace(default, **values)


def _load_subsection(default: Any, table: Any, where: str) -> Any:
    """A section within a section (``[lake.storage]``)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a section")
    return _load_section(default, table, where)


def _load_spark(default: SparkConfig, table: dict[str, Any], where: str) -> SparkConfig:
    extra = set(table) - {"master", "conf"}
    if extra:
        raise ConfigError(
            f"{where} unknown key {sorted(extra)[0]!r} (known: master, conf; "
            'put Spark settings under [spark.conf] as "spark.x.y" = value)'
        )
    master = table.get("master", default.master)
    if not isinstance(master, str) or not master:
        raise ConfigError(f"{where} master must be a non-empty string, got {master!r}")
    conf = table.get("conf", {})
    if not isinstance(conf, dict):
        raise ConfigError(f"{where} conf must be a table of Spark settings")
    settings = {key: _spark_value(key, v, where) for key, v in _flatten(conf).items()}
    return SparkConfig(master=master, conf={**default.conf, **settings})


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Unquoted dotted TOML keys (spark.sql.x = 1) arrive as nested tables: join them back."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _spark_value(key: str, value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigError(f"{where} conf {key!r} must be a string, number or boolean, got {value!r}")


def _check_value(spec: Any, value: Any, where: str) -> Any:
    name, meta, default = spec.name, spec.metadata, spec.default
    if meta.get("integer"):
        return _check_words_or_integer(spec, value, where)
    value = _check_type(name, default, value, where)
    choices = meta.get("choices") or ()
    if choices and value not in choices:
        options = " or ".join(f'"{c}"' for c in choices)
        raise ConfigError(f'{where} {name} must be {options}, got "{value}"')
    if meta.get("positive") and value <= 0:
        raise ConfigError(f"{where} {name} must be > 0, got {value}")
    if meta.get("minimum") is not None and value < meta["minimum"]:
        raise ConfigError(f"{where} {name} must be >= {meta['minimum']}, got {value}")
    if meta.get("maximum") is not None and value > meta["maximum"]:
        raise ConfigError(f"{where} {name} must be <= {meta['maximum']}, got {value}")
    return value


def _check_words_or_integer(spec: Any, value: Any, where: str) -> Any:
    """A key that is one of its words or an integer at least its minimum."""
    meta = spec.metadata
    words = " or ".join(f'"{c}"' for c in meta["choices"])
    expected = f"{words} or an integer >= {meta['minimum']}"
    if isinstance(value, str) and value in meta["choices"]:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= meta["minimum"]:
        return value
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    raise ConfigError(f"{where} {spec.name} must be {expected}, got {shown}")


_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _check_type(name: str, default: Any, value: Any, where: str) -> Any:
    expected = type(default)
    ok = isinstance(value, expected) and (expected is bool or not isinstance(value, bool))
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise ConfigError(f"{where} {name} must be {_TYPE_NAMES[expected]}, got {value!r}")
    return value


def _check_cross_section(config: Config) -> None:
    try:
        for server in config.kafka.bootstrap_servers.split(","):
            parse_host_port(server)
    except ConfigError as error:
        raise ConfigError(f"{config.source}: [kafka] bootstrap_servers: {error}") from None
    if not config.lake.path:
        raise ConfigError(f"{config.source}: [lake] path must not be empty")
    if config.kafka.storage != "memory" and not config.kafka.embedded:
        raise ConfigError(
            f'{config.source}: [kafka] storage = "{config.kafka.storage}" is the embedded '
            "broker's storage, and embedded = false here: remove the key, or set embedded = true"
        )
    problem = kafka_security_problem(config.kafka)
    if problem:
        raise ConfigError(f"{config.source}: [kafka] {problem}")


def kafka_security_problem(kafka: KafkaConfig) -> str:
    """What is wrong with the ``[kafka]`` security keys, naming the key ("" if nothing).
    Secrets are checked to exist, not read: they are read when a client connects."""
    return (
        _protocol_problem(kafka)
        or _sasl_problem(kafka)
        or _secret_problem(kafka, "sasl_password")
        or _secret_problem(kafka, "ssl_key_password")
        or _files_problem(kafka)
    )


def _protocol_problem(kafka: KafkaConfig) -> str:
    """A key the protocol does not use, or a secured protocol on the embedded broker."""
    protocol = kafka.security_protocol
    for name in ("sasl_mechanism", "sasl_username", *_secret_keys("sasl_password")):
        if getattr(kafka, name) and not protocol.startswith("SASL_"):
            return (
                f'{name} needs security_protocol = "SASL_SSL" or "SASL_PLAINTEXT" (is "{protocol}")'
            )
    for name in ("ssl_ca_file", "ssl_cert_file", "ssl_key_file", *_secret_keys("ssl_key_password")):
        if getattr(kafka, name) and not protocol.endswith("SSL"):
            return f'{name} needs security_protocol = "SSL" or "SASL_SSL" (is "{protocol}")'
    if protocol != "PLAINTEXT" and kafka.embedded:
        return (
            f'security_protocol = "{protocol}" needs embedded = false: the embedded broker '
            "serves PLAINTEXT only; point bootstrap_servers at the secured broker"
        )
    if bool(kafka.ssl_cert_file) != bool(kafka.ssl_key_file):
        return "ssl_cert_file and ssl_key_file go together: set both or neither"
    return ""


def _sasl_problem(kafka: KafkaConfig) -> str:
    """A SASL protocol without a mechanism, a user or a password source."""
    protocol = kafka.security_protocol
    if not protocol.startswith("SASL_"):
        return ""
    if not kafka.sasl_mechanism:
        return (
            f'security_protocol = "{protocol}" needs sasl_mechanism ({", ".join(SASL_MECHANISMS)})'
        )
    if not kafka.sasl_username:
        return f'security_protocol = "{protocol}" needs sasl_username'
    if not (kafka.sasl_password_env or kafka.sasl_password_file):
        return f'security_protocol = "{protocol}" needs sasl_password_env or sasl_password_file'
    return ""


def _secret_keys(name: str) -> tuple[str, str]:
    return f"{name}_env", f"{name}_file"


def _secret_problem(kafka: KafkaConfig, name: str) -> str:
    env_key, file_key = _secret_keys(name)
    variable, path = getattr(kafka, env_key), getattr(kafka, file_key)
    if variable and path:
        return f"{env_key} and {file_key} are two sources of one secret: set one of them"
    if variable and variable not in os.environ:
        return f"{env_key}: the environment variable {variable} is not set"
    return ""


def _files_problem(kafka: KafkaConfig) -> str:
    for name in (
        "sasl_password_file",
        "ssl_key_password_file",
        "ssl_ca_file",
        "ssl_cert_file",
        "ssl_key_file",
    ):
        path = getattr(kafka, name)
        if path and not os.access(path, os.R_OK):
            why = "no such file" if not Path(path).exists() else "not readable"
            return f"{name}: {path}: {why}"
    return ""


def add_conf_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--conf FILE`` option every command takes."""
    parser.add_argument(
        "--conf",
        metavar="FILE",
        default=None,
        help="config file (TOML); default: the embedded settings of conf/local.toml",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    return load_config(getattr(args, "conf", None))
