"""The `fixflow publish` of before issue #11, kept runnable for bench/bench_publish.py.

    python bench/publish_baseline.py RELATION FILE [--program PROG.dl] [--conf FILE]
        [--producer KEY=VALUE ...]

The same command as the old one: the row-at-a-time reader (``fact_rows.read_fact_file``,
unchanged), one ``encode_fact`` and one ``fact_key`` (two ``json.dumps``) per fact, and one
kafka-python ``KafkaProducer.send`` per fact with the old settings (acks=all, linger_ms=5,
retries=5). The one difference: encoding runs before sending instead of inside the send
loop, so that the two can be timed apart (the cProfile in bench/PUBLISH_RESULTS.md is of
this script and splits the same way). ``--producer`` overrides a KafkaProducer setting
(e.g. ``batch_size=1048576``), to measure tuned kafka-python settings.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from fixflow.pipeline.broker.embedded import ensure_topics, reachable
from fixflow.pipeline.cli.commands.publish import _load_program
from fixflow.pipeline.config import Config, add_conf_argument, config_from_args
from fixflow.pipeline.kafka.messages import Op, encode_fact, fact_key
from fixflow.pipeline.publish.fact_rows import PublishError, read_fact_file
from fixflow.pipeline.publish.files import relation_attributes

log = logging.getLogger("fixflow.pipeline.publish.files")
SEND_TIMEOUT_S = 60.0


def encode(facts: Any, op: Op) -> tuple[list[bytes], list[bytes]]:
    keys = [fact_key(values).encode("utf-8") for values in facts.facts]
    values = [encode_fact(facts.attributes, v, op).encode("utf-8") for v in facts.facts]
    return keys, values


def send(
    config: Config, topic: str, keys: list[bytes], values: list[bytes], **overrides: Any
) -> int:
    """The old send_facts: one KafkaProducer.send per fact, failures counted."""
    from kafka import KafkaProducer

    failures: list[BaseException] = []
    settings: dict[str, Any] = {"acks": "all", "linger_ms": 5, "retries": 5, **overrides}
    producer = KafkaProducer(bootstrap_servers=config.kafka.bootstrap_servers, **settings)
    try:
        for key, value in zip(keys, values, strict=True):
            future = producer.send(topic, key=key, value=value)
            future.add_errback(failures.append)
        producer.flush(timeout=SEND_TIMEOUT_S)
    finally:
        producer.close(timeout=SEND_TIMEOUT_S)
    if failures:
        raise PublishError(f"{len(failures)} of {len(keys)} facts were not published")
    return len(keys)


def publish(args: argparse.Namespace) -> None:
    config = config_from_args(args)
    program = _load_program(args.program) if args.program else None
    attributes = relation_attributes(program, args.relation) if program else None
    started = time.perf_counter()
    facts = read_fact_file(Path(args.file), attributes)
    read = time.perf_counter()
    keys, values = encode(facts, "insert")
    encoded = time.perf_counter()
    if not reachable(config.kafka.bootstrap_servers):
        raise PublishError(f"cannot reach Kafka at {config.kafka.bootstrap_servers}")
    topic = config.kafka.topic(args.relation)
    ensure_topics(config, [topic])
    count = send(config, topic, keys, values, **dict(map(_setting, args.producer)))
    sent = time.perf_counter()
    log.info(
        "published %d facts (insert) to %s: read %.3fs, encode %.3fs, send %.3fs",
        *(count, topic, read - started, encoded - read, sent - encoded),
    )
    print(f"published {count} facts to topic {topic}")


def _setting(text: str) -> tuple[str, Any]:
    name, _, value = text.partition("=")
    return name, int(value) if value.lstrip("-").isdigit() else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("relation")
    parser.add_argument("file")
    parser.add_argument("--program", default=None)
    parser.add_argument("--producer", action="append", default=[], metavar="KEY=VALUE")
    add_conf_argument(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kafka").setLevel(logging.ERROR)
    try:
        publish(args)
    except PublishError as error:
        print(f"publish_baseline: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
