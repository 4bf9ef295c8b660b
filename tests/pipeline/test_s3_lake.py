"""Lakes in an object store (issue #37): ``fixflow eval -D s3://…``, ``show``, ``query``,
``explain`` and ``fixflow run`` with ``[lake] path = "s3://…"`` against a real S3 server on
loopback (SeaweedFS, credentials required: ``s3server``); a wrong key or endpoint fails in
one line, in under 5 s, before anything is evaluated; the lease and the checkpoint mirror
on the object store."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fixflow.checker.parser import parse
from fixflow.pipeline.config import Config, parse_config
from fixflow.pipeline.lake.checkpoint_mirror import CheckpointMirror
from fixflow.pipeline.lake.lakehouse import ProgramLake
from fixflow.pipeline.lake.lease import LEASE_FILE, LakeBusy, refuse_if_held, take
from fixflow.pipeline.object_store import StorageError, storage_environment, use_lake
from ports import free_port
from s3server import SECRET_KEY, S3Server
from streams.cli import BATCH_LINE, FIXFLOW, FixflowRun, write_conf
from streams.harness import isolated_config, oracle, publish

ROOT = Path(__file__).resolve().parents[2]
SSSP = ROOT / "examples" / "pipeline" / "sssp.dl"
EDGES = ROOT / "examples" / "pipeline" / "edges.csv"
GONE = ROOT / "examples" / "pipeline" / "gone.csv"


def fixflow(
    *args: str, env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FIXFLOW), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def storage_conf(path: Path, s3: S3Server, lake: str = "", **keys: str) -> Path:
    lake_section = f'[lake]\npath = "{lake}"\n' if lake else ""
    path.write_text(lake_section + s3.storage_section(**keys))
    return path


def csv_rows(text: str) -> set[tuple[str, ...]]:
    return {tuple(row) for row in list(csv.reader(io.StringIO(text)))[1:]}


def edges(path: Path) -> set[tuple[int, int, float]]:
    with path.open() as file:
        return {(int(a), int(b), float(w)) for a, b, w in list(csv.reader(file))[1:]}


def expected_sssp(facts: set[tuple[int, int, float]]) -> set[tuple[str, str]]:
    program = parse(SSSP.read_text(), str(SSSP))
    return {(str(n), str(float(d))) for n, d in oracle(program, {"edge": facts})["sssp"]}


def test_eval_show_query_and_explain_on_an_object_store(s3: S3Server, tmp_path: Path) -> None:
    conf = storage_conf(tmp_path / "s3.toml", s3)
    facts = tmp_path / "facts"
    facts.mkdir()
    shutil.copy(EDGES, facts / "edge.csv")
    out = s3.url("eval/out")
    run = fixflow(
        "eval", str(SSSP), "-F", str(facts), "-D", out, "--csv", "--explainable",
        "--conf", str(conf), env=s3.environment,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"sssp: 6 rows -> {out}/sssp" in run.stdout
    stored = {path.rsplit("/", 1)[-1] for path in s3.files("eval/out")}
    assert {"sssp.csv", "program.dl"} <= stored
    expected = expected_sssp(edges(EDGES))
    query = fixflow(
        "query", "SELECT * FROM sssp", "--results", out, "--format", "csv",
        "--conf", str(conf), env=s3.environment,
    )  # fmt: skip
    assert query.returncode == 0, query.stderr
    assert csv_rows(query.stdout) == expected
    show = fixflow("show", "sssp", "--results", out, "--conf", str(conf), env=s3.environment)
    assert show.returncode == 0, show.stderr
    assert show.stdout.startswith(f"sssp  ({out}/sssp)") and "6 rows" in show.stdout
    explain = fixflow(
        "explain", "sssp", "4", "--results", out, "--conf", str(conf), env=s3.environment
    )
    assert explain.returncode == 0, explain.stderr
    assert explain.stdout.splitlines()[0].startswith("sssp(4, 4.5)  <-  sssp(3, 3.5), edge(3, 4")


@pytest.mark.parametrize("fault", ["secret", "endpoint", "bucket"])
def test_a_wrong_key_endpoint_or_bucket_fails_in_one_line_before_evaluating(
    s3: S3Server, tmp_path: Path, fault: str
) -> None:
    keys, location, env = {}, s3.url("eval/wrong"), dict(s3.environment)
    if fault == "secret":
        env["TEST_S3_SECRET"] = "not-the-secret"
        why = (
            f"{s3.endpoint} refused the credentials (access key id from $TEST_S3_KEY, "
            "secret access key from $TEST_S3_SECRET)"
        )
    elif fault == "endpoint":
        endpoint = f"http://127.0.0.1:{free_port()}"  # a port nothing listens on
        keys["endpoint"] = f'"{endpoint}"'
        why = f"cannot reach {endpoint}: check [lake.storage] endpoint and the network"
    else:
        location = "s3://no-such-bucket/out"
        why = f"the bucket s3://no-such-bucket does not exist at {s3.endpoint}: create it"
    conf = storage_conf(tmp_path / "s3.toml", s3, **keys)
    facts = tmp_path / "facts"
    facts.mkdir()
    shutil.copy(EDGES, facts / "edge.csv")
    started = time.monotonic()
    run = fixflow("eval", str(SSSP), "-F", str(facts), "-D", location, "--conf", str(conf), env=env)
    seconds = time.monotonic() - started
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        f"fixflow eval: error: the lake {location} cannot be used: {why}"
    ]
    assert run.stdout == "", "nothing evaluated"
    assert seconds < 5, f"eval took {seconds:.1f} s to refuse"  # idle: 0.3 s
    show = fixflow("show", "sssp", "--results", location, "--conf", str(conf), env=env)
    assert show.returncode == 1 and show.stderr.splitlines() == [
        f"fixflow show: the lake {location} cannot be used: {why}"
    ]
    run_conf = storage_conf(tmp_path / "run.toml", s3, lake=location, **keys)
    started = time.monotonic()
    stream = fixflow("run", str(SSSP), "--available-now", "--conf", str(run_conf), env=env)
    assert stream.returncode == 1 and stream.stdout == "", "refused before anything started"
    assert stream.stderr.splitlines() == [f"fixflow run: the lake {location} cannot be used: {why}"]
    # Idle, 1.0-1.2 s (importing pyspark); the margin is for a loaded CI machine.
    assert time.monotonic() - started < 15, "refused at once"


def test_a_credential_file_that_cannot_be_read_is_one_line(s3: S3Server, tmp_path: Path) -> None:
    config = parse_config(
        f'[lake]\npath = "{s3.url("x")}"\n'
        + s3.storage_section(secret_access_key_file=f'"{tmp_path / "missing"}"')
    )
    with pytest.raises(StorageError) as error:
        use_lake(config.lake)
    assert str(error.value) == (
        f"[lake.storage] secret_access_key_file: cannot read {tmp_path / 'missing'}: "
        "No such file or directory"
    )


def test_the_storage_settings_become_the_aws_environment(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t\n")
    config = parse_config(
        '[lake]\npath = "s3a://b/p"\n[lake.storage]\nendpoint = "http://h:9000"\n'
        f'region = "eu-west-1"\nsecret_access_key_file = "{secret}"\n'
        'access_key_id_env = "MY_KEY"\npath_style = false\n'
    )
    os.environ.pop("AWS_SESSION_TOKEN", None)
    os.environ["MY_KEY"] = "AKIA-test"
    try:
        assert storage_environment(config.lake.storage) == {
            "AWS_ENDPOINT_URL": "http://h:9000",
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "eu-west-1",
            "AWS_DEFAULT_REGION": "eu-west-1",
            "AWS_ACCESS_KEY_ID": "AKIA-test",
            "AWS_SECRET_ACCESS_KEY": "s3cr3t",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true",
        }
    finally:
        del os.environ["MY_KEY"]
    assert "s3cr3t" not in repr(config), "the config holds where secrets are, not them"
    local = config.lake.local_root()
    assert local == Path("~/.cache/fixflow/lakes/b/p").expanduser()


@pytest.fixture
def s3_process(s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    """This test process set up for ``s3`` as ``use_lake`` does it for a command."""
    for name, value in s3.credentials.items():
        monkeypatch.setenv(name, value)
    config = parse_config(f'[lake]\npath = "{s3.url("unit")}"\n' + s3.storage_section())
    for name, value in storage_environment(config.lake.storage).items():
        monkeypatch.setenv(name, value)
    return config


def test_the_lease_in_an_object_store(s3_process: Config, s3: S3Server) -> None:
    lake = ProgramLake(s3.url(f"unit/lease-{time.time_ns()}"), "cc")
    first = take(lake)
    with pytest.raises(LakeBusy, match="is being written by another Fixflow stream: pid"):
        take(lake)
    with pytest.raises(LakeBusy):
        refuse_if_held(lake)
    # A writer elsewhere whose heartbeat stopped: its lease is taken over, and it learns so.
    first.renew()
    stale = take(lake, expires_s=-1.0)  # every lease counts as stale
    assert first.renew() is False and first.lost
    key = f"{lake.base.removeprefix('s3://')}/{LEASE_FILE}"
    with s3.filesystem().open_input_stream(key) as source:
        assert json.loads(source.read())["id"] == stale.owner.id
    first.release()  # not its lease any more: left alone
    assert key in s3.files(lake.base.removeprefix(f"s3://{s3.bucket}/"))
    stale.release()
    assert s3.files(lake.base.removeprefix(f"s3://{s3.bucket}/")) == []
    take(lake).release()  # free again


def test_the_checkpoint_mirror_copies_what_spark_wrote(
    s3_process: Config, s3: S3Server, tmp_path: Path
) -> None:
    prefix = f"unit/mirror-{time.time_ns()}"
    lake = ProgramLake(s3.url(prefix), "tc", str(tmp_path / "here"))
    mirror = CheckpointMirror.of(lake)
    assert mirror is not None
    mirror.restore()
    local = Path(lake.checkpoints)
    (local / "stream" / "offsets").mkdir(parents=True)
    (local / "stream" / "offsets" / "0").write_text("v1\n{}")
    (local / "stream" / "offsets" / ".0.tmp").write_text("half written")
    (local / "stream" / "metadata").write_text('{"id":"q"}')
    mirror.push()
    stored = f"{s3.bucket}/{prefix}/tc/_checkpoints/stream"
    assert sorted(s3.files(f"{prefix}/tc")) == [f"{stored}/metadata", f"{stored}/offsets/0"]
    (local / "stream" / "offsets" / "0").unlink()  # purged by Spark
    (local / "stream" / "offsets" / "1").write_text("v1\n{1}")
    mirror.push()
    assert sorted(s3.files(f"{prefix}/tc")) == [f"{stored}/metadata", f"{stored}/offsets/1"]
    elsewhere = ProgramLake(s3.url(prefix), "tc", str(tmp_path / "elsewhere"))
    other = CheckpointMirror.of(elsewhere)
    assert other is not None
    other.restore()  # another machine: the lake's copy
    restored = Path(elsewhere.checkpoints)
    assert (restored / "stream" / "offsets" / "1").read_text() == "v1\n{1}"
    assert sorted(p.name for p in restored.rglob("*") if p.is_file()) == ["1", "metadata"]


def test_a_stream_on_an_object_store_lake(
    broker: Config, s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fixflow run` with an s3:// lake: the results equal the oracle; a second writer is
    refused in one line; after kill -9, a run on another machine (an empty local directory)
    takes the lease over, resumes from the checkpoint in the lake, and commits nothing twice."""
    for name, value in s3.credentials.items():
        monkeypatch.setenv(name, value)  # for the `fixflow run` processes
    config = isolated_config(broker, tmp_path / "unused")
    lake_url = s3.url(f"stream-{time.time_ns()}")
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"

    def conf(name: str, local: Path) -> Path:
        section = s3.storage_section(local_dir=f'"{local}"')
        path = write_conf(tmp_path / name, config, sections=section)
        path.write_text(path.read_text().replace(config.lake.path, lake_url))
        return path

    program = parse(SSSP.read_text(), str(SSSP))
    facts = edges(EDGES)
    publish(config, program, [("edge", row, "insert") for row in sorted(facts)])
    first = FixflowRun.start(SSSP, conf("here.toml", here), tmp_path / "first.out")
    try:
        first.wait_until(lambda: BATCH_LINE.search(first.output), "the first batch")
        second = fixflow(
            "run", str(SSSP), "--conf", str(conf("here.toml", here)), env=s3.environment
        )
        lake = ProgramLake(lake_url, "sssp")
        assert second.returncode == 1
        assert (
            second.stderr.startswith(
                f"fixflow run: {lake.base} is being written by another Fixflow stream: pid "
                f"{first.process.pid}"
            )
            and len(second.stderr.splitlines()) == 1
        )
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=30)
    finally:
        first.kill_if_running()
    assert s3.files(f"{lake_url.removeprefix(f's3://{s3.bucket}/')}/sssp/_checkpoints/stream")
    gone = edges(GONE)
    publish(config, program, [("edge", row, "delete") for row in sorted(gone)])
    third = FixflowRun.start(
        SSSP, conf("elsewhere.toml", elsewhere), tmp_path / "third.out", available_now=True
    )
    try:
        assert third.process.wait(timeout=600) == 0, third.output[-3000:]
    finally:
        third.kill_if_running()
    assert f"{lake.base}: taking over the lake's lease (pid {first.process.pid} is gone)" in (
        third.output
    )
    query = fixflow(
        "query", "SELECT * FROM sssp", "--format", "csv",
        "--conf", str(conf("elsewhere.toml", elsewhere)), env=s3.environment,
    )  # fmt: skip
    assert query.returncode == 0, query.stderr
    assert csv_rows(query.stdout) == expected_sssp(facts - gone)
    assert SECRET_KEY not in third.output


def test_program_stream_refuses_an_unusable_object_store_before_starting(
    spark: object, s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API: a stream into an object-store lake the credentials do not open raises
    ``fixflow.OperationalError`` (a ``StorageError``) in one line, before any query starts."""
    import fixflow

    monkeypatch.setenv("TEST_S3_KEY", "fixflow-test-key")
    monkeypatch.setenv("TEST_S3_SECRET", "wrong")
    for name in storage_environment(parse_config(s3.storage_section()).lake.storage):
        monkeypatch.setenv(name, "-")  # recorded, so what the stream exports is undone
        monkeypatch.delenv(name)
    settings = {
        "lake": {
            "storage": {
                "endpoint": s3.endpoint,
                "access_key_id_env": "TEST_S3_KEY",
                "secret_access_key_env": "TEST_S3_SECRET",
            }
        }
    }
    program = fixflow.Program.from_file(SSSP)
    active = len(spark.streams.active)  # type: ignore[attr-defined]
    with pytest.raises(fixflow.OperationalError) as refused:
        program.stream(spark, settings, lake=s3.url("api"), trigger="available_now")
    assert isinstance(refused.value, StorageError)
    assert str(refused.value).startswith(f"the lake {s3.url('api')} cannot be used: ")
    assert "refused the credentials" in str(refused.value) and "\n" not in str(refused.value)
    assert len(spark.streams.active) == active  # type: ignore[attr-defined]
