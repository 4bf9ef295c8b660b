"""Benchmark of batch evaluation (`fixflow eval`'s engine) against scipy and a plain PySpark loop.

For seeded scale-free graphs (networkx Barabási–Albert, both arc directions) of about 100k
and 1M arcs it times, per algorithm (SSSP, CC, PageRank):

- fixflow: ``evaluate`` on the program text (MRA MonoTable, one materializing job per round);
- scipy: ``scipy.sparse.csgraph`` (dijkstra, connected_components) / sparse power iteration;
- plain Spark: the loop a Spark user writes by hand: join the frontier with the edges,
  group-by min, anti-join/compare with the current table, local checkpoint each round
  (PageRank: the usual join + group-by sum power iteration).

Each timing is the median of ``--runs`` runs; results go to bench/RESULTS.md.
Run: ``.venv/bin/python bench/run_eval_bench.py [--sizes 100000 1000000] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, dijkstra

from fixflow.checker import load
from fixflow.operators.evaluate import EvalOptions, evaluate_with_stats
from fixflow.pipeline.spark import make_session

log = logging.getLogger("bench")
SEED = 7

SSSP = """
.decl edge(src: number, dst: number, w: float)
.input edge
.decl sssp(node: number, dist: float)
.output sssp
sssp(X, d) :- X = 0, d = 0.0.
sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
"""

CC = """
.decl edge(src: number, dst: number, w: float)
.input edge
.decl cc(node: number, label: number)
.output cc
cc(X, X) :- edge(X, _, _).
cc(Y, min[v]) :- cc(X, v), edge(X, Y, _).
"""

PAGERANK = """
.decl edge(src: number, dst: number, w: float)
.input edge
.decl node(id: number)
.input node
.decl degree(node: number, d: number)
.decl rank(node: number, r: float)
.output rank
degree(X, count[Y]) :- edge(X, Y, _).
rank(Y, sum[r]) :- node(Y), r = 0.15
                 ; rank(X, rx), edge(X, Y, _), degree(X, d), r = 0.85 * rx / d
                 ; {{sum[Δr] < {epsilon}}}.
"""


@dataclass
class Graph:
    nodes: int
    src: np.ndarray
    dst: np.ndarray
    w: np.ndarray

    @property
    def arcs(self) -> int:
        return len(self.src)

    def matrix(self, values: np.ndarray | None = None) -> csr_matrix:
        data = self.w if values is None else values
        return csr_matrix((data, (self.src, self.dst)), shape=(self.nodes, self.nodes))


def make_graph(arcs: int) -> Graph:
    nodes = arcs // 4
    graph = nx.barabasi_albert_graph(nodes, 2, seed=SEED)
    edges = np.array(graph.edges, dtype=np.int64)
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    weights = np.random.default_rng(SEED).uniform(1.0, 10.0, len(src))
    return Graph(nodes, src, dst, weights)


# ---------------------------------------------------------------- scipy


def scipy_sssp(g: Graph) -> object:
    return dijkstra(g.matrix(), indices=0)


def scipy_cc(g: Graph) -> object:
    return connected_components(g.matrix(), directed=False)


def scipy_pagerank(g: Graph, epsilon: float) -> object:
    out = np.bincount(g.src, minlength=g.nodes)
    step = csr_matrix((0.85 / out[g.src], (g.dst, g.src)), shape=(g.nodes, g.nodes))
    rank = np.zeros(g.nodes)
    while True:
        nxt = 0.15 + step @ rank
        done = np.abs(nxt - rank).sum() < epsilon
        rank = nxt
        if done:
            return rank


# ---------------------------------------------------------------- fixflow


def edge_frame(spark: SparkSession, g: Graph) -> DataFrame:
    table = pa.table({"src": g.src, "dst": g.dst, "w": g.w})
    return spark.createDataFrame(table)


def fixflow_run(spark: SparkSession, text: str, edb: dict[str, DataFrame]) -> dict[str, object]:
    report = load(text, "bench.dl")
    evaluation = evaluate_with_stats(
        report, edb, spark, EvalOptions(max_iterations=10_000, local_rows=0)
    )
    stats = evaluation.stats[-1]
    return {"rounds": stats.rounds, "jobs": stats.jobs}


# ---------------------------------------------------------------- plain Spark


def plain_min_loop(
    spark: SparkSession, edges: DataFrame, seed: DataFrame, cap: int = 1_000_000
) -> dict[str, object]:
    """Semi-naive min propagation as a Spark user writes it: (node, v) rows; at most
    ``cap`` rounds (``capped`` in the result when it stopped there)."""
    edges = edges.cache()
    edges.count()
    best = seed.localCheckpoint()
    frontier = best
    rounds, capped = 0, False
    while True:
        if rounds >= cap:
            capped = True
            break
        rounds += 1
        candidates = (
            frontier.join(edges, frontier.node == edges.src)
            .select(F.col("dst").alias("node"), (F.col("v") + F.col("w")).alias("v"))
            .groupBy("node")
            .agg(F.min("v").alias("v"))
        )
        improved = (
            candidates.alias("c")
            .join(best.alias("b"), "node", "left")
            .where(F.col("b.v").isNull() | (F.col("c.v") < F.col("b.v")))
            .select("node", F.col("c.v").alias("v"))
            .localCheckpoint()
        )
        if improved.count() == 0:
            break
        best = best.join(improved, "node", "left_anti").unionByName(improved).localCheckpoint()
        frontier = improved
    edges.unpersist()
    return {"rounds": rounds, "capped": capped}


def plain_sssp(spark: SparkSession, edges: DataFrame) -> dict[str, object]:
    seed = spark.createDataFrame([(0, 0.0)], "node long, v double")
    return plain_min_loop(spark, edges, seed)


def plain_cc(spark: SparkSession, edges: DataFrame, cap: int = 1_000_000) -> dict[str, object]:
    zero = edges.select("src", "dst", F.lit(0.0).alias("w"))
    seed = (
        edges.select(F.col("src").alias("node"))
        .distinct()
        .select("node", F.col("node").cast("double").alias("v"))
    )
    return plain_min_loop(spark, zero, seed, cap)


def plain_pagerank(
    spark: SparkSession, edges: DataFrame, nodes: DataFrame, epsilon: float, cap: int = 1_000_000
) -> dict[str, object]:
    degree = edges.groupBy("src").agg(F.count("*").alias("d"))
    links = edges.join(degree, "src").select("src", "dst", "d").cache()
    links.count()
    rank = nodes.select(F.col("id").alias("node"), F.lit(0.0).alias("r")).localCheckpoint()
    rounds = 0
    while True:
        rounds += 1
        contributions = (
            rank.join(links, rank.node == links.src)
            .groupBy("dst")
            .agg(F.sum(0.85 * F.col("r") / F.col("d")).alias("c"))
        )
        new = (
            nodes.join(contributions, nodes.id == contributions.dst, "left")
            .select(F.col("id").alias("node"), (0.15 + F.coalesce("c", F.lit(0.0))).alias("r"))
            .localCheckpoint()
        )
        change = (
            new.alias("n")
            .join(rank.alias("o"), "node")
            .agg(F.sum(F.abs(F.col("n.r") - F.col("o.r"))))
            .first()[0]
        )
        rank = new
        if change < epsilon or rounds >= cap:
            break
    links.unpersist()
    return {"rounds": rounds, "capped": change >= epsilon}


# ---------------------------------------------------------------- driver


Case = tuple[Callable[[], object], Callable[[], object], Callable[[], object]]


def cases_for(
    spark: SparkSession, g: Graph, edges: DataFrame, nodes: DataFrame, epsilon: float
) -> dict[str, Case]:
    """(fixflow, scipy, plain Spark) runners per algorithm."""
    pagerank = PAGERANK.format(epsilon=epsilon)
    return {
        "sssp": (
            lambda: fixflow_run(spark, SSSP, {"edge": edges}),
            lambda: scipy_sssp(g),
            lambda: plain_sssp(spark, edges),
        ),
        "cc": (
            lambda: fixflow_run(spark, CC, {"edge": edges}),
            lambda: scipy_cc(g),
            lambda: plain_cc(spark, edges),
        ),
        "pagerank": (
            lambda: fixflow_run(spark, pagerank, {"edge": edges, "node": nodes}),
            lambda: scipy_pagerank(g, epsilon),
            lambda: plain_pagerank(spark, edges, nodes, epsilon),
        ),
    }


def timed(fn: Callable[[], object], runs: int, warmup: int = 0) -> tuple[float, object]:
    """Median wall time of ``runs`` calls after ``warmup`` untimed ones (JIT, caches)."""
    for _ in range(warmup):
        fn()
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed runs of each Spark engine first"
    )
    parser.add_argument("--algorithms", nargs="+", default=["sssp", "cc", "pagerank"])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("fixflow").setLevel(logging.WARNING)
    spark = make_session(app_name="fixflow-bench")
    rows = []
    for size in args.sizes:
        g = make_graph(size)
        edges = edge_frame(spark, g).localCheckpoint()
        nodes = spark.range(g.nodes).withColumnRenamed("id", "id").localCheckpoint()
        epsilon = 0.01 * g.nodes
        cases = cases_for(spark, g, edges, nodes, epsilon)
        for name in args.algorithms:
            ours, scipy_fn, plain = cases[name]
            log.info("%s on %d arcs ...", name, g.arcs)
            t_ours, info = timed(ours, args.runs, args.warmup)
            t_scipy, _ = timed(scipy_fn, args.runs)
            t_plain, plain_info = timed(plain, args.runs, args.warmup)
            row = {
                "algorithm": name,
                "arcs": g.arcs,
                "nodes": g.nodes,
                "fixflow": t_ours,
                "scipy": t_scipy,
                "plain": t_plain,
                "rounds": info["rounds"],  # type: ignore[index]
                "jobs": info["jobs"],  # type: ignore[index]
                "plain_rounds": plain_info["rounds"],  # type: ignore[index]
            }
            log.info("%s", row)
            rows.append(row)
            write_results(args.out, rows, args.runs, args.warmup)
    return 0


def write_results(path: Path, rows: list[dict[str, object]], runs: int, warmup: int) -> None:
    lines = [
        "# Batch evaluation benchmark",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}, "
        f"Python {sys.version.split()[0]}; Spark local[2] (fixflow's make_session defaults).",
        f"Median of {runs} runs after {warmup} untimed warm-up run(s) of each Spark engine, "
        f"seconds; load average at the end {os.getloadavg()[0]:.1f}. Graphs: Barabási–Albert "
        f"(m=2, seed {SEED}), both arc "
        "directions, weights uniform in [1, 10). Generated by `bench/run_eval_bench.py`.",
        "",
        "| algorithm | arcs | nodes | fixflow (s) | plain Spark loop (s) | scipy (s) "
        "| fixflow / plain | fixflow / scipy | rounds (fixflow / plain) | fixflow jobs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['algorithm']} | {r['arcs']:,} | {r['nodes']:,} | {r['fixflow']:.1f} "
            f"| {r['plain']:.1f} | {r['scipy']:.3f} "
            f"| {r['fixflow'] / r['plain']:.2f} | {r['fixflow'] / r['scipy']:.0f} "  # type: ignore[operator]
            f"| {r['rounds']} / {r['plain_rounds']} | {r['jobs']} |"
        )
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
