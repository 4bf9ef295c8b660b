"""``Program.stream``: a program kept up to date over a user's streaming DataFrames.

Each input stream is turned into the records a Kafka topic would hold (topic = the
relation, value = the fact as the JSON message ``kafka.messages`` parses, with the frame's
``op`` column when it has one), the streams are unioned, and every micro-batch runs the
pipeline of `fixflow run` (``stream.query.BatchPipeline`` with ``stream.program.ProgramStream``
as its maintenance hook): validation and dead letters, one epoch of the ``Maintainer``,
the idempotent Delta commits under (query id, batch id), the EDB commit last. Only the
transport differs, as with ``stream.memory_source``.

Within one micro-batch the operations on one fact apply in the order of the batch's rows
(their position stands for Kafka's offset), the last one winning.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from fixflow.checker.ast import Attribute
from fixflow.pipeline.api.errors import FixflowError, InputError
from fixflow.pipeline.api.inputs import frame_of, typed_columns
from fixflow.pipeline.config import Config
from fixflow.pipeline.kafka.messages import OP_FIELD
from fixflow.pipeline.stream.metrics import Metrics, MetricsServer, serve_configured
from fixflow.pipeline.stream.program import ProgramStream
from fixflow.pipeline.stream.query import BatchPipeline, streaming_query_id

log = logging.getLogger(__name__)

AVAILABLE_NOW = "available_now"


def start(
    spark: SparkSession,
    config: Config,
    program: tuple[str, str],
    name: str,
    trigger: str | None,
    inputs: Mapping[str, DataFrame],
    declared: Mapping[str, Sequence[Attribute]],
) -> StreamingQuery:
    """Start the streaming query of ``program`` (its file name and text) over ``inputs``,
    its lake directory ``name`` under ``[lake] path``."""
    if config.stream.consistency != "converged":
        raise FixflowError(
            '[stream] consistency = "async" runs in `fixflow run` only (it carries deltas '
            "on between batches); Program.stream commits converged results"
        )
    if not inputs:
        raise InputError(f"{program[0]}: give at least one input stream")
    records = [
        _records(relation, declared[relation], frame, config.kafka.topic(relation))
        for relation, frame in inputs.items()
    ]
    metrics = Metrics()
    stream = ProgramStream(spark, config, program[0], metrics, text=program[1], name=name)
    handle = functools.partial(_run_batch, stream.batch_pipeline())
    union = functools.reduce(DataFrame.unionByName, records)
    writer = (
        union.writeStream.foreachBatch(handle)
        .option("checkpointLocation", stream.lake.checkpoint())
        .queryName(f"fixflow-{name}")
    )
    if trigger == AVAILABLE_NOW:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(
            processingTime=trigger or f"{config.stream.trigger_ms} milliseconds"
        )
    server = serve_configured(metrics, config.metrics)
    query = writer.start()
    if server is not None:
        _stop_with(query, server)
    log.info("streaming %s into %s", ", ".join(inputs), stream.lake.base)
    return query


def _records(
    relation: str, attributes: Sequence[Attribute], frame: DataFrame, topic: str
) -> DataFrame:
    """The stream's rows as Kafka-shaped records of ``topic`` (a fact's JSON message)."""
    frame = frame_of(relation, frame)
    if not frame.isStreaming:
        raise InputError(
            f"input `{relation}` is not a streaming DataFrame (spark.readStream...): "
            "Program.evaluate takes static ones"
        )
    without_op = frame.drop(OP_FIELD) if OP_FIELD in frame.columns else frame
    fields = [
        typed.alias(a.name) for a, _, typed in typed_columns(relation, attributes, without_op)
    ]
    if OP_FIELD in frame.columns:
        fields.append(frame[OP_FIELD].cast("string").alias(OP_FIELD))
    return frame.select(
        F.lit(topic).alias("topic"),
        F.lit(None).cast("string").alias("key"),
        F.to_json(F.struct(*fields)).alias("value"),
    )


def _run_batch(pipeline: BatchPipeline, batch_df: DataFrame, batch_id: int) -> None:
    """``foreachBatch``: the batch's records, numbered in order, through ``pipeline``."""
    query_id = streaming_query_id(batch_df)
    pipeline.run(lambda: _numbered(batch_df.toArrow()), batch_id, query_id)


def _numbered(table: pa.Table) -> pa.Table:
    """Records with the partition and offset the pipeline orders by: one partition per
    relation, the offset a record's position among its relation's records in the batch
    (what a commit's ``offsets`` then name)."""
    topics = table.column("topic").to_numpy(zero_copy_only=False)
    offsets = np.zeros(table.num_rows, np.int64)
    for topic in np.unique(topics):
        mine = topics == topic
        offsets[mine] = np.arange(int(mine.sum()))
    table = table.append_column("partition", pa.array(np.zeros(table.num_rows, np.int32)))
    return table.append_column("offset", pa.array(offsets))


def _stop_with(query: StreamingQuery, server: MetricsServer) -> None:
    """Stop the metrics endpoint when the query ends."""

    def wait() -> None:
        with contextlib.suppress(Exception):  # the query's failure is the caller's to see
            query.awaitTermination()
        server.stop()

    threading.Thread(target=wait, name="fixflow-metrics-stop", daemon=True).start()
