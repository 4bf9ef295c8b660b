"""`fixflow explain` on a lake of a million result rows: the derivation of the row farthest
from the source (the longest chain), whole process and in a warm process.

    .venv/bin/python bench/bench_explain.py --graphs grid_1m rmat_1m --repeats 3

Per graph the lake of ``examples/api/sssp.dl`` is written directly (its Delta tables as a
stream would leave them: ``edb/edge``, ``edb/source``, ``results/sssp`` computed by scipy's
Dijkstra, and ``program.dl``), so the benchmark measures the explanation, not a stream.
The row explained is the reachable node with the most hops from the source (the longest
witness chain on that graph). Reported: the chain's length, the median wall time of
``fixflow explain sssp NODE --lake L --program sssp`` (a whole process: Python start, the
imports, reading the tables, the walk) and of ``Program.explain`` in one process (the
first call builds the indexes, the next reuse nothing: each call reads the lake again),
and whether the printed chain is right: every edge exists and the weights add up to the
stored distance. Machine load before and after.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from benchlib import log, machine, write_report
from graphs import Graph, build
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "api" / "sssp.dl"
STEP = re.compile(r"^sssp\((\d+), (\S+)\)  <-  sssp\((\d+), (\S+)\), edge\((\d+), (\d+), (\S+)\)$")


def write_lake(graph: Graph, lake: Path) -> tuple[int, int, float, int]:
    """The lake of ``sssp.dl`` over ``graph``; the node explained, its hops and distance,
    and the result rows (the nodes the source reaches)."""
    from fixflow.checker import load
    from fixflow.pipeline.lake.delta import write_table
    from fixflow.pipeline.lake.lakehouse import ProgramLake, record_program

    text = PROGRAM.read_text(encoding="utf-8")
    report = load(text, str(PROGRAM))
    matrix = csr_matrix((graph.weight, (graph.src, graph.dst)), shape=(graph.nodes,) * 2)
    dist = dijkstra(matrix, indices=graph.source)
    hops = dijkstra(matrix, indices=graph.source, unweighted=True)
    reached = np.flatnonzero(np.isfinite(dist))
    target = int(reached[np.argmax(hops[reached])])
    place = ProgramLake(str(lake), "sssp")
    record_program(place, text)
    tables = {
        place.edb("edge"): pa.table({"src": graph.src, "dst": graph.dst, "w": graph.weight}),
        place.edb("source"): pa.table({"node": np.array([graph.source], np.int64)}),
        place.results("sssp"): pa.table({"node": reached.astype(np.int64), "dist": dist[reached]}),
    }
    for path, table in tables.items():
        relation = path.rsplit("/", 1)[1]
        write_table(path, table, report.catalog[relation].result)
    return target, int(hops[target]), float(dist[target]), len(reached)


def check_chain(lines: list[str], graph: Graph, target: int, distance: float) -> bool:
    weights = {
        (int(a), int(b)): float(w)
        for a, b, w in zip(graph.src, graph.dst, graph.weight, strict=True)
    }
    node, total = target, 0.0
    for line in lines[:-1]:
        found = STEP.match(line)
        if found is None or int(found.group(1)) != node:
            return False
        a, b, w = int(found.group(5)), int(found.group(6)), float(found.group(7))
        if b != node or weights.get((a, b)) != w:
            return False
        total, node = total + w, a
    return node == graph.source and abs(total - distance) <= 1e-9 * max(1.0, distance)


def whole_process(lake: Path, target: int) -> tuple[float, list[str]]:
    command = [sys.executable, "-m", "fixflow.pipeline.cli", "explain", "sssp", str(target)]
    started = time.monotonic()
    done = subprocess.run(
        [*command, "--lake", str(lake), "--program", "sssp"],
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"fixflow explain failed: {done.stderr}")
    return seconds, [line for line in done.stdout.splitlines() if not line.startswith("//")]


def in_process(lake: Path, target: int, repeats: int) -> list[float]:
    import fixflow

    program = fixflow.Program.from_file(PROGRAM)
    times = []
    for _ in range(repeats):
        started = time.monotonic()
        program.explain("sssp", target, lake=lake, name="sssp")
        times.append(time.monotonic() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", nargs="+", default=["grid_1m", "rmat_1m"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "EXPLAIN_RESULTS.md")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    for name in args.graphs:
        graph = build(name)
        with tempfile.TemporaryDirectory() as directory:
            lake = Path(directory) / "lake"
            target, hops, distance, results = write_lake(graph, lake)
            log(f"{name}: explaining node {target} ({hops} hops)")
            runs = [whole_process(lake, target) for _ in range(args.repeats)]
            warm = in_process(lake, target, args.repeats)
        lines = runs[0][1]
        right = check_chain(lines, graph, target, distance)
        rows.append(
            f"| {name} | {len(graph.src):,} | {results:,} | {hops} | {len(lines) - 1} | "
            f"{statistics.median(s for s, _ in runs):.2f} | {statistics.median(warm):.2f} | "
            f"{'yes' if right else 'NO'} |"
        )
    load_after = os.getloadavg()
    text = "\n".join(
        [
            "# fixflow explain, the longest chain "
            f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
            "",
            machine(),
            f"load before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
            f"medians of {args.repeats}",
            "",
            "| graph | edges | result rows | BFS hops | chain steps | whole process s "
            "| in process s | right |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    write_report(text, args)


if __name__ == "__main__":
    main()
