"""Helpers of the streaming acceptance tests (tests/pipeline/test_stream_*.py).

Reading the streaming golden cases of this directory, delivering facts (to the real broker,
or to the in-memory source), reading the Delta result tables back, the checks every test
makes (against the expected files and against the reference oracle on the current facts),
and ``run_case``: a golden case step by step, checked after each step, over either
transport.
"""

from __future__ import annotations

import tomllib
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fixflow.checker.ast import Program
from fixflow.checker.model import Report
from fixflow.checker.parser import parse
from fixflow.operators.maintain import Epoch
from fixflow.pipeline.config import Config, default_config
from fixflow.pipeline.kafka.messages import encode_fact, fact_key
from fixflow.pipeline.lake.lakehouse import ProgramLake, read_table
from fixflow.pipeline.stream.memory_source import MemorySource
from fixflow.pipeline.stream.program import ProgramStream
from fixflow.pipeline.stream.query import BatchPipeline
from reference.evaluator import evaluate
from reference.golden import column_types, compare_rows, read_expected, read_facts

STREAMS = Path(__file__).resolve().parent
Row = tuple[Any, ...]
Facts = dict[str, set[Row]]


# ---------------------------------------------------------------- the golden cases


@dataclass(frozen=True)
class StreamStep:
    number: int
    inserts: dict[str, list[Row]]
    deletes: dict[str, list[Row]]
    expected: dict[str, list[Row]]
    why: str
    expect_strategy: str | None = None
    """From the optional step.toml: the strategy every epoch of the step ran for the
    recursive strata (``update`` stands for any ``update:<method>``)."""


@dataclass(frozen=True)
class StreamCase:
    name: str
    program_file: Path
    program: Program
    steps: list[StreamStep]
    tolerance: float


def case_names() -> list[str]:
    return sorted(p.name for p in STREAMS.iterdir() if (p / "program.dl").is_file())


def load_case(name: str) -> StreamCase:
    directory = STREAMS / name
    program_file = directory / "program.dl"
    program = parse(program_file.read_text(), str(program_file))
    meta = tomllib.loads((directory / "meta.toml").read_text())
    steps = [_load_step(program, d) for d in sorted((directory / "steps").iterdir())]
    return StreamCase(name, program_file, program, steps, float(meta["tolerance"]))


def _load_step(program: Program, directory: Path) -> StreamStep:
    def present(facts: dict[str, list[Row]]) -> dict[str, list[Row]]:
        return {rel: rows for rel, rows in facts.items() if rows}

    expected = {
        p.stem: read_expected(p, program) for p in sorted((directory / "expected").glob("*.csv"))
    }
    options = directory / "step.toml"
    meta = tomllib.loads(options.read_text()) if options.is_file() else {}
    return StreamStep(
        int(directory.name),
        present(read_facts(directory / "insert", program)),
        present(read_facts(directory / "delete", program)),
        expected,
        (directory / "WHY").read_text().strip(),
        meta.get("expect_strategy"),
    )


def apply_changes(
    facts: Facts, inserts: Mapping[str, Iterable[Row]], deletes: Mapping[str, Iterable[Row]]
) -> None:
    for rel, rows in deletes.items():
        facts.setdefault(rel, set()).difference_update(rows)
    for rel, rows in inserts.items():
        facts.setdefault(rel, set()).update(rows)


# ---------------------------------------------------------------- broker and lake


def isolated_config(broker: Config, lake_root: Path, **stream: Any) -> Config:
    """The broker's config with topics of its own (a fresh prefix) and its own lake."""
    prefix = f"s{uuid.uuid4().hex[:8]}."
    return replace(
        broker,
        kafka=replace(broker.kafka, topic_prefix=prefix, embedded=False),
        lake=replace(broker.lake, path=str(lake_root)),
        stream=replace(broker.stream, **stream),
        metrics=replace(broker.metrics, port=0),
    )


def memory_config(lake_root: Path, **stream: Any) -> Config:
    """The default config with its own lake, for the in-memory source (no broker)."""
    base = default_config()
    return replace(
        base,
        lake=replace(base.lake, path=str(lake_root)),
        stream=replace(base.stream, **stream),
        metrics=replace(base.metrics, port=0),
    )


def publish(config: Config, program: Program, messages: Iterable[tuple[str, Row, str]]) -> int:
    """Send (relation, fact, op) messages in order, keyed by the fact; wait for every ack."""
    return len(publish_raw(config, raw_messages(config, program, messages)))


def raw_messages(
    config: Config, program: Program, messages: Iterable[tuple[str, Row, str]]
) -> list[tuple[str, str | None, str]]:
    """(relation, fact, op) messages as the (topic, key, value) records `fixflow publish`
    sends: keyed by the fact, to the relation's topic."""
    raw: list[tuple[str, str | None, str]] = []
    for relation, values, op in messages:
        attributes = program.declaration(relation).attributes  # type: ignore[union-attr]
        value = encode_fact(attributes, values, op)  # type: ignore[arg-type]
        raw.append((config.kafka.topic(relation), fact_key(values), value))
    return raw


def publish_raw(
    config: Config, messages: Iterable[tuple[str, str | None, str]]
) -> list[tuple[str, int, int]]:
    """Send (topic, key, value) messages in order; return each one's (topic, partition,
    offset) once the broker acknowledged it."""
    from kafka import KafkaProducer

    from fixflow.pipeline.broker.embedded import ensure_topics

    messages = list(messages)
    ensure_topics(config, sorted({topic for topic, _, _ in messages}))
    producer = KafkaProducer(
        bootstrap_servers=config.kafka.bootstrap_servers, acks="all", linger_ms=5
    )
    try:
        futures = [
            producer.send(
                topic, key=key.encode() if key is not None else None, value=value.encode()
            )
            for topic, key, value in messages
        ]
        producer.flush(timeout=60)
        acks = [future.get(timeout=60) for future in futures]
    finally:
        producer.close(timeout=60)
    return [(a.topic, a.partition, a.offset) for a in acks]


def step_messages(
    inserts: Mapping[str, Iterable[Row]], deletes: Mapping[str, Iterable[Row]]
) -> list[tuple[str, Row, str]]:
    return [(rel, row, "delete") for rel, rows in deletes.items() for row in rows] + [
        (rel, row, "insert") for rel, rows in inserts.items() for row in rows
    ]


def table_rows(path: str) -> set[Row]:
    table = read_table(path)
    assert table is not None, f"{path}: no Delta table"
    return {tuple(row.values()) for row in table.to_pylist()}


def result_rows(lake: ProgramLake, relation: str) -> set[Row]:
    return table_rows(lake.results(relation))


# ---------------------------------------------------------------- checks


def oracle(program: Program, facts: Facts) -> dict[str, set[Row]]:
    """The reference evaluation of ``facts``, values typed as declared (the oracle keeps
    ``d = 0`` an int even in a float column)."""
    results = evaluate(program, {rel: sorted(rows) for rel, rows in facts.items()})
    return {rel: {_typed(program, rel, row) for row in rows} for rel, rows in results.items()}


def _typed(program: Program, relation: str, row: Row) -> Row:
    types = column_types(program, relation)
    types = types[len(types) - len(row) :]  # an iteration-indexed relation lost its index
    return tuple(float(v) if t == "float" else v for v, t in zip(row, types, strict=True))


def mismatches_with_oracle(
    program: Program, lake: ProgramLake, facts: Facts, tolerance: float
) -> dict[str, list[str]]:
    """Per output relation, how its result table differs from the oracle on ``facts``."""
    fresh = oracle(program, facts)
    problems = {}
    for relation in program.outputs:
        found = compare_rows(result_rows(lake, relation), sorted(fresh[relation]), tolerance)
        if found:
            problems[relation] = found[:8]
    return problems


def mismatches_with_expected(
    lake: ProgramLake, expected: Mapping[str, list[Row]], tolerance: float
) -> dict[str, list[str]]:
    problems = {}
    for relation, rows in expected.items():
        found = compare_rows(result_rows(lake, relation), rows, tolerance)
        if found:
            problems[relation] = found[:8]
    return problems


def strategy_mismatches(report: Report, epochs: Iterable[Epoch | None], expected: str) -> list[str]:
    """The recursive strata of ``epochs`` that did not run ``expected`` (``update`` matches
    any ``update:<method>``), or why nothing could be checked."""
    recursive = {s.index for s in report.strata if s.recursive}
    ran = [epoch for epoch in epochs if epoch is not None]
    if not ran:
        return ["no epoch ran"]
    found = []
    for number, epoch in enumerate(ran):
        for stratum in epoch.strata:
            strategy = stratum.strategy
            if stratum.stratum in recursive and not (
                strategy == expected or strategy.startswith(f"{expected}:")
            ):
                note = f" ({stratum.note})" if stratum.note else ""
                relations = ",".join(stratum.relations)
                found.append(f"epoch {number} of the step, {relations}: {strategy}{note}")
    return found


def edb_mismatches(program: Program, lake: ProgramLake, facts: Facts) -> dict[str, str]:
    """Per input relation, missing and extra facts of its EDB table against ``facts``."""
    problems = {}
    for relation in program.inputs:
        stored = table_rows(lake.edb(relation))
        want = facts.get(relation, set())
        if stored != want:
            problems[relation] = (
                f"missing {sorted(want - stored)[:5]}, extra {sorted(stored - want)[:5]}"
            )
    return problems


# ---------------------------------------------------------------- the Kafka query


QUERY_TIMEOUT_S = 240


def run_available_now(stream: Any) -> None:
    """One availableNow run on a ``ProgramStream``'s checkpoint (started again if it lost
    Spark's connect-back race, as `fixflow run` does); a failed batch raises."""
    query = stream.run_available_now(timeout_s=QUERY_TIMEOUT_S)
    assert query.exception() is None, query.exception()


# ---------------------------------------------------------------- one golden case, step by step

Messages = list[tuple[str, Row, str]]
Deliver = Callable[[ProgramStream, Messages], int]
"""How a step reaches a ``ProgramStream``: send its (relation, fact, op) messages, process
them to the end, return the records sent."""

NO_SWITCH = 1e6
"""``[elastic] switch_fraction`` of the cases that expect strategies: never abandon."""


def through_broker(stream: ProgramStream, messages: Messages) -> int:
    """Publish to the real broker, then one ``available_now`` run of the streaming query."""
    sent = publish(stream.config, stream.program, messages)
    run_available_now(stream)
    return sent


class ThroughMemory:
    """Deliver through one ``MemorySource`` (no broker, no streaming query) to the stream's
    ``batch_pipeline``: a step's records in batches of at most ``max_records`` (None: one
    batch)."""

    def __init__(self, max_records: int | None = None) -> None:
        self.source = MemorySource()
        self.max_records = max_records
        self.pipeline: BatchPipeline | None = None

    def __call__(self, stream: ProgramStream, messages: Messages) -> int:
        if self.pipeline is None:
            self.pipeline = stream.batch_pipeline()
        sent = self.source.send_all(raw_messages(stream.config, stream.program, messages))
        self.source.run_available_now(self.pipeline, self.max_records)
        return len(sent)


def run_case(name: str, spark: Any, config: Config, deliver: Deliver) -> ProgramStream:
    """A golden case's steps delivered one by one to a new ``ProgramStream``; the problems
    of every step (``step_problems``) fail the test together. Returns the stream."""
    case = load_case(name)
    if any(step.expect_strategy for step in case.steps):
        config = replace(config, elastic=replace(config.elastic, switch_fraction=NO_SWITCH))
    stream = ProgramStream(spark, config, case.program_file)
    facts: Facts = {rel: set() for rel in case.program.inputs}
    failures = []
    for step in case.steps:
        before = len(stream.reports)
        sent = deliver(stream, step_messages(step.inserts, step.deletes))
        apply_changes(facts, step.inserts, step.deletes)
        problems = step_problems(stream, case, facts, step, before)
        processed = sum(r.records for r in stream.reports[before:])
        if processed != sent:
            problems["records"] = f"sent {sent}, the batches read {processed}"
        if problems:
            failures.append(f"step {step.number:02d} ({step.why}): {problems}")
    assert not failures, f"{name}:\n" + "\n".join(failures)
    return stream


def step_problems(
    stream: ProgramStream, case: StreamCase, facts: Facts, step: StreamStep, before: int
) -> dict[str, Any]:
    """What is wrong after a step whose batches made the stream's reports from ``before``
    on: the result tables against the expected files and the oracle, the EDB against the
    facts, the result tables' columns against the declarations, the first batch's
    bootstrap, the strategies the step expects."""
    problems: dict[str, Any] = {}
    if bad := mismatches_with_expected(stream.lake, step.expected, case.tolerance):
        problems["expected"] = bad
    if bad := mismatches_with_oracle(case.program, stream.lake, facts, case.tolerance):
        problems["oracle"] = bad
    if bad := edb_mismatches(case.program, stream.lake, facts):
        problems["edb"] = bad
    problems |= column_mismatches(case.program, stream.lake)
    reports = stream.reports[before:]
    if before == 0 and not any(step.deletes.values()):
        # Bootstrap = update from empty: a fresh stream's first batch of insertions is
        # loaded and evaluated once (not an empty load, then an update that outgrows it).
        first = reports[0].epoch if reports else None
        ran = {s.strategy for s in first.strata} if first is not None else set()
        if ran != {"bootstrap"}:
            problems["first batch"] = f"ran {sorted(ran)}, expected one bootstrap"
    if step.expect_strategy is not None:
        epochs = [r.epoch for r in reports]
        if bad := strategy_mismatches(stream.report, epochs, step.expect_strategy):
            problems[f"strategy (expected {step.expect_strategy})"] = bad
    return problems


def column_mismatches(program: Program, lake: ProgramLake) -> dict[str, str]:
    """Per output relation whose result table's columns are not the declared ones, both."""
    problems = {}
    for relation in program.outputs:
        declared = [a.name for a in program.declaration(relation).attributes]  # type: ignore[union-attr]
        table = read_table(lake.results(relation))
        columns = table.schema.names if table is not None else None
        if columns != declared:
            problems[f"{relation} columns"] = f"{columns} != declared {declared}"
    return problems
