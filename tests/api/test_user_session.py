"""The API from a user's side: a fresh ``python`` with its own SparkSession (``local[2]``,
Spark's defaults plus the shuffle partitions), and a job run by ``spark-submit``. Each runs
in a subprocess with the environment of an activated virtualenv (its ``bin`` first on PATH,
no ``PYSPARK_*`` variables, no ``PYTHONPATH``), so nothing of the test session's set-up
(``pipeline.spark.make_session``) can help. The oracle is scipy's Dijkstra."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from .roads import distances, road_grid

pytestmark = pytest.mark.spark  # each test starts Spark in a subprocess

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCRIPT = """
import sys
from pyspark.sql import SparkSession
import fixflow

spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.sql.shuffle.partitions", "4")
    .getOrCreate()
)
program = fixflow.Program.from_file(sys.argv[1])
edges = spark.read.csv(sys.argv[2], header=True, inferSchema=True)
source = spark.createDataFrame([(int(sys.argv[3]),)], ["node"])
for row in program.evaluate(spark, edge=edges, source=source)["sssp"].collect():
    print(row.node, row.dist)
"""


def user_environment() -> dict[str, str]:
    """What a user's shell has after ``source .venv/bin/activate``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHONPATH"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(BIN.parent)
    return env


@pytest.fixture(scope="module")
def roads(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, dict[int, float]]:
    src, dst, w = road_grid(30, seed=11)
    path = tmp_path_factory.mktemp("roads") / "edges.csv"
    lines = [
        f"{a},{b},{c:g}" for a, b, c in zip(src.tolist(), dst.tolist(), w.tolist(), strict=True)
    ]
    path.write_text("src,dst,w\n" + "\n".join(lines) + "\n", encoding="utf-8")
    source = int(src[np.argmin(src)])
    return path, source, distances(src, dst, w, source)


def run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=user_environment(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_fresh_python_with_its_own_session(roads, tmp_path: Path) -> None:
    edges, source, expected = roads
    program = ROOT / "examples" / "api" / "sssp.dl"
    out = run(["python", "-c", SCRIPT, str(program), str(edges), str(source)], tmp_path)
    found = {int(node): float(dist) for node, dist in (line.split() for line in out.splitlines())}
    assert found == pytest.approx(expected)


def test_the_example_job_under_spark_submit(roads, tmp_path: Path) -> None:
    edges, source, expected = roads
    job = ROOT / "examples" / "api" / "sssp_job.py"
    out_dir = tmp_path / "sssp"
    printed = run(
        ["spark-submit", "--master", "local[2]", str(job), str(edges), str(source), str(out_dir)],
        tmp_path,
    )
    assert f"sssp: {len(expected)} rows -> {out_dir}" in printed
    table = pq.read_table(out_dir)
    found = dict(zip(table["node"].to_pylist(), table["dist"].to_pylist(), strict=True))
    assert found == pytest.approx(expected)
