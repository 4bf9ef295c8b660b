"""End-to-end latency of the continuous pipeline (not a test).

For SSSP, CC and PageRank: publish a random graph of --edges edges, let the pipeline
bootstrap it, then --repeats times publish --batch new edge insertions and measure the time
from the first send to the batch's EDB commit being visible in Delta (the EDB commit is a
batch's last commit, after its result commits). Reported beside the bootstrap (the same
publish -> visible time for the initial graph, in the same run) and the ratio.

Everything runs on the embedded default: a Tansu broker on a free port, local Spark, Delta
tables in a temporary lake.

    .venv/bin/python bench/bench_stream.py                 # 100k edges, batches of 100, 5 runs
    .venv/bin/python bench/bench_stream.py --edges 10000   # smaller, quicker
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = {
    "sssp": ROOT / "examples" / "powerlog_p1_sssp.dl",
    "cc": ROOT / "examples" / "powerlog_p3_cc.dl",
    "pagerank": ROOT / "examples" / "powerlog_p2b_pagerank.dl",
}


@dataclass
class Measurement:
    program: str
    edges: int
    bootstrap_s: float
    bootstrap_batch_s: float
    updates_s: list[float] = field(default_factory=list)
    update_batches_s: list[float] = field(default_factory=list)
    strategies: list[str] = field(default_factory=list)
    bootstrap_batches: int = 0
    update_batch_counts: list[int] = field(default_factory=list)

    @property
    def median_update_s(self) -> float:
        return statistics.median(self.updates_s)

    @property
    def ratio(self) -> float:
        return self.median_update_s / self.bootstrap_s


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
    program: str, present: set[tuple], n_nodes: int, count: int, rng: random.Random
) -> list[tuple]:
    fresh: list[tuple] = []
    keys = {e[:2] for e in present}
    while len(fresh) < count:
        a, b = rng.randrange(1, n_nodes + 1), rng.randrange(1, n_nodes + 1)
        if a != b and (a, b) not in keys:
            keys.add((a, b))
            fresh.append((a, b, float(rng.randrange(1, 10))) if program == "sssp" else (a, b))
    return fresh


def publish(config: Any, program: Any, relation: str, rows: list[tuple]) -> None:
    from kafka import KafkaProducer

    from fixflow.pipeline.messages import encode_fact, fact_key

    attributes = program.declaration(relation).attributes
    producer = KafkaProducer(
        bootstrap_servers=config.kafka.bootstrap_servers,
        acks=1,
        linger_ms=20,
        batch_size=256 * 1024,
    )
    for row in rows:
        producer.send(
            config.kafka.topic(relation),
            key=fact_key(row).encode(),
            value=encode_fact(attributes, row).encode(),
        )
    producer.flush(timeout=300)
    producer.close()


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


def measure(
    program_name: str,
    spark: Any,
    base_config: Any,
    lake_root: Path,
    n_edges: int,
    batch: int,
    repeats: int,
    seed: int,
) -> Measurement:
    from fixflow.pipeline.stream import ProgramStream

    config = replace(
        base_config,
        kafka=replace(base_config.kafka, topic_prefix=f"bench{seed}{program_name}."),
        lake=replace(base_config.lake, path=str(lake_root)),
        stream=replace(
            base_config.stream,
            trigger_ms=50,
            adaptive=False,
            max_records_per_trigger=max(10 * n_edges, 10_000),
        ),
    )
    stream = ProgramStream(spark, config, PROGRAMS[program_name])
    program = stream.program
    n_nodes, edges = random_graph(program_name, n_edges, seed)
    query = stream.start(available_now=False)
    try:
        started = time.monotonic()
        sent = 0
        if program_name == "pagerank":
            publish(config, program, "node", [(v,) for v in range(1, n_nodes + 1)])
            sent += n_nodes
        publish(config, program, "edge", edges)
        sent += len(edges)
        bootstrap = wait_for_records(stream, query, sent, 3600) - started
        result = Measurement(
            program_name, n_edges, bootstrap, sum(r.seconds for r in stream.reports)
        )
        result.bootstrap_batches = len(stream.reports)
        rng = random.Random(seed + 1)
        present = set(edges)
        for _ in range(repeats):
            fresh = new_edges(program_name, present, n_nodes, batch, rng)
            present.update(fresh)
            seen = len(stream.reports)
            started = time.monotonic()
            publish(config, program, "edge", fresh)
            sent += len(fresh)
            result.updates_s.append(wait_for_records(stream, query, sent, 3600) - started)
            reports = stream.reports[seen:]
            result.update_batch_counts.append(len(reports))
            result.update_batches_s.append(sum(r.seconds for r in reports))
            result.strategies += [
                s.strategy
                for r in reports
                if r.epoch
                for s in r.epoch.strata
                if s.strategy != "unchanged"
            ]
            print(
                f"  {program_name}: update {len(result.updates_s)}: {result.updates_s[-1]:.2f} s",
                flush=True,
            )
        return result
    finally:
        query.stop()


def machine() -> str:
    memory = "unknown"
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kib = int(meminfo.read_text().split("MemTotal:")[1].split()[0])
        memory = f"{kib / 1024 / 1024:.1f} GiB"
    cpu = platform.processor() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    return f"nproc {os.cpu_count()}, memory {memory}, CPU {cpu}, {platform.platform()}"


def report(results: list[Measurement], args: argparse.Namespace, note: str) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "# Streaming latency (bench/bench_stream.py)",
        "",
        f"Machine: {machine()}.",
        "",
        f"Run: `.venv/bin/python bench/bench_stream.py --edges {args.edges} --batch "
        f"{args.batch} --repeats {args.repeats}` on {when}.",
        "Embedded default: Tansu broker, local[2] Spark, Delta via delta-rs, converged "
        "consistency. Latency = first send of the messages -> every one of them processed "
        "and the last batch's EDB commit (its last Delta commit) visible; the messages may "
        "arrive in more than one micro-batch (`batches`). Bootstrap = the same for the "
        "initial graph (and, for PageRank, its node facts).",
        "",
        "| program | edges | bootstrap (s) | batches | update median (s) | update min-max (s) "
        "| batches per update | maintenance part, median (s) | update / bootstrap "
        "| strategies run (count) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in results:
        counts = {s: m.strategies.count(s) for s in sorted(set(m.strategies))}
        strategies = ", ".join(f"{s} ×{n}" for s, n in counts.items()) or "-"
        lines.append(
            f"| {m.program} | {m.edges} | {m.bootstrap_s:.2f} | {m.bootstrap_batches} "
            f"| {m.median_update_s:.2f} | {min(m.updates_s):.2f}-{max(m.updates_s):.2f} "
            f"| {'/'.join(map(str, m.update_batch_counts))} "
            f"| {statistics.median(m.update_batches_s):.2f} | {m.ratio:.2f} | {strategies} |"
        )
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--programs", default="sssp,cc,pagerank")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--note", default="", help="a paragraph appended to the results file")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "STREAM_RESULTS.md")
    args = parser.parse_args()

    from fixflow.pipeline.broker import start_broker, stop_broker
    from fixflow.pipeline.config import default_config
    from fixflow.pipeline.spark import make_session

    work = Path(tempfile.mkdtemp(prefix="fixflow-bench-"))
    base = default_config()
    config = replace(
        base,
        kafka=replace(base.kafka, bootstrap_servers=f"127.0.0.1:{free_port()}"),
        lake=replace(base.lake, path=str(work / "broker")),
    )
    start_broker(config)
    spark = make_session(app_name="fixflow-bench-stream")
    results = []
    try:
        for name in args.programs.split(","):
            print(
                f"{name}: {args.edges} edges, {args.repeats} x {args.batch} insertions", flush=True
            )
            results.append(
                measure(
                    name,
                    spark,
                    config,
                    work / name,
                    args.edges,
                    args.batch,
                    args.repeats,
                    args.seed,
                )
            )
            m = results[-1]
            print(
                f"{name}: bootstrap {m.bootstrap_s:.2f} s, update median "
                f"{m.median_update_s:.2f} s, ratio {m.ratio:.2f}",
                flush=True,
            )
    finally:
        spark.stop()
        stop_broker(config)
    args.out.write_text(report(results, args, args.note))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
