"""End-to-end latency of the continuous pipeline under insertions and deletions (not a test).

Per program (SSSP, CC, PageRank), graph kind and engine: one stream is started, the graph is
published and bootstrapped, then for each batch kind (--kinds) --repeats batches of --batch
edges are published one after the other and each is timed from the first send to the
batch's EDB commit being visible in Delta (the EDB commit is a batch's last commit, after
its result commits). Every row is reported beside the bootstrap of the same stream (the
same publish -> visible time for the initial graph, in the same run) and the ratio.

Batch kinds
  insert : --batch new edges.
  delete : --batch edges drawn uniformly from the edges present at that moment (so every
           deletion is real; the Maintainer's report of the batch confirms it).
  mixed  : --batch // 2 deletions of present edges and the rest insertions of new edges,
           published in one go (deletions first).

Graphs (--graphs)
  random : the original benchmark graph: uniform random digraph, average out-degree 8,
           weights 1..9, SSSP from vertex 1; new edges are uniform random new pairs.
           CC runs on the directed edges, as before.
  rmat, grid : ``bench/graphs.py`` (the peer benchmark's generator, node ids randomly
           permuted), SSSP from the generator's source, weights 1..100. New edges come
           from the same generator: ``repeats x (insertions per batch)`` edges drawn at
           random from the generated graph are held out of the bootstrap and inserted
           later (rmat: R-MAT edges; grid: re-opened roads), so the bootstrapped graph is
           that many edges short of --edges (750 of 100k with the defaults).
           CC runs on the undirected graph: every edge in both directions. One CC *edge* of
           a batch is an undirected edge, i.e. two facts (both directions), inserted or
           deleted together: a CC batch of 100 edges is 200 messages. The table's "facts"
           column counts facts.
SSSP rows also say how many deleted edges were on a shortest path just before the batch
(dist[src] + w == dist[dst], by scipy): deletions stay uniformly random, that column shows
that some of them hit the shortest-path tree.

Engines (--engines): the MRA engine of ``[engine] mode`` (sync, async, hybrid); the stream's
consistency stays ``converged``. Strategies are read from each batch's report (the
Maintainer's epoch: per stratum ``bootstrap``, ``bootstrap:switched`` or
``update:<method>``). Machine load (os.getloadavg) is taken at the start and end of the run
and of every row.

Everything runs on the embedded default: a Tansu broker on a free port, local Spark, Delta
tables in a temporary lake; trigger 50 ms, no adaptive batch size. Per engine a throwaway
stream (--warmup edges of the random graph, one insertion batch) runs first, so the first
measured bootstrap does not pay the JVM's warm-up. The sync engine needs one round per hop
(more than 1,000 on grid_1m): --max-iterations defaults to 5,000.

    # the original insertion run (random graph, 100k edges, 5 batches of 100)
    .venv/bin/python bench/bench_stream.py
    # deletions and mixed batches on the peer graphs, sync and async, Markdown to stdout
    .venv/bin/python bench/bench_stream.py --graphs rmat,grid --edges 100k \\
        --kinds delete,mixed --engines sync,async --markdown > /tmp/updates.md
    .venv/bin/python bench/bench_stream.py --edges 10k --repeats 3 --programs sssp \\
        --graphs rmat --kinds insert,delete,mixed --markdown      # small and quick

Progress goes to stderr; the report goes to --out (default bench/STREAM_RESULTS.md) or,
with --markdown, to stdout only.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphs
from benchlib import free_port, log, machine, write_report

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = {
    "sssp": ROOT / "examples" / "powerlog_p1_sssp.dl",
    "cc": ROOT / "examples" / "powerlog_p3_cc.dl",
    "pagerank": ROOT / "examples" / "powerlog_p2b_pagerank.dl",
}
SSSP_SOURCE = "X = 1,"
"""The source clause of the SSSP example; rmat/grid replace the 1 by the graph's source."""
GRAPH_KINDS = ("random", "rmat", "grid")
BATCH_KINDS = ("insert", "delete", "mixed")
ENGINES = ("sync", "async", "hybrid")

Edge = tuple[Any, ...]
"""(src, dst) or, for SSSP, (src, dst, w); for undirected CC (src < dst), one per pair."""


@dataclass
class Measurement:
    """One row: a batch kind's updates on one stream, beside that stream's bootstrap."""

    program: str
    graph: str
    engine: str
    kind: str
    edges: int
    bootstrap_s: float
    bootstrap_batch_s: float
    bootstrap_stratum_s: float
    bootstrap_batches: int
    updates_s: list[float] = field(default_factory=list)
    update_batches_s: list[float] = field(default_factory=list)
    update_stratum_s: list[float] = field(default_factory=list)
    update_batch_counts: list[int] = field(default_factory=list)
    strategies: list[str] = field(default_factory=list)
    """Per update: what every changed stratum ran (batches of one update joined by ->)."""
    facts: list[tuple[int, int]] = field(default_factory=list)
    """Per update: facts the batches really inserted and deleted (Maintainer's input)."""
    expected_facts: tuple[int, int] = (0, 0)
    on_shortest_path: list[int] = field(default_factory=list)
    """SSSP, per update: deleted edges with dist[src] + w == dist[dst] before the batch."""
    load_start: float = 0.0
    load_end: float = 0.0
    result: str = "not checked"
    """The committed results after the kind's last batch against scipy (``check_results``)."""

    @property
    def median_update_s(self) -> float:
        return statistics.median(self.updates_s)

    @property
    def ratio(self) -> float:
        return self.median_update_s / self.bootstrap_s


# ---------------------------------------------------------------- graphs and workloads


def random_graph(program: str, n_edges: int, seed: int) -> tuple[int, list[tuple]]:
    """A random digraph with average out-degree 8 whose vertex 1 reaches most vertices
    (a path 1 -> 2 -> ... through every vertex would be too deep; a random graph of this
    density has a giant strongly connected component)."""
    rng = random.Random(seed)
    n_nodes = max(16, n_edges // 8)
    edges: set[tuple] = set()
    while len(edges) < n_edges:
        a, b = rng.randrange(1, n_nodes + 1), rng.randrange(1, n_nodes + 1)
        if a != b:
            edges.add((a, b, float(rng.randrange(1, 10))) if program == "sssp" else (a, b))
    return n_nodes, sorted(edges)


def new_edges(
    program: str, keys: set[tuple[int, int]], n_nodes: int, count: int, rng: random.Random
) -> list[tuple]:
    """``count`` uniform random edges whose (src, dst) is not in ``keys`` (which grows)."""
    fresh: list[tuple] = []
    while len(fresh) < count:
        a, b = rng.randrange(1, n_nodes + 1), rng.randrange(1, n_nodes + 1)
        if a != b and (a, b) not in keys:
            keys.add((a, b))
            fresh.append((a, b, float(rng.randrange(1, 10))) if program == "sssp" else (a, b))
    return fresh


class EdgeSet:
    """The edges present in the stream, with O(1) uniform sampling and removal."""

    def __init__(self, edges: Sequence[Edge]) -> None:
        self.items: list[Edge] = list(edges)
        self.where = {e: i for i, e in enumerate(self.items)}

    def __len__(self) -> int:
        return len(self.items)

    def add(self, edges: Sequence[Edge]) -> None:
        for e in edges:
            self.where[e] = len(self.items)
            self.items.append(e)

    def take(self, count: int, rng: random.Random) -> list[Edge]:
        """Remove and return ``count`` edges drawn uniformly without replacement."""
        chosen = [self.items[i] for i in rng.sample(range(len(self.items)), count)]
        for e in chosen:
            i = self.where.pop(e)
            last = self.items.pop()
            if i < len(self.items):
                self.items[i] = last
                self.where[last] = i
        return chosen


@dataclass
class Workload:
    """One program's graph: the facts to bootstrap and where new edges come from."""

    program: str
    graph: str
    """``random_<edges>`` or a ``bench/graphs.py`` name such as ``rmat_100k``."""
    nodes: list[int]
    """PageRank's node facts."""
    source: int
    """SSSP's source vertex."""
    initial: list[Edge]
    undirected: bool
    spare: list[Edge] = field(default_factory=list)
    """rmat/grid: held-out edges of the generated graph, inserted as new edges."""
    keys: set[tuple[int, int]] = field(default_factory=set)
    """random: every (src, dst) ever present (new edges avoid them)."""

    def facts(self, edges: Sequence[Edge]) -> list[tuple]:
        if not self.undirected:
            return list(edges)
        return [f for a, b in edges for f in ((a, b), (b, a))]

    def fresh(self, count: int, rng: random.Random) -> list[Edge]:
        if self.graph.startswith("random"):
            return new_edges(self.program, self.keys, len(self.nodes), count, rng)
        if len(self.spare) < count:
            raise RuntimeError(f"{self.graph}: only {len(self.spare)} held-out edges left")
        taken, self.spare = self.spare[:count], self.spare[count:]
        return taken

    def program_text(self) -> str:
        text = PROGRAMS[self.program].read_text(encoding="utf-8")
        if self.program == "sssp" and self.source != 1:
            if SSSP_SOURCE not in text:
                raise RuntimeError(f"{PROGRAMS['sssp']} no longer says {SSSP_SOURCE!r}")
            text = text.replace(SSSP_SOURCE, f"X = {self.source},")
        return text


def size_name(edges: int) -> str:
    """100000 -> "100k", 1000000 -> "1m" (the names ``bench/graphs.py`` caches under)."""
    if edges % 1_000_000 == 0:
        return f"{edges // 1_000_000}m"
    if edges % 1_000 == 0:
        return f"{edges // 1_000}k"
    return str(edges)


def workload(program: str, kind: str, n_edges: int, seed: int, held_out: int) -> Workload:
    if kind == "random":
        n_nodes, edges = random_graph(program, n_edges, seed)
        return Workload(
            program,
            f"random_{n_edges}",
            list(range(1, n_nodes + 1)),
            1,
            edges,
            undirected=False,
            keys={e[:2] for e in edges},
        )
    g = graphs.load(f"{kind}_{size_name(n_edges)}")
    src, dst = g.src.tolist(), g.dst.tolist()
    units: list[Edge]
    if program == "sssp":
        units = list(zip(src, dst, g.weight.tolist(), strict=True))
    elif program == "cc":
        units = sorted({(min(a, b), max(a, b)) for a, b in zip(src, dst, strict=True)})
    else:
        units = list(zip(src, dst, strict=True))
    rng = random.Random(seed)
    spare_at = set(rng.sample(range(len(units)), min(held_out, len(units) // 10)))
    return Workload(
        program,
        g.name,
        list(range(g.nodes)),
        g.source,
        [e for i, e in enumerate(units) if i not in spare_at],
        undirected=program == "cc",
        spare=[units[i] for i in sorted(spare_at)],
    )


def on_shortest_paths(present: EdgeSet, deleted: Sequence[Edge], source: int) -> int:
    """How many of the ``deleted`` (src, dst, w) edges (still in ``present``'s graph a
    moment ago) satisfy dist[src] + w == dist[dst]."""
    from scipy.sparse.csgraph import dijkstra

    dist = dijkstra(weight_matrix(present.items + list(deleted), source), indices=source)
    return sum(1 for a, b, w in deleted if dist[a] + w == dist[b] and dist[b] < float("inf"))


def weight_matrix(edges: Sequence[Edge], source: int) -> Any:
    """The (src, dst, w) edges as a sparse matrix, the least weight of parallel edges (the
    random graph has some; a sparse matrix would add their weights up)."""
    import numpy as np
    from scipy.sparse import csr_matrix

    rows = np.array(edges, dtype=np.float64).reshape(-1, 3)
    rows = rows[np.lexsort((rows[:, 2], rows[:, 1], rows[:, 0]))]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = (rows[1:, 0] != rows[:-1, 0]) | (rows[1:, 1] != rows[:-1, 1])
    rows = rows[first]
    n = int(max(rows[:, :2].max(initial=0), source)) + 1
    pairs = (rows[:, 0].astype(np.int64), rows[:, 1].astype(np.int64))
    return csr_matrix((rows[:, 2], pairs), (n, n))


def check_results(work: Workload, lake: Any, present: EdgeSet) -> str:
    """The stream's committed results against scipy over the edges ``present`` now: SSSP's
    distances from the source, CC's labels (the least node of each component); "exact",
    or what differs. PageRank is not checked here (bench_forms.py checks its fixpoint)."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components, dijkstra

    from fixflow.pipeline.lake.lakehouse import read_table

    if work.program not in ("sssp", "cc"):
        return "not checked"
    table = read_table(lake.results(work.program))
    got = {} if table is None else dict(zip(*(c.to_pylist() for c in table.columns), strict=True))
    edges = np.array([e[:2] for e in present.items], dtype=np.int64).reshape(-1, 2)
    n = int(max(edges.max(initial=0), work.source)) + 1
    if work.program == "sssp":
        dist = dijkstra(weight_matrix(present.items, work.source), indices=work.source)
        reached = np.flatnonzero(np.isfinite(dist))
        expected = dict(zip(reached.tolist(), dist[reached].tolist(), strict=True))
    else:
        ones = np.ones(len(edges), dtype=np.int8)
        matrix = csr_matrix((ones, (edges[:, 0], edges[:, 1])), (n, n))
        _, component = connected_components(matrix, directed=False)
        nodes = np.unique(edges)
        least = np.full(component.max(initial=0) + 1, n, dtype=np.int64)
        np.minimum.at(least, component[nodes], nodes)
        expected = dict(zip(nodes.tolist(), least[component[nodes]].tolist(), strict=True))
    wrong = sum(1 for k, v in expected.items() if k not in got or got[k] != v)
    extra = len(got.keys() - expected.keys())
    return "exact" if not wrong and not extra else f"{wrong} wrong or missing, {extra} extra"


# ---------------------------------------------------------------- the stream


def publish(
    config: Any, program: Any, relation: str, rows: Sequence[tuple], deletes: Sequence[tuple] = ()
) -> None:
    """Send ``deletes`` (op "delete") then ``rows`` (insertions) with one producer."""
    from kafka import KafkaProducer

    from fixflow.pipeline.kafka.messages import encode_fact, fact_key

    attributes = program.declaration(relation).attributes
    producer = KafkaProducer(
        bootstrap_servers=config.kafka.bootstrap_servers,
        acks=1,
        linger_ms=20,
        batch_size=256 * 1024,
    )
    topic = config.kafka.topic(relation)
    for row in deletes:
        value = encode_fact(attributes, row, "delete")
        producer.send(topic, key=fact_key(row).encode(), value=value.encode())
    for row in rows:
        value = encode_fact(attributes, row)
        producer.send(topic, key=fact_key(row).encode(), value=value.encode())
    producer.flush(timeout=300)
    producer.close()


FILE_PUBLISH_FACTS = 1_000_000
"""From this many initial facts on, the graph is published from a file as `fixflow publish`
does (Arrow read, librdkafka): kafka-python's per-record ``send`` managed ~10k facts/s on
the loaded 2-core machine, 17+ minutes for R-MAT 10M, against ~300k/s."""


def initial_file(program: Any, facts: Sequence[tuple], scratch: Path) -> Path | None:
    """A CSV of the bootstrap's edge facts (written by Arrow, before the clock starts) when
    there are ``FILE_PUBLISH_FACTS`` or more, else None (sent by ``publish``)."""
    if len(facts) < FILE_PUBLISH_FACTS:
        return None
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    names = [a.name for a in program.declaration("edge").attributes]
    table = pa.table({n: [f[i] for f in facts] for i, n in enumerate(names)})
    path = scratch / "initial_edge.csv"
    with path.open("wb") as handle:
        handle.write((",".join(names) + "\n").encode())  # Arrow would quote the names
        pa_csv.write_csv(table, handle, pa_csv.WriteOptions(include_header=False))
    return path


def publish_initial(config: Any, program: Any, facts: Sequence[tuple], file: Path | None) -> None:
    """The bootstrap's edge facts: from ``file`` as `fixflow publish` sends them, or one by
    one by ``publish``."""
    if file is None:
        publish(config, program, "edge", facts)
        return
    from fixflow.pipeline.publish.files import publish_facts

    publish_facts(config, "edge", file, program=program)
    file.unlink()


def wait_for_records(stream: Any, query: Any, expected: int, timeout_s: float) -> float:
    """Poll until the stream has processed ``expected`` records in all (the published ones
    may arrive in several micro-batches) and no batch is running, so the last batch's EDB
    commit is visible; the monotonic time that was seen."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {query.exception()}")
        done = sum(r.records for r in stream.reports) >= expected
        if done and not query.status.get("isTriggerActive", False):
            return time.monotonic()
        time.sleep(0.02)
    raise TimeoutError(f"{expected} records not processed within {timeout_s} s")


def stratum_seconds(reports: Sequence[Any]) -> float:
    return sum(
        s.seconds for r in reports if r.epoch for s in r.epoch.strata if s.strategy != "unchanged"
    )


def strategies(reports: Sequence[Any]) -> str:
    """What the changed strata ran, per micro-batch (``->`` between micro-batches)."""
    per_batch = [
        ", ".join(
            f"{'/'.join(s.relations)}: {s.strategy}"
            for s in r.epoch.strata
            if s.strategy != "unchanged"
        )
        for r in reports
        if r.epoch
    ]
    return " -> ".join(b for b in per_batch if b) or "-"


def batch_sizes(kind: str, batch: int) -> tuple[int, int]:
    """(insertions, deletions) of one batch, in edges."""
    if kind == "insert":
        return batch, 0
    if kind == "delete":
        return 0, batch
    return batch - batch // 2, batch // 2


def release_all(spark: Any) -> None:
    """Drop every cached frame and persisted RDD of the finished stream."""
    spark.catalog.clearCache()
    for rdd in spark.sparkContext._jsc.getPersistentRDDs().values():
        rdd.unpersist(False)


def local_rows_text(args: argparse.Namespace) -> str:
    if args.local_rows is None:
        return "as configured (2,000,000 by default: min/max retractions in the driver)"
    if args.local_rows == 0:
        return "0 (retractions on Spark)"
    return f"{args.local_rows:,} (min/max retractions up to that size in the driver)"


def stream_config(base_config: Any, lake_root: Path, prefix: str, records: int, args: Any) -> Any:
    return replace(
        base_config,
        kafka=replace(base_config.kafka, topic_prefix=prefix),
        lake=replace(base_config.lake, path=str(lake_root)),
        stream=replace(
            base_config.stream,
            trigger_ms=50,
            adaptive=False,
            max_records_per_trigger=max(10 * records, 10_000),
            # The bootstrap is one batch, read by the driver: read by a Spark job and
            # collected, R-MAT 10M's 10M records ran the driver's JVM (4g) out of heap.
            driver_read_max_records=max(records, base_config.stream.driver_read_max_records),
        ),
        engine=replace(
            base_config.engine,
            mode=args.engine_mode,
            max_iterations=args.max_iterations,
            local_rows=base_config.engine.local_rows
            if args.local_rows is None
            else args.local_rows,
        ),
    )


def measure(
    work: Workload,
    spark: Any,
    base_config: Any,
    lake_root: Path,
    args: argparse.Namespace,
    kinds: Sequence[str],
    repeats: int,
) -> list[Measurement]:
    """Bootstrap ``work`` on a fresh stream, then ``repeats`` batches of every kind."""
    from fixflow.pipeline.stream.program import ProgramStream

    facts = work.facts(work.initial)
    prefix = f"bench{args.seed}{args.engine_mode}{work.graph}{work.program}."
    config = stream_config(base_config, lake_root, prefix, len(facts), args)
    program_file = lake_root.parent / "programs" / lake_root.name / PROGRAMS[work.program].name
    program_file.parent.mkdir(parents=True, exist_ok=True)
    program_file.write_text(work.program_text(), encoding="utf-8")
    stream = ProgramStream(spark, config, program_file)
    program = stream.program
    query = stream.start(available_now=False)
    initial = initial_file(program, facts, lake_root.parent)
    results: list[Measurement] = []
    try:
        started = time.monotonic()
        sent = 0
        if work.program == "pagerank":
            publish(config, program, "node", [(v,) for v in work.nodes])
            sent += len(work.nodes)
        publish_initial(config, program, facts, initial)
        sent += len(facts)
        bootstrap = wait_for_records(stream, query, sent, 3600) - started
        boot_reports = list(stream.reports)
        log(
            f"{work.program} {work.graph} {args.engine_mode}: bootstrap {bootstrap:.2f} s "
            f"({len(facts)} edge facts, {strategies(boot_reports)})"
        )
        rng = random.Random(args.seed + 1)
        present = EdgeSet(work.initial)
        for kind in kinds:
            n_insert, n_delete = batch_sizes(kind, args.batch)
            per = 2 if work.undirected else 1
            m = Measurement(
                work.program,
                work.graph,
                args.engine_mode,
                kind,
                len(work.initial),
                bootstrap,
                sum(r.seconds for r in boot_reports),
                stratum_seconds(boot_reports),
                len(boot_reports),
                expected_facts=(per * n_insert, per * n_delete),
                load_start=os.getloadavg()[0],
            )
            for _ in range(repeats):
                gone = present.take(n_delete, rng) if n_delete else []
                fresh = work.fresh(n_insert, rng) if n_insert else []
                if work.program == "sssp" and gone:
                    m.on_shortest_path.append(on_shortest_paths(present, gone, work.source))
                present.add(fresh)
                inserts, deletes = work.facts(fresh), work.facts(gone)
                seen = len(stream.reports)
                started = time.monotonic()
                publish(config, program, "edge", inserts, deletes)
                sent += len(inserts) + len(deletes)
                m.updates_s.append(wait_for_records(stream, query, sent, 3600) - started)
                reports = stream.reports[seen:]
                m.update_batch_counts.append(len(reports))
                m.update_batches_s.append(sum(r.seconds for r in reports))
                m.update_stratum_s.append(stratum_seconds(reports))
                m.strategies.append(strategies(reports))
                m.facts.append(
                    (
                        sum(r.inserted.get("edge", 0) for r in reports),
                        sum(r.deleted.get("edge", 0) for r in reports),
                    )
                )
                if m.facts[-1] != (len(inserts), len(deletes)):
                    log(f"  WARNING: applied {m.facts[-1]}, sent {(len(inserts), len(deletes))}")
                log(
                    f"  {work.program} {kind} {len(m.updates_s)}: {m.updates_s[-1]:.2f} s, "
                    f"{m.strategies[-1]}; " + "; ".join(r.phases.describe() for r in reports)
                )
            m.load_end = os.getloadavg()[0]
            m.result = check_results(work, stream.lake, present)
            log(
                f"{work.program} {work.graph} {kind}: median {m.median_update_s:.2f} s, "
                f"ratio {m.ratio:.2f}, results {m.result}"
            )
            results.append(m)
        return results
    finally:
        query.stop()
        release_all(spark)


# ---------------------------------------------------------------- the report


def grouped(values: Iterable[Any]) -> str:
    """``a ×3, b ×2`` (first appearance order), or ``a`` when every value is ``a``."""
    counts = Counter(map(str, values))
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{v} ×{n}" for v, n in counts.items())


def load_text(load: Sequence[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


def command_line(args: argparse.Namespace) -> str:
    return (
        f".venv/bin/python bench/bench_stream.py --graphs {','.join(args.graphs)} "
        f"--edges {args.edges} --batch {args.batch} --repeats {args.repeats} "
        f"--kinds {','.join(args.kinds)} --programs {','.join(args.programs)} "
        f"--engines {','.join(args.engines)} --max-iterations {args.max_iterations} "
        f"--warmup {args.warmup} --seed {args.seed} --master {args.master}"
    )


def report(
    results: list[Measurement],
    args: argparse.Namespace,
    note: str,
    load_start: Sequence[float],
    load_end: Sequence[float],
) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "# Streaming latency (bench/bench_stream.py)",
        "",
        f"Machine: {machine()}.",
        "",
        f"Run: `{command_line(args)}` on {when}. Load average (1 / 5 / 15 min) at the start "
        f"{load_text(load_start)}, at the end {load_text(load_end)}.",
        f"Embedded default: Tansu broker, Spark master {args.master}, Delta via delta-rs, "
        "converged "
        "consistency, trigger 50 ms, no adaptive batch size, "
        f"`[engine] local_rows` {local_rows_text(args)}. Latency = first send of a "
        "batch's messages -> every one of them processed and the last micro-batch's EDB "
        "commit (its last Delta commit) visible; the messages may arrive in more than one "
        "micro-batch (`batches`). Bootstrap = the same for the initial graph (and, for "
        "PageRank, its node facts) on the same stream, earlier in the same run (after a "
        "throwaway warm-up stream per engine); every batch kind of a (program, graph, "
        "engine) runs on that one stream, in the order listed. "
        "*Stratum* = the Maintainer's time in the strata that changed (`StratumEpoch.seconds`); "
        "*maintenance part* = all of `foreachBatch`. *Facts +/−* = edge facts the Maintainer "
        "really inserted/deleted per update (CC: an undirected edge is 2 facts). *On a "
        "shortest path* (SSSP): per update, deleted edges with dist[src] + w = dist[dst] "
        "just before the batch. *Result*: the committed results after the kind's last "
        "batch against scipy over the edges present then (SSSP, CC).",
        "",
        "| program | graph | engine | batch | facts +/− | bootstrap (s) | bootstrap stratum (s) "
        "| update median (s) | update min–max (s) | update stratum median (s) "
        "| maintenance part median (s) | update / bootstrap | batches per update "
        "| strategy per update | on a shortest path | load 1 min start→end | result |",
        "|---|---|---|---|---|--:|--:|--:|---|--:|--:|--:|---|---|---|---|---|",
    ]
    for m in results:
        facts = grouped(f"{i}/{d}" for i, d in m.facts)
        if any(f != m.expected_facts for f in m.facts):
            facts += f" (sent {m.expected_facts[0]}/{m.expected_facts[1]})"
        tight = "/".join(map(str, m.on_shortest_path)) or "-"
        lines.append(
            f"| {m.program} | {m.graph} ({m.edges}) | {m.engine} | {m.kind} | {facts} "
            f"| {m.bootstrap_s:.2f} | {m.bootstrap_stratum_s:.2f} | {m.median_update_s:.2f} "
            f"| {min(m.updates_s):.2f}–{max(m.updates_s):.2f} "
            f"| {statistics.median(m.update_stratum_s):.2f} "
            f"| {statistics.median(m.update_batches_s):.2f} | {m.ratio:.2f} "
            f"| {grouped(m.update_batch_counts)} | {grouped(m.strategies)} | {tight} "
            f"| {m.load_start:.2f}→{m.load_end:.2f} | {m.result} |"
        )
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def choices(allowed: Sequence[str]) -> Any:
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(allowed)}")
        return items

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--graphs", type=choices(GRAPH_KINDS), default=["random"], help="random, rmat, grid"
    )
    parser.add_argument(
        "--edges", type=graphs.parse_size, default=100_000, help="e.g. 10k, 100k, 1m"
    )
    parser.add_argument("--batch", type=int, default=100, help="edges per update batch")
    parser.add_argument("--repeats", type=int, default=5, help="batches per batch kind")
    parser.add_argument(
        "--kinds", type=choices(BATCH_KINDS), default=["insert"], help="insert, delete, mixed"
    )
    parser.add_argument("--programs", type=choices(tuple(PROGRAMS)), default=list(PROGRAMS))
    parser.add_argument(
        "--engines",
        type=choices(ENGINES),
        default=["hybrid"],
        help="[engine] mode: sync, async, hybrid (default: hybrid, the embedded default)",
    )
    parser.add_argument(
        "--max-iterations",
        type=int,
        default=5000,
        help="[engine] max_iterations (the sync engine needs one round per hop: >1000 on grid_1m)",
    )
    parser.add_argument(
        "--local-rows",
        type=graphs.parse_size,
        default=None,
        help="[engine] local_rows: min/max retractions of relations and inputs up to this "
        "many rows run in the driver (default: the embedded default's, 2M; 0: on Spark)",
    )
    parser.add_argument(
        "--warmup",
        type=graphs.parse_size,
        default=2000,
        help="edges of a throwaway stream run first per engine (0: none)",
    )
    parser.add_argument(
        "--master",
        default="local[2]",
        help="Spark master (bench_cluster.py --bench stream passes a standalone cluster's)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--note", default="", help="a paragraph appended to the report")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "STREAM_RESULTS.md")
    parser.add_argument(
        "--markdown", action="store_true", help="print the report to stdout, write no file"
    )
    args = parser.parse_args()

    from fixflow.pipeline.broker.embedded import start_broker, stop_broker
    from fixflow.pipeline.config import default_config
    from fixflow.pipeline.spark import make_session

    load_start = os.getloadavg()
    inserted = sum(batch_sizes(k, args.batch)[0] for k in args.kinds) * args.repeats
    work = Path(tempfile.mkdtemp(prefix="fixflow-bench-"))
    base = default_config()
    config = replace(
        base,
        kafka=replace(base.kafka, bootstrap_servers=f"127.0.0.1:{free_port()}"),
        lake=replace(base.lake, path=str(work / "broker")),
    )
    start_broker(config)
    spark = make_session(master=args.master, app_name="fixflow-bench-stream")
    results: list[Measurement] = []
    try:
        for engine in args.engines:
            args.engine_mode = engine
            if args.warmup:
                # A throwaway stream first: the JVM's warm-up would otherwise inflate the
                # first bootstrap (and with it the ratios of the first program).
                w = workload(args.programs[0], "random", args.warmup, args.seed + 100, 0)
                log(f"warm-up: {w.program} on {w.graph}, {engine}")
                measure(w, spark, config, work / f"warmup-{engine}", args, ["insert"], 1)
            for kind in args.graphs:
                for name in args.programs:
                    w = workload(name, kind, args.edges, args.seed, inserted)
                    log(
                        f"{name} on {w.graph} ({len(w.initial)} edges, {len(w.spare)} held out), "
                        f"{engine}: {args.repeats} x {args.batch} per kind {','.join(args.kinds)}"
                    )
                    lake = work / f"{engine}-{w.graph}-{name}"
                    results += measure(w, spark, config, lake, args, args.kinds, args.repeats)
    finally:
        spark.stop()
        stop_broker(config)
    text = report(results, args, args.note, load_start, os.getloadavg())
    write_report(text, args)


if __name__ == "__main__":
    main()
