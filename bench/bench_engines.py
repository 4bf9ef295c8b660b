"""MRA engines on hard and easy graphs: sync vs async vs hybrid vs scipy vs a plain PySpark loop.

Graphs (``bench/graphs.py``, the peer benchmark's generator with node ids randomly
permuted): R-MAT (scale-free, ~10 hops) and a road-like grid (hundreds of hops), 100k and
1M directed edges. Programs: SSSP from the generator's source, CC over both directions of
every edge, PageRank with ``sum[Δr] < 0.01·nodes``.

Per cell the median of ``--runs`` timed runs after one untimed warm-up (the same
SparkSession for everything), with the engine's Spark jobs, its rounds (sync) or stages
(async/hybrid), local iterations, messages and β, and the shard cut. A Spark engine that
would run for longer than ``--budget`` seconds is given a round cap that stops it there:
the cell then says ``capped`` with the rounds it reached (the sync engine needs one round
per hop: 1,085 on the 1M grid). Results go to ``bench/ENGINES.md``.

Run: ``.venv/bin/python bench/bench_engines.py [--graphs grid_100k rmat_100k ...]
[--programs sssp cc pagerank] [--engines sync async hybrid plain scipy] [--runs 3]``.
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
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphs
import run_eval_bench as classic

from fixflow.checker import load
from fixflow.operators.change import inserted
from fixflow.operators.engines.base import EngineOptions, RoundInfo
from fixflow.operators.evaluate import EvalOptions, Progress, evaluate_with_stats
from fixflow.operators.maintain import Maintainer
from fixflow.pipeline.spark import make_session

log = logging.getLogger("bench")

SSSP = classic.SSSP
CC = classic.CC
PAGERANK = classic.PAGERANK


@dataclass
class Cell:
    graph: str
    program: str
    engine: str
    seconds: float
    runs: int
    rounds: int = 0
    jobs: int = 0
    capped: bool = False
    detail: dict[str, float] = field(default_factory=dict)
    check: str = ""
    """Against scipy on the last run: "ok", or what differs (empty: not checked)."""
    verify: Callable[[], str] | None = field(default=None, repr=False)
    """Computes ``check`` after the clock stopped."""
    times: list[float] = field(default_factory=list)
    """Every timed run's seconds (``seconds`` is their median)."""
    load: tuple[float, float] = (0.0, 0.0)
    """The load average (1 min) before the first and after the last timed run."""


@dataclass
class Loaded:
    name: str
    graph: classic.Graph
    edges: DataFrame
    nodes: DataFrame
    source: int


def load_graph(spark: SparkSession, name: str) -> Loaded:
    nodes, src, dst, weights, source = graphs.edge_arrays(name)
    graph = classic.Graph(nodes, src, dst, weights)
    edges = spark.createDataFrame(pa.table({"src": src, "dst": dst, "w": weights}))
    node_frame = spark.range(nodes).localCheckpoint()
    return Loaded(name, graph, edges.localCheckpoint(), node_frame, source)


def program_text(name: str, loaded: Loaded) -> str:
    if name == "sssp":
        return SSSP.replace("X = 0", f"X = {loaded.source}")
    if name == "cc":
        return CC
    return PAGERANK.format(epsilon=0.01 * loaded.graph.nodes)


def edb_for(name: str, loaded: Loaded, spark: SparkSession) -> dict[str, DataFrame]:
    if name == "cc":  # connected components of the undirected graph
        both = loaded.edges.unionByName(
            loaded.edges.selectExpr("dst as src", "src as dst", "w")
        ).distinct()
        return {"edge": both}
    if name == "pagerank":
        return {"edge": loaded.edges, "node": loaded.nodes}
    return {"edge": loaded.edges}


def fixflow_runner(
    spark: SparkSession, program: str, loaded: Loaded, engine: str, cap: int, shards: int
) -> Callable[[], Cell]:
    report = load(program_text(program, loaded), f"{program}.dl")
    edb = edb_for(program, loaded, spark)
    details: list[RoundInfo | Progress] = []
    options = EvalOptions(
        max_iterations=cap,
        engine_options=EngineOptions(mode=engine, shards=shards, priority=True),
        progress=details.append,
        local_rows=0,  # the engines on Spark are what is measured
    )

    def run() -> Cell:
        details.clear()
        evaluation = evaluate_with_stats(report, edb, spark, options)
        stats = evaluation.stats[-1]
        for frame in evaluation.relations.values():
            frame.count()
        last = details[-1] if details else None
        detail = dict(getattr(last, "detail", {}) or {})
        cell = Cell(
            loaded.name, program, engine, 0.0, 0, stats.rounds, stats.jobs, stats.capped, detail
        )
        if not stats.capped:
            cell.verify = partial(check_result, program, loaded, evaluation.relations)
        return cell

    return run


def check_result(program: str, loaded: Loaded, relations: dict[str, DataFrame]) -> str:
    """The evaluation's answer against scipy's (every timed run, after its clock stops)."""
    g = loaded.graph
    name = {"sssp": "sssp", "cc": "cc", "pagerank": "rank"}[program]
    rows = np.array(relations[name].collect(), dtype=np.float64).reshape(-1, 2)
    keys, values = rows[:, 0].astype(np.int64), rows[:, 1]
    if program == "sssp":
        expected = classic.dijkstra(g.matrix(), indices=loaded.source)
        reached = np.flatnonzero(np.isfinite(expected))
        if set(keys.tolist()) != set(reached.tolist()):
            return f"reached {len(keys)} nodes, scipy {len(reached)}"
        worst = float(np.abs(values - expected[keys]).max(initial=0.0))
        return "ok" if worst <= 1e-6 else f"off by {worst:.3g}"
    if program == "cc":
        _, component = classic.connected_components(g.matrix(), directed=False)
        pairs = set(zip(component[keys].tolist(), values.astype(np.int64).tolist(), strict=True))
        components = len(set(component[keys].tolist()))
        return "ok" if len(pairs) == components == len(set(values.tolist())) else "differs"
    # The clause stops both engines short of the fixpoint (Σ|Δ| < 0.01·nodes), at different
    # places: each is compared with the fixpoint itself (scipy to Σ|Δ| < 1e-9·nodes).
    expected = np.asarray(classic.scipy_pagerank(g, 1e-9 * g.nodes))
    error = np.abs(values - expected[keys])
    return (
        f"to the fixpoint: Σ|Δ| {error.sum():.3g}, max |Δ| {error.max(initial=0.0):.3g} "
        f"(max rank {expected.max():.3g})"
    )


def scipy_runner(program: str, loaded: Loaded) -> Callable[[], Cell]:
    g = loaded.graph

    def run() -> Cell:
        if program == "sssp":
            classic.dijkstra(g.matrix(), indices=loaded.source)
        elif program == "cc":
            classic.connected_components(g.matrix(), directed=False)
        else:
            classic.scipy_pagerank(g, 0.01 * g.nodes)
        return Cell(loaded.name, program, "scipy", 0.0, 0)

    return run


def plain_runner(spark: SparkSession, program: str, loaded: Loaded, cap: int) -> Callable[[], Cell]:
    def run() -> Cell:
        if program == "sssp":
            seed = spark.createDataFrame([(loaded.source, 0.0)], "node long, v double")
            info = classic.plain_min_loop(spark, loaded.edges, seed, cap)
        elif program == "cc":
            info = classic.plain_cc(spark, edb_for("cc", loaded, spark)["edge"], cap)
        else:
            info = classic.plain_pagerank(
                spark,
                loaded.edges,
                loaded.nodes.withColumnRenamed("id", "id"),
                0.01 * loaded.graph.nodes,
                cap,
            )
        return Cell(
            loaded.name,
            program,
            "plain",
            0.0,
            0,
            int(str(info["rounds"])),
            capped=bool(info.get("capped")),
        )

    return run


INSERTED_EDGES = 100
"""Edges per incremental epoch (``--incremental``)."""


def incremental_runner(
    spark: SparkSession, program: str, loaded: Loaded, engine: str, shards: int
) -> Callable[[], Cell]:
    """An epoch inserting 100 random edges (random endpoints, the graph's weights) into the
    maintained relation; the cell's time is the recursive stratum's update time, the
    bootstrap (a ``Maintainer.load``) happens once, untimed. Every call inserts new edges."""
    report = load(program_text(program, loaded), f"{program}.dl")
    options = EvalOptions(
        max_iterations=100_000,
        engine_options=EngineOptions(mode=engine, shards=shards),
        local_rows=0,  # the engines on Spark are what is measured
    )
    maintainer = Maintainer(report, spark, options, switch_fraction=1e6)
    maintainer.load(edb_for(program, loaded, spark))
    rng = np.random.default_rng(7)

    def run() -> Cell:
        n = loaded.graph.nodes
        src, dst = rng.integers(0, n, INSERTED_EDGES), rng.integers(0, n, INSERTED_EDGES)
        w = rng.choice(loaded.graph.w, INSERTED_EDGES)
        if program == "cc":  # both directions, as ``edb_for`` gives them
            src, dst, w = np.r_[src, dst], np.r_[dst, src], np.r_[w, w]
        rows = pa.table({"src": src, "dst": dst, "w": w})
        inserts = spark.createDataFrame(rows).subtract(maintainer.relation("edge"))
        epoch = maintainer.apply({"edge": inserted(inserts.toDF("src", "dst", "w"))})
        stratum = max(epoch.strata, key=lambda s: s.seconds)
        cell = Cell(loaded.name, f"{program}+{INSERTED_EDGES}", engine, 0.0, 0, stratum.rounds)
        cell.detail = {"stratum_seconds": stratum.seconds}
        return cell

    return run


def timed(run: Callable[[], Cell], runs: int, warmup: int) -> Cell:
    return alternated([run], runs, warmup)[0]


def alternated(runs_of: list[Callable[[], Cell]], runs: int, warmup: int) -> list[Cell]:
    """Each configuration's cell (median of ``runs``), the configurations taking turns run
    by run, so that they share the machine's load; the load average (1 min) before the
    first and after the last timed run goes into every cell's detail."""
    for run in runs_of:
        for _ in range(warmup):
            run()
    times: list[list[float]] = [[] for _ in runs_of]
    cells: list[Cell | None] = [None for _ in runs_of]
    load_start = os.getloadavg()[0]
    for _ in range(runs):
        for i, run in enumerate(runs_of):
            started = time.perf_counter()
            cell = run()
            seconds = time.perf_counter() - started
            times[i].append(cell.detail.pop("stratum_seconds", seconds))
            if cell.verify is not None:
                cell.check = cell.verify()
                if cell.check != "ok" and not cell.check.startswith("to the fixpoint"):
                    log.warning("%s %s %s: %s", cell.graph, cell.program, cell.engine, cell.check)
            cells[i] = cell
    load_end = os.getloadavg()[0]
    out = []
    for cell, seconds in zip(cells, times, strict=True):
        assert cell is not None
        cell.seconds, cell.runs = statistics.median(seconds), runs
        cell.times = seconds
        cell.load = (load_start, load_end)
        out.append(cell)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--graphs", nargs="+", default=["grid_100k", "rmat_100k", "rmat_1m", "grid_1m"]
    )
    parser.add_argument("--programs", nargs="+", default=["sssp", "cc", "pagerank"])
    parser.add_argument(
        "--engines", nargs="+", default=["async", "hybrid", "sync", "plain", "scipy"]
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--shards",
        type=int,
        nargs="+",
        default=[0],
        help="[engine] shards (0: automatic); several: each Fixflow cell is run with every "
        "count, the counts alternating run by run in the same session",
    )
    parser.add_argument(
        "--cap",
        type=int,
        default=120,
        help="round cap of the sync engine and the plain loop (they need one round per hop)",
    )
    parser.add_argument(
        "--incremental",
        nargs="*",
        default=["grid_100k"],
        help=f"graphs on which an epoch inserting {INSERTED_EDGES} edges is timed (SSSP, CC)",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("ENGINES.md"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("fixflow").setLevel(logging.WARNING)
    spark = make_session(app_name="fixflow-bench-engines")
    cells: list[Cell] = []
    for name in args.graphs:
        loaded = load_graph(spark, name)
        for program in args.programs:
            for engine in args.engines:
                counts = args.shards if engine in ("async", "hybrid", "sync") else [0]
                runners = [_runner(spark, program, loaded, engine, args, n) for n in counts]
                warmup = 0 if engine == "scipy" else args.warmup
                for n, cell in zip(counts, alternated(runners, args.runs, warmup), strict=True):
                    if len(counts) > 1:
                        cell.engine = f"{engine}, {n} shard{'s' if n != 1 else ''}"
                    log.info("%s", cell)
                    cells.append(cell)
                write_results(args.out, cells, args)
        if name in args.incremental:
            cells += incremental_cells(spark, loaded, args)
            write_results(args.out, cells, args)
    return 0


def incremental_cells(spark: SparkSession, loaded: Loaded, args: argparse.Namespace) -> list[Cell]:
    cells = []
    for program in [p for p in args.programs if p in ("sssp", "cc")]:
        # Not sync: its bootstrap alone needs one round per hop (CC on the 100k grid ran
        # for more than 15 minutes); the issue measured its epochs at 2.5–22 s.
        for engine in [e for e in args.engines if e in ("async", "hybrid")]:
            run = incremental_runner(spark, program, loaded, engine, args.shards[0])
            cell = timed(run, args.runs, args.warmup)
            log.info("%s", cell)
            cells.append(cell)
    return cells


def _runner(
    spark: SparkSession,
    program: str,
    loaded: Loaded,
    engine: str,
    args: argparse.Namespace,
    shards: int,
) -> Callable[[], Cell]:
    if engine == "scipy":
        return scipy_runner(program, loaded)
    if engine == "plain":
        return plain_runner(spark, program, loaded, args.cap)
    cap = args.cap if engine == "sync" else 100_000
    return fixflow_runner(spark, program, loaded, engine, cap, shards)


def write_results(path: Path, cells: list[Cell], args: argparse.Namespace) -> None:
    load1, load5, _ = os.getloadavg()
    lines = [
        "# MRA engines: sync vs async vs hybrid",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{sys.version.split()[0]}; Spark local[2]. Median of {args.runs} runs after "
        f"{args.warmup} warm-up, seconds; load average at the end {load1:.1f} (5 min "
        f"{load5:.1f}). Sync and the plain loop are capped at {args.cap} rounds (one per hop):"
        " a capped cell did not finish. Generated by `bench/bench_engines.py`.",
        "",
        "| graph | program | engine | seconds | rounds/stages | jobs | capped "
        "| local iterations | messages | β min–max | cut | result | runs (s) | load |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---|---:|---|---|---|",
    ]
    for c in cells:
        d = c.detail
        beta = f"{d['beta_min']:.0f}–{d['beta_max']:.0f}" if "beta_min" in d else ""
        lines.append(
            f"| {c.graph} | {c.program} | {c.engine} | {c.seconds:.2f} | {c.rounds or ''} "
            f"| {c.jobs or ''} | {'capped' if c.capped else ''} "
            f"| {d.get('local_iterations', '') and int(d['local_iterations'])} "
            f"| {d.get('messages', '') and int(d['messages'])} | {beta} "
            f"| {d.get('cut', '') and int(d['cut'])} | {c.check} "
            f"| {' '.join(f'{t:.2f}' for t in c.times)} | {c.load[0]:.1f}–{c.load[1]:.1f} |"
        )
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
