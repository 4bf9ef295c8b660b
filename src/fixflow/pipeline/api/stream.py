"""``Program.stream``: a program kept up to date over streaming input.

The input is either the user's streaming DataFrames or, when none is given, the program's
Kafka topics as ``[kafka]`` configures them (what `fixflow run` reads: the CLI is a user of
this function). Each input DataFrame is turned into the records a Kafka topic would hold
(topic = the relation, value = the fact as the JSON message ``kafka.messages`` parses, with
the frame's ``op`` column when it has one), the streams are unioned, and every micro-batch
runs the pipeline of `fixflow run` (``stream.query.BatchPipeline`` with
``stream.program.ProgramStream`` as its maintenance hook): validation and dead letters, one
epoch of the ``Maintainer``, the idempotent Delta commits under (query id, batch id), the EDB
commit last. The query is returned watched (``stream.running.RunningStream``): async
consistency carries pending deltas on between batches, as in `fixflow run`.

Within one micro-batch the operations on one fact apply in the order of the batch's rows
(their position stands for Kafka's offset), the last one winning.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.checker.ast import Attribute, InputDirective
from fixflow.checker.model import Report
from fixflow.operators.evaluate import Progress
from fixflow.pipeline.api.errors import FixflowError, InputError
from fixflow.pipeline.api.inputs import frame_of, typed_columns
from fixflow.pipeline.config import Config
from fixflow.pipeline.kafka.messages import OP_FIELD
from fixflow.pipeline.kafka_security import check_access, secured
from fixflow.pipeline.stream.metrics import Metrics, serve_configured
from fixflow.pipeline.stream.program import BatchReport, ProgramStream
from fixflow.pipeline.stream.query import BatchPipeline, streaming_query_id, with_trigger
from fixflow.pipeline.stream.running import RunningStream

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
    *,
    metrics: Metrics | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
    on_round: Callable[[Progress], None] | None = None,
) -> RunningStream:
    """Start the streaming query of ``program`` (its file name and text) over ``inputs``
    (none: its Kafka topics), its lake directory ``name`` under ``[lake] path``. Without
    ``metrics``, new ones, served when ``[metrics] enabled``."""
    if not inputs and secured(config.kafka):
        # Refused credentials are one error now, not kafka-python's 30 s bootstrap timeout
        # (`fixflow run` checked before its Spark started; this is the API's check).
        check_access(config.kafka)
    records = [
        _records(relation, declared[relation], frame, config.kafka.topic(relation))
        for relation, frame in inputs.items()
    ]
    server = None
    if metrics is None:
        metrics = Metrics()
        server = serve_configured(metrics, config.metrics)
    try:
        stream = ProgramStream(
            spark, config, program[0], metrics, on_batch, on_round, text=program[1], name=name
        )
        available_now = trigger == AVAILABLE_NOW
        processing_time = None if available_now else trigger
        if not records:
            log.info("streaming the topics of %s into %s", program[0], stream.lake.base)
            return stream.run(available_now, processing_time=processing_time, server=server)
        handle = functools.partial(_run_batch, stream.batch_pipeline())
        writer = (
            functools.reduce(DataFrame.unionByName, records)
            .writeStream.foreachBatch(handle)
            .option("checkpointLocation", stream.lake.checkpoint())
            .queryName(f"fixflow-{name}")
        )
        writer = with_trigger(writer, config, available_now, processing_time)
        log.info("streaming %s into %s", ", ".join(inputs), stream.lake.base)
        return RunningStream(stream, writer.start, available_now=available_now, server=server)
    except BaseException:
        if server is not None:
            server.stop()
        raise


def refuse_nullary_inputs(report: Report) -> None:
    """A stream carries the fields of a tuple, and a nullary relation's one tuple has none:
    such an input is refused (`fixflow eval` reads its facts file; docs/language.md)."""
    schemas = report.analysis.schemas
    for item in report.analysis.program.items:
        if isinstance(item, InputDirective) and not schemas.get(item.relation, (None,)):
            raise FixflowError(
                f"{item.span}: nullary input relation `{item.relation}` is not supported by "
                "the stream (only by `fixflow eval`): derive it from a relation with "
                "attributes instead"
            )


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
