"""Edge-cut partitioners for Fixflow's sharded MRA engine, compared with RCM ranges.

Vertex partitioning: every node goes to one of ``k`` shards; a directed link whose ends are
in different shards is cut. A shard's work is its nodes' out-links; balance = largest
shard's out-links / mean, kept <= 1 + eps (eps = 0.05). Cut and balance are measured as in
``fixflow.operators.engines.sharding.compare``. numpy/scipy only.

Methods (``--methods``, comma separated):
  rcm           sharding.node_order(rcm) + contiguous_ranges (Fixflow's default; baseline)
  hash          hash_shard_numpy (the fallback; not balanced)
  lp_rcm        balanced label propagation started from the rcm ranges
  lp_rand       balanced label propagation started from a random order cut into ranges
  fennel_rand   Fennel (Tsourakakis et al. 2014), chunked streaming, random order, 1 pass
  fennel_bfs    Fennel, chunked, in RCM order, 1 pass
  fennel_deg    Fennel, chunked, hubs first (degree descending), 1 pass
  refennel      Fennel, chunked, random order, 5 passes (restreaming, Nishimura & Ugander)
  ldg_rand      LDG (Stanton & Kliot 2012), chunked, random order, 1 pass
  reldg         LDG, chunked, random order, 5 passes (restreaming)
  hybrid        PowerLyra-style: hubs (top 1% degree) spread by weight, every other node
                with its highest-degree neighbour, then a rebalance
  lp_hybrid     hybrid, then balanced label propagation
  lp_fennel     refennel, then balanced label propagation
  refennel_rcm  Fennel restreaming, 5 passes in random order, started from the rcm ranges
                (the rcm assignment is the state of "pass 0")
  refennel_rcm_rcm  the same, passes in rcm order

Balanced label propagation (Ugander & Backstrom 2013 / Spinner-style, vectorized): each
iteration computes every node's neighbour weight per shard (symmetric adjacency, a link in
both directions weighs 2) by one bincount, proposes the best shard if it gains, keeps each
proposal with probability 1/2 (damps swaps of adjacent nodes), and accepts, per pair of
shards (a, b), the a->b and b->a proposals in order of gain while the net flow fits in the
receiver's spare capacity (one side is always accepted in full), so balance never exceeds
1 + eps once the start is within it.

Streaming (Fennel, LDG) is a Python loop over chunks of ``chunk`` nodes (default n/256, at
least 64), vectorized inside a chunk: a chunk's nodes see the shards of the nodes streamed
before the chunk (not of each other) and the loads at the chunk's start; capacity is
enforced within a chunk by cumulative sums (overflowing nodes re-pick).

Run (from the project root; the graphs of ``bench/graphs.py``):
  PYTHONPATH=src:bench .venv/bin/python bench/partition_cut.py rmat_1m grid_100k \
      --shards 2,4,8 --methods rcm,refennel_rcm
Rows go to stdout (markdown); with ``--out FILE`` they are appended to FILE as JSON lines.
Results and the conclusion: ``bench/ENGINES.md``, "Cutting R-MAT".
"""

from __future__ import annotations

import argparse
import json
import time

import graphs
import numpy as np
from scipy.sparse import csr_array

from fixflow.operators.engines import sharding

EPS = 0.05


# ------------------------------------------------------------------ graph and measures


class G:
    """Links src -> dst over 0..n-1, their symmetric adjacency and the node work."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, n: int):
        self.src, self.dst, self.n = src, dst, n
        keep = src != dst
        rows = np.concatenate([src[keep], dst[keep]]).astype(np.int32)
        cols = np.concatenate([dst[keep], src[keep]]).astype(np.int32)
        a = csr_array((np.ones(len(rows), np.float32), (rows, cols)), shape=(n, n))
        a.sum_duplicates()  # a reciprocal pair weighs 2: both links are cut together
        self.a = a
        self.rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(a.indptr))
        self.w = np.bincount(src, minlength=n).astype(np.float64)  # work = out-links
        self.deg = np.diff(a.indptr)


def evaluate(g: G, shard: np.ndarray, k: int) -> tuple[float, float]:
    cut = np.count_nonzero(shard[g.src] != shard[g.dst])
    per = np.bincount(shard[g.src], minlength=k)
    return 100.0 * cut / len(g.src), float(per.max() / per.mean())


def counts(g: G, shard: np.ndarray, k: int) -> np.ndarray:
    """n x k: every node's neighbour weight in every shard."""
    idx = g.rows * k + shard[g.a.indices]
    return np.bincount(idx, weights=g.a.data, minlength=g.n * k).reshape(g.n, k)


def capacity(g: G, k: int, eps: float = EPS) -> float:
    return (1.0 + eps) * g.w.sum() / k


def ranges(g: G, order: np.ndarray, k: int) -> np.ndarray:
    return sharding.contiguous_ranges(order, g.w, k)


# ------------------------------------------------------------------ label propagation


def label_propagation(
    g: G, shard: np.ndarray, k: int, iters: int = 20, p: float = 0.5, seed: int = 0
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shard = shard.astype(np.int32).copy()
    cap = capacity(g, k)
    ar = np.arange(g.n)
    for _ in range(iters):
        c = counts(g, shard, k)
        c += rng.random(c.shape) * 1e-3  # random tie-break among equal shards
        best = c.argmax(1).astype(np.int32)
        gain = c[ar, best] - c[ar, shard]
        cand = np.flatnonzero((best != shard) & (gain > 0.5) & (rng.random(g.n) < p))
        if len(cand) == 0:
            break
        cand = cand[np.argsort(-gain[cand], kind="stable")]
        frm, to, wc = shard[cand], best[cand], g.w[cand]
        load = np.bincount(shard, weights=g.w, minlength=k)
        room = np.maximum(cap - load, 0.0) / max(k - 1, 1)
        accept = np.zeros(len(cand), bool)
        for a in range(k):
            for b in range(a + 1, k):
                ab = np.flatnonzero((frm == a) & (to == b))
                ba = np.flatnonzero((frm == b) & (to == a))
                x, y = np.cumsum(wc[ab]), np.cumsum(wc[ba])
                xt, yt = (x[-1] if len(x) else 0.0), (y[-1] if len(y) else 0.0)
                accept[ab[x <= min(xt, yt + room[b])]] = True
                accept[ba[y <= min(yt, xt + room[a])]] = True
        moved = cand[accept]
        shard[moved] = best[moved]
        if len(moved) < 1e-4 * g.n:
            break
    return shard


# ------------------------------------------------------------------ streaming (Fennel, LDG)


def stream(
    g: G,
    k: int,
    order: np.ndarray,
    kind: str = "fennel",
    passes: int = 1,
    chunk: int | None = None,
    gamma: float = 1.5,
    init: np.ndarray | None = None,
) -> np.ndarray:
    n, w = g.n, g.w
    chunk = chunk or max(64, n // 256)
    cap = capacity(g, k)
    total, m = w.sum(), g.a.data.sum() / 2
    alpha = m * k ** (gamma - 1) / total**gamma
    shard = np.full(n + 1, -1, np.int32)  # index n: "unassigned" sink for neighbours
    load = np.zeros(k)
    if init is not None:  # restream from a given assignment: every pass is a restream
        shard[:n] = init
        load = np.bincount(init, weights=w, minlength=k)
    a = g.a
    for p in range(passes):
        for s in range(0, n, chunk):
            nodes = order[s : s + chunk]
            if p > 0 or init is not None:
                load -= np.bincount(shard[nodes], weights=w[nodes], minlength=k)
                shard[nodes] = -1
            sub = a[nodes]
            r = np.repeat(np.arange(len(nodes)), np.diff(sub.indptr))
            ns = shard[sub.indices]
            ok = ns >= 0
            c = np.bincount(
                r[ok] * k + ns[ok], weights=sub.data[ok], minlength=len(nodes) * k
            ).reshape(len(nodes), k)
            wn = w[nodes]
            if kind == "fennel":
                score = c - alpha * gamma * np.maximum(load, 0) ** (gamma - 1) * wn[:, None]
            else:  # ldg
                score = c * np.maximum(1.0 - load / cap, 0.0)
            score -= 1e-9 * load  # ties: least loaded
            pick = _capped_pick(score, wn, load, cap, k)
            shard[nodes] = pick
            load += np.bincount(pick, weights=wn, minlength=k)
    return shard[:n]


def _capped_pick(score, wn, load, cap, k):
    """argmax of every row, re-picking rows that would overflow a shard (in row order)."""
    score = score.copy()
    pick = score.argmax(1)
    for _ in range(k):
        over = np.zeros(len(pick), bool)
        for t in range(k):
            rows = np.flatnonzero(pick == t)
            if len(rows):
                bad = rows[load[t] + np.cumsum(wn[rows]) > cap]
                over[bad] = True
                score[bad, t] = -np.inf
        if not over.any():
            break
        pick[over] = score[over].argmax(1)
    return pick.astype(np.int32)


# ------------------------------------------------------------------ hubs (PowerLyra-style)


def hybrid(g: G, k: int, top: float = 0.01, seed: int = 0) -> np.ndarray:
    """Hubs (top ``top`` by degree) spread greedily by work; every other node joins its
    highest-degree neighbour's shard (a node without neighbours: random); rebalanced."""
    rng = np.random.default_rng(seed)
    n, a = g.n, g.a
    rank = np.empty(n, np.int64)
    rank[np.argsort(-g.deg, kind="stable")] = np.arange(n)
    hubs = np.argsort(-g.deg, kind="stable")[: max(k, int(top * n))]
    shard = rng.integers(0, k, n).astype(np.int32)
    load = np.zeros(k)
    for h in hubs[np.argsort(-g.w[hubs], kind="stable")]:  # LPT: heaviest to lightest shard
        t = int(load.argmin())
        shard[h] = t
        load[t] += g.w[h]
    # the neighbour of lowest rank (highest degree) of every node
    nb_rank = rank[a.indices]
    first = np.minimum.reduceat(nb_rank, a.indptr[:-1][g.deg > 0]) if a.nnz else []
    top_nb = np.argsort(rank)[first]  # rank -> node
    low = np.ones(n, bool)
    low[hubs] = False
    has = np.flatnonzero(g.deg > 0)
    sel = low[has]
    shard[has[sel]] = shard[top_nb[sel]]
    return rebalance(g, shard, k)


def rebalance(g: G, shard: np.ndarray, k: int, rounds: int = 20) -> np.ndarray:
    """Move the cheapest nodes out of over-capacity shards into shards with room."""
    shard = shard.copy()
    cap = capacity(g, k, EPS * 0.8)
    for _ in range(rounds):
        load = np.bincount(shard, weights=g.w, minlength=k)
        if load.max() <= cap:
            break
        c = counts(g, shard, k)
        room = cap - load
        for s in np.flatnonzero(load > cap):
            targets = np.flatnonzero(room > 1e-3 * cap)
            nodes = np.flatnonzero((shard == s) & (g.w > 0))
            cs = c[nodes][:, targets] + 1e-6 * room[targets]  # ties: the emptiest
            loss = (c[nodes, s] - cs.max(1)) / g.w[nodes]
            o = np.argsort(loss, kind="stable")
            nodes, cs = nodes[o], cs[o]
            t_idx = _capped_pick(cs, g.w[nodes], cap - room[targets], cap, len(targets))
            tt = targets[t_idx]  # every target takes what fits in its room, cheapest first
            ok = np.ones(len(nodes), bool)
            for j, t in enumerate(targets):
                sel = np.flatnonzero(t_idx == j)
                ok[sel[np.cumsum(g.w[nodes[sel]]) > room[t]]] = False
            nodes, tt = nodes[ok], tt[ok]
            take = np.searchsorted(np.cumsum(g.w[nodes]), load[s] - cap) + 1
            nodes, tt = nodes[:take], tt[:take]
            shard[nodes] = tt
            room -= np.bincount(tt, weights=g.w[nodes], minlength=k)
    return shard


# ------------------------------------------------------------------ methods


def run(g: G, k: int, method: str) -> np.ndarray:
    rng = np.random.default_rng(1)
    if method == "hash":
        return sharding.hash_shard_numpy(np.arange(g.n, dtype=np.int64), k)
    if method in ("rcm", "lp_rcm", "fennel_bfs", "refennel_rcm", "refennel_rcm_rcm"):
        order = sharding.node_order(g.src, g.dst, g.n, "rcm")
        if method == "rcm":
            return ranges(g, order, k)
        if method == "lp_rcm":
            return label_propagation(g, ranges(g, order, k), k)
        if method == "fennel_bfs":
            return stream(g, k, order, "fennel")
        init = ranges(g, order, k)
        o = order if method == "refennel_rcm_rcm" else rng.permutation(g.n)
        return stream(g, k, o, "fennel", passes=5, init=init)
    if method == "lp_rand":
        return label_propagation(g, ranges(g, rng.permutation(g.n), k), k)
    if method == "fennel_rand":
        return stream(g, k, rng.permutation(g.n), "fennel")
    if method == "fennel_deg":
        return stream(g, k, np.argsort(-g.deg, kind="stable"), "fennel")
    if method == "refennel":
        return stream(g, k, rng.permutation(g.n), "fennel", passes=5)
    if method == "ldg_rand":
        return stream(g, k, rng.permutation(g.n), "ldg")
    if method == "reldg":
        return stream(g, k, rng.permutation(g.n), "ldg", passes=5)
    if method == "hybrid":
        return hybrid(g, k)
    if method == "lp_hybrid":
        return label_propagation(g, hybrid(g, k), k)
    if method == "lp_fennel":
        return label_propagation(g, stream(g, k, rng.permutation(g.n), "fennel", passes=5), k)
    raise ValueError(method)


ALL = (
    "rcm,hash,lp_rcm,lp_rand,fennel_rand,fennel_bfs,fennel_deg,refennel,ldg_rand,reldg,"
    "hybrid,lp_hybrid,lp_fennel,refennel_rcm,refennel_rcm_rcm"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--shards", default="2,4,8")
    ap.add_argument("--methods", default=ALL)
    ap.add_argument("--out", default=None, help="append the rows as JSON lines")
    args = ap.parse_args()
    print("| graph | shards | method | cut % | imbalance | seconds |")
    print("|---|---:|---|---:|---:|---:|")
    for name in args.graphs:
        gr = graphs.load(name)
        t0 = time.monotonic()
        g = G(gr.src, gr.dst, gr.nodes)
        setup = time.monotonic() - t0
        del gr
        for k in map(int, args.shards.split(",")):
            for method in args.methods.split(","):
                t0 = time.monotonic()
                shard = run(g, k, method)
                sec = time.monotonic() - t0
                cut, imb = evaluate(g, shard, k)
                row = dict(
                    graph=name,
                    shards=k,
                    method=method,
                    cut_pct=round(cut, 2),
                    imbalance=round(imb, 3),
                    seconds=round(sec, 2),
                    setup_seconds=round(setup, 2),
                )
                print(
                    f"| {name} | {k} | {method} | {cut:.2f} | {imb:.3f} | {sec:.2f} |", flush=True
                )
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
