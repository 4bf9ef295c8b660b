"""Program forms: one program in the spellings users write, `fixflow eval` of each (whole
process) beside its best spelling, on road grids and R-MAT graphs with permuted ids.

    .venv/bin/python bench/bench_forms.py --graphs grid_100k rmat_100k rmat_1m grid_1m
    .venv/bin/python bench/bench_forms.py --cases      # the recursion classes, on their graphs

Spellings (every program reads ``edge(src, dst, w)``; the undirected ones use each edge
both ways):
- ``cc``: ``semicolon`` (one rule, ``;`` between the directions), ``two_rules`` (one rule
  per direction, as most users and papers write it), ``symmetric`` (a ``link`` relation
  holding both directions, then PowerLog's one-direction CC over it);
- ``sssp`` (undirected): the same three spellings, the second aggregating an expression
  (``min[dy + w]``);
- ``pagerank`` (directed): ``semicolon`` (the constant as an alternative, PowerLog's
  Program 2b, ``{sum[Δr] < 0.001}``), ``two_rules`` (the constant as a rule of its own, the
  same clause) and ``no_clause`` (no termination clause: it runs to its float fixpoint);
- ``katz`` (directed, β = half the inverse spectral radius, rounded down; no clause):
  ``semicolon`` and ``two_rules``.

The cases (``--cases``) are the recursion classes other than linear single-relation MRA,
each on the graph its acceptance names, in two spellings:
- ``even_odd`` on ``grid_10k``: shortest even- and odd-hop walks by mutual recursion of
  two relations (``mutual``) or one relation indexed by the parity (``parity``);
- ``apsp`` on ``grid_400``: all-pairs shortest paths of at least one edge, ``path ⋈ path``
  (``non_linear``) or ``path ⋈ edge`` (``linear``);
- ``tc`` on ``dag_3k`` (a seeded sparse 3,000-node DAG): transitive closure, ``tc ⋈ tc``
  (``non_linear``) or ``tc ⋈ edge`` (``linear``).

Per run: the wall time of the whole ``fixflow eval`` process (Python start, reading the
facts, evaluating, writing the results) and the engine's time (``evaluated in`` of ``-v``),
the median over ``--repeats``, the ratio to the best spelling of the same program on the
same graph, and whether the results are right against an independent oracle: CC and SSSP
against scipy (exact), PageRank and Katz against a power iteration run to 1e-13 (the
largest relative error; the spellings with a clause stop early by design), even/odd
against scipy Dijkstra on the parity product graph, APSP against scipy Dijkstra (the
diagonal is the shortest cycle), TC against scipy's reachability. Each spelling's
``fixflow check`` class is printed beside it; machine load before and after.
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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
from benchlib import log, machine, write_report
from graphs import Graph, load
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, dijkstra, shortest_path
from scipy.sparse.linalg import eigs

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
PAGERANK_STEP = "rank(Y, ry), edge(Y, X, _), deg(Y, d), r = 0.85 * ry / d"
KATZ = HEADER + ".decl katz(x: number, k: float)\n.output katz\n"
LINK = (
    ".decl link(x: number, y: number, w: float)\n"
    "link(X, Y, w) :- edge(X, Y, w).\nlink(Y, X, w) :- edge(X, Y, w).\n"
)
EVEN_ODD = HEADER + (
    ".decl even(node: number, dist: float)\n.decl odd(node: number, dist: float)\n"
    ".output even\n.output odd\n"
)
APSP = HEADER + ".decl path(src: number, dst: number, d: float)\n.output path\n"
TC = HEADER + ".decl tc(src: number, dst: number)\n.output tc\n"
REACH = HEADER + ".decl reach(node: number)\n.output reach\nreach(X) :- X = {source}.\n"

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
        + f"rank(X, sum[r]) :- edge(X, _, _), r = 0.15 ; {PAGERANK_STEP} {{sum[Δr] < 0.001}}.\n",
        "two_rules": PAGERANK
        + "rank(X, sum[r]) :- edge(X, _, _), r = 0.15.\n"
        + f"rank(X, sum[r]) :- {PAGERANK_STEP} {{sum[Δr] < 0.001}}.\n",
        "no_clause": PAGERANK + f"rank(X, sum[r]) :- edge(X, _, _), r = 0.15 ; {PAGERANK_STEP}.\n",
    },
    "katz": {
        "semicolon": KATZ
        + "katz(X, sum[k]) :- edge(X, _, _), k = 1.0 ;"
        + " katz(Y, ky), edge(Y, X, _), k = {beta} * ky.\n",
        "two_rules": KATZ
        + "katz(X, sum[k]) :- edge(X, _, _), k = 1.0.\n"
        + "katz(X, sum[k]) :- katz(Y, ky), edge(Y, X, _), k = {beta} * ky.\n",
    },
    "even_odd": {
        "mutual": EVEN_ODD
        + "even(X, d) :- X = {source}, d = 0.0.\n"
        + "odd(Y, min[d]) :- even(X, dx), edge(X, Y, w), d = dx + w.\n"
        + "even(Y, min[d]) :- odd(X, dx), edge(X, Y, w), d = dx + w.\n",
        "parity": EVEN_ODD
        + ".decl walk(node: number, parity: number, dist: float)\n"
        + "walk(X, 0, d) :- X = {source}, d = 0.0.\n"
        + "walk(Y, q, min[d]) :- walk(X, p, dx), edge(X, Y, w), q = 1 - p, d = dx + w.\n"
        + "even(X, d) :- walk(X, 0, d).\nodd(X, d) :- walk(X, 1, d).\n",
    },
    "apsp": {
        "non_linear": APSP
        + "path(X, Y, min[d]) :- edge(X, Y, d).\n"
        + "path(X, Y, min[d]) :- path(X, Z, d1), path(Z, Y, d2), d = d1 + d2.\n",
        "linear": APSP
        + "path(X, Y, min[d]) :- edge(X, Y, d) ; path(X, Z, d1), edge(Z, Y, w), d = d1 + w.\n",
    },
    "tc": {
        "non_linear": TC + "tc(X, Y) :- edge(X, Y, _).\ntc(X, Y) :- tc(X, Z), tc(Z, Y).\n",
        "linear": TC + "tc(X, Y) :- edge(X, Y, _).\ntc(X, Y) :- tc(X, Z), edge(Z, Y, _).\n",
    },
    "reach": {
        "delta_first": REACH + "reach(Y) :- reach(X), edge(X, Y, _).\n",
        "facts_first": REACH + "reach(Y) :- edge(X, Y, _), reach(X).\n",
    },
}
"""Every program's spellings (``{source}``: the SSSP source; ``{beta}``: Katz's β)."""

CASES = {"even_odd": "grid_10k", "apsp": "grid_400", "tc": "dag_3k"}
"""The recursion classes beyond single-relation MRA, each on its acceptance graph."""
OUTPUTS = {
    "cc": ("cc",),
    "sssp": ("sp",),
    "pagerank": ("rank",),
    "katz": ("katz",),
    "even_odd": ("even", "odd"),
    "apsp": ("path",),
    "tc": ("tc",),
    "reach": ("reach",),
}
KEYS_ONLY = ("tc", "reach")
"""Programs whose relations have no value column."""
LIMITS = ("pagerank", "katz")
"""Programs whose value is a limit: checked by relative error, not for equality."""
LIMIT_TOLERANCE = 1e-6
ENGINE_TIME = re.compile(r"evaluated in ([0-9.]+) s")
Result = dict[tuple, float]
"""(relation, key columns...) -> value (1.0 for a relation without a value column)."""


@dataclass
class Row:
    program: str
    spelling: str
    graph: str
    eval_class: str
    walls: list[float] = field(default_factory=list)
    engines: list[float] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)
    """Peak resident memory of each run, GB."""
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
    parser.add_argument(
        "--programs", nargs="+", default=["cc", "sssp", "pagerank", "katz"], choices=list(PROGRAMS)
    )
    parser.add_argument(
        "--cases", action="store_true", help="run the CASES (each on its own graph) instead"
    )
    parser.add_argument(
        "--facts",
        choices=("facts", "csv"),
        default="facts",
        help="the edge file's form: edge.facts (tab-separated) or edge.csv (with a header)",
    )
    parser.add_argument(
        "--spellings", nargs="+", default=[], help="only these spellings (default: every one)"
    )
    parser.add_argument(
        "--eval-args",
        action="append",
        default=[],
        help="one more argument of every `fixflow eval`, e.g. --eval-args=--local-rows=0 "
        "(repeat it for several)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per eval")
    parser.add_argument("--markdown", action="store_true", help="report to stdout")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "FORMS_RESULTS.md")
    args = parser.parse_args()
    plan = list(CASES.items()) if args.cases else planned(args.graphs, args.programs)
    load_before = os.getloadavg()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fixflow-forms-") as scratch:
        for graph_name, programs in grouped(plan):
            graph_of = graph_loader(graph_name)
            facts = Path(scratch) / graph_name
            write_facts(graph_of(), facts, args.facts)
            for program in programs:
                rows += run_program(program, graph_of, facts, Path(scratch), args)
    write_report(report(rows, load_before, os.getloadavg(), args), args)


def graph_loader(name: str) -> Callable[[], Graph]:
    """The graph ``name``, as a function: a benchmark graph is loaded from the cache each
    time it is needed, so that the bench does not hold 100M edges while Fixflow runs."""
    if name.startswith("dag_"):
        held = dag(name)
        return lambda: held
    return lambda: load(name)


def planned(graphs: list[str], programs: list[str]) -> list[tuple[str, str]]:
    return [(program, graph) for graph in graphs for program in programs]


def grouped(plan: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """(program, graph) pairs as graph -> programs, in the plan's order (each graph built once)."""
    by_graph: dict[str, list[str]] = {}
    for program, graph in plan:
        by_graph.setdefault(graph, []).append(program)
    return list(by_graph.items())


def dag(name: str, seed: int = 42) -> Graph:
    """A seeded sparse DAG of ``dag_<nodes>`` nodes: each node links to a Poisson(1.2)
    number of nodes among the next 100 ids (at 3k nodes: 3,379 edges, 152k TC pairs);
    ids permuted like the benchmark graphs."""
    nodes = int(name.split("_")[1].replace("k", "000"))
    rng = np.random.default_rng(seed)
    fan = rng.poisson(1.2, size=nodes)
    src = np.repeat(np.arange(nodes), fan)
    dst = src + rng.integers(1, 101, size=len(src))
    keep = dst < nodes
    pairs = np.unique(np.column_stack([src[keep], dst[keep]]), axis=0)
    perm = rng.permutation(nodes)
    empty = np.empty(0, dtype=np.int64)
    return Graph(
        name=name,
        nodes=nodes,
        src=perm[pairs[:, 0]],
        dst=perm[pairs[:, 1]],
        weight=np.ones(len(pairs)),
        source=int(perm[0]),
        insert_src=empty,
        insert_dst=empty,
        insert_weight=np.empty(0),
        delete_src=empty,
        delete_dst=empty,
        delete_weight=np.empty(0),
        meta={"name": name, "nodes": nodes, "edges": len(pairs), "seed": seed},
    )


def write_facts(graph: Graph, directory: Path, form: str = "facts") -> None:
    """``edge.csv`` (headed) or ``edge.facts`` (tab-separated), written by Arrow: numpy's
    ``savetxt`` took ~40 s for 10M rows."""
    directory.mkdir(parents=True)
    table = pa.table({"src": graph.src, "dst": graph.dst, "w": graph.weight})
    csv_form = form == "csv"
    options = pa_csv.WriteOptions(include_header=False, delimiter="," if csv_form else "\t")
    with (directory / f"edge.{form}").open("wb") as handle:
        if csv_form:  # Arrow would quote the header's names
            handle.write(b"src,dst,w\n")
        pa_csv.write_csv(table, handle, options)


def run_program(
    program: str,
    graph_of: Callable[[], Graph],
    facts: Path,
    scratch: Path,
    args: argparse.Namespace,
) -> list[Row]:
    rows: list[Row] = []
    results: dict[str, Result] = {}
    graph = graph_of()
    beta = katz_beta(graph) if program == "katz" else 0.0
    name, source = graph.name, graph.source
    del graph  # not held while Fixflow runs
    for spelling, text in PROGRAMS[program].items():
        if args.spellings and spelling not in args.spellings:
            continue
        path = scratch / f"{program}_{spelling}.dl"
        path.write_text(text.replace("{source}", str(source)).replace("{beta}", f"{beta}"))
        row = Row(program, spelling, name, eval_class(path))
        for repeat in range(args.repeats):
            out = scratch / f"out_{program}_{spelling}_{name}_{repeat}"
            if not timed_eval(path, facts, out, row, args.timeout, args.eval_args):
                break
            results[spelling] = read_result(out, program)
        log(f"{name} {program} {spelling}: {row.walls} s whole, {row.engines} s engine")
        rows.append(row)
    expected = ORACLES[program](graph_of(), beta)
    for row in rows:
        if row.spelling in results:
            clause = "{sum[" in PROGRAMS[program][row.spelling]
            row.check = check(program, results[row.spelling], expected, clause)
        elif not row.check:
            row.check = "no result"
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


def timed_eval(
    path: Path, facts: Path, out: Path, row: Row, timeout: float, extra: list[str]
) -> bool:
    command = [sys.executable, "-m", "fixflow.pipeline.cli", "-v", "eval", str(path)]
    command += ["-F", str(facts), "-D", str(out), "--csv", *extra]
    with tempfile.TemporaryFile("w+") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        # wait4, not wait: the child's own peak resident memory comes with its exit status.
        _, status, usage = os.wait4(process.pid, 0)
        timer.cancel()
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        errors = stderr.read()
    if wall >= timeout:
        row.check = f"timeout ({timeout:.0f} s)"
        return False
    if process.returncode != 0:
        row.check = f"exit {process.returncode}: {errors.strip().splitlines()[-1:]}"
        return False
    row.walls.append(wall)
    row.peaks.append(usage.ru_maxrss / 1e6)  # kB on Linux
    row.engines.append(sum(float(t) for t in ENGINE_TIME.findall(errors)))
    return True


def read_result(out: Path, program: str) -> Result:
    """Every output relation's rows: the key columns as ints, the last column as the value
    (a relation of keys only, like ``tc``, maps each row to 1.0)."""
    result: Result = {}
    for relation in OUTPUTS[program]:
        with (out / f"{relation}.csv").open() as handle:
            reader = csv.reader(handle)
            next(reader)
            for row in reader:
                keys = row if program in KEYS_ONLY else row[:-1]
                value = 1.0 if program in KEYS_ONLY else float(row[-1])
                result[(relation, *(int(k) for k in keys))] = value
    return result


def check(program: str, got: Result, expected: Result, clause: bool) -> str:
    if got.keys() != expected.keys():
        missing, extra = len(expected.keys() - got.keys()), len(got.keys() - expected.keys())
        return f"WRONG: {missing} rows missing, {extra} extra"
    if program not in LIMITS:
        wrong = sum(1 for k, v in expected.items() if got[k] != v)
        return "exact" if not wrong else f"WRONG: {wrong} values differ"
    worst = max(abs(got[k] - v) / abs(v) for k, v in expected.items())
    verdict = "within" if worst <= LIMIT_TOLERANCE else "outside"
    stop = "; stopped by its clause" if clause else ""
    return f"rel. error {worst:.1e} ({verdict} {LIMIT_TOLERANCE:g}{stop})"


def undirected(graph: Graph) -> csr_matrix:
    n = graph.nodes
    key = np.concatenate([graph.src * n + graph.dst, graph.dst * n + graph.src])
    return lightest(key, np.concatenate([graph.weight, graph.weight]), n)


def lightest(key: np.ndarray, weight: np.ndarray, n: int) -> csr_matrix:
    """The adjacency matrix of edges ``key = src * n + dst``, keeping each pair's lightest
    edge (csr would sum duplicates). One int64 key per edge: at 100M edges a lexsort of
    three columns and its copies needed ~20 GB."""
    order = np.argsort(key)
    key, weight = key[order], weight[order]
    del order
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    weight = np.minimum.reduceat(weight, starts)
    key = key[starts]
    del starts
    indptr = np.r_[0, np.cumsum(np.bincount(key // n, minlength=n))]
    indices = (key % n).astype(np.int32)
    return csr_matrix((weight, indices, indptr), shape=(n, n))


def directed(graph: Graph) -> csr_matrix:
    return lightest(graph.src * graph.nodes + graph.dst, graph.weight, graph.nodes)


def present(graph: Graph) -> np.ndarray:
    return np.unique(np.concatenate([graph.src, graph.dst]))


def cc_oracle(graph: Graph, _beta: float) -> Result:
    _, labels = connected_components(undirected(graph), directed=False)
    smallest: dict[int, int] = {}
    for node in present(graph):
        smallest.setdefault(int(labels[node]), int(node))
    return {("cc", int(v)): float(smallest[int(labels[v])]) for v in present(graph)}


def sssp_oracle(graph: Graph, _beta: float) -> Result:
    distances = dijkstra(undirected(graph), directed=True, indices=graph.source)
    return {("sp", v): float(d) for v, d in enumerate(distances) if np.isfinite(d)}


def power_iteration(base: np.ndarray, step: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """x = base + step(x), iterated from base until no value moves by more than 1e-13."""
    x = base.copy()
    while True:
        following = base + step(x)
        if np.max(np.abs(following - x)) <= 1e-13:
            return following
        x = following


def has_out_edge(graph: Graph) -> np.ndarray:
    return np.bincount(graph.src, minlength=graph.nodes) > 0


def pagerank_oracle(graph: Graph, _beta: float) -> Result:
    """rank = 0.15 on every node with an out-edge + 0.85 Σ rank(y)/deg(y) over in-edges."""
    adjacency = (directed(graph) > 0).astype(np.float64)
    degree = np.asarray(adjacency.sum(axis=1)).ravel()
    spread = adjacency.T.tocsr()
    inverse = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
    rank = power_iteration(0.15 * has_out_edge(graph), lambda r: spread @ (0.85 * r * inverse))
    return {("rank", int(v)): float(rank[v]) for v in present(graph)}


def katz_beta(graph: Graph) -> float:
    """Half the inverse spectral radius of the adjacency matrix, to two significant digits
    rounded down (the sum then contracts by about one half a round)."""
    adjacency = (directed(graph) > 0).astype(np.float64)
    radius = float(np.abs(eigs(adjacency, k=1, which="LM", return_eigenvectors=False, tol=1e-4)[0]))
    beta = 0.5 / radius
    scale = 10.0 ** (np.floor(np.log10(beta)) - 1)
    return float(np.floor(beta / scale) * scale)


def katz_oracle(graph: Graph, beta: float) -> Result:
    """katz = 1 on every node with an out-edge + β Σ katz(y) over in-edges."""
    spread = (directed(graph) > 0).astype(np.float64).T.tocsr()
    katz = power_iteration(has_out_edge(graph).astype(np.float64), lambda k: beta * (spread @ k))
    return {("katz", int(v)): float(katz[v]) for v in present(graph)}


def even_odd_oracle(graph: Graph, _beta: float) -> Result:
    """Dijkstra over the parity product graph: (v, p) -> (w, 1 - p), node (v, p) = v + p·n."""
    n = graph.nodes
    src = np.concatenate([graph.src, graph.src + n])
    dst = np.concatenate([graph.dst + n, graph.dst])
    weights = np.concatenate([graph.weight, graph.weight])
    product = lightest(src * (2 * n) + dst, weights, 2 * n)
    distances = dijkstra(product, directed=True, indices=graph.source)
    result: Result = {}
    for node, distance in enumerate(distances):
        if np.isfinite(distance):
            result[("even" if node < n else "odd", node % n)] = float(distance)
    return result


def apsp_oracle(graph: Graph, _beta: float) -> Result:
    """Shortest paths of at least one edge: Dijkstra off the diagonal, the shortest cycle
    through x (an edge x -> z, then back) on it."""
    matrix = directed(graph)
    distances = dijkstra(matrix, directed=True)
    result: Result = {}
    for x, y in zip(*np.nonzero(np.isfinite(distances)), strict=True):
        if x != y:
            result[("path", int(x), int(y))] = float(distances[x, y])
    coo = matrix.tocoo()
    for x, z, w in zip(coo.row, coo.col, coo.data, strict=True):
        back = 0.0 if z == x else distances[z, x]
        if np.isfinite(back):
            key = ("path", int(x), int(x))
            result[key] = min(result.get(key, np.inf), float(w + back))
    return result


def tc_oracle(graph: Graph, _beta: float) -> Result:
    """Pairs joined by a path of at least one edge (scipy's unweighted shortest paths)."""
    hops = shortest_path(directed(graph), directed=True, unweighted=True)
    reach = np.isfinite(hops)
    np.fill_diagonal(reach, False)  # a DAG has no cycles: no node reaches itself
    return {("tc", int(x), int(y)): 1.0 for x, y in zip(*np.nonzero(reach), strict=True)}


def reach_oracle(graph: Graph, _beta: float) -> Result:
    """The nodes the directed edges lead to from the source, the source too (scipy)."""
    hops = shortest_path(directed(graph), directed=True, unweighted=True, indices=graph.source)
    return {("reach", int(v)): 1.0 for v in np.flatnonzero(np.isfinite(hops))}


ORACLES: dict[str, Callable[[Graph, float], Result]] = {
    "cc": cc_oracle,
    "sssp": sssp_oracle,
    "pagerank": pagerank_oracle,
    "katz": katz_oracle,
    "even_odd": even_odd_oracle,
    "apsp": apsp_oracle,
    "tc": tc_oracle,
    "reach": reach_oracle,
}


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
        f"load {before[0]:.2f} before, {after[0]:.2f} after; medians of {args.repeats}; "
        f"facts as edge.{args.facts}; `fixflow eval` arguments: "
        f"{' '.join(args.eval_args) or 'none'}.",
        "",
        "| program | spelling | class | graph | whole process (s) | engine (s) | × best | "
        "peak RSS (GB) | result |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        peers = [r.wall for r in rows if (r.program, r.graph) == (row.program, row.graph)]
        best = min((w for w in peers if w == w), default=float("nan"))
        lines.append(
            f"| {row.program} | {row.spelling} | {row.eval_class} | {row.graph} | "
            f"{row.wall:.2f} | {row.engine:.2f} | {row.wall / best:.2f} | "
            f"{max(row.peaks, default=float('nan')):.2f} | {row.check} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
