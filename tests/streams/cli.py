"""`fixflow run` as a subprocess, for the end-to-end tests: a config file of its own, output
captured to a file (a pipe could fill up and block the pipeline), Prometheus scrapes over
HTTP, and signals."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixflow.pipeline.config import Config, load_config

FIXFLOW = Path(sys.executable).parent / "fixflow"
BATCH_LINE = re.compile(r"^batch (\d+): (\d+) records", re.MULTILINE)
STOPPED_LINE = re.compile(r"^stopped after (\d+) batch\(es\)$", re.MULTILINE)


def write_conf(
    path: Path,
    config: Config,
    *,
    trigger_ms: int = 300,
    metrics_port: int | None = None,
    max_records_per_trigger: int = 10000,
    adaptive: bool = True,
    stream_keys: str = "",
    kafka_keys: str = "",
    sections: str = "",
) -> Path:
    """A TOML config for the test's broker, topics and lake (the embedded broker is the
    test session's, so `fixflow run` must not manage one); ``stream_keys`` and
    ``kafka_keys`` are more ``[stream]`` and ``[kafka]`` lines, ``sections`` more tables."""
    path.write_text(f"""
[kafka]
bootstrap_servers = "{config.kafka.bootstrap_servers}"
embedded = false
topic_prefix = "{config.kafka.topic_prefix}"
{kafka_keys}

[lake]
path = "{config.lake.path}"

[spark]
master = "local[2]"

[spark.conf]
"spark.ui.enabled" = false
"spark.sql.shuffle.partitions" = 4

[stream]
trigger_ms = {trigger_ms}
max_records_per_trigger = {max_records_per_trigger}
adaptive = {str(adaptive).lower()}
{stream_keys}

[metrics]
{"enabled = false" if metrics_port is None else f"port = {metrics_port}"}
{sections}
""")
    load_config(path)  # a config the CLI would refuse would make every check below moot
    return path


@dataclass
class FixflowRun:
    """One `fixflow run PROG --conf FILE [--available-now]` process."""

    process: subprocess.Popen[bytes]
    output_file: Path

    @classmethod
    def start(
        cls,
        program: Path,
        conf: Path,
        output_file: Path,
        available_now: bool = False,
        flags: Sequence[str] = (),
    ) -> FixflowRun:
        args = [str(FIXFLOW), "run", str(program), "--conf", str(conf), *flags]
        if available_now:
            args.append("--available-now")
        with output_file.open("wb") as sink:
            process = subprocess.Popen(
                args, stdout=sink, stderr=subprocess.STDOUT, cwd=output_file.parent
            )
        return cls(process, output_file)

    @property
    def output(self) -> str:
        return self.output_file.read_text(errors="replace")

    def batches(self) -> list[tuple[int, int]]:
        """(batch id, records) of every batch line printed so far."""
        return [(int(b), int(n)) for b, n in BATCH_LINE.findall(self.output)]

    def wait_until(self, condition: Callable[[], Any], what: str, timeout_s: float = 240.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"fixflow run exited ({self.process.returncode}) while "
                    f"waiting for {what}:\n{self.output[-3000:]}"
                )
            value = condition()
            if value:
                return value
            time.sleep(0.3)
        raise AssertionError(
            f"timed out after {timeout_s} s waiting for {what}:\n{self.output[-3000:]}"
        )

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = 120.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        return self.process.wait(timeout=timeout_s)

    def kill_if_running(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def probe(port: int, path: str) -> tuple[int, dict[str, str]]:
    """(HTTP status, JSON body) of a health probe (``/ready``, ``/healthz``) of the
    endpoint at 127.0.0.1:PORT; a 503 is an answer, not an error."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of http://127.0.0.1:PORT/metrics: (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    return sum(
        value
        for (sample, sample_labels), value in samples.items()
        if sample == name and set(labels.items()) <= set(sample_labels)
    )
