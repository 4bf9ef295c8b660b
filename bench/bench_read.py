"""The streaming source's range read: librdkafka (``records.read_range``) against the
kafka-python reader it replaced, on the same records of the same broker, in one run.

    .venv/bin/python bench/bench_read.py [--records 500k] [--repeats 5]
        [--out bench/READ_RESULTS.md | --markdown]

It starts an embedded broker of its own (memory storage, a free port), publishes
``--records`` fact messages of the stream's JSON format through ``fixflow publish``'s
producer into one partition, then reads the whole partition as one Spark task would, each
reader in turn, ``--repeats`` times. A reader's time runs from creating its consumer to the
last Arrow batch; both hand Spark the same Arrow batches (checked after the clock stops).
Not a test: the numbers depend on the machine and its load, reported with them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphs
from benchlib import free_port, log, machine, write_report

from fixflow.pipeline.broker.embedded import ensure_topics, start_broker, stop_broker
from fixflow.pipeline.config import default_config
from fixflow.pipeline.kafka.records import ARROW_SCHEMA, READ_CHUNK, KafkaRange, read_range
from fixflow.pipeline.publish.fact_columns import Messages
from fixflow.pipeline.publish.producer import Publisher

TOPIC = "bench-read"


def kafka_python_range(part: KafkaRange) -> Iterator[pa.RecordBatch]:
    """The reader of before (kafka-python ``KafkaConsumer.poll``, a record at a time)."""
    from kafka import KafkaConsumer, TopicPartition

    from fixflow.pipeline.kafka_security import kafka_python_settings

    tp = TopicPartition(part.topic, part.partition)
    consumer = KafkaConsumer(
        **kafka_python_settings(part.kafka),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        max_poll_records=READ_CHUNK,
    )
    try:
        consumer.assign([tp])
        consumer.seek(tp, part.start)
        position = part.start
        while position < part.end:
            records = [r for r in consumer.poll(timeout_ms=200).get(tp, []) if r.offset < part.end]
            if records:
                position = records[-1].offset + 1
                yield _old_batch(part, records)
    finally:
        consumer.close()


def _old_batch(part: KafkaRange, records: list[Any]) -> pa.RecordBatch:
    def text(raw: bytes | None) -> str | None:
        return None if raw is None else raw.decode("utf-8", errors="replace")

    def when(millis: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC)

    return pa.RecordBatch.from_arrays(
        [
            pa.array([part.topic] * len(records), pa.string()),
            pa.array([part.partition] * len(records), pa.int32()),
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([text(r.key) for r in records], pa.string()),
            pa.array([text(r.value) for r in records], pa.string()),
            pa.array([when(r.timestamp) for r in records], pa.timestamp("us", tz="UTC")),
        ],
        schema=ARROW_SCHEMA,
    )


READERS: dict[str, Callable[[KafkaRange], Iterator[pa.RecordBatch]]] = {
    "kafka-python (before)": kafka_python_range,
    "librdkafka (read_range)": read_range,
}


def publish(config: Any, records: int) -> None:
    keys = [f"[{i},{i + 1}]".encode() for i in range(records)]
    values = [f'{{"src":{i},"dst":{i + 1},"w":1.5}}'.encode() for i in range(records)]
    with Publisher(config) as publisher:
        publisher.send(config.kafka.topic(TOPIC), Messages(keys, values))


def timed_read(reader: Callable, part: KafkaRange) -> tuple[float, pa.Table]:
    started = time.perf_counter()
    batches = list(reader(part))
    seconds = time.perf_counter() - started
    return seconds, pa.Table.from_batches(batches, ARROW_SCHEMA)


def run(args: argparse.Namespace) -> str:
    base = default_config()
    config = replace(
        base,
        kafka=replace(base.kafka, bootstrap_servers=f"127.0.0.1:{free_port()}", partitions=1),
        lake=replace(base.lake, path=tempfile.mkdtemp(prefix="fixflow-bench-read-")),
    )
    start_broker(config)
    load_before = os.getloadavg()[0]
    try:
        ensure_topics(config, [config.kafka.topic(TOPIC)])
        publish(config, args.records)
        part = KafkaRange(config.kafka, TOPIC, 0, 0, args.records, timeout_s=120)
        seconds: dict[str, list[float]] = {name: [] for name in READERS}
        tables: dict[str, pa.Table] = {}
        for repeat in range(args.repeats):
            for name, reader in READERS.items():
                took, tables[name] = timed_read(reader, part)
                seconds[name].append(took)
                log(f"  {name}, run {repeat + 1}: {took:.2f} s")
    finally:
        stop_broker(config)
    same = _same_rows(*tables.values())
    return report(args, seconds, same, load_before)


def _same_rows(old: pa.Table, new: pa.Table) -> bool:
    return old.drop_columns(["timestamp"]).equals(new.drop_columns(["timestamp"]))


def report(args: argparse.Namespace, seconds: dict, same: bool, load_before: float) -> str:
    baseline = statistics.median(seconds["kafka-python (before)"])
    lines = [
        "# The stream's range read: librdkafka against kafka-python",
        "",
        "Written by `bench/bench_read.py`; not a test.",
        "",
        f"Command: `{' '.join(sys.argv)}`  ",
        f"Machine: {machine()}  ",
        f"Load (1-min) before / after: {load_before:.1f} / {os.getloadavg()[0]:.1f}",
        "",
        f"{args.records:,} records of one partition, read whole as one Spark task reads its"
        " range; the same Arrow rows from both readers: " + ("yes" if same else "**NO**"),
        "",
        "| reader | median s | µs a record | records/s | ratio to before | runs (s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, runs in seconds.items():
        median = statistics.median(runs)
        lines.append(
            f"| {name} | {median:.2f} | {median / args.records * 1e6:.1f} | "
            f"{args.records / median:,.0f} | {baseline / median:.1f}x | "
            + ", ".join(f"{s:.2f}" for s in runs)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=graphs.parse_size, default=500_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/READ_RESULTS.md"))
    parser.add_argument("--markdown", action="store_true", help="print the report instead")
    args = parser.parse_args()
    text = run(args)
    write_report(text, args)
    if "**NO**" in text:
        raise SystemExit("the readers disagree: see the report")


if __name__ == "__main__":
    main()
