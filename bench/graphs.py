#!/usr/bin/env python3
"""The benchmark graphs: R-MAT and road-like grids with randomly permuted node ids.

The generator is a copy of the peer benchmark's ``gen_graph.py`` (``../shared/bench``), kept
draw for draw: with the same seed (42) it yields the very edges, weights and updates the
peer figures in ``bench/PEERS.md`` were measured on. Fixflow then renumbers the nodes by a
seeded random permutation (real node ids carry no locality; the generator's ids do: grid
neighbours are numbered side by side, R-MAT hubs get small ids). The permutation uses its
own random stream, so the generator's draws stay untouched.

Kinds
  rmat : R-MAT / Graph500 generator (a,b,c,d = 0.57,0.19,0.19,0.05), scale
         = round(log2(edges/16)), duplicates and self loops removed, exactly
         ``edges`` distinct directed edges kept (in generation order). Before the
         permutation node 0 is the hub (the SSSP source reaches the giant out-component).
  grid : road-like 2-D grid; every neighbour link exists in both directions with
         independent random weights, then exactly ``edges`` of those directed edges are
         kept (about 10% dropped -> one-way streets); before the permutation node 0 is a
         corner, so SSSP from it has the largest hop depth.
Node ids are compacted to 0..n-1 (order preserving), so every id occurs in some edge.
Weights are the generator's: integers 1..100. The SSSP source is (the permuted id of)
generator node 0; ``Graph.source`` and ``meta.json`` give it.

Updates: 100 insertions (rmat: further R-MAT edges not yet present; grid: previously
dropped neighbour links, i.e. re-opened roads) and 100 deletions (uniformly chosen
existing edges).

Names: ``rmat_100k``, ``rmat_1m``, ``grid_100k``, ``grid_1m`` (the peers' graphs),
``rmat_small`` and ``grid_small`` (5k edges, for CI), or any ``<kind>_<size>``.

Facts (Soufflé conventions, tab-separated, no header), under ``bench/.graphs/<name>/``
(gitignored; generated on first use, reused afterwards)::

    sssp/edge.facts        src dst w     the directed weighted edges
    cc/edge.facts          src dst       both directions of every edge (undirected CC)
    pagerank/edge.facts    src dst       the directed edges
    pagerank/node.facts    id            every node 0..n-1
    updates.csv            op,src,dst,weight   100 '+' then 100 '-' (header row)
    meta.json              sizes, parameters, seeds and the SSSP source

Run: ``.venv/bin/python bench/graphs.py [NAME ...] [--small] [--seed 42]`` (no name: the
four peer graphs; ``--small``: the two CI graphs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

A, B, C = 0.57, 0.19, 0.19
_Drawn = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, object]]
"""src, dst, insertion src, insertion dst, the node ids used, the generator's parameters."""
SEED = 42
UPDATES = 100
SMALL_EDGES = 5_000
PEER_GRAPHS = ("rmat_100k", "rmat_1m", "grid_100k", "grid_1m")
SMALL_GRAPHS = ("rmat_small", "grid_small")
CACHE = Path(__file__).resolve().parent / ".graphs"
FORMAT = 1
"""Bumped whenever the cached files would change; stale caches are regenerated."""


# ---------------------------------------------------------------- the peers' generator


def parse_size(s: str) -> int:
    s = s.strip().lower().replace("_", "")
    if s == "small":
        return SMALL_EDGES
    mult = 1
    if s.endswith("k"):
        mult, s = 1_000, s[:-1]
    elif s.endswith("m"):
        mult, s = 1_000_000, s[:-1]
    return int(float(s) * mult)


def rmat_batch(rng: np.random.Generator, scale: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for _ in range(scale):
        r = rng.random(m)
        sbit = r >= A + B
        dbit = ((r >= A) & (r < A + B)) | (r >= A + B + C)
        src = (src << 1) | sbit
        dst = (dst << 1) | dbit
    return src, dst


def gen_rmat(rng: np.random.Generator, edges: int, n_updates: int) -> _Drawn:
    scale = max(4, round(math.log2(edges / 16)))
    nv = 1 << scale
    keys_order: list[np.ndarray] = []
    total_needed = edges + n_updates
    while True:
        s, d = rmat_batch(rng, scale, int(edges * 0.6) + 1024)
        k = s * nv + d
        k = k[s != d]
        keys_order.append(k)
        allk = np.concatenate(keys_order)
        uniq, first = np.unique(allk, return_index=True)
        if len(uniq) >= total_needed:
            break
    first.sort()
    ordered = allk[first]  # distinct keys in generation order
    base = ordered[:edges]
    extra = ordered[edges : edges + n_updates * 4]
    src, dst = base // nv, base % nv
    ids = np.unique(np.concatenate([src, dst]))
    # insertions: later R-MAT edges whose endpoints already exist
    es, ed = extra // nv, extra % nv
    ok = np.isin(es, ids) & np.isin(ed, ids)
    es, ed = es[ok][:n_updates], ed[ok][:n_updates]
    if len(es) < n_updates:
        raise ValueError("could not draw enough insertion edges")
    return src, dst, es, ed, ids, {"scale": scale, "a": A, "b": B, "c": C}


def gen_grid(rng: np.random.Generator, edges: int, n_updates: int) -> _Drawn:
    keep_frac = 0.9
    side = 2
    while 4 * side * (side - 1) * keep_frac < edges:
        side += 1
    r, c = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    node = (r * side + c).ravel()
    right = node[(c < side - 1).ravel()]
    down = node[(r < side - 1).ravel()]
    u = np.concatenate([right, down])
    v = np.concatenate([right + 1, down + side])
    fsrc = np.concatenate([u, v])
    fdst = np.concatenate([v, u])
    full = len(fsrc)
    if full < edges:
        raise ValueError("grid too small")
    perm = rng.permutation(full)
    kept = np.sort(perm[:edges])
    dropped = perm[edges:]
    src, dst = fsrc[kept], fdst[kept]
    ids = np.unique(np.concatenate([src, dst]))
    ins = dropped[np.isin(fsrc[dropped], ids) & np.isin(fdst[dropped], ids)][:n_updates]
    if len(ins) < n_updates:
        raise ValueError("could not draw enough insertion edges")
    return src, dst, fsrc[ins], fdst[ins], ids, {"side": side, "keep_frac": keep_frac}


@dataclass
class Generated:
    """``gen_graph.py``'s output, in memory: ids compacted, not permuted."""

    kind: str
    nodes: int
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    """Integers 1..100."""
    insert_src: np.ndarray
    insert_dst: np.ndarray
    insert_weight: np.ndarray
    deletes: np.ndarray
    """Indices (sorted) of the deleted edges."""
    meta: dict[str, object]


def generate(kind: str, edges: int, seed: int = SEED, updates: int = UPDATES) -> Generated:
    """Exactly what ``gen_graph.py --kind KIND --edges EDGES --seed SEED`` writes."""
    if kind not in ("rmat", "grid"):
        raise ValueError(f"unknown graph kind {kind!r} (rmat or grid)")
    rng = np.random.default_rng([seed, 0 if kind == "rmat" else 1, edges])
    gen = gen_rmat if kind == "rmat" else gen_grid
    src, dst, isrc, idst, ids, params = gen(rng, edges, updates)
    # compact ids (order preserving)
    src = np.searchsorted(ids, src)
    dst = np.searchsorted(ids, dst)
    isrc = np.searchsorted(ids, isrc)
    idst = np.searchsorted(ids, idst)
    n = len(ids)
    w = rng.integers(1, 101, size=len(src))
    iw = rng.integers(1, 101, size=len(isrc))
    dele = np.sort(rng.choice(len(src), size=updates, replace=False))
    assert len(src) == edges
    assert len(np.unique(src * n + dst)) == len(src) and not np.any(src == dst)
    outdeg = np.bincount(src, minlength=n)
    meta: dict[str, object] = {
        "kind": kind,
        "edges": len(src),
        "nodes": n,
        "seed": seed,
        "updates": updates,
        "dangling_nodes": int((outdeg == 0).sum()),
        "max_outdeg": int(outdeg.max()),
        **params,
    }
    return Generated(kind, n, src, dst, w, isrc, idst, iw, dele, meta)


# ---------------------------------------------------------------- Fixflow's graphs


@dataclass
class Graph:
    """A benchmark graph with permuted node ids (0..nodes-1)."""

    name: str
    nodes: int
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    """float64, the generator's integer weights 1..100."""
    source: int
    """The SSSP source: generator node 0 (R-MAT hub, grid corner) under the permutation."""
    insert_src: np.ndarray
    insert_dst: np.ndarray
    insert_weight: np.ndarray
    delete_src: np.ndarray
    delete_dst: np.ndarray
    delete_weight: np.ndarray
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def edges(self) -> int:
        return len(self.src)


def parse_name(name: str) -> tuple[str, int]:
    """``rmat_100k`` → ("rmat", 100000); ``grid_small`` → ("grid", SMALL_EDGES)."""
    kind, _, size = name.partition("_")
    if kind not in ("rmat", "grid") or not size:
        raise ValueError(f"bad graph name {name!r}: expected rmat_<size> or grid_<size>")
    return kind, parse_size(size)


def permutation(nodes: int, kind: str, edges: int, seed: int = SEED) -> np.ndarray:
    """perm[old id] = new id; a random stream of its own (the generator's is untouched)."""
    rng = np.random.default_rng([seed, 2, 0 if kind == "rmat" else 1, edges])
    return rng.permutation(nodes).astype(np.int64)


def build(name: str, seed: int = SEED, permute: bool = True) -> Graph:
    """Generate ``name`` (no cache)."""
    kind, edges = parse_name(name)
    g = generate(kind, edges, seed)
    perm = (
        permutation(g.nodes, kind, edges, seed) if permute else np.arange(g.nodes, dtype=np.int64)
    )
    meta = {**g.meta, "name": name, "permuted": permute, "permutation_seed": [seed, 2]}
    meta["source"] = int(perm[0])
    meta["format"] = FORMAT
    return Graph(
        name=name,
        nodes=g.nodes,
        src=perm[g.src],
        dst=perm[g.dst],
        weight=g.weight.astype(np.float64),
        source=int(perm[0]),
        insert_src=perm[g.insert_src],
        insert_dst=perm[g.insert_dst],
        insert_weight=g.insert_weight.astype(np.float64),
        delete_src=perm[g.src[g.deletes]],
        delete_dst=perm[g.dst[g.deletes]],
        delete_weight=g.weight[g.deletes].astype(np.float64),
        meta=meta,
    )


_ARRAYS = (
    "src",
    "dst",
    "weight",
    "insert_src",
    "insert_dst",
    "insert_weight",
    "delete_src",
    "delete_dst",
    "delete_weight",
)


def _directory(name: str, seed: int, root: Path) -> Path:
    return root / (name if seed == SEED else f"{name}_seed{seed}")


def load(name: str, seed: int = SEED, root: Path = CACHE, cache: bool = True) -> Graph:
    """The permuted graph ``name``, from the cache (``root``) when present."""
    directory = _directory(name, seed, root)
    arrays_path = directory / "graph.npz"
    meta_path = directory / "meta.json"
    if cache and arrays_path.is_file() and meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("format") == FORMAT:
            with np.load(arrays_path) as data:
                arrays = {k: data[k] for k in _ARRAYS}
            return Graph(
                name=name, nodes=int(meta["nodes"]), source=int(meta["source"]), meta=meta, **arrays
            )
    graph = build(name, seed)
    if cache:
        directory.mkdir(parents=True, exist_ok=True)
        _atomic(arrays_path, lambda p: np.savez(p, **{k: getattr(graph, k) for k in _ARRAYS}))
        _atomic(meta_path, lambda p: p.write_text(json.dumps(graph.meta, indent=1) + "\n"))
    return graph


def edge_arrays(name: str, seed: int = SEED) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, int]:
    """(nodes, src, dst, weight, source) of the permuted graph ``name``."""
    g = load(name, seed)
    return g.nodes, g.src, g.dst, g.weight, g.source


PROGRAMS = ("sssp", "cc", "pagerank")


def facts_dir(name: str, program: str, seed: int = SEED, root: Path = CACHE) -> Path:
    """The facts directory of ``program`` (sssp, cc, pagerank) on graph ``name``; written
    on first use (all three programs, the updates and meta.json at once)."""
    if program not in PROGRAMS:
        raise ValueError(f"unknown program {program!r} (one of {', '.join(PROGRAMS)})")
    write_facts(name, seed, root)
    return _directory(name, seed, root) / program


def write_facts(name: str, seed: int = SEED, root: Path = CACHE) -> Path:
    """Write (unless present) every facts file of graph ``name``; its directory."""
    directory = _directory(name, seed, root)
    stamp = directory / ".facts-written"
    if stamp.is_file() and stamp.read_text().strip() == str(FORMAT):
        return directory
    g = load(name, seed, root)
    src, dst = g.src, g.dst
    w = g.weight.astype(np.int64)  # integral: written without a fraction
    _write_columns(directory / "sssp" / "edge.facts", [src, dst, w])
    _write_columns(directory / "pagerank" / "edge.facts", [src, dst])
    _write_columns(directory / "pagerank" / "node.facts", [np.arange(g.nodes, dtype=np.int64)])
    both = np.unique(np.concatenate([src * g.nodes + dst, dst * g.nodes + src]))
    _write_columns(directory / "cc" / "edge.facts", [both // g.nodes, both % g.nodes])

    def updates(path: Path) -> None:
        with path.open("w") as f:
            f.write("op,src,dst,weight\n")
            for a, b, c in zip(g.insert_src, g.insert_dst, g.insert_weight, strict=True):
                f.write(f"+,{a},{b},{int(c)}\n")
            for a, b, c in zip(g.delete_src, g.delete_dst, g.delete_weight, strict=True):
                f.write(f"-,{a},{b},{int(c)}\n")

    _atomic(directory / "updates.csv", updates)
    stamp.write_text(f"{FORMAT}\n")
    return directory


def _write_columns(path: Path, columns: list[np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic(
        path,
        lambda p: np.savetxt(p, np.column_stack(columns), fmt="%d", delimiter="\t"),
    )


def _atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary file and rename, so readers never see half a file (two
    benchmark processes may generate the same graph at once)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if path.suffix == ".npz":  # np.savez appends .npz to a name without it
        tmp = tmp.with_suffix(".tmp.npz")
    write(tmp)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="graphs (default: the four peer graphs)")
    parser.add_argument("--small", action="store_true", help="the CI graphs rmat_small, grid_small")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--root", type=Path, default=CACHE, help=f"cache directory ({CACHE})")
    args = parser.parse_args()
    names = list(args.names) or (list(SMALL_GRAPHS) if args.small else list(PEER_GRAPHS))
    if args.names and args.small:
        names += SMALL_GRAPHS
    for name in names:
        directory = write_facts(name, args.seed, args.root)
        meta = json.loads((directory / "meta.json").read_text())
        print(
            f"{name}: {meta['nodes']} nodes, {meta['edges']} edges, source {meta['source']} "
            f"-> {directory}"
        )


if __name__ == "__main__":
    main()
