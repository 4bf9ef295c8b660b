"""Write the golden directories tests/programs/<name>/ from the examples.

Each golden holds program.dl (a copy of examples/<name>.dl), facts/<rel>.facts
(tab-separated), expected/<rel>.csv (header = declared attribute names without the
iteration index; rows sorted) and meta.toml (tolerance, how the expected values were
computed). Expected values come from networkx, numpy closed forms and hand computation in
this directory; never from fixflow or the reference evaluator.

Run: .venv/bin/python tests/programs/_tools/make_goldens.py [name ...]
(with names, only those goldens are rewritten, and not the demo facts)
"""

from __future__ import annotations

import math
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from graphs import (
    digraph,
    power_iteration,
    random_walk,
    same_generation,
    shortest_from,
    shortest_nonempty,
    stationary,
    tolerance_for,
    widest_from,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
PROGRAMS = ROOT / "tests" / "programs"

Rows = list[tuple]


@dataclass
class Golden:
    facts: dict[str, Rows]
    expected: dict[str, tuple[tuple[str, ...], Rows]]
    """relation -> (header, rows)"""
    tolerance: float
    how: str


GOLDENS: dict[str, Golden] = {}


def golden(name: str):
    def register(fn):
        GOLDENS[name] = fn()
        return fn

    return register


# ---------------------------------------------------------------- shared inputs

# weighted digraph with cycles; vertex 7 is not reachable from 1
W_EDGES = [
    (1, 2, 2.0), (1, 3, 5.0), (2, 3, 1.5), (2, 4, 4.0), (3, 4, 1.0), (4, 1, 3.0),
    (4, 5, 2.5), (5, 6, 1.0), (6, 5, 0.5), (3, 6, 7.0), (7, 2, 1.0),
]  # fmt: skip
# unweighted digraph, every vertex has an out-edge (no dangling vertices)
U_EDGES = [(1, 2), (1, 3), (2, 3), (3, 1), (4, 3), (5, 4), (5, 6), (6, 5), (4, 1), (2, 5)]
U_NODES = [1, 2, 3, 4, 5, 6]
# three undirected components {1,2,3,4}, {5,6}, {7,8,9}, both directions listed
_CC_UNDIRECTED = [(1, 2), (2, 3), (3, 4), (4, 2), (5, 6), (9, 8), (8, 7)]
CC_EDGES = sorted({(a, b) for u, v in _CC_UNDIRECTED for a, b in ((u, v), (v, u))})


def nodes_of(edges: list[tuple]) -> list[int]:
    return sorted({e[0] for e in edges} | {e[1] for e in edges})


def sssp_rows(source: int = 1) -> Rows:
    return sorted(shortest_from(W_EDGES, source).items())


def pagerank_limit(edges: list[tuple[int, int]], nodes: list[int], base: float) -> np.ndarray:
    """r = base + 0.85 · Aᵀ D⁻¹ r, solved exactly."""
    m = pagerank_matrix(edges, nodes)
    return np.linalg.solve(np.eye(len(nodes)) - m, np.full(len(nodes), base))


def pagerank_matrix(edges: list[tuple[int, int]], nodes: list[int]) -> np.ndarray:
    index = {v: k for k, v in enumerate(nodes)}
    out = {v: sum(1 for a, _ in edges if a == v) for v in nodes}
    m = np.zeros((len(nodes), len(nodes)))
    for a, b in edges:
        m[index[b], index[a]] += 0.85 / out[a]
    return m


def limit_golden(
    facts: dict[str, Rows],
    relation: str,
    header: tuple[str, ...],
    keys: list[tuple],
    exact: np.ndarray,
    stopped: np.ndarray,
    eps: float,
    how: str,
    linear: np.ndarray,
) -> Golden:
    """A golden for a limit program; ``linear`` is the iteration's linear part M."""
    tol = tolerance_for(exact, stopped, eps, linear)
    rows = [(*k, float(v)) for k, v in zip(keys, exact, strict=True)]
    how += (
        f" Tolerance {tol:g}: 10x the error (never below the bound) where naive iteration,"
        " simulated in numpy, meets the termination clause."
    )
    return Golden(facts, {relation: (header, rows)}, tol, how)


# ---------------------------------------------------------------- shortest paths


def _sssp_golden(edge_rel: str, out: str, header: tuple[str, ...]) -> Golden:
    return Golden(
        {edge_rel: W_EDGES},
        {out: (header, sssp_rows())},
        1e-9,
        "networkx single_source_dijkstra_path_length from vertex 1 (7 is unreachable).",
    )


for _name, _rel, _out, _hdr in [
    ("powerlog_p1_sssp", "edge", "sssp", ("node", "dist")),
    ("a3_sssp", "edge", "sssp", ("node", "dist")),
    ("dcd_sssp", "warc", "results", ("node", "c")),
    ("nexus_sssp", "warc", "sssp", ("node", "d")),
]:
    GOLDENS[_name] = _sssp_golden(_rel, _out, _hdr)


def _apsp_rows() -> Rows:
    return sorted((x, y, d) for (x, y), d in shortest_nonempty(W_EDGES).items())


GOLDENS["apsp"] = Golden(
    {"edge": W_EDGES},
    {"path": (("src", "dst", "d"), _apsp_rows())},
    1e-9,
    "networkx all_pairs_dijkstra_path_length, extended by one first edge so that paths have"
    " at least one edge (path(x, x) is the shortest cycle through x).",
)
GOLDENS["dcd_apsp"] = Golden(
    {"warc": W_EDGES},
    {"apsp": (("src", "dst", "d"), _apsp_rows())},
    1e-9,
    GOLDENS["apsp"].how,
)


@golden("a3_max_prob_path")
def _max_prob() -> Golden:
    net = [
        (1, 2, 0.5), (2, 3, 0.8), (1, 3, 0.3), (3, 1, 0.9), (3, 4, 0.6), (4, 5, 0.5),
        (2, 5, 0.2), (5, 4, 1.0),
    ]  # fmt: skip
    # max product = exp(-shortest path) under weights -log p (all p in (0, 1])
    logs = [(a, b, -math.log(p)) for a, b, p in net]
    rows = sorted((x, y, math.exp(-d)) for (x, y), d in shortest_nonempty(logs).items())
    return Golden(
        {"net": net},
        {"reach": (("src", "dst", "p"), rows)},
        1e-9,
        "max product path = exp(-d) for networkx shortest paths under weights -log p,"
        " over paths with at least one edge.",
    )


@golden("widest_path")
def _widest() -> Golden:
    rows = sorted(widest_from(W_EDGES, [1]).items())
    return Golden(
        {"source": [(1,)], "edge": W_EDGES},
        {"wp": (("node", "width"), rows)},
        0.0,
        "networkx reachability over the edges at least as wide as each width (paths of at"
        " least one edge from vertex 1; 1 itself through the cycle 1->2->4->1, 7 unreachable).",
    )


# ---------------------------------------------------------------- components, closure


def _cc_labels() -> Rows:
    g = nx.Graph(CC_EDGES)
    return sorted((v, min(c)) for c in nx.connected_components(g) for v in c)


for _name, _rel, _out in [
    ("powerlog_p3_cc", "edge", "cc"),
    ("a3_cc", "edge", "cc"),
    ("dcd_cc", "arc", "cc"),
]:
    GOLDENS[_name] = Golden(
        {_rel: CC_EDGES},
        {_out: (("node", "label"), _cc_labels())},
        0.0,
        "networkx connected_components on the symmetric edge set; label = min vertex id.",
    )

GOLDENS["cc_two_rules"] = Golden(
    {"edge": sorted(set(_CC_UNDIRECTED))},
    {"cc": (("node", "label"), _cc_labels())},
    0.0,
    "networkx connected_components of the undirected graph (each edge listed once); "
    "label = min vertex id.",
)


def _undirected_sssp() -> Golden:
    lightest: dict[tuple[int, int], float] = {}
    for u, v, w in W_EDGES:  # (5, 6, 1.0) and (6, 5, 0.5): the lighter one, either way
        for pair in ((u, v), (v, u)):
            lightest[pair] = min(w, lightest.get(pair, w))
    both = [(a, b, w) for (a, b), w in sorted(lightest.items())]
    return Golden(
        {"edge": W_EDGES},
        {"sp": (("node", "dist"), sorted(shortest_from(both, 1).items()))},
        1e-9,
        "networkx Dijkstra from vertex 1 over every edge in both directions.",
    )


GOLDENS["sssp_undirected"] = _undirected_sssp()


def _even_odd() -> Golden:
    """Dijkstra over the parity product graph: (v, p) -> (w, 1 - p) for every edge."""
    product = [((u, p), (v, 1 - p), w) for u, v, w in W_EDGES for p in (0, 1)]
    graph = nx.DiGraph()
    graph.add_weighted_edges_from(product)
    dist = nx.single_source_dijkstra_path_length(graph, (1, 0))
    rows = {p: sorted((v, d) for (v, q), d in dist.items() if q == p) for p in (0, 1)}
    return Golden(
        {"edge": W_EDGES},
        {"even": (("node", "dist"), rows[0]), "odd": (("node", "dist"), rows[1])},
        1e-9,
        "networkx Dijkstra from (1, even) over the parity product graph of the edges.",
    )


GOLDENS["sssp_even_odd"] = _even_odd()

GOLDENS["nexus_cc"] = Golden(
    {"arc": CC_EDGES},
    {
        "hcc": (("node", "label"), _cc_labels()),
        "cc": (("n",), [(nx.number_connected_components(nx.Graph(CC_EDGES)),)]),
    },
    0.0,
    "networkx connected_components (labels = min id) and number_connected_components.",
)

TC_ARCS = [(1, 2), (2, 3), (3, 1), (3, 4), (4, 5), (6, 5), (6, 7)]
for _name in ("dcd_tc", "nexus_tc"):
    GOLDENS[_name] = Golden(
        {"arc": TC_ARCS},
        {"tc": (("src", "dst"), sorted(nx.transitive_closure(digraph(TC_ARCS)).edges()))},
        0.0,
        "networkx transitive_closure (reflexive=False: (x, x) only on a cycle).",
    )

SG_ARCS = [(1, 2), (1, 3), (2, 4), (2, 5), (3, 6), (6, 7), (4, 8), (9, 3), (9, 10)]
for _name in ("dcd_sg", "nexus_sg"):
    GOLDENS[_name] = Golden(
        {"arc": SG_ARCS},
        {"sg": (("x", "y"), sorted(same_generation(SG_ARCS)))},
        0.0,
        "networkx descendants in the pair graph (A,B)->(X,Y) for arcs A->X, B->Y, starting"
        " from sibling pairs (X != Y).",
    )

GOLDENS["nexus_reachability"] = Golden(
    {"arc": TC_ARCS},
    {"reach": (("node",), sorted((v,) for v in nx.descendants(digraph(TC_ARCS), 1) | {1}))},
    0.0,
    "networkx descendants of vertex 1, plus 1 itself.",
)


@golden("nexus_triangles")
def _triangles() -> Golden:
    undirected = [(1, 2), (2, 3), (1, 3), (3, 4), (4, 5), (3, 5), (5, 6), (2, 4), (6, 7)]
    arcs = sorted({(a, b) for u, v in undirected for a, b in ((u, v), (v, u))})
    count = sum(nx.triangles(nx.Graph(undirected)).values()) // 3
    return Golden(
        {"arc": arcs},
        {"triangles": (("n",), [(count,)])},
        0.0,
        "networkx triangles (sum over vertices / 3).",
    )


# ---------------------------------------------------------------- DAG counting and BoM

DAG = [(1, 2), (1, 3), (2, 3), (2, 4), (3, 4), (3, 5), (4, 6), (5, 6), (1, 4)]


def _path_counts() -> Rows:
    g = digraph(DAG)
    rows = []
    for x in g:
        for y in g:
            n = sum(1 for _ in nx.all_simple_paths(g, x, y)) if x != y else 0
            if n:
                rows.append((x, y, n))
    return sorted(rows)


for _name in ("paths_dag", "a3_paths_dag"):
    GOLDENS[_name] = Golden(
        {"edge": DAG},
        {"cpaths": (("src", "dst", "c"), _path_counts())},
        0.0,
        "networkx all_simple_paths counted per pair (a DAG: every path is simple).",
    )

BASIC = [(4, 2.5), (5, 1.0), (6, 4.0), (2, 0.5)]
ASSB = [(1, 2, 2), (1, 3, 1), (2, 4, 3), (2, 5, 1), (3, 5, 4), (3, 6, 1)]


def _cost_rows() -> Rows:
    parts = sorted({p for p, _ in BASIC} | {a for a, _, _ in ASSB} | {b for _, b, _ in ASSB})
    index = {p: k for k, p in enumerate(parts)}
    n = np.zeros((len(parts), len(parts)))
    for a, b, k in ASSB:
        n[index[a], index[b]] = k
    basic = np.zeros(len(parts))
    for p, c in BASIC:
        basic[index[p]] = c
    cost = np.linalg.solve(np.eye(len(parts)) - n, basic)
    return [(p, float(cost[index[p]])) for p in parts]


@golden("cost")
def _cost() -> Golden:
    return Golden(
        {"basic": BASIC, "assb": ASSB},
        {"cost": (("part", "c"), _cost_rows())},
        1e-9,
        "numpy solve of (I - N) cost = basic, N[part, sub] = n (the parts graph is a DAG).",
    )


GOLDENS["a3_cost"] = Golden(
    {"basic": BASIC, "assb": ASSB},
    {"cost": (("part", "c"), _cost_rows())},
    1e-9,
    GOLDENS["cost"].how,
)


@golden("dcd_delivery")
def _delivery() -> Golden:
    basic = [(4, 3), (5, 7), (6, 2), (7, 5)]
    assbl = [(1, 2), (1, 3), (2, 4), (2, 5), (3, 5), (3, 6), (8, 6), (8, 7)]
    days = dict(basic)
    g = digraph(assbl)
    rows = sorted(
        (p, max(days[q] for q in nx.descendants(g, p) | {p} if q in days))
        for p in g
        if any(q in days for q in nx.descendants(g, p) | {p})
    )
    return Golden(
        {"basic": basic, "assbl": assbl},
        {"results": (("part", "days"), rows)},
        0.0,
        "max basic days over networkx descendants of each part (and the part itself).",
    )


@golden("lca")
def _lca() -> Golden:
    cites = [(1, 2), (1, 3), (2, 4), (3, 4), (3, 5), (4, 6), (5, 6), (7, 5), (8, 7)]
    g = digraph(cites)
    dist = {x: {a: d for a, d in nx.single_source_shortest_path_length(g, x).items() if d > 0}
            for x in g}  # fmt: skip
    rows = []
    for x in sorted(g):
        for y in sorted(g):
            common = dist[x].keys() & dist[y].keys()
            if x < y and common:
                best = min(dist[x][a] + dist[y][a] for a in common)
                rows += [(x, y, a) for a in common if dist[x][a] + dist[y][a] == best]
    return Golden(
        {"cite": cites},
        {"lca": (("a", "b", "ancestor"), sorted(rows))},
        0.0,
        "networkx shortest_path_length (BFS) to every transitively cited paper; for each pair"
        " x < y the common ancestors minimizing d1 + d2.",
    )


# ---------------------------------------------------------------- PageRank family


def _pagerank(name: str, edge_rel: str, indexed_start: float | None, eps: float, **kw) -> None:
    m = pagerank_matrix(U_EDGES, U_NODES)
    exact = pagerank_limit(U_EDGES, U_NODES, 0.15)
    x0 = np.zeros(len(U_NODES)) if indexed_start is None else np.full(6, indexed_start)
    stopped, _ = power_iteration(lambda r: 0.15 + m @ r, x0, eps, kw.get("strict", True))
    start = (
        "from 0 (naive rounds from the empty relation)"
        if indexed_start is None
        else (f"from {indexed_start} per vertex")
    )
    GOLDENS[name] = limit_golden(
        {edge_rel: U_EDGES, "node": [(v,) for v in U_NODES]},
        "rank",
        ("node", "r"),
        [(v,) for v in U_NODES],
        exact,
        stopped,
        eps,
        "numpy solve of r = 0.15 + 0.85 A^T D^-1 r (the PageRank limit); iteration simulated "
        + start
        + ".",
        linear=m,
    )


_pagerank("powerlog_p2_pagerank_indexed", "edge", 0.0, 1e-6)
_pagerank("powerlog_p2b_pagerank", "edge", None, 1e-6)
_pagerank("a3_pagerank", "edge", None, 1e-6, strict=False)
_pagerank("nexus_pagerank", "arc", 1.0, 1e-6)


@golden("dcd_pagerank")
def _dcd_pagerank() -> Golden:
    out = {v: sum(1 for a, _ in U_EDGES if a == v) for v in U_NODES}
    matrix = [(a, b, out[a]) for a, b in U_EDGES]
    n = len(U_NODES)
    m = pagerank_matrix(U_EDGES, U_NODES)
    exact = np.linalg.solve(np.eye(n) - m, np.full(n, 0.15 / n))
    stopped, _ = power_iteration(lambda r: 0.15 / n + m @ r, np.zeros(n), 1e-9)
    return limit_golden(
        {"matrix": matrix},
        "results",
        ("node", "r"),
        [(v,) for v in U_NODES],
        exact,
        stopped,
        1e-9,
        "numpy solve of r = 0.15/N + 0.85 A^T D^-1 r, N = 6 vertices.",
        linear=m,
    )


# ---------------------------------------------------------------- float fixpoints (issue #33)


def float_fixpoint(linear: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, int]:
    """The accumulated (MRA) iteration of x = base + M x in float64, simulated in numpy, as
    a sum without a termination clause runs it: acc and the pending delta both receive each
    incoming delta; a pending delta is propagated (M @ Δ) only while acc + Δ != acc, and
    the run ends when none is. Returns acc and the number of propagation rounds. (Only the
    tolerance's margin is read from it; the expected values are the exact solve.)"""
    acc = np.zeros(len(base))
    delta = np.zeros(len(base))
    incoming = base.copy()
    for n in range(1, 100_000):
        acc += incoming
        delta += incoming
        pending = (delta != 0) & (acc + delta != acc)
        if not pending.any():
            return acc, n
        incoming = linear @ np.where(pending, delta, 0.0)
        delta = np.where(pending, 0.0, delta)
    raise RuntimeError("no float fixpoint")


FLOAT_FIXPOINT_TOLERANCE = 1e-9


def float_fixpoint_golden(
    relation: str,
    header: tuple[str, ...],
    linear: np.ndarray,
    base: np.ndarray,
    how: str,
) -> Golden:
    """A golden for a sum recursion without a termination clause, on the "web" graph: the
    expected values are the exact limit (numpy solve of (I - M) x = base); the run stops at
    its float fixpoint, within a few ulps of it, so the tolerance is tight."""
    exact = np.linalg.solve(np.eye(len(base)) - linear, base)
    stopped, rounds = float_fixpoint(linear, base)
    err = float(np.abs(stopped - exact).max())
    # the simulated float fixpoint must be far inside the tolerance: a stop by a clause-like
    # bound (1e-6 in sum) would not be
    assert err < FLOAT_FIXPOINT_TOLERANCE / 1000, (relation, err)
    # what a stop by a clause {sum[Δ] < 1e-6} would leave (naive iteration from 0)
    early, _ = power_iteration(lambda x: base + linear @ x, np.zeros(len(base)), 1e-6)
    early_err = float(np.abs(early - exact).max())
    assert early_err > FLOAT_FIXPOINT_TOLERANCE, (relation, early_err)
    rows = [(v, float(x)) for v, x in zip(U_NODES, exact, strict=True)]
    how += (
        " No termination clause: the run stops at its float fixpoint (no pending delta"
        " changes any accumulated value in float64, acc + delta == acc), which the numpy"
        f" simulation of the accumulated iteration reaches after {rounds} propagation rounds,"
        f" {err:.1e} from the exact limit. Tolerance {FLOAT_FIXPOINT_TOLERANCE:g}: tight,"
        " far above float rounding, and below what stopping early would leave (naive"
        f" iteration stopped by a clause sum[delta] < 1e-6 is {early_err:.1e} off), so an"
        " engine that stops short of the float fixpoint fails."
    )
    return Golden(
        {"edge": U_EDGES, "node": [(v,) for v in U_NODES]},
        {relation: (header, rows)},
        FLOAT_FIXPOINT_TOLERANCE,
        how,
    )


@golden("pagerank_float_fixpoint")
def _pagerank_float_fixpoint() -> Golden:
    return float_fixpoint_golden(
        "rank",
        ("node", "r"),
        pagerank_matrix(U_EDGES, U_NODES),
        np.full(len(U_NODES), 0.15),
        "numpy solve of r = 0.15 + 0.85 A^T D^-1 r (the PageRank limit).",
    )


KATZ_BETA = 0.2  # 1/lambda_max of the "web" graph is 0.618 (checked below)


@golden("katz_float_fixpoint")
def _katz_float_fixpoint() -> Golden:
    index = {v: k for k, v in enumerate(U_NODES)}
    a = np.zeros((len(U_NODES), len(U_NODES)))
    for x, y in U_EDGES:
        a[index[y], index[x]] += 1.0
    assert KATZ_BETA * max(abs(np.linalg.eigvals(a))) < 1
    return float_fixpoint_golden(
        "katz",
        ("node", "k"),
        KATZ_BETA * a,
        np.ones(len(U_NODES)),
        f"numpy solve of k = 1 + {KATZ_BETA} A^T k (Katz centrality; beta = {KATZ_BETA} <"
        f" 1/lambda_max = {1 / max(abs(np.linalg.eigvals(a))):.3f}, numpy eigenvalues).",
    )


# ---------------------------------------------------------------- Katz, Adsorption, Jacobi


@golden("powerlog_p5_katz")
def _katz() -> Golden:
    edges = [(0, 1), (0, 2), (1, 2), (2, 3), (3, 1), (3, 4), (5, 0)]
    nodes = nodes_of(edges)
    n = len(nodes)
    a = np.zeros((n, n))
    for x, y in edges:
        a[y, x] = 0.1
    j = np.zeros(n)
    j[0] = 10000.0
    exact = np.linalg.solve(np.eye(n) - a, j)
    stopped, _ = power_iteration(lambda k: j + a @ k, j.copy(), 1e-3)
    reachable = sorted(nx.descendants(digraph(edges), 0) | {0})
    keep = [nodes.index(v) for v in reachable]
    return limit_golden(
        {"edge": edges},
        "K",
        ("node", "k"),
        [(v,) for v in reachable],
        exact[keep],
        stopped[keep],
        1e-3,
        "numpy solve of k = 10000 e_0 + 0.1 A^T k; only vertices reachable from 0 (networkx"
        " descendants) have a row.",
        linear=a,
    )


@golden("powerlog_p4_adsorption")
def _adsorption() -> Golden:
    nodes = [1, 2, 3, 4, 5]
    a_edges = [(1, 2, 0.5), (1, 3, 0.5), (2, 3, 1.0), (3, 1, 0.4), (3, 4, 0.6), (4, 5, 1.0),
               (5, 1, 0.3), (5, 4, 0.7)]  # fmt: skip
    pi = [(1, 0.9), (2, 0.2), (3, 0.5), (4, 0.1), (5, 0.6)]
    pc = [(1, 0.8), (2, 0.5), (3, 1.0), (4, 0.9), (5, 0.4)]
    n = len(nodes)
    m = np.zeros((n, n))
    for x, y, w in a_edges:
        m[y - 1, x - 1] += 0.7 * w * dict(pc)[x]
    c = np.array([p for _, p in pi])
    exact = np.linalg.solve(np.eye(n) - m, c)
    stopped, _ = power_iteration(lambda v: c + m @ v, np.zeros(n), 1e-3)
    return limit_golden(
        {"node": [(v,) for v in nodes], "A": a_edges, "pi": pi, "pc": pc},
        "L",
        ("node", "l"),
        [(v,) for v in nodes],
        exact,
        stopped,
        1e-3,
        "numpy solve of L = I·p_i + M L, M[y, x] = 0.7 w(x, y) p_c(x).",
        linear=m,
    )


@golden("a3_jacobi")
def _jacobi() -> Golden:
    a = np.array([[10.0, -2.0, 1.0, 0.0], [1.0, 8.0, 0.0, -3.0], [2.0, 0.0, 9.0, 1.0],
                  [0.0, -1.0, 2.0, 7.0]])  # fmt: skip
    b = np.array([7.0, -4.0, 12.0, 5.0])
    exact = np.linalg.solve(a, b)
    d = np.diag(a)
    off = a - np.diag(d)
    stopped, _ = power_iteration(lambda x: b / d - (off @ x) / d, np.zeros(4), 1e-9)
    facts_a = [(i + 1, j + 1, float(a[i, j])) for i in range(4) for j in range(4) if a[i, j]]
    return limit_golden(
        {"A": facts_a, "B": [(i + 1, float(b[i])) for i in range(4)]},
        "X",
        ("i", "x"),
        [(i + 1,) for i in range(4)],
        exact,
        stopped,
        1e-9,
        "numpy.linalg.solve(A, b); A is strictly diagonally dominant.",
        linear=-off / d[:, None],
    )


# ---------------------------------------------------------------- BP, GCN, CommNet, SimRank

BP_NODES = [1, 2, 3, 4]
BP_UNDIRECTED = [(1, 2), (2, 3), (3, 4), (4, 1), (1, 3)]
COUPLING = np.array([[0.6, 0.4], [0.4, 0.6]])


@golden("powerlog_p6_belief_propagation")
def _bp() -> Golden:
    # 0.8·w·h with w = 1.25·P(s, t) and stochastic H preserves the total belief, so the
    # iteration converges to (total) · π_P ⊗ uniform, π_P ∝ degree + 1 (self-loops)
    p = random_walk(BP_UNDIRECTED, BP_NODES)
    e = [(s, t, 1.25 * p[i, j]) for i, s in enumerate(BP_NODES) for j, t in
         enumerate(BP_NODES) if p[i, j]]  # fmt: skip
    h = [(c1, c2, float(COUPLING[c1, c2])) for c1 in (0, 1) for c2 in (0, 1)]
    initial = [(1, 0, 0.7), (1, 1, 0.3), (3, 0, 0.2), (4, 1, 1.0)]
    total = sum(b for _, _, b in initial)
    pi = stationary(p)
    exact = np.array([total * pi[i] / 2 for i in range(4) for _ in (0, 1)])
    transition = np.kron(p.T, COUPLING.T)  # acts on the vector indexed (v, c)
    x0 = np.zeros(8)
    for v, c, b in initial:
        x0[2 * BP_NODES.index(v) + c] = b
    stopped, _ = power_iteration(lambda x: transition @ x, x0, 1e-4)
    return limit_golden(
        {"I": initial, "E": e, "H": h},
        "B",
        ("v", "c", "b"),
        [(v, c) for v in BP_NODES for c in (0, 1)],
        exact,
        stopped,
        1e-4,
        "closed form: 0.8·w·h with w = 1.25·P (P = D^-1(A+I), self-loops) and doubly"
        " stochastic H preserves total belief, so B -> total · pi_P(v) / 2 with pi_P ∝ deg+1"
        " (numpy eigenvector of P^T).",
        linear=transition,
    )


@golden("powerlog_p7_gcn_forward")
def _gcn() -> Golden:
    p = random_walk(BP_UNDIRECTED, BP_NODES)
    a = [(s, t, float(p[i, j])) for i, s in enumerate(BP_NODES) for j, t in
         enumerate(BP_NODES) if p[i, j]]  # fmt: skip
    h0 = [(1, 2.0), (2, -1.5), (3, 0.5), (4, 1.0)]
    g0 = np.array([g for _, g in h0])
    exact = np.maximum(g0, 0).sum() * stationary(p)
    stopped, _ = power_iteration(lambda g: p.T @ np.maximum(g, 0), g0, 1e-9)
    return limit_golden(
        {"H0": h0, "A": a, "Para": [(1.0,)]},
        "GCN",
        ("node", "g"),
        [(v,) for v in BP_NODES],
        exact,
        stopped,
        1e-9,
        "closed form: with p = 1 and A = D^-1(A+I) (self-loops), relu zeroes the negative"
        " embedding in round 1 and the rest is a random walk: g -> sum(relu(h0)) · pi, pi ∝"
        " deg+1 (numpy eigenvector).",
        linear=p.T,
    )


@golden("commnet")
def _commnet() -> Golden:
    agents = [1, 2, 3, 4]
    links = [(x, y) for x in agents for y in agents if x != y]
    h0 = [(1, 1.0), (2, -2.0), (3, 0.5), (4, 3.0)]
    w = 0.5 * np.eye(4) + (0.5 / 3) * (np.ones((4, 4)) - np.eye(4))
    g0 = np.array([h for _, h in h0])
    exact = np.full(4, np.maximum(g0, 0).sum() / 4)
    stopped, _ = power_iteration(lambda h: w @ np.maximum(h, 0), g0, 1e-9)
    return limit_golden(
        {"h0": h0, "link": links, "wself": [(0.5,)], "wcomm": [(0.5,)]},
        "comm",
        ("agent", "h"),
        [(v,) for v in agents],
        exact,
        stopped,
        1e-9,
        "closed form: on the complete graph with a = c = 0.5 the step is a doubly stochastic"
        " average after relu zeroes the negative state in round 1: h -> sum(relu(h0)) / 4.",
        linear=w,
    )


SIM_EDGES = [(1, 2), (1, 3), (2, 1), (2, 4), (3, 1), (3, 4), (4, 5), (5, 1), (5, 2)]


def _simrank() -> Golden:
    nodes = nodes_of(SIM_EDGES)
    out = {v: [b for a, b in SIM_EDGES if a == v] for v in nodes}
    pairs = [(x, y) for x in nodes for y in nodes]
    index = {pq: k for k, pq in enumerate(pairs)}
    m = np.zeros((len(pairs), len(pairs)))
    for x, y in pairs:
        if x != y and out[x] and out[y]:
            for x1 in out[x]:
                for y1 in out[y]:
                    m[index[(x, y)], index[(x1, y1)]] += 0.8 / (len(out[x]) * len(out[y]))
    base = np.array([1.0 if x == y else 0.0 for x, y in pairs])
    exact = np.linalg.solve(np.eye(len(pairs)) - m, base)
    stopped, _ = power_iteration(lambda s: base + m @ s, np.zeros(len(pairs)), 1e-6)
    # a pair has a row iff it is reachable from a diagonal pair in the dependency graph
    present = {k for k, (x, y) in enumerate(pairs) if x == y}
    while True:
        grown = present | {i for i in range(len(pairs)) if any(m[i, j] for j in present)}
        if grown == present:
            break
        present = grown
    keep = sorted(present)
    return limit_golden(
        {"E": SIM_EDGES},
        "S",
        ("a", "b", "s"),
        [pairs[k] for k in keep],
        exact[keep],
        stopped[keep],
        1e-6,
        "numpy solve of s(x,y) = 0.8/(|O(x)||O(y)|) sum s(x',y') over out-neighbours,"
        " s(x,x) = 1; pairs present iff reachable from a diagonal pair.",
        linear=m,
    )


GOLDENS["simrank"] = _simrank()
GOLDENS["a3_simrank"] = _simrank()


@golden("a3_belief_propagation")
def _a3_bp() -> Golden:
    initial = [(1, 0, 0.6), (1, 1, 0.4), (6, 0, 0.1), (6, 1, 0.9)]
    arcs = [(1, 2, 0.5), (1, 3, 0.8), (2, 4, 1.0), (3, 4, 0.3), (4, 5, 0.7), (5, 2, 0.4),
            (6, 3, 0.2), (3, 1, 0.6)]  # fmt: skip
    coupling = {(0, 0): 0.9, (0, 1): 0.1, (1, 0): 0.2, (1, 1): 0.8}
    g = digraph(arcs, weighted=True)
    depth = nx.multi_source_dijkstra_path_length(
        nx.DiGraph([(a, b) for a, b, _ in arcs]), {1, 6}, weight=lambda u, v, d: 1
    )
    belief: dict[tuple[int, int], float] = {(v, c): b for v, c, b in initial}
    # single pass, layer by layer along BFS depth (hand-written dynamic programming)
    for v in sorted(depth, key=depth.get):
        if depth[v] == 0:
            continue
        for c2 in (0, 1):
            belief[(v, c2)] = sum(
                g[s][v]["weight"] * belief[(s, c1)] * coupling[(c1, c2)]
                for s in g.predecessors(v)
                if depth[s] == depth[v] - 1
                for c1 in (0, 1)
            )
    return Golden(
        {"E": initial, "A": arcs, "H": [(a, b, h) for (a, b), h in coupling.items()]},
        {
            "G": (("v", "i"), sorted(depth.items())),
            "B": (("v", "c", "b"), sorted((v, c, b) for (v, c), b in belief.items())),
        },
        1e-9,
        "networkx multi-source BFS depths from the vertices with initial beliefs; beliefs by"
        " dynamic programming over the BFS layers (each vertex sums w·b·h over predecessors"
        " one layer up).",
    )


# ---------------------------------------------------------------- Viterbi


@golden("viterbi")
def _viterbi() -> Golden:
    states, symbols = [1, 2], [0, 1, 2]
    emit = np.array([[0.5, 0.4, 0.1], [0.1, 0.3, 0.6]])
    trans = np.array([[0.7, 0.3], [0.4, 0.6]])
    sequence = [0, 2, 1, 2]
    v = emit[:, sequence[0]].copy()
    calc = [(0, s, float(v[k])) for k, s in enumerate(states)]
    for t in range(1, len(sequence)):
        v = (v[:, None] * trans).max(axis=0) * emit[:, sequence[t]]
        calc += [(t, s, float(v[k])) for k, s in enumerate(states)]
    best = {}
    for t, _, p in calc:
        best[t] = max(best.get(t, 0.0), p)
    return Golden(
        {
            "obs": list(enumerate(sequence)),
            "emit": [(s, e, float(emit[k, e])) for k, s in enumerate(states) for e in symbols],
            "trans": [
                (s, u, float(trans[i, j]))
                for i, s in enumerate(states)
                for j, u in enumerate(states)
            ],
        },
        {
            "calcV": (("t", "state", "p"), sorted(calc)),
            "viterbi": (("t", "p"), sorted(best.items())),
        },
        1e-12,
        "numpy Viterbi recursion v_t = max_x(v_{t-1}(x) trans(x, .)) · emit(., obs_t).",
    )


# ---------------------------------------------------------------- party, galaxies

FRIENDS = [(4, 1), (4, 2), (4, 3), (6, 1), (6, 2), (6, 4), (5, 1), (5, 2), (5, 6), (7, 5),
           (7, 8), (8, 7), (8, 3)]  # fmt: skip
SURE = [1, 2, 3]


def _party() -> tuple[set[int], Rows]:
    # by hand: 4 has 1,2,3; then 6 has 1,2,4; then 5 has 1,2,6; 7 has only 5; 8 has only 3
    coming = {1, 2, 3, 4, 5, 6}
    counts: dict[int, int] = {}
    for y, x in FRIENDS:
        if x in coming:
            counts[y] = counts.get(y, 0) + 1
    return coming, sorted(counts.items())


GOLDENS["a3_party"] = Golden(
    {"sure": [(x,) for x in SURE], "friend": FRIENDS},
    {
        "coming": (("x",), [(x,) for x in sorted(_party()[0])]),
        "cntComing": (("y", "n"), _party()[1]),
    },
    0.0,
    "by hand: 4 has friends 1,2,3 coming, then 6 (1,2,4), then 5 (1,2,6); 7 and 8 have one"
    " coming friend each; counts are coming friends per person.",
)
GOLDENS["dcd_attend"] = Golden(
    {"organizer": [(x,) for x in SURE], "friend": FRIENDS},
    {"attend": (("x",), [(x,) for x in sorted(_party()[0])])},
    0.0,
    GOLDENS["a3_party"].how,
)

GOLDENS["a3_galaxy"] = Golden(
    {
        "galaxies_seed": [(10,)],
        "particles": [
            (1, 10, 1),
            (2, 10, 1),
            (3, 10, 1),
            (4, 11, 1),
            (5, 11, 1),
            (1, 20, 2),
            (2, 20, 2),
            (3, 21, 2),
            (4, 21, 2),
            (5, 21, 2),
            (1, 30, 3),
            (2, 30, 3),
            (4, 30, 3),
            (3, 31, 3),
            (5, 31, 3),
        ],
    },
    {
        "galaxies": (("t", "gid"), [(1, 10), (2, 20), (3, 30)]),
        "edges": (("t", "gid1", "gid2", "c"), [(1, 10, 20, 2), (1, 10, 21, 1), (2, 20, 30, 2)]),
    },
    0.0,
    "by hand: galaxy 10 (t=1) sends particles 1,2 to 20 and 3 to 21; 20 (t=2) sends 1,2 to"
    " 30; only counts >= 2 extend the history.",
)


# ---------------------------------------------------------------- writing


def fmt(value: object) -> str:
    # numpy scalars print as np.float64(...): convert to plain Python numbers first
    if isinstance(value, float | np.floating):
        return repr(float(value))
    if isinstance(value, np.integer):
        return str(int(value))
    return str(value)


def declared_types(name: str) -> dict[str, list[str]]:
    """Column types per relation, read from the example's .decl lines (only to print each
    value in its declared type: 0 in a float column is written 0.0)."""
    types: dict[str, list[str]] = {}
    for line in (EXAMPLES / f"{name}.dl").read_text().splitlines():
        match = re.match(r"\s*\.decl\s+(\w+)\((.*)\)", line)
        if match:
            types[match[1]] = [a.split(":")[1].strip() for a in match[2].split(",") if a]
    return types


def typed(row: tuple, types: list[str]) -> list[str]:
    assert len(row) == len(types), (row, types)
    return [fmt(float(v) if t == "float" else v) for v, t in zip(row, types, strict=True)]


def write(name: str, g: Golden) -> None:
    target = PROGRAMS / name
    if target.exists():
        shutil.rmtree(target)
    (target / "facts").mkdir(parents=True)
    (target / "expected").mkdir()
    shutil.copyfile(EXAMPLES / f"{name}.dl", target / "program.dl")
    types = declared_types(name)
    for rel, rows in g.facts.items():
        lines = ["\t".join(typed(row, types[rel])) for row in rows]
        (target / "facts" / f"{rel}.facts").write_text("".join(line + "\n" for line in lines))
    for rel, (header, rows) in g.expected.items():
        # an iteration-indexed relation's file has no index column
        columns = types[rel][len(types[rel]) - len(header) :]
        body = [",".join(typed(row, columns)) for row in sorted(rows)]
        (target / "expected" / f"{rel}.csv").write_text("\n".join([",".join(header), *body]) + "\n")
    how = g.how.replace("\\", "\\\\").replace('"', '\\"')
    (target / "meta.toml").write_text(f'tolerance = {g.tolerance!r}\nhow_expected = "{how}"\n')


DEMO_FACTS: dict[str, dict[str, Rows]] = {
    # weighted digraph: powerlog_p1_sssp, a3_sssp, apsp
    "graph": {"edge": W_EDGES, "node": [(v,) for v in nodes_of(W_EDGES)]},
    # unweighted digraph, no dangling vertices: the PageRank and CC programs on `edge`
    "web": {"edge": U_EDGES, "node": [(v,) for v in U_NODES]},
    # DCDatalog / Nexus spelling: arc, warc, node
    "arcs": {"arc": U_EDGES, "warc": W_EDGES, "node": [(v,) for v in U_NODES]},
}


def write_demo_facts() -> None:
    for directory, relations in DEMO_FACTS.items():
        target = EXAMPLES / "facts" / directory
        target.mkdir(parents=True, exist_ok=True)
        for rel, rows in relations.items():
            text = "".join("\t".join(fmt(v) for v in row) + "\n" for row in rows)
            (target / f"{rel}.facts").write_text(text)


def main(names: list[str]) -> None:
    """Write every golden and the demo facts, or only the goldens named on the command line
    (the others' last digits may differ with the numpy/LAPACK build that solves them)."""
    unknown = sorted(set(names) - set(GOLDENS))
    if unknown:
        raise SystemExit(f"no golden named {unknown}")
    if not names:
        write_demo_facts()
    missing = sorted(p.stem for p in EXAMPLES.glob("*.dl") if p.stem not in GOLDENS)
    chosen = sorted(names or GOLDENS)
    for name in chosen:
        write(name, GOLDENS[name])
    print(f"wrote {len(chosen)} goldens; examples without a golden: {missing}")


if __name__ == "__main__":
    main(sys.argv[1:])
