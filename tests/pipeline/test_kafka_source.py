"""The fixflow-kafka Python streaming source against the real embedded broker and Spark."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from fixflow.pipeline.broker.embedded import ensure_topics
from fixflow.pipeline.config import Config
from fixflow.pipeline.kafka.batch_limit import lag_from_progress, write_limit_file
from fixflow.pipeline.kafka.broker_view import end_offsets
from fixflow.pipeline.kafka.driver_read import DriverRead
from fixflow.pipeline.kafka.offsets import cap_offsets, record_count
from fixflow.pipeline.kafka.records import KafkaRange, read_range
from fixflow.pipeline.kafka.source import KafkaStreamReader, native_options, read_stream


def _publish(config: Config, topic: str, values: list[dict[str, Any]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=config.kafka.bootstrap_servers, linger_ms=20)
    for value in values:
        producer.send(topic, key=str(value["n"]).encode(), value=json.dumps(value).encode())
    producer.flush()
    producer.close()


def _run_available_now(
    spark: Any, config: Config, topics: list[str], checkpoint: Path, limit: int
) -> list[list[tuple[str, int, int, str]]]:
    batches: list[list[tuple[str, int, int, str]]] = []

    def collect(batch_df: Any, batch_id: int) -> None:
        rows = batch_df.collect()
        now = dt.datetime.now()
        for row in rows:  # key and timestamp arrive too
            assert row.key == str(json.loads(row.value)["n"])
            assert abs((now - row.timestamp).total_seconds()) < 600
        batches.append([(r.topic, r.partition, r.offset, r.value) for r in rows])

    stream = read_stream(spark, config, topics, max_records_per_trigger=limit)
    query = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert set(lag_from_progress(query.lastProgress).values()) <= {0}, "all read: no lag"
    return batches


def test_every_message_exactly_once_across_restarts(
    spark: Any, broker: Config, tmp_path: Path
) -> None:
    topics = [f"src-a-{uuid.uuid4().hex[:8]}", f"src-b-{uuid.uuid4().hex[:8]}"]
    ensure_topics(broker, topics)
    first = [{"n": i} for i in range(230)]
    _publish(broker, topics[0], first[:150])
    _publish(broker, topics[1], first[150:])

    run1 = _run_available_now(spark, broker, topics, tmp_path / "ckpt", limit=100)
    assert len(run1) >= 3, "230 records at <= 100 per trigger need at least 3 batches"
    assert all(len(batch) <= 100 for batch in run1)

    second = [{"n": i} for i in range(230, 300)]
    _publish(broker, topics[0], second)
    run2 = _run_available_now(spark, broker, topics, tmp_path / "ckpt", limit=100)

    seen = [row for batch in run1 + run2 for row in batch]
    positions = [(t, p, o) for t, p, o, _ in seen]
    assert len(positions) == len(set(positions)), "a record was delivered twice"
    assert sorted(json.loads(v)["n"] for *_, v in seen) == list(range(300))
    assert {json.loads(v)["n"] for *_, v in (r for b in run2 for r in b)} == set(range(230, 300))
    # Within a partition, records arrive in offset order.
    for topic in topics:
        for partition in range(broker.kafka.partitions):
            offsets = [o for t, p, o, _ in seen if t == topic and p == partition]
            assert offsets == sorted(offsets)


def test_a_range_reads_exactly_its_records_with_keys_timestamps_and_bad_bytes(
    broker: Config,
) -> None:
    """The task-side reader (librdkafka): exactly [start, end) in offset order, across
    several chunks; a missing key stays null; invalid UTF-8 arrives replaced (the dead-letter
    table gets it) instead of failing the task."""
    from kafka import KafkaProducer

    topic = f"range-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker, [topic])
    producer = KafkaProducer(bootstrap_servers=broker.kafka.bootstrap_servers, linger_ms=20)
    values = [json.dumps({"n": i}).encode() for i in range(5000)]
    values[4321] = b"\xff\xfe not utf-8"
    for i, value in enumerate(values):
        producer.send(topic, key=None if i % 7 == 0 else str(i).encode(), value=value, partition=0)
    producer.flush()
    producer.close()

    part = KafkaRange(broker.kafka, topic, 0, 17, 4990, timeout_s=60)
    batches = list(read_range(part))
    assert len(batches) > 1, "more records than one chunk"
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(17, 4990))
    assert all(r["topic"] == topic and r["partition"] == 0 for r in rows)
    for row in rows:
        n = row["offset"]
        assert row["key"] == (None if n % 7 == 0 else str(n))
        expected = "\ufffd\ufffd not utf-8" if n == 4321 else values[n].decode()
        assert row["value"] == expected
        assert abs((dt.datetime.now(dt.UTC) - row["timestamp"]).total_seconds()) < 600


@pytest.mark.parametrize("read_ahead", [False, True])
def test_the_driver_reads_the_very_records_of_a_small_batch(
    spark: Any, broker: Config, tmp_path: Path, read_ahead: bool
) -> None:
    """``DriverRead``: the ranges in Spark's offset log (for the first batch, from the log
    start) are read in the driver and give exactly the records the source's Spark job
    gives (in the same order once sorted); a batch over the limit and a checkpoint off the
    local file system are left to Spark (None). Reading ahead changes none of it."""
    topics = [f"drv-a-{uuid.uuid4().hex[:8]}", f"drv-b-{uuid.uuid4().hex[:8]}"]
    ensure_topics(broker, topics)
    _publish(broker, topics[0], [{"n": i} for i in range(150)])
    _publish(broker, topics[1], [{"n": i} for i in range(150, 230)])
    checkpoint = str(tmp_path / "ckpt")
    bootstrap = broker.kafka
    read = DriverRead(bootstrap, checkpoint, max_records=100, read_ahead=read_ahead)
    compared: list[int] = []

    def compare(batch_df: Any, batch_id: int) -> None:
        from fixflow.pipeline.stream.ingest import RECORD_COLUMNS, _sorted_records

        table = read(batch_id)
        assert DriverRead(bootstrap, checkpoint, max_records=1)(batch_id) is None
        assert table is not None
        spark_read = _sorted_records(batch_df.select(*RECORD_COLUMNS).toArrow())
        assert _sorted_records(table.select(RECORD_COLUMNS)).to_pylist() == spark_read.to_pylist()
        compared.append(table.num_rows)

    query = (
        read_stream(spark, broker, topics, max_records_per_trigger=60)
        .writeStream.foreachBatch(compare)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    read.close()
    assert query.exception() is None
    assert len(compared) >= 4 and sum(compared) == 230, compared
    assert DriverRead(bootstrap, "s3a://bucket/ckpt", max_records=100)(1) is None


@pytest.mark.parametrize("count", [1, 37, 3000])
def test_end_offsets_count_every_record_of_a_batched_produce(broker: Config, count: int) -> None:
    topic = f"ends-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker, [topic])
    _publish(broker, topic, [{"n": i} for i in range(count)])
    ends = end_offsets(broker.kafka, [topic])
    assert sum(ends[topic].values()) == count


def test_cap_offsets_shares_the_budget_fairly() -> None:
    start = {"t": {"0": 0, "1": 10, "2": 5}}
    end = {"t": {"0": 100, "1": 12, "2": 105}}
    capped = cap_offsets(start, end, 50)
    assert record_count(start, capped) == 50
    assert capped["t"]["1"] == 12  # a small backlog is read in full
    assert capped == {"t": {"0": 24, "1": 12, "2": 29}}
    assert cap_offsets(start, end, 1000) == end


def test_native_source_options_name_spark_kafka_settings(broker: Config) -> None:
    # Spark's own kafka format needs the spark-sql-kafka jar, absent here: only the
    # options are checked.
    options = native_options(broker, ["edge", "node"], 500)
    assert options["kafka.bootstrap.servers"] == broker.kafka.bootstrap_servers
    assert options["subscribe"] == "edge,node"
    assert options["maxOffsetsPerTrigger"] == "500"


def test_reader_follows_the_limit_file_and_reports_lag(broker: Config, tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    topic = f"limit-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker, [topic])
    _publish(broker, topic, [{"n": i} for i in range(60)])
    limit_file = tmp_path / "limit"
    reader = KafkaStreamReader(
        {
            "bootstrap_servers": broker.kafka.bootstrap_servers,
            "topics": topic,
            "max_records_per_trigger": "50",
            "max_records_file": str(limit_file),
        }
    )
    start = reader.initialOffset()
    assert record_count(start, reader.latestOffset(start, ReadMaxRows(50))) == 50
    write_limit_file(limit_file, 7)
    end = reader.latestOffset(start, ReadMaxRows(50))
    assert record_count(start, end) == 7
    progress = {
        "sources": [{"endOffset": json.dumps(end), "latestOffset": reader.reportLatestOffset()}]
    }
    assert lag_from_progress(progress) == {topic: 53}
    rows = [
        r
        for part in reader.partitions(start, end)
        for b in reader.read(part)
        for r in b.to_pylist()
    ]
    assert len(rows) == 7 and all(r["topic"] == topic for r in rows)
    for partition, stop in end[topic].items():
        offsets = [r["offset"] for r in rows if r["partition"] == int(partition)]
        assert offsets == list(range(start[topic][partition], stop))


def test_batch_limit_follows_the_beta_rule() -> None:
    from fixflow.pipeline.kafka.batch_limit import next_batch_limit

    rule = {"tau_s": 1.0, "alpha": 0.8, "r": 2.0, "cap": 10_000}
    # 1,000 records/s against beta = 1,000 per 1 s: inside the band, unchanged.
    assert next_batch_limit(1000, 1000, 1.0, **rule) == 1000
    assert next_batch_limit(1000, 1900, 1.0, **rule) == 1000
    # Rate above r * beta / tau: grow to alpha * tau * rate.
    assert next_batch_limit(1000, 5000, 1.0, **rule) == 4000
    # Rate below beta / (r * tau): shrink.
    assert next_batch_limit(1000, 100, 1.0, **rule) == 80
    # Bounded by the configured cap and by 1.
    assert next_batch_limit(1000, 10**6, 1.0, **rule) == 10_000
    assert next_batch_limit(1000, 0, 1.0, **rule) == 1
    assert next_batch_limit(500, 10, 0.0, **rule) == 500


def _loss_reader(broker: Config, topic: str, on_data_loss: str) -> KafkaStreamReader:
    options = {"bootstrap_servers": broker.kafka.bootstrap_servers, "topics": topic}
    return KafkaStreamReader({**options, "on_data_loss": on_data_loss})


def _topic_with_records(broker: Config, prefix: str, count: int) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker, [topic])
    _publish(broker, topic, [{"n": i} for i in range(count)])
    return topic


def test_a_checkpoint_ahead_of_the_broker_is_reported_as_data_loss(broker: Config) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from fixflow.pipeline.kafka.broker_view import DataLossError

    topic = _topic_with_records(broker, "loss", 4)
    ahead = {topic: {"0": 100, "1": 100}}  # as if the broker had restarted empty
    with pytest.raises(DataLossError, match=rf"{topic}\[0\]: checkpoint at offset 100, but the"):
        _loss_reader(broker, topic, "fail").latestOffset(ahead, ReadAllAvailable())


def test_resume_after_a_loss_moves_to_the_log_start_and_reads_nothing_of_it(
    broker: Config,
) -> None:
    """on_data_loss = resume: one batch realigns the lost partitions (no range is read for
    them), the next reads the broker's current log from its start."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from fixflow.pipeline.kafka.offsets import CLUSTER_KEY, REALIGNED_KEY, positions_of

    topic = _topic_with_records(broker, "resume", 6)
    reader = _loss_reader(broker, topic, "resume")
    ahead = {topic: {"0": 100, "1": 100}}
    realigned = reader.latestOffset(ahead, ReadAllAvailable())
    assert positions_of(realigned) == {topic: {"0": 0, "1": 0}}
    assert realigned[REALIGNED_KEY] == [f"{topic}/0", f"{topic}/1"]
    assert realigned[CLUSTER_KEY].startswith("fixflow-memory-")
    assert reader.partitions(ahead, realigned) == []
    after = reader.latestOffset(realigned, ReadAllAvailable())
    assert REALIGNED_KEY not in after
    ranges = reader.partitions(realigned, after)
    assert sum(r.end - r.start for r in ranges) == 6, "the whole current log is read"


def test_a_new_cluster_id_is_a_reset_even_when_the_new_log_is_longer(broker: Config) -> None:
    """Offsets of a broker that restarted empty and then received more records than the
    checkpoint had read look valid; only the cluster id tells them apart."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from fixflow.pipeline.kafka.broker_view import DataLossError
    from fixflow.pipeline.kafka.offsets import CLUSTER_KEY, positions_of

    topic = _topic_with_records(broker, "reset", 40)
    reader = _loss_reader(broker, topic, "fail")
    now = reader.latestOffset({topic: {"0": 0, "1": 0}}, ReadAllAvailable())
    same_cluster = {**{topic: {"0": 2, "1": 2}}, CLUSTER_KEY: now[CLUSTER_KEY]}
    assert positions_of(reader.latestOffset(same_cluster, ReadAllAvailable())) == positions_of(now)
    old_cluster = {topic: {"0": 2, "1": 2}, CLUSTER_KEY: "fixflow-memory-earlier"}
    with pytest.raises(DataLossError, match="the broker's log was reset"):
        reader.latestOffset(old_cluster, ReadAllAvailable())


def test_an_unreachable_broker_plans_no_batch() -> None:
    """The reader answers at once with the start offset (Spark then runs no batch) instead
    of failing the query; the driver says that it waits (BrokerWatch)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from ports import free_port

    reader = KafkaStreamReader({"bootstrap_servers": f"127.0.0.1:{free_port()}", "topics": "edge"})
    start = {"edge": {"0": 7, "1": 3}, "@cluster": "c"}
    assert reader.latestOffset(start, ReadAllAvailable()) is start


def test_a_reset_broker_that_lacks_the_topic_yet_is_a_loss_too(broker: Config) -> None:
    """Right after a restart the topic may not exist again: the old positions must not be
    carried over to the new cluster, or its new log would be skipped up to them."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from fixflow.pipeline.kafka.broker_view import DataLossError
    from fixflow.pipeline.kafka.offsets import CLUSTER_KEY, positions_of

    topic = f"ghost-{uuid.uuid4().hex[:8]}"  # never created
    start = {topic: {"0": 5, "1": 3}, CLUSTER_KEY: "fixflow-memory-earlier"}
    with pytest.raises(DataLossError, match=rf"{topic}\[0\]: checkpoint at offset 5"):
        _loss_reader(broker, topic, "fail").latestOffset(start, ReadAllAvailable())
    moved = _loss_reader(broker, topic, "resume").latestOffset(start, ReadAllAvailable())
    assert positions_of(moved) == {topic: {"0": 0, "1": 0}}
    assert moved[CLUSTER_KEY] != start[CLUSTER_KEY]


def test_an_end_no_probe_confirmed_proves_no_truncation() -> None:
    """A partition whose probe got no answer keeps the broker's reported end, which Tansu's
    s3 engine understates: below the checkpoint it is no evidence of lost records."""
    from fixflow.pipeline.kafka.broker_view import BrokerView, find_losses

    positions = {"edge": {"0": 50, "1": 50}}
    view = BrokerView(
        "c", {"edge": {"0": 0, "1": 0}}, {"edge": {"0": 1, "1": 1}}, frozenset({("edge", "1")})
    )
    losses = find_losses("c", positions, view)
    assert [(loss.partition, loss.cause) for loss in losses] == [("0", "truncated")]
