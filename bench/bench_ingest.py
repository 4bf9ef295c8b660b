"""Ingest throughput and per-batch overhead of the streaming pipeline (not a test).

Scenarios (--scenarios), each on a fresh stream (own topics and lake) on the embedded
default: a Tansu broker on a free port, local[2] Spark, Delta tables via delta-rs, the
default configuration except where a scenario says otherwise.

  backlog  : --facts edge facts (random pairs) are published first (``publish_facts`` from a
             CSV, what ``fixflow publish`` does, in process), then the copy program
             (``out(x, y) :- edge(x, y).``) runs ``--available-now`` over the backlog, as
             ``fixflow run copy.dl --available-now`` does: facts/s = facts / (query start ->
             the last batch committed). Per micro-batch: records, seconds per phase, Spark
             jobs.
  empty    : the copy program running continuously on --warm facts; a batch of 100 facts
             that are all present already (no change) is published: the trigger's duration
             (Spark's triggerExecution) and the batch's phases.
  one-fact : the same stream; one new fact is published through a producer made before
             (a service's long-lived one) and timed from the send until the result table's
             new Delta version is visible (publish -> commit visible).
  sssp     : SSSP on a random graph of --sssp-edges edges (average out-degree 8): the
             streaming bootstrap (``publish_facts`` of a CSV -> committed, into a stream
             that has started and handled its first, empty batch) beside an
             in-process evaluation of the same facts with results written to Delta (what
             ``fixflow eval`` does, without its JVM start and its read of the CSV, timed
             apart); then a publisher process sends
             100-edge batches of new edges back to back (each acknowledged before the next,
             at most --steady-rate facts/s) for --steady-s seconds, and the facts/s the
             stream commits are measured beside the facts/s offered. The eval runs twice:
             wholly on Spark, and as ``fixflow eval`` runs it by default, with strata of up
             to 100k rows in the driver (``--local-rows``). The bootstrap is given twice:
             from the publish's start (the publish of 100k facts and the wait for the next
             trigger included), and as Spark's ``triggerExecution`` of the batches that took
             the facts (the trigger that found them -> their commit).

Every scenario runs --repeats times; backlog and sssp run --warmup times more first, not
counted (the JVM's first runs of their plans pay code generation and JIT). The report gives
medians and the machine load.

    .venv/bin/python bench/bench_ingest.py                       # all, writes INGEST_RESULTS.md
    .venv/bin/python bench/bench_ingest.py --facts 100k --scenarios backlog --markdown
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphs
from benchlib import free_port, log, machine, write_report

ROOT = Path(__file__).resolve().parents[1]
COPY = """.decl edge(src: number, dst: number)
.input edge
.decl out(src: number, dst: number)
.output out
out(x, y) :- edge(x, y).
"""
SSSP = """.decl edge(src: number, dst: number, w: float)
.input edge
.decl sssp(v: number, d: float)
.output sssp
sssp(v, min[d]) :- v = 1, d = 0.0.
sssp(v, min[d]) :- sssp(u, d1), edge(u, v, w), d = d1 + w.
"""
SCENARIOS = ("backlog", "empty", "one-fact", "sssp")


@dataclass
class Row:
    scenario: str
    measure: str
    values: list[float] = field(default_factory=list)
    unit: str = "s"
    detail: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")


# ---------------------------------------------------------------- publishing


def producer(config: Any) -> Any:
    from kafka import KafkaProducer

    return KafkaProducer(
        bootstrap_servers=config.kafka.bootstrap_servers,
        acks=1,
        linger_ms=20,
        batch_size=512 * 1024,
    )


def send(
    config: Any, program: Any, rows: Sequence[tuple], flush: bool = True, out: Any = None
) -> None:
    from fixflow.pipeline.kafka.messages import encode_fact, fact_key

    attributes = program.declaration("edge").attributes
    topic = config.kafka.topic("edge")
    client = out or producer(config)
    for row in rows:
        client.send(topic, key=fact_key(row).encode(), value=encode_fact(attributes, row).encode())
    if flush:
        client.flush(timeout=600)
    if out is None:
        client.close()


def publish_batches(
    config: Any,
    attributes: Any,
    nodes: int,
    seed: int,
    args: argparse.Namespace,
    stop: Any,
    sent: Any,
) -> None:
    """The steady-state publisher (a process of its own): 100 new weight-1 edges a batch,
    each batch sent and acknowledged through the librdkafka publisher before the next,
    paced to at most ``args.steady_rate`` facts/s (0: as fast as it goes)."""
    from fixflow.pipeline.kafka.messages import encode_fact, fact_key
    from fixflow.pipeline.publish.fact_columns import Messages
    from fixflow.pipeline.publish.producer import Publisher

    rng, topic = random.Random(seed), config.kafka.topic("edge")
    started, count = time.monotonic(), 0
    with Publisher(config) as publisher:
        while not stop.is_set():
            rows = [(rng.randrange(nodes), rng.randrange(nodes), 1.0) for _ in range(100)]
            keys = [fact_key(row).encode() for row in rows]
            values = [encode_fact(attributes, row).encode() for row in rows]
            count += publisher.send(topic, Messages(keys, values))
            sent.value = count
            if args.steady_rate:
                time.sleep(max(0.0, started + count / args.steady_rate - time.monotonic()))


def random_pairs(n: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < n:
        pairs.add((rng.randrange(n), rng.randrange(n)))
    return list(pairs)


# ---------------------------------------------------------------- streams


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        from fixflow.pipeline.config import default_config

        self.args = args
        self.work = Path(tempfile.mkdtemp(prefix="fixflow-bench-ingest-"))
        base = default_config()
        self.config = replace(
            base,
            kafka=replace(base.kafka, bootstrap_servers=f"127.0.0.1:{free_port()}"),
            lake=replace(base.lake, path=str(self.work / "broker")),
        )
        self.runs = 0

    def stream(self, text: str, **stream_conf: Any) -> Any:
        from fixflow.pipeline.stream.program import ProgramStream

        self.runs += 1
        name = f"run{self.runs}"
        config = replace(
            self.config,
            kafka=replace(self.config.kafka, topic_prefix=f"{name}."),
            lake=replace(self.config.lake, path=str(self.work / name)),
            stream=replace(self.config.stream, **stream_conf),
        )
        program = self.work / f"{name}.dl"
        program.write_text(text, encoding="utf-8")
        from fixflow.pipeline.broker.embedded import ensure_topics
        from fixflow.pipeline.stream.ingest import topics_for

        stream = ProgramStream(self.spark, config, program)
        ensure_topics(config, topics_for(stream.program, config.kafka.topic_prefix))
        return stream

    # -------------------------------------------------------- scenarios

    def backlog(self, rows: list[Row]) -> None:
        from fixflow.pipeline.publish.files import publish_facts

        facts = random_pairs(self.args.facts, seed=self.runs)
        stream = self.stream(COPY)
        csv = self.work / f"edges{self.runs}.csv"
        csv.write_text("src,dst\n" + "".join(f"{s},{d}\n" for s, d in facts), encoding="utf-8")
        started = time.monotonic()
        publish_facts(stream.config, "edge", csv, program=stream.program)
        rows[1].values.append(len(facts) / (time.monotonic() - started))
        started = time.monotonic()
        query = stream.start(available_now=True)
        query.awaitTermination()
        seconds = time.monotonic() - started
        processed = sum(r.records for r in stream.reports)
        assert processed == len(facts), (processed, len(facts))
        rows[0].values.append(len(facts) / seconds)
        rows[0].detail = batch_table(stream.reports)
        log(f"backlog: {len(facts)} facts in {seconds:.1f} s, {len(stream.reports)} batches")

    def warm_copy(self) -> tuple[Any, Any, list[tuple[int, int]]]:
        facts = random_pairs(self.args.warm, seed=100 + self.runs)
        stream = self.stream(COPY, trigger_ms=self.args.trigger_ms)
        query = stream.start()
        send(stream.config, stream.program, facts)
        wait_records(stream, query, len(facts))
        return stream, query, facts

    def empty(self, rows: list[Row]) -> None:
        stream, query, facts = self.warm_copy()
        try:
            for _ in range(self.args.repeats):
                seen = len(stream.reports)
                send(stream.config, stream.program, facts[:100])
                wait_records(stream, query, sum(r.records for r in stream.reports[:seen]) + 100)
                report = stream.reports[-1]
                assert not any(report.inserted.values()), report.inserted
                progress = [p for p in query.recentProgress if p["batchId"] == report.batch_id]
                rows[0].values.append(progress[-1]["durationMs"]["triggerExecution"] / 1000)
                rows[1].values.append(sum(report.phases.seconds.values()))
                rows[1].detail = phase_text(report)
        finally:
            query.stop()

    def one_fact(self, rows: list[Row]) -> None:
        from deltalake import DeltaTable

        stream, query, _ = self.warm_copy()
        table = stream.lake.results("out")
        # A long-lived producer, as a service publishing facts has: the time is the fact's
        # (send and flush to commit visible), not a new client's connection set-up.
        client = producer(stream.config)
        try:
            for i in range(self.args.repeats):
                version = DeltaTable(table).version()
                time.sleep(random.random() * self.args.trigger_ms / 1000)
                started = time.monotonic()
                send(stream.config, stream.program, [(-1 - i, -1 - i)], out=client)
                while DeltaTable(table).version() == version:
                    time.sleep(0.01)
                rows[0].values.append(time.monotonic() - started)
                rows[0].detail = phase_text(stream.reports[-1])
        finally:
            client.close()
            query.stop()

    def sssp(self, rows: list[Row]) -> None:
        n = self.args.sssp_edges
        rng = random.Random(7 + self.runs)
        nodes = n // 8
        edges = list({(rng.randrange(nodes), rng.randrange(nodes)): 0 for _ in range(n)})
        facts = [(s, d, float(rng.randint(1, 9))) for s, d in edges]
        csv = self.work / f"sssp{self.runs}.csv"
        csv.write_text("src,dst,w\n" + "".join(f"{s},{d},{w}\n" for s, d, w in facts))
        rows[1].values.append(self.eval_seconds(csv))
        rows[5].values.append(self.eval_seconds(csv, local_rows=100_000))
        rows[9].values.append(csv_read_seconds(csv))
        stream = self.stream(SSSP, trigger_ms=self.args.trigger_ms)
        query = stream.start()
        # The stream runs before the facts come, as a service does: its start (the JVM's
        # query set-up and the first, empty batch) is not the bootstrap's, as the eval's
        # SparkSession start is not the eval's.
        wait_started(stream, query)
        from fixflow.pipeline.publish.files import publish_facts

        try:
            seen = len(stream.reports)
            started = time.monotonic()
            publish_facts(stream.config, "edge", csv, program=stream.program)
            wait_records(stream, query, len(facts))
            rows[0].values.append(time.monotonic() - started)
            boot = list(stream.reports)
            rows[0].detail = f"{batch_table(boot)}\n\nStrategies: {strategies(boot)}."
            rows[2].values.append(rows[0].values[-1] / rows[1].values[-1])
            rows[6].values.append(rows[0].values[-1] / rows[5].values[-1])
            rows[7].values.append(trigger_seconds(query, boot[seen:]))
            rows[8].values.append(rows[7].values[-1] / rows[5].values[-1])
            seen = len(stream.reports)
            committed, offered = self.steady(stream, query, rng, nodes)
            rows[3].values.append(committed)
            steady = stream.reports[seen:]
            rows[3].detail = f"{batch_table(steady)}\n\nStrategies: {strategies(steady)}."
            rows[4].values.append(offered)
        finally:
            query.stop()

    def steady(
        self, stream: Any, query: Any, rng: random.Random, nodes: int
    ) -> tuple[float, float]:
        """100-edge batches published back to back (each acknowledged before the next) by
        a process of their own, at most --steady-rate facts/s, for --steady-s seconds: the
        facts/s the stream commits meanwhile. The publisher is a separate process so that
        it does not share the driver's GIL: what is measured is the stream, not a publisher
        slowed by the batches it feeds."""
        context = multiprocessing.get_context("spawn")
        stop, sent = context.Event(), context.Value("q", 0)
        attributes = stream.program.declaration("edge").attributes
        publisher = context.Process(
            target=publish_batches,
            args=(stream.config, attributes, nodes, rng.randrange(1 << 30), self.args, stop, sent),
            daemon=True,
        )
        seen = len(stream.reports)
        publisher.start()
        while sent.value == 0 and publisher.is_alive():
            time.sleep(0.01)
        started, first = time.monotonic(), sent.value
        time.sleep(self.args.steady_s)
        offered = (sent.value - first) / (time.monotonic() - started)
        # Count whole batches committed after the first one that started under load.
        reports = stream.reports[seen + 1 :]
        stop.set()
        publisher.join()
        # Let the running batch finish: stopping the query inside it fails that batch.
        wait_records(stream, query, sum(r.records for r in stream.reports))
        if len(reports) < 2:
            return 0.0, offered
        span = reports[-1].finished_at - reports[0].started_at
        return sum(r.records for r in reports) / span, offered

    def eval_seconds(self, csv: Path, local_rows: int = 0) -> float:
        """An in-process ``fixflow eval`` of SSSP on the facts in ``csv`` with the stream's
        engine options: evaluate, collect and write the results to Delta. The facts are
        read as ``fixflow eval`` reads them (``facts.read_table``) before the clock starts:
        that reader goes row by row in Python (0.46 s for 100k rows, ``--scenarios sssp``'s
        last row), and counting it would flatter the stream, whose own read is columnar.
        Without ``local_rows`` every stratum runs on Spark (the input a Spark frame); with
        it strata of up to that many rows run in the driver, as ``fixflow eval`` runs them
        (its ``--local-rows``)."""
        from fixflow.checker import load
        from fixflow.operators.evaluate import EvalOptions, evaluate
        from fixflow.pipeline.engine_settings import engine_options
        from fixflow.pipeline.lake.delta import to_arrow, write_table
        from fixflow.pipeline.lake.facts import read_table

        report = load(SSSP, "sssp.dl")
        attributes = report.catalog["sssp"].result
        options = EvalOptions(
            max_iterations=self.config.engine.max_iterations or None,
            engine_options=engine_options(self.config),
            local_rows=local_rows,
        )
        edge: Any = read_table(csv, report.analysis.schemas["edge"], None)
        started = time.monotonic()
        if not local_rows:
            edge = self.spark.createDataFrame(edge)
        relations = evaluate(report, {"edge": edge}, self.spark, options)
        table = to_arrow(relations["sssp"], attributes)
        write_table(self.work / f"eval{self.runs}-{local_rows}", table, attributes)
        return time.monotonic() - started


def csv_read_seconds(csv: Path) -> float:
    """How long ``fixflow eval`` takes to read the SSSP facts of ``csv``."""
    from fixflow.checker import load
    from fixflow.pipeline.lake.facts import read_table

    schema = load(SSSP, "sssp.dl").analysis.schemas["edge"]
    started = time.monotonic()
    read_table(csv, schema, None)
    return time.monotonic() - started


def trigger_seconds(query: Any, reports: Sequence[Any]) -> float:
    """Spark's ``triggerExecution`` summed over the batches of ``reports``: from the trigger
    that found the facts (its offset probe, log writes and the batch) to its commit,
    without the publish before it and the wait for the trigger."""
    ids = {r.batch_id for r in reports}
    progress = {p["batchId"]: p for p in query.recentProgress if p["batchId"] in ids}
    missing = ids - set(progress)
    assert not missing, f"no progress reported for batches {sorted(missing)}"
    return sum(p["durationMs"]["triggerExecution"] for p in progress.values()) / 1000


def wait_records(stream: Any, query: Any, expected: int, timeout_s: float = 1800) -> None:
    """Until ``expected`` records have been handled and no trigger runs."""

    def done() -> bool:
        return sum(r.records for r in stream.reports) >= expected

    wait_idle(query, done, f"{expected} records not processed", timeout_s)


def wait_started(stream: Any, query: Any, timeout_s: float = 600) -> None:
    """Until the query's first batch has been handled and no trigger runs."""
    wait_idle(query, lambda: bool(stream.reports), "the query handled no batch", timeout_s)


def wait_idle(query: Any, done: Callable[[], bool], failure: str, timeout_s: float) -> None:
    """Until ``done()`` holds while no trigger runs; a failed query or the timeout raises."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {query.exception()}")
        if done() and not query.status.get("isTriggerActive", False):
            return
        time.sleep(0.01)
    raise TimeoutError(f"{failure} within {timeout_s} s")


def phase_text(report: Any) -> str:
    return report.phases.describe()


def strategies(reports: Sequence[Any]) -> str:
    seen = {s.strategy for r in reports if r.epoch for s in r.epoch.strata}
    return ", ".join(sorted(seen - {"unchanged"})) or "-"


def batch_table(reports: Sequence[Any]) -> str:
    phases = sorted({p for r in reports for p in r.phases.seconds}, key=PHASE_ORDER.index)
    lines = [
        "| batch | records | " + " | ".join(phases) + " | Spark jobs |",
        "|---" * (len(phases) + 3) + "|",
    ]
    for r in reports:
        cells = " | ".join(f"{r.phases.seconds.get(p, 0.0):.2f}" for p in phases)
        lines.append(f"| {r.batch_id} | {r.records} | {cells} | {r.phases.jobs} |")
    return "\n".join(lines)


PHASE_ORDER = ["read", "validate", "normalize", "maintain", "results", "edb_commit"]


def rows_for(scenario: str) -> list[Row]:
    if scenario == "backlog":
        return [
            Row(scenario, "ingest, facts/s", unit="facts/s"),
            Row(scenario, "publish_facts from a CSV, facts/s", unit="facts/s"),
        ]
    if scenario == "empty":
        return [Row(scenario, "trigger (triggerExecution)"), Row(scenario, "batch phases, sum")]
    if scenario == "one-fact":
        return [Row(scenario, "publish -> result commit visible")]
    return [
        Row(scenario, "streaming bootstrap (publish -> committed)"),
        Row(scenario, "in-process eval on Spark (evaluate + write Delta)"),
        Row(scenario, "bootstrap / eval on Spark", unit="x"),
        Row(scenario, "steady state, 100-edge batches, facts/s", unit="facts/s"),
        Row(scenario, "steady state, facts/s offered by the publisher", unit="facts/s"),
        Row(scenario, "in-process eval in the driver (fixflow eval's default, local rows 100k)"),
        Row(scenario, "bootstrap / eval in the driver", unit="x"),
        Row(scenario, "bootstrap batches, trigger -> committed (triggerExecution)"),
        Row(scenario, "bootstrap batches / eval in the driver", unit="x"),
        Row(scenario, "fixflow eval's read of the facts CSV (not in the evals above)"),
    ]


def report(all_rows: list[Row], args: argparse.Namespace, load: Sequence[float]) -> str:
    lines = [
        "# Ingest throughput and per-batch overhead (bench/bench_ingest.py)",
        "",
        f"Machine: {machine()}",
        "",
        f"Run: `{' '.join(sys.argv)}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"load average {load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end.",
        "",
        "| scenario | measure | median | runs |",
        "|---|---|---|---|",
    ]
    for row in all_rows:
        runs = ", ".join(f"{v:.2f}" if row.unit != "facts/s" else f"{v:,.0f}" for v in row.values)
        median = f"{row.median:,.0f}" if row.unit == "facts/s" else f"{row.median:.2f} {row.unit}"
        lines.append(f"| {row.scenario} | {row.measure} | {median} | {runs} |")
    for row in all_rows:
        if row.detail:
            lines += ["", f"**{row.scenario}, {row.measure}** (last run):", "", row.detail]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--facts", type=graphs.parse_size, default=1_000_000)
    parser.add_argument("--warm", type=graphs.parse_size, default=10_000)
    parser.add_argument("--sssp-edges", type=graphs.parse_size, default=100_000)
    parser.add_argument("--steady-s", type=float, default=60.0)
    parser.add_argument(
        "--steady-rate",
        type=graphs.parse_size,
        default=0,
        help="offered facts/s of the SSSP steady state (default 0: as fast as the publisher goes)",
    )
    parser.add_argument("--trigger-ms", type=int, default=None, help="default: the config's")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="runs of backlog and sssp before the counted ones, not counted (the JVM's "
        "code generation and JIT of their plans)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "INGEST_RESULTS.md")
    parser.add_argument("--markdown", action="store_true", help="print, write no file")
    args = parser.parse_args()

    from fixflow.pipeline.broker.embedded import start_broker, stop_broker
    from fixflow.pipeline.spark import make_session

    load = os.getloadavg()
    bench = Bench(args)
    if args.trigger_ms is None:
        args.trigger_ms = bench.config.stream.trigger_ms
    start_broker(bench.config)
    bench.spark = make_session(app_name="fixflow-bench-ingest")
    all_rows: list[Row] = []
    try:
        for scenario in args.scenarios.split(","):
            rows = rows_for(scenario)
            all_rows += rows
            repeated = scenario in ("backlog", "sssp")
            warmups = args.warmup if repeated else 0
            for run in range(warmups + (args.repeats if repeated else 1)):
                log(f"{scenario} run {run + 1 - warmups}" if run >= warmups else "warm-up run")
                getattr(bench, scenario.replace("-", "_"))(rows)
                bench.spark.catalog.clearCache()
                if run < warmups:  # the JVM's first runs of these plans: not counted
                    for row in rows:
                        row.values.clear()
    finally:
        bench.spark.stop()
        stop_broker(bench.config)
    text = report(all_rows, args, load)
    write_report(text, args)


if __name__ == "__main__":
    main()
