"""Config files: defaults, validation messages, the shipped files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fixflow.pipeline.config import Config, ConfigError, default_config, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_local_toml_equals_the_embedded_defaults() -> None:
    assert load_config(ROOT / "conf" / "local.toml") == default_config()


def test_every_key_of_local_toml_is_documented() -> None:
    lines = (ROOT / "conf" / "local.toml").read_text().splitlines()
    for number, line in enumerate(lines):
        if "=" in line and not line.lstrip().startswith("#"):
            assert lines[number - 1].lstrip().startswith("#"), f"undocumented: {line}"


def test_cluster_toml_selects_native_kafka_and_object_storage() -> None:
    config = load_config(ROOT / "conf" / "cluster.toml")
    assert config.kafka.source == "native"
    assert not config.kafka.embedded
    assert config.lake.path.startswith("s3a://")
    assert config.spark.conf["spark.sql.shuffle.partitions"] == "48"


def test_missing_keys_take_defaults_and_values_are_typed() -> None:
    config = parse_config('[stream]\nconsistency = "async"\n[buffer]\nr = 3\n')
    assert config.stream.consistency == "async"
    assert config.stream.trigger_ms == default_config().stream.trigger_ms
    assert config.buffer.r == 3.0 and isinstance(config.buffer.r, float)
    assert config.kafka.topic("edge") == "edge"
    assert parse_config('[kafka]\ntopic_prefix = "p."').kafka.topic("edge") == "p.edge"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[stream]\nconsistency = "fast"',
            'conf/x.toml: [stream] consistency must be "converged" or "async", got "fast"',
        ),
        ("[stream]\nspeed = 1", "conf/x.toml: [stream] unknown key 'speed'"),
        ("[streams]\n", "conf/x.toml: unknown section [streams]"),
        (
            '[kafka]\npartitions = "2"',
            "conf/x.toml: [kafka] partitions must be an integer, got '2'",
        ),
        ("[kafka]\npartitions = 0", "conf/x.toml: [kafka] partitions must be > 0, got 0"),
        ('[kafka]\nsource = "jvm"', 'conf/x.toml: [kafka] source must be "python" or "native"'),
        ("[kafka]\nembedded = 1", "conf/x.toml: [kafka] embedded must be a boolean, got 1"),
        (
            '[kafka]\nstorage = "disk"',
            'conf/x.toml: [kafka] storage must be "memory" or "durable", got "disk"',
        ),
        (
            '[kafka]\nembedded = false\nstorage = "durable"',
            'conf/x.toml: [kafka] storage = "durable" is the embedded broker\'s storage, and '
            "embedded = false here",
        ),
        (
            '[kafka]\nbootstrap_servers = "localhost"',
            "conf/x.toml: [kafka] bootstrap_servers: expected HOST:PORT, got 'localhost'",
        ),
        ("[metrics]\nport = 70000", "conf/x.toml: [metrics] port must be <= 65535, got 70000"),
        ("[lake.storage]\nkey = 1", "conf/x.toml: [lake.storage] unknown key 'key' (known: end"),
        ("[lake]\nstorage = 1", "conf/x.toml: [lake.storage] must be a section"),
        (
            "[lake.storage]\npath_style = 1",
            "conf/x.toml: [lake.storage] path_style must be a boolean, got 1",
        ),
        ("[buffer]\nalpha = 1.5", "conf/x.toml: [buffer] alpha must be <= 1.0, got 1.5"),
        ('[engine]\nmode = "fast"', 'conf/x.toml: [engine] mode must be "sync" or "async" or'),
        ("[spark]\nexecutors = 3", "conf/x.toml: [spark] unknown key 'executors'"),
        ('[spark.conf]\n"spark.x" = [1]', "conf/x.toml: [spark] conf 'spark.x' must be"),
        ("[stream\n", "conf/x.toml: not valid TOML"),
    ],
)
def test_invalid_configs_say_where_and_why(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(text, "conf/x.toml")
    assert str(error.value).startswith(message), str(error.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.toml")


def test_shipped_engine_settings_are_accepted() -> None:
    """Every engine mode and priority scheduling are implemented: the shipped cluster
    configs and the embedded default (mode = "hybrid") load, and the defaults schedule by
    priority."""
    root = Path(__file__).resolve().parents[2]
    for path in (
        root / "conf" / "cluster.toml",
        root / "deploy" / "compose" / "cluster.toml",
        root / "conf" / "local.toml",
    ):
        assert load_config(path).engine.mode == "hybrid"
    assert load_config(root / "conf" / "local.toml").engine.priority


def _eval_settings(tmp_path: Path, toml: str | None, *flags: str) -> Config:
    from fixflow.pipeline.cli import build_parser
    from fixflow.pipeline.cli.commands.eval import settings

    argv = ["eval", "prog.dl"]
    if toml is not None:
        (tmp_path / "eval.toml").write_text(toml)
        argv += ["--conf", str(tmp_path / "eval.toml")]
    return settings(build_parser().parse_args([*argv, *flags]))


def test_eval_reads_engine_buffer_and_spark_from_conf_and_its_flags_win(tmp_path: Path) -> None:
    """`fixflow eval --conf` takes the same [engine]/[buffer]/[spark] sections as `run`; a
    flag overrides the file's key; a key neither sets keeps the embedded default."""
    plain = _eval_settings(tmp_path, None)
    assert (plain.engine.mode, plain.engine.local_rows, plain.spark.master) == (
        "hybrid",
        "auto",
        "local[2]",
    )
    toml = (
        '[engine]\nmode = "sync"\nmax_iterations = 7\n[buffer]\ninitial = 64\n'
        '[spark]\nmaster = "local[1]"\n[spark.conf]\n"spark.sql.shuffle.partitions" = 3\n'
    )
    filed = _eval_settings(tmp_path, toml)
    assert (filed.engine.mode, filed.engine.max_iterations, filed.buffer.initial) == ("sync", 7, 64)
    assert filed.engine.local_rows == "auto"  # not in the file: the embedded default
    assert filed.spark.master == "local[1]"
    assert filed.spark.conf["spark.sql.shuffle.partitions"] == "3"
    flagged = _eval_settings(tmp_path, toml, "--engine", "async", "--master", "local[2]")
    assert (flagged.engine.mode, flagged.engine.max_iterations) == ("async", 7)
    assert flagged.spark.master == "local[2]"
    rows = _eval_settings(tmp_path, "[engine]\nlocal_rows = 5\n", "--max-iterations", "9")
    assert (rows.engine.local_rows, rows.engine.max_iterations) == (5, 9)
    flagged_rows = _eval_settings(tmp_path, "[engine]\nlocal_rows = 5\n", "--local-rows", "auto")
    assert flagged_rows.engine.local_rows == "auto"


@pytest.mark.parametrize(
    ("value", "shown"), [('"big"', '"big"'), ("-1", "-1"), ("1.5", "1.5"), ("true", "True")]
)
def test_local_rows_is_auto_or_a_number_of_rows(tmp_path: Path, value: str, shown: str) -> None:
    expected = f'local_rows must be "auto" or an integer >= 0, got {shown}'
    with pytest.raises(ConfigError, match=re.escape(expected)):
        _eval_settings(tmp_path, f"[engine]\nlocal_rows = {value}\n")


def test_eval_conf_errors_name_the_file_and_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"eval\.toml: \[engine\] unknown key 'mood'"):
        _eval_settings(tmp_path, '[engine]\nmood = "sync"\n')
