"""Program forms: one program in the spellings users write, `fixflow eval` of each (whole
process) beside its best spelling, on road grids and R-MAT graphs with permuted ids.

    .venv/bin/python bench/bench_forms.py --graphs grid_100k rmat_100k rmat_1m --repeats 3

Spellings (every program reads ``edge(src, dst, w)``; the undirected ones use each edge
both ways):
- ``cc``: ``semicolon`` (one rule, ``;`` between the directions), ``two_rules`` (one rule
  per direction, as most users and papers write it), ``symmetric`` (a ``link`` relation
  holding both directions, then PowerLog's one-direction CC over it);
- ``sssp`` (undirected): the same three spellings, the second aggregating an expression
  (``min[dy + w]``);
- ``pagerank`` (directed, ``{sum[Δr] < 0.001}``): ``semicolon`` (the constant as an
  alternative, PowerLog's Program 2b) and ``two_rules`` (the constant as a rule of its own).

Per run: the wall time of the whole ``fixflow eval`` process (Python start, reading the
facts, evaluating, writing Delta) and the engine's time (``evaluated in`` of ``-v``), the
median over ``--repeats``, the ratio to the best spelling of the same program on the same
graph, and whether the results are right: CC and SSSP against scipy, PageRank against the
program's other spelling (max absolute difference). Machine load is reported before and
after. Each spelling's ``fixflow check`` class is printed beside it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from benchlib import log, machine, write_report
from graphs import Graph, build
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, dijkstra

ROOT = Path(__file__).resolve().parent.parent
HEADER = """\
.decl edge(src: number, dst: number, w: float)
.input edge
"""
CC = HEADER + ".decl cc(node: number, label: number)\n.output cc\n"
SSSP = (
    HEADER + ".decl sp(node: number, dist: float)\n.output sp\nsp(X, d) :- X = {source}, d = 0.0.\n"
)
PAGERANK = HEADER + (
    ".decl deg(x: number, d: number)\n.decl rank(x: number, r: float)\n.output rank\n"
    "deg(X, count[Y]) :- edge(X, Y, _).\n"
)
LINK = (
    ".decl link(x: number, y: number, w: float)\n"
    "link(X, Y, w) :- edge(X, Y, w).\nlink(Y, X, w) :- edge(X, Y, w).\n"
)

PROGRAMS: dict[str, dict[str, str]] = {
    "cc": {
        "semicolon": CC
        + "cc(X, X) :- edge(X, _, _).\ncc(X, X) :- edge(_, X, _).\n"
        + "cc(Y, min[v]) :- cc(X, v), edge(X, Y, _) ; cc(X, v), edge(Y, X, _).\n",
        "two_rules": CC
        + "cc(X, X) :- edge(X, _, _).\ncc(X, X) :- edge(_, X, _).\n"
        + "cc(Y, min[v]) :- cc(X, v), edge(X, Y, _).\ncc(X, min[v]) :- cc(Y, v), edge(X, Y, _).\n",
        "symmetric": CC
        + LINK
        + "cc(X, X) :- link(X, _, _).\ncc(Y, min[v]) :- cc(X, v), link(X, Y, _).\n",
    },
    "sssp": {
        "semicolon": SSSP
        + "sp(Y, min[d]) :- sp(X, dx), edge(X, Y, w), d = dx + w ;"
        + " sp(X, dx), edge(Y, X, w), d = dx + w.\n",
        "two_rules": SSSP
        + "sp(Y, min[d]) :- sp(X, dx), edge(X, Y, w), d = dx + w.\n"
        + "sp(X, min[dy + w]) :- sp(Y, dy), edge(X, Y, w).\n",
        "symmetric": SSSP + LINK + "sp(Y, min[d]) :- sp(X, dx), link(X, Y, w), d = dx + w.\n",
    },
    "pagerank": {
        "semicolon": PAGERANK
        + "rank(X, sum[r]) :- edge(X, _, _), r = 0.15 ;"
        + " rank(Y, ry), edge(Y, X, _), deg(Y, d), r = 0.85 * ry / d {sum[Δr] < 0.001}.\n",
        "two_rules": PAGERANK
        + "rank(X, sum[r]) :- edge(X, _, _), r = 0.15.\n"
        + "rank(X, sum[r]) :- rank(Y, ry), edge(Y, X, _), deg(Y, d), r = 0.85 * ry / d"
        + " {sum[Δr] < 0.001}.\n",
    },
}
"""Every program's spellings (``{source}`` is the SSSP source of the graph)."""

ENGINE_TIME = re.compile(r"evaluated in ([0-9.]+) s")


@dataclass
class Row:
    program: str
    spelling: str
    graph: str
    eval_class: str
    walls: list[float] = field(default_factory=list)
    engines: list[float] = field(default_factory=list)
    check: str = ""

    @property
    def wall(self) -> float:
        return statistics.median(self.walls) if self.walls else float("nan")

    @property
    def engine(self) -> float:
        return statistics.median(self.engines) if self.engines else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+", default=["grid_100k", "rmat_100k", "rmat_1m"])
    parser.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per eval")
    parser.add_argument("--markdown", action="store_true", help="report to stdout")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "FORMS_RESULTS.md")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fixflow-forms-") as scratch:
        for name in args.graphs:
            graph = build(name)
            facts = Path(scratch) / name
            write_facts(graph, facts)
            for program in args.programs:
                rows += run_program(program, graph, facts, Path(scratch), args)
    write_report(report(rows, load_before, os.getloadavg(), args), args)


def write_facts(graph: Graph, directory: Path) -> None:
    directory.mkdir(parents=True)
    columns = np.column_stack([graph.src, graph.dst, graph.weight])
    np.savetxt(directory / "edge.facts", columns, fmt="%d\t%d\t%.1f")


def run_program(
    program: str, graph: Graph, facts: Path, scratch: Path, args: argparse.Namespace
) -> list[Row]:
    rows: list[Row] = []
    results: dict[str, dict[int, float]] = {}
    for spelling, text in PROGRAMS[program].items():
        path = scratch / f"{program}_{spelling}.dl"
        path.write_text(text.replace("{source}", str(graph.source)))
        row = Row(program, spelling, graph.name, eval_class(path))
        for repeat in range(args.repeats):
            out = scratch / f"out_{program}_{spelling}_{graph.name}_{repeat}"
            if not timed_eval(path, facts, out, row, args.timeout):
                break
            results[spelling] = read_result(out, program)
        log(f"{graph.name} {program} {spelling}: {row.walls} s whole, {row.engines} s engine")
        rows.append(row)
    for row in rows:
        row.check = check(program, graph, results.get(row.spelling), results)
    return rows


def eval_class(path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fixflow.pipeline.cli", "check", "--json", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    strata = json.loads(done.stdout)["strata"] if done.returncode == 0 else []
    return "/".join(s["class"] for s in strata if s["recursive"]) or "?"


def timed_eval(path: Path, facts: Path, out: Path, row: Row, timeout: float) -> bool:
    command = [sys.executable, "-m", "fixflow.pipeline.cli", "-v", "eval", str(path)]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [*command, "-F", str(facts), "-D", str(out), "--csv"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        row.check = f"timeout ({timeout:.0f} s)"
        return False
    row.walls.append(time.perf_counter() - started)
    if done.returncode != 0:
        row.check = f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
        return False
    found = ENGINE_TIME.search(done.stderr)
    if found:
        row.engines.append(float(found.group(1)))
    return True


def read_result(out: Path, program: str) -> dict[int, float]:
    relation = {"cc": "cc", "sssp": "sp", "pagerank": "rank"}[program]
    with (out / f"{relation}.csv").open() as handle:
        rows = list(csv.reader(handle))[1:]
    return {int(key): float(value) for key, value in rows}


def check(
    program: str,
    graph: Graph,
    got: dict[int, float] | None,
    results: dict[str, dict[int, float]],
) -> str:
    if got is None:
        return "no result"
    if program == "pagerank":
        others = [r for r in results.values() if r is not got]
        if not others:
            return "no other spelling to compare"
        worst = max(max(abs(got[k] - o.get(k, np.inf)) for k in got) for o in others)
        return f"max abs difference to the other spelling {worst:.2g}"
    expected = cc_oracle(graph) if program == "cc" else sssp_oracle(graph)
    return "exact (scipy)" if got == expected else "WRONG (scipy differs)"


def undirected(graph: Graph) -> csr_matrix:
    n = graph.nodes
    src = np.concatenate([graph.src, graph.dst])
    dst = np.concatenate([graph.dst, graph.src])
    weight = np.concatenate([graph.weight, graph.weight])
    order = np.lexsort((weight, dst, src))  # csr sums duplicates: keep each pair's lightest
    src, dst, weight = src[order], dst[order], weight[order]
    first = np.ones(len(src), dtype=bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    return csr_matrix((weight[first], (src[first], dst[first])), shape=(n, n))


def cc_oracle(graph: Graph) -> dict[int, float]:
    _, labels = connected_components(undirected(graph), directed=False)
    nodes = np.unique(np.concatenate([graph.src, graph.dst]))
    smallest: dict[int, int] = {}
    for node in nodes:
        smallest.setdefault(int(labels[node]), int(node))
    return {int(node): float(smallest[int(labels[node])]) for node in nodes}


def sssp_oracle(graph: Graph) -> dict[int, float]:
    distances = dijkstra(undirected(graph), directed=True, indices=graph.source)
    return {int(v): float(d) for v, d in enumerate(distances) if np.isfinite(d)}


def report(
    rows: list[Row],
    before: tuple[float, float, float],
    after: tuple[float, float, float],
    args: argparse.Namespace,
) -> str:
    lines = [
        "# Program forms: `fixflow eval` of each spelling, whole process",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; "
        f"load {before[0]:.2f} before, {after[0]:.2f} after; medians of {args.repeats}.",
        "",
        "| program | spelling | class | graph | whole process (s) | engine (s) | × best | result |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        peers = [r.wall for r in rows if (r.program, r.graph) == (row.program, row.graph)]
        best = min((w for w in peers if w == w), default=float("nan"))
        lines.append(
            f"| {row.program} | {row.spelling} | {row.eval_class} | {row.graph} | "
            f"{row.wall:.2f} | {row.engine:.2f} | {row.wall / best:.2f} | {row.check} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
