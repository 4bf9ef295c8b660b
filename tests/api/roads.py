"""A small road-like grid with permuted node ids, and scipy's shortest paths over it: the
oracle of the API tests (independent of Fixflow)."""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import dijkstra


def road_grid(side: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Directed edges (src, dst, w) of a ``side`` × ``side`` grid: each neighbour link in
    both directions with its own weight 1..100, a tenth of them dropped, ids permuted."""
    rng = np.random.default_rng(seed)
    cells = np.arange(side * side).reshape(side, side)
    pairs = [(cells[:, :-1], cells[:, 1:]), (cells[:-1, :], cells[1:, :])]
    src = np.concatenate([a.ravel() for a, b in pairs] + [b.ravel() for a, b in pairs])
    dst = np.concatenate([b.ravel() for a, b in pairs] + [a.ravel() for a, b in pairs])
    keep = rng.random(src.size) >= 0.1
    ids = rng.permutation(side * side)
    weights = rng.integers(1, 101, src.size).astype(np.float64)
    return ids[src[keep]], ids[dst[keep]], weights[keep]


def distances(src: np.ndarray, dst: np.ndarray, w: np.ndarray, source: int) -> dict[int, float]:
    """Node → shortest distance from ``source``, for every node it reaches."""
    nodes = int(max(src.max(), dst.max())) + 1
    matrix = csr_array((w, (src, dst)), shape=(nodes, nodes))
    found = dijkstra(matrix, indices=source)
    return {int(v): float(d) for v, d in enumerate(found) if np.isfinite(d)}
