"""A Kafka source worker that misses Spark's connect-back window does not end the run.

Spark 4.2 gives the Python worker that runs the streaming source a hard-coded 10 s to connect
back to the JVM; on a loaded machine its start can take longer, and the query fails before
reading anything. `fixflow run` starts the query again on its checkpoint
(``stream.query.missed_connect_back``). Here the worker's first start is made late on purpose: the
interpreter Spark starts for Python workers is a wrapper that sleeps past the window the first
time it is asked for the streaming source's runner."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from fixflow.checker.parser import parse
from fixflow.pipeline.config import Config
from fixflow.pipeline.lake.lakehouse import ProgramLake
from fixflow.pipeline.stream.query import START_AGAIN
from streams.cli import BATCH_LINE, STOPPED_LINE, FixflowRun, write_conf
from streams.harness import STREAMS, isolated_config, oracle, publish, result_rows

PROGRAM = STREAMS / "tc" / "program.dl"
RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
LATE_S = 13
"""Past Spark's 10 s."""


def late_python(directory: Path) -> Path:
    """An interpreter for Spark's Python workers whose first streaming-source runner starts
    ``LATE_S`` seconds late (it is ``python -m RUNNER``); every other start is immediate."""
    mark = directory / "was-late"
    wrapper = directory / "late-python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$2" = "{RUNNER}" ] && [ ! -e "{mark}" ]; then touch "{mark}"; sleep {LATE_S}; fi\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


def test_a_source_worker_that_connects_back_late_is_started_again(
    broker: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = isolated_config(broker, tmp_path / "lake")
    conf = write_conf(tmp_path / "run.toml", config)
    python = late_python(tmp_path)
    # The JVM starts the driver's Python runners with PYSPARK_PYTHON/PYSPARK_DRIVER_PYTHON
    # from its environment (Fixflow sets them only where unset; `fixflow run` inherits these),
    # the workers of tasks per `spark.pyspark.python`: the wrapper is both.
    for variable in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        monkeypatch.setenv(variable, str(python))
    keys = "".join(f'"spark.pyspark.{k}" = "{python}"\n' for k in ("python", "driver.python"))
    conf.write_text(conf.read_text().replace("[spark.conf]\n", f"[spark.conf]\n{keys}", 1))
    program = parse(PROGRAM.read_text(), str(PROGRAM))
    arcs = {(1, 2), (2, 3), (3, 4)}
    publish(config, program, [("arc", a, "insert") for a in sorted(arcs)])
    run = FixflowRun.start(PROGRAM, conf, tmp_path / "run.out", available_now=True)
    try:
        code = run.process.wait(timeout=600)
    finally:
        run.kill_if_running()
    output = run.output
    assert code == 0, output[-3000:]
    assert (tmp_path / "was-late").exists(), "the runner was never started late"
    assert START_AGAIN.split(":")[0] in output, output[-3000:]
    batches = [int(records) for _, records in BATCH_LINE.findall(output)]
    assert sum(batches) == len(arcs) and STOPPED_LINE.findall(output) == [str(len(batches))]
    lake = ProgramLake.for_program(config.lake.path, PROGRAM)
    assert result_rows(lake, "tc") == oracle(program, {"arc": arcs})["tc"]
