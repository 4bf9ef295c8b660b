"""The read-ahead against the real embedded broker: what it serves equals a range read, and
it declines (None) whenever its buffers cannot give a batch exactly."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from fixflow.pipeline.broker.embedded import ensure_topics
from fixflow.pipeline.config import Config
from fixflow.pipeline.kafka.read_ahead import ReadAhead
from fixflow.pipeline.kafka.records import KafkaRange, read_range


@pytest.fixture
def topic(broker: Config) -> str:
    name = f"ahead-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker, [name])
    return name


@pytest.fixture
def read_ahead(broker: Config) -> Iterator[ReadAhead]:
    ahead = ReadAhead(broker.kafka, max_records=1000, wait_s=20)
    yield ahead
    ahead.close()


def _publish(config: Config, topic: str, numbers: range) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=config.kafka.bootstrap_servers, linger_ms=5)
    for n in numbers:
        producer.send(topic, value=json.dumps({"n": n}).encode(), partition=0)
    producer.flush()
    producer.close()


def _range(config: Config, topic: str, start: int, end: int) -> KafkaRange:
    return KafkaRange(config.kafka, topic, 0, start, end, timeout_s=60)


def _records(table: object) -> list[tuple[int, str]]:
    return [(r["offset"], r["value"]) for r in table.to_pylist()]  # type: ignore[attr-defined]


def _range_read(config: Config, topic: str, start: int, end: int) -> list[tuple[int, str]]:
    return [
        (r["offset"], r["value"])
        for batch in read_range(_range(config, topic, start, end))
        for r in batch.to_pylist()
    ]


def test_batches_taken_from_the_buffer_equal_range_reads(
    broker: Config, topic: str, read_ahead: ReadAhead
) -> None:
    """Records published after ``follow`` are read ahead; consecutive batches take exactly
    their ranges' records, and what lies past a batch's end stays for the next one."""
    read_ahead.follow({(topic, 0): 0})
    _publish(broker, topic, range(50))
    first = read_ahead.take([_range(broker, topic, 0, 30)])
    assert first is not None and _records(first) == _range_read(broker, topic, 0, 30)
    read_ahead.follow({(topic, 0): 30})  # where the batch ended: the buffer is kept
    _publish(broker, topic, range(50, 70))
    second = read_ahead.take([_range(broker, topic, 30, 70)])
    assert second is not None and _records(second) == _range_read(broker, topic, 30, 70)
    assert read_ahead.served == 2
    assert first.column("timestamp").null_count == first.num_rows  # ingestion reads none


def test_a_batch_that_starts_elsewhere_is_declined(
    broker: Config, topic: str, read_ahead: ReadAhead
) -> None:
    """A range that does not start where the buffer does (Spark read the batch before, a
    new partition) is left to the caller; ``follow`` from the new end reads on from there."""
    _publish(broker, topic, range(40))
    read_ahead.follow({(topic, 0): 0})
    assert read_ahead.take([_range(broker, topic, 10, 20)]) is None
    assert read_ahead.take([KafkaRange(broker.kafka, topic, 1, 0, 5, 60)]) is None
    read_ahead.follow({(topic, 0): 20})
    table = read_ahead.take([_range(broker, topic, 20, 40)])
    assert table is not None and _records(table) == _range_read(broker, topic, 20, 40)
    assert read_ahead.served == 1


def test_full_buffers_bound_what_is_read_ahead(broker: Config, topic: str) -> None:
    """The thread stops at ``max_records``; a batch the buffer cannot reach is declined,
    and taking a batch makes room for the next."""
    ahead = ReadAhead(broker.kafka, max_records=10, wait_s=20)
    try:
        _publish(broker, topic, range(30))
        ahead.follow({(topic, 0): 0})
        assert ahead.take([_range(broker, topic, 0, 25)]) is None  # more than the bound
        ahead.follow({(topic, 0): 0})
        table = ahead.take([_range(broker, topic, 0, 8)])
        assert table is not None and _records(table) == _range_read(broker, topic, 0, 8)
        ahead.follow({(topic, 0): 8})
        table = ahead.take([_range(broker, topic, 8, 18)])
        assert table is not None and _records(table) == _range_read(broker, topic, 8, 18)
    finally:
        ahead.close()


def test_an_idle_or_closed_read_ahead_declines_and_follow_starts_it_again(
    broker: Config, topic: str
) -> None:
    ahead = ReadAhead(broker.kafka, max_records=100, idle_s=0.3, wait_s=20)
    try:
        ahead.follow({(topic, 0): 0})
        time.sleep(1.5)  # nothing arrives and no batch comes: the thread ends
        _publish(broker, topic, range(5))
        assert ahead.take([_range(broker, topic, 0, 5)]) is None
        ahead.follow({(topic, 0): 0})
        table = ahead.take([_range(broker, topic, 0, 5)])
        assert table is not None and _records(table) == _range_read(broker, topic, 0, 5)
        ahead.close()
        assert ahead.take([_range(broker, topic, 5, 5)]) is None
    finally:
        ahead.close()


def test_a_trickle_of_records_is_read_once_each_in_order(
    broker: Config, topic: str, read_ahead: ReadAhead
) -> None:
    """Records that come a few at a time, fetched as they come, reach the buffer once
    each, in order."""
    read_ahead.follow({(topic, 0): 0})
    for burst in range(12):
        _publish(broker, topic, range(burst * 7, burst * 7 + 7))
        time.sleep(0.03)
    table = read_ahead.take([_range(broker, topic, 0, 84)])
    assert table is not None and _records(table) == _range_read(broker, topic, 0, 84)
    assert read_ahead.served == 1
