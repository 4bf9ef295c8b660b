"""The Python API in a warm session: `Program.evaluate` of SSSP over a DataFrame the user
read with Spark, against `fixflow eval` of the same edges (whole process) and scipy.

    .venv/bin/python bench/bench_api.py --graphs grid_1m rmat_1m --repeats 3

Per graph the edges are written once as Parquet; each repeat reads them with
``spark.read.parquet`` (what a user's job does), evaluates ``examples/api/sssp.dl`` with
``Program.evaluate`` on the default settings and counts the result (``count()`` makes Spark
produce it). Reported: the median of that call, the median of ``fixflow eval`` of the same
edges as a ``.facts`` file (a whole process: Python, reading, evaluating, writing Delta), and
whether the API's distances equal scipy's Dijkstra. Machine load before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from benchlib import log, machine, write_report
from graphs import Graph, build
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "api" / "sssp.dl"


def write_inputs(graph: Graph, directory: Path) -> tuple[Path, Path]:
    """The edges as Parquet (for Spark) and the facts directory (for `fixflow eval`)."""
    edges = pa.table({"src": graph.src, "dst": graph.dst, "w": graph.weight})
    parquet = directory / "edges.parquet"
    pq.write_table(edges, parquet)
    facts = directory / "facts"
    facts.mkdir()
    lines = np.char.add(
        np.char.add(graph.src.astype(str), "\t"),
        np.char.add(np.char.add(graph.dst.astype(str), "\t"), graph.weight.astype(str)),
    )
    (facts / "edge.facts").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (facts / "source.facts").write_text(f"{graph.source}\n", encoding="utf-8")
    return parquet, facts


def api_runs(graph: Graph, parquet: Path, repeats: int) -> tuple[list[float], bool]:
    import fixflow
    from fixflow.pipeline.spark import make_session

    spark = make_session()
    program = fixflow.Program.from_file(PROGRAM)
    times, found = [], {}
    for _ in range(repeats):
        started = time.monotonic()
        edges = spark.read.parquet(str(parquet))
        source = spark.createDataFrame([(graph.source,)], "node long")
        result = program.evaluate(spark, edge=edges, source=source)["sssp"]
        result.count()
        times.append(time.monotonic() - started)
    found = {int(r.node): float(r.dist) for r in result.collect()}
    matrix = csr_matrix((graph.weight, (graph.src, graph.dst)), shape=(graph.nodes,) * 2)
    dist = dijkstra(matrix, indices=graph.source)
    expected = {int(v): float(d) for v, d in enumerate(dist) if np.isfinite(d)}
    right = found.keys() == expected.keys() and all(
        abs(found[k] - expected[k]) <= 1e-9 * max(1.0, expected[k]) for k in expected
    )
    return times, right


def eval_runs(facts: Path, directory: Path, repeats: int) -> list[float]:
    times = []
    for i in range(repeats):
        command = [sys.executable, "-m", "fixflow.pipeline.cli", "eval", str(PROGRAM)]
        started = time.monotonic()
        done = subprocess.run(
            [*command, "-F", str(facts), "-D", str(directory / f"out{i}")],
            capture_output=True,
            text=True,
            check=False,
        )
        times.append(time.monotonic() - started)
        if done.returncode != 0:
            raise SystemExit(f"fixflow eval failed: {done.stderr}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", nargs="+", default=["grid_1m", "rmat_1m"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "API_RESULTS.md")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    for name in args.graphs:
        graph = build(name)
        with tempfile.TemporaryDirectory() as scratch:
            directory = Path(scratch)
            parquet, facts = write_inputs(graph, directory)
            log(f"{name}: Program.evaluate x{args.repeats}")
            api, right = api_runs(graph, parquet, args.repeats)
            log(f"{name}: fixflow eval x{args.repeats}")
            whole = eval_runs(facts, directory, args.repeats)
        rows.append(
            f"| {name} | {len(graph.src):,} | {statistics.median(api):.2f} | "
            f"{statistics.median(whole):.2f} | {'yes' if right else 'NO'} |"
        )
    load_after = os.getloadavg()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = "\n".join(
        [
            f"# Program.evaluate over a DataFrame ({stamp})",
            "",
            machine(),
            f"load before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
            f"medians of {args.repeats}",
            "",
            "| graph | edges | Program.evaluate s (warm) | fixflow eval s (whole) | exact |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    write_report(text, args)


if __name__ == "__main__":
    main()
