"""The first half of every micro-batch: Kafka records → validated, normalized EDB changes.

``ingest_batch`` is called from ``foreachBatch`` with the batch's DataFrame (the columns of
``kafka_source.SCHEMA``). It

1. validates every record against its relation's declaration (topic = prefix + relation);
2. writes the bad ones to the program's ``dead_letter`` table, idempotently;
3. normalizes the good ones per relation: the last operation per fact wins (in partition /
   offset order); inserting a present fact or deleting an absent one is a no-op, counted;
   presence is checked against the EDB table *as it was before this batch*, so a replay
   (after a crash) computes exactly the same changes as the first run;
4. returns an ``IngestResult``: per-relation insert and delete sets (Arrow tables with the
   declared schema), the offsets covered, and ``commit_edb()``.

The seam for the maintenance engine: it takes ``result.changes``, maintains every stratum,
writes state and results with ``lakehouse`` helpers and ``result.commit`` (the
(query id, batch id) that makes its commits idempotent), and calls ``result.commit_edb()``
*last*: the EDB commit marks the batch as applied. A replay then sees ``result.replayed``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from fixflow.checker.ast import Attribute, Program
from fixflow.pipeline.lake import arrow_schema
from fixflow.pipeline.lakehouse import (
    DEAD_LETTER_SCHEMA,
    BatchCommit,
    ProgramLake,
    already_committed,
    append_rows,
    merge_changes,
    open_table,
    read_before_batch,
)
from fixflow.pipeline.messages import DeadLetter, Fact, Value, parse_message
from fixflow.pipeline.metrics import Metrics

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from fixflow.pipeline.config import Config

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Spark sets this local property on the thread that runs foreachBatch."""


@dataclass(frozen=True, slots=True)
class RelationChanges:
    """The net effect of one batch on one EDB relation."""

    relation: str
    attributes: tuple[Attribute, ...]
    inserts: pa.Table
    """Facts absent before the batch and present after it (declared schema)."""
    deletes: pa.Table
    """Facts present before the batch and absent after it (declared schema)."""
    noop_inserts: int = 0
    noop_deletes: int = 0

    @property
    def empty(self) -> bool:
        return self.inserts.num_rows == 0 and self.deletes.num_rows == 0


@dataclass(frozen=True)
class IngestResult:
    batch_id: int
    commit: BatchCommit
    """(query id, batch id, offsets): pass it to every Delta commit of this batch."""
    lake: ProgramLake
    changes: dict[str, RelationChanges]
    """One entry per ``.input`` relation of the program (possibly empty)."""
    records: int
    dead_letters: int
    replayed: bool
    """True when the EDB changes of this batch were already committed (a replay)."""
    edb_committed: list[str] = field(default_factory=list, repr=False)
    """Relations whose EDB commit ``commit_edb`` made (empty for a replay)."""

    @property
    def offsets(self) -> Mapping[str, Mapping[str, Sequence[int]]]:
        return self.commit.offsets

    @property
    def changed_relations(self) -> list[str]:
        return [r for r, c in self.changes.items() if not c.empty]

    def commit_edb(self) -> list[str]:
        """Apply the changes to the EDB tables, one idempotent commit per relation; return
        the relations committed now (a replayed batch commits nothing)."""
        committed = []
        for relation in self.changed_relations:
            change = self.changes[relation]
            names = [a.name for a in change.attributes]
            if merge_changes(
                self.lake.edb(relation), names, change.inserts, change.deletes, self.commit
            ):
                committed.append(relation)
        self.edb_committed.extend(committed)
        return committed


# ---------------------------------------------------------------- the entry point


def ingest_batch(
    batch_df: DataFrame,
    batch_id: int,
    program: Program,
    lake: ProgramLake,
    metrics: Metrics | None = None,
    *,
    topic_prefix: str = "",
    query_id: str | None = None,
) -> IngestResult:
    """Validate, dead-letter and normalize one micro-batch (see the module docstring)."""
    query = query_id or streaming_query_id(batch_df)
    records = _sorted_records(
        batch_df.select("topic", "partition", "offset", "key", "value").toArrow()
    )
    commit = BatchCommit(query, batch_id, offsets_covered(records))
    schemas = input_schemas(program)
    facts, letters = validate(records, schemas, topic_prefix)
    written = write_dead_letters(lake, letters, commit)
    changes = {
        relation: normalize(
            relation,
            attributes,
            facts.get(relation, []),
            read_before_batch(lake.edb(relation), query, batch_id),
        )
        for relation, attributes in schemas.items()
    }
    replayed = _is_replay(lake, changes, commit)
    result = IngestResult(batch_id, commit, lake, changes, records.num_rows, len(letters), replayed)
    if metrics is not None and not replayed:
        _count(metrics, facts, letters if written else [], changes, topic_prefix)
    log.info(
        "batch %d: %d records, %d dead letters, changed %s%s",
        batch_id,
        records.num_rows,
        len(letters),
        result.changed_relations or "nothing",
        " (replay)" if replayed else "",
    )
    return result


def streaming_query_id(batch_df: DataFrame) -> str:
    """The id of the streaming query running this foreachBatch (stable across restarts
    from the same checkpoint, new for a new checkpoint)."""
    value = batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    if not value:
        raise RuntimeError("not inside a streaming foreachBatch: pass query_id explicitly")
    return value


def input_schemas(program: Program) -> dict[str, tuple[Attribute, ...]]:
    schemas = {}
    for relation in program.inputs:
        declaration = program.declaration(relation)
        if declaration is not None:
            schemas[relation] = declaration.attributes
    return schemas


def ensure_edb_tables(program: Program, lake: ProgramLake) -> list[str]:
    """Create the missing EDB tables, empty, with their declared schemas (so the engine and
    analysts can read every input relation before its first fact arrives)."""
    created = []
    for relation, attributes in input_schemas(program).items():
        if open_table(lake.edb(relation)) is None:
            append_rows(lake.edb(relation), arrow_schema(attributes).empty_table())
            created.append(relation)
    return created


# ---------------------------------------------------------------- steps


@dataclass(frozen=True, slots=True)
class Letter:
    """A dead letter with where it came from."""

    record: dict[str, Any]
    dead: DeadLetter


def _sorted_records(records: pa.Table) -> pa.Table:
    return records.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )


def offsets_covered(records: pa.Table) -> dict[str, dict[str, list[int]]]:
    """``{topic: {partition: [first offset, last offset]}}`` of the batch's records."""
    covered: dict[str, dict[str, list[int]]] = {}
    if records.num_rows == 0:
        return covered
    grouped = records.group_by(["topic", "partition"]).aggregate(
        [("offset", "min"), ("offset", "max")]
    )
    for row in grouped.to_pylist():
        covered.setdefault(row["topic"], {})[str(row["partition"])] = [
            row["offset_min"],
            row["offset_max"],
        ]
    return covered


def validate(
    records: pa.Table, schemas: Mapping[str, tuple[Attribute, ...]], topic_prefix: str
) -> tuple[dict[str, list[Fact]], list[Letter]]:
    """Split records into facts per relation (in record order) and dead letters."""
    facts: dict[str, list[Fact]] = {}
    letters: list[Letter] = []
    for record in records.to_pylist():
        relation = _relation_of(record["topic"], topic_prefix)
        attributes = schemas.get(relation) if relation is not None else None
        if relation is None or attributes is None:
            inputs = ", ".join(sorted(schemas)) or "none"
            letters.append(
                Letter(
                    record,
                    DeadLetter(
                        "unknown_relation",
                        f"topic {record['topic']!r} is not an .input relation of the program "
                        f"(inputs: {inputs})",
                    ),
                )
            )
            continue
        parsed = parse_message(record["value"], attributes)
        if isinstance(parsed, DeadLetter):
            letters.append(Letter(record, parsed))
        else:
            facts.setdefault(relation, []).append(parsed)
    return facts, letters


def _relation_of(topic: str, prefix: str) -> str | None:
    return topic[len(prefix) :] if topic.startswith(prefix) else None


def write_dead_letters(lake: ProgramLake, letters: list[Letter], commit: BatchCommit) -> bool:
    """Append the dead letters in one idempotent commit; True if written now."""
    if not letters:
        return False
    now = dt.datetime.now(dt.UTC)
    rows = pa.Table.from_pylist(
        [
            {
                **{
                    column: letter.record[column]
                    for column in ("value", "key", "topic", "partition", "offset")
                },
                "reason": letter.dead.reason,
                "kind": letter.dead.kind,
                "batch_id": commit.batch_id,
                "ingested_at": now,
            }
            for letter in letters
        ],
        schema=DEAD_LETTER_SCHEMA,
    )
    return append_rows(lake.dead_letter, rows, commit)


def normalize(
    relation: str, attributes: tuple[Attribute, ...], facts: list[Fact], before: pa.Table | None
) -> RelationChanges:
    """Net changes of ``facts`` (in order) against the EDB contents ``before``."""
    schema = arrow_schema(attributes)
    last_op: dict[tuple[Value, ...], str] = {}
    for fact in facts:
        last_op.pop(fact.values, None)  # re-insert so dict order follows the last operation
        last_op[fact.values] = fact.op
    inserts = _facts_table([v for v, op in last_op.items() if op == "insert"], schema)
    deletes = _facts_table([v for v, op in last_op.items() if op == "delete"], schema)
    existing = _conform(before, schema)
    new_inserts = inserts.join(existing, schema.names, join_type="left anti")
    real_deletes = deletes.join(existing, schema.names, join_type="left semi")
    return RelationChanges(
        relation,
        attributes,
        _conform(new_inserts, schema),
        _conform(real_deletes, schema),
        noop_inserts=inserts.num_rows - new_inserts.num_rows,
        noop_deletes=deletes.num_rows - real_deletes.num_rows,
    )


def _facts_table(rows: list[tuple[Value, ...]], schema: pa.Schema) -> pa.Table:
    columns: list[Sequence[Value]] = (
        list(zip(*rows, strict=True)) if rows else [[] for _ in schema.names]
    )
    return pa.table(
        [pa.array(list(c), f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def _conform(table: pa.Table | None, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema`` (Delta may hand back large/view string types)."""
    if table is None:
        return schema.empty_table()
    return pa.table(
        [table.column(n).cast(schema.field(n).type) for n in schema.names], schema=schema
    )


def _is_replay(
    lake: ProgramLake, changes: Mapping[str, RelationChanges], commit: BatchCommit
) -> bool:
    changed = [r for r, c in changes.items() if not c.empty]
    return bool(changed) and all(
        already_committed(lake.edb(r), commit.query_id, commit.batch_id) for r in changed
    )


def _count(
    metrics: Metrics,
    facts: Mapping[str, list[Fact]],
    letters: list[Letter],
    changes: Mapping[str, RelationChanges],
    topic_prefix: str,
) -> None:
    for relation, relation_facts in facts.items():
        for op in ("insert", "delete"):
            metrics.count_input(relation, op, sum(1 for f in relation_facts if f.op == op))
    for letter in letters:
        topic = letter.record["topic"]
        metrics.count_dead_letter(_relation_of(topic, topic_prefix) or topic, letter.dead.kind)
    for relation, change in changes.items():
        metrics.count_noop(relation, "insert", change.noop_inserts)
        metrics.count_noop(relation, "delete", change.noop_deletes)


# ---------------------------------------------------------------- the foreachBatch skeleton

Maintain = Callable[[IngestResult], None]
"""The maintenance engine's hook: given a batch's changes, update state and results (with
``result.commit`` on every Delta commit). It runs before the EDB commit."""


def topics_for(program: Program, topic_prefix: str = "") -> list[str]:
    """The Kafka topics of a program: one per ``.input`` relation."""
    return [f"{topic_prefix}{relation}" for relation in program.inputs]


def batch_handler(
    program: Program,
    lake: ProgramLake,
    metrics: Metrics | None = None,
    maintain: Maintain | None = None,
    *,
    topic_prefix: str = "",
    lock: AbstractContextManager[Any] | None = None,
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function: ingest → ``maintain`` (the engine) → EDB commit → metrics.

    Any exception propagates and stops the query without committing the batch in Spark's
    checkpoint, so the batch is replayed on restart; the idempotent commits make that safe.
    ``lock`` is held for the whole batch (work between batches, such as carrying pending
    deltas on under async consistency, takes it too).
    """

    def handle(batch_df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        with lock or nullcontext():
            result = ingest_batch(
                batch_df, batch_id, program, lake, metrics, topic_prefix=topic_prefix
            )
            if maintain is not None:
                maintain(result)
            result.commit_edb()
        if metrics is not None:
            if result.replayed:
                metrics.batches_replayed.inc()
            metrics.batch_committed(batch_id)
            metrics.batch_duration.observe(time.monotonic() - started)

    return handle


def start_ingest_query(
    spark: SparkSession,
    config: Config,
    program: Program,
    lake: ProgramLake,
    metrics: Metrics | None = None,
    maintain: Maintain | None = None,
    *,
    available_now: bool = False,
    limit_file: str | None = None,
    lock: AbstractContextManager[Any] | None = None,
) -> StreamingQuery:
    """Start the streaming query of a program: its input topics (created if missing) →
    ``batch_handler`` → the lake, checkpointed under ``lake.checkpoint()``.

    ``available_now`` processes what is published, then stops (``fixflow run
    --available-now``, tests); otherwise a batch starts every ``[stream] trigger_ms``.
    """
    from fixflow.pipeline.broker import ensure_topics
    from fixflow.pipeline.kafka_source import read_stream

    prefix = config.kafka.topic_prefix
    topics = topics_for(program, prefix)
    ensure_topics(config, topics)
    ensure_edb_tables(program, lake)
    writer = (
        read_stream(spark, config, topics, limit_file=limit_file)
        .writeStream.foreachBatch(
            batch_handler(program, lake, metrics, maintain, topic_prefix=prefix, lock=lock)
        )
        .option("checkpointLocation", lake.checkpoint())
        .queryName(f"fixflow-{lake.program}")
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.stream.trigger_ms} milliseconds")
    return writer.start()
