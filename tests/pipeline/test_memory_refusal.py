"""A run whose inputs the configured memory cannot hold by the memory model is refused
before it starts (``operators.memory_check``): by `fixflow eval` and `fixflow run` in one
line, exit 1, no traceback; just within the model it runs. ``[engine] memory`` (bytes;
``auto``: the machine's) is the configured memory; ``local_rows = "auto"`` takes half."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from fixflow.checker import load
from fixflow.operators.core import EvalOptions
from fixflow.operators.engines.base import EngineOptions
from fixflow.operators.memory_check import memory_refusal
from fixflow.operators.memory_model import auto_local_rows, physical_memory
from fixflow.operators.thresholds import DRIVER_BYTES_PER_ROW, DRIVER_FIXED_BYTES
from fixflow.pipeline.config import ConfigError, load_config
from fixflow.pipeline.engine_settings import local_rows
from fixflow.pipeline.lake.lakehouse import ProgramLake, append_rows, read_table
from streams.cli import FIXFLOW

SSSP = """\
.decl edge(src: number, dst: number, w: float)
.input edge
.decl sssp(node: number, dist: float)
.output sssp
sssp(X, d) :- X = 0, d = 0.0.
sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
"""

MEMORY = DRIVER_FIXED_BYTES + 10_000_000
"""A configured memory the model fills at 95,238 input rows."""
HELD = (MEMORY - DRIVER_FIXED_BYTES) // DRIVER_BYTES_PER_ROW
"""The most input rows a driver stratum may read within ``MEMORY`` by the model."""


def star(rows: int) -> pa.Table:
    """``rows`` edges 0 -> n of weight n, n = 1..rows."""
    nodes = np.arange(1, rows + 1, dtype=np.int64)
    return pa.table({"src": np.zeros(rows, np.int64), "dst": nodes, "w": nodes.astype(float)})


def options(local: int, shards: int = 0) -> EvalOptions:
    return EvalOptions(engine_options=EngineOptions(mode="hybrid", shards=shards), local_rows=local)


def test_the_rule_refuses_one_row_past_the_model_in_the_driver_only() -> None:
    report = load(SSSP, "sssp.dl")
    assert memory_refusal(report, options(10**9), {"edge": HELD}, MEMORY) is None
    refused = memory_refusal(report, options(10**9), {"edge": HELD + 1}, MEMORY)
    assert refused is not None
    assert (refused.stratum, refused.relations, refused.rows) == (0, ("sssp",), HELD + 1)
    assert refused.needed == DRIVER_FIXED_BYTES + DRIVER_BYTES_PER_ROW * (HELD + 1) > MEMORY
    # On Spark the model does not apply: past local_rows, or over two shards.
    assert memory_refusal(report, options(HELD), {"edge": HELD + 1}, MEMORY) is None
    assert memory_refusal(report, options(10**9, shards=2), {"edge": HELD + 1}, MEMORY) is None


def test_auto_never_refuses_what_it_places_in_the_driver() -> None:
    """``local_rows = "auto"`` is half the memory by the same model: its largest driver
    stratum fits in the whole memory."""
    report = load(SSSP, "sssp.dl")
    memory = physical_memory()
    limit = auto_local_rows(memory)
    assert memory_refusal(report, options(limit), {"edge": limit}, memory) is None


def test_memory_is_auto_or_a_positive_number_of_bytes(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text("[engine]\nmemory = 2000000000\n")
    config = load_config(conf)
    assert config.engine.memory == 2_000_000_000
    assert local_rows(config) == auto_local_rows(2_000_000_000)  # auto takes half of it
    for bad in ('"lots"', "0", "-5", "1.5"):
        conf.write_text(f"[engine]\nmemory = {bad}\n")
        with pytest.raises(ConfigError, match=r"\[engine\] memory must be \"auto\" or an"):
            load_config(conf)


def _project(tmp_path: Path, rows: int) -> tuple[Path, Path, Path]:
    (tmp_path / "sssp.dl").write_text(SSSP)
    facts = tmp_path / "facts"
    facts.mkdir()
    table = star(rows)
    columns = (c.to_pylist() for c in table.columns)
    lines = [f"{a}\t{b}\t{w}" for a, b, w in zip(*columns, strict=True)]
    (facts / "edge.facts").write_text("\n".join(lines) + "\n")
    conf = tmp_path / "eval.toml"
    conf.write_text(f"[engine]\nmemory = {MEMORY}\n")
    return tmp_path / "sssp.dl", facts, conf


def test_eval_refuses_in_one_line_what_the_memory_cannot_hold(tmp_path: Path) -> None:
    program, facts, conf = _project(tmp_path, HELD + 1)
    out = tmp_path / "out"
    args = [str(FIXFLOW), "eval", str(program), "-F", str(facts), "-D", str(out)]
    done = subprocess.run([*args, "--conf", str(conf)], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("fixflow eval: error: not started: stratum 0 (sssp) would run ")
    assert f"over {HELD + 1:,} input rows" in lines[0]
    sizes = re.search(r"need ([\d.]+) GB, more than the ([\d.]+) GB of \[engine\] memory", lines[0])
    assert sizes is not None, lines[0]
    needed, memory = (float(g) * 1e9 for g in sizes.groups())
    assert round(memory) == MEMORY and needed > memory  # told apart, however close
    assert "set [engine] local_rows (--local-rows) below 95,239" in lines[0]
    assert not out.exists(), "nothing is written"


def test_eval_runs_what_the_memory_holds_by_the_model(tmp_path: Path) -> None:
    """One row fewer than the refused run: in the driver, no Spark, exact."""
    program, facts, conf = _project(tmp_path, HELD)
    out = tmp_path / "out"
    args = [str(FIXFLOW), "eval", str(program), "-F", str(facts), "-D", str(out)]
    done = subprocess.run([*args, "--conf", str(conf)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = read_table(str(out / "sssp"))
    assert table is not None
    distances = dict(zip(*(c.to_pylist() for c in table.columns), strict=True))
    assert distances == {n: float(n) for n in range(HELD + 1)}  # 0 -> n weighs n


def test_run_refuses_before_starting_when_the_lake_holds_too_many_facts(tmp_path: Path) -> None:
    """The facts the lake already holds are what the first batch loads: a lake beyond the
    model is refused before Spark or a broker starts (none is configured to answer)."""
    (tmp_path / "sssp.dl").write_text(SSSP)
    lake_root = tmp_path / "lake"
    append_rows(ProgramLake(str(lake_root), "sssp").edb("edge"), star(HELD + 1))
    conf = tmp_path / "run.toml"
    conf.write_text(
        f'[kafka]\nbootstrap_servers = "127.0.0.1:9"\nembedded = false\n'
        f'[lake]\npath = "{lake_root}"\n[metrics]\nenabled = false\n'
        f"[engine]\nmemory = {MEMORY}\n"
    )
    done = subprocess.run(
        [str(FIXFLOW), "run", str(tmp_path / "sssp.dl"), "--conf", str(conf)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert re.match(
        r"fixflow run: not started: stratum 0 \(sssp\) would run in the driver", lines[0]
    )
    assert f"over {HELD + 1:,} input rows" in lines[0]
