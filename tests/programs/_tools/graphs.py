"""Independent computations of expected outputs: networkx graph algorithms, numpy linear
solves and closed forms. Nothing here imports fixflow or the reference evaluator."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import networkx as nx
import numpy as np

Edge = tuple[int, int]
WEdge = tuple[int, int, float]


def digraph(edges: Iterable[tuple], weighted: bool = False) -> nx.DiGraph:
    g = nx.DiGraph()
    for e in edges:
        if weighted:
            g.add_edge(e[0], e[1], weight=e[2])
        else:
            g.add_edge(e[0], e[1])
    return g


def shortest_from(edges: list[WEdge], source: int) -> dict[int, float]:
    """Dijkstra distances from ``source`` (the source itself at 0)."""
    return nx.single_source_dijkstra_path_length(digraph(edges, weighted=True), source)


def shortest_nonempty(edges: list[WEdge]) -> dict[tuple[int, int], float]:
    """Shortest path lengths over paths with at least one edge (so (x, x) is the shortest
    cycle through x): min over first edges (x, z, w) of w + dist(z, y)."""
    g = digraph(edges, weighted=True)
    dist = dict(nx.all_pairs_dijkstra_path_length(g))
    best: dict[tuple[int, int], float] = {}
    for x, z, w in edges:
        for y, d in dist[z].items():
            key = (x, y)
            best[key] = min(best.get(key, math.inf), w + d)
    return best


def widest_from(edges: list[WEdge], sources: Iterable[int]) -> dict[int, float]:
    """Widest paths of at least one edge from any source: the width of a path is its
    narrowest edge, so y's width is the largest w such that y is reachable from a source
    in one step or more over edges of width >= w (networkx reachability per threshold)."""
    best: dict[int, float] = {}
    for w in sorted({e[2] for e in edges}):
        g = digraph([e for e in edges if e[2] >= w])
        for s in sources:
            if s in g:
                # one step or more: the successors of s and everything they reach
                for first in g.successors(s):
                    for y in nx.descendants(g, first) | {first}:
                        best[y] = w
    return best


def same_generation(arcs: list[Edge]) -> set[Edge]:
    """Pairs reachable in the pair graph (A, B) -> (X, Y) for arcs A->X, B->Y from the
    siblings (X, Y), X != Y, of a common parent."""
    children: dict[int, list[int]] = {}
    for a, b in arcs:
        children.setdefault(a, []).append(b)
    base = {(x, y) for kids in children.values() for x in kids for y in kids if x != y}
    pairs = nx.DiGraph()
    for a, xs in children.items():
        for b, ys in children.items():
            pairs.add_edges_from(((a, b), (x, y)) for x in xs for y in ys)
    result = set(base)
    for start in base:
        if start in pairs:
            result |= nx.descendants(pairs, start)
    return result


def power_iteration(
    step: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, eps: float, strict: bool = True
) -> tuple[np.ndarray, int]:
    """Iterate x <- step(x) until sum |Δx| < eps (or <= eps): the termination clause."""
    x = x0
    for n in range(1, 100_000):
        nxt = step(x)
        delta = float(np.abs(nxt - x).sum())
        x = nxt
        if delta < eps or (not strict and delta <= eps):
            return x, n
    raise RuntimeError("no convergence")


def contraction(linear: np.ndarray) -> float:
    """How fast the iteration x <- c + M x forgets: the L1-induced norm of M (max column
    sum) when below 1; otherwise the spectral radius, or for mass-preserving maps (radius 1)
    the second largest |eigenvalue| (an estimate, not a bound)."""
    norm = float(np.abs(linear).sum(axis=0).max())
    if norm < 1 - 1e-12:
        return norm
    moduli = sorted(float(m) for m in np.abs(np.linalg.eigvals(linear)))
    return moduli[-2] if moduli[-1] > 1 - 1e-9 else moduli[-1]


def tolerance_for(exact: np.ndarray, stopped: np.ndarray, eps: float, linear: np.ndarray) -> float:
    """Room for any engine that stops by the termination clause, nothing more: the larger of
    10× the error where naive iteration stops and 2× the bound c/(1-c)·eps on the error
    left once a round changes the values by less than eps in sum (c = contraction(M)),
    never below eps."""
    err = float(np.abs(exact - stopped).max())
    c = contraction(linear)
    tol = max(10 * err, 2 * c / (1 - c) * eps, eps)
    exponent = math.floor(math.log10(tol))
    return math.ceil(tol / 10**exponent) * 10**exponent


def random_walk(undirected: list[Edge], nodes: list[int]) -> np.ndarray:
    """Row-stochastic P = D⁻¹(A + I) of an undirected graph with a self-loop on every node."""
    index = {v: k for k, v in enumerate(nodes)}
    a = np.eye(len(nodes))
    for u, v in undirected:
        a[index[u], index[v]] = a[index[v], index[u]] = 1.0
    return a / a.sum(axis=1, keepdims=True)


def stationary(p: np.ndarray) -> np.ndarray:
    """The stationary distribution of a row-stochastic matrix (left eigenvector for 1)."""
    values, vectors = np.linalg.eig(p.T)
    v = np.real(vectors[:, np.argmin(np.abs(values - 1))])
    return v / v.sum()
