"""Publishing facts from files to Kafka: what ``fixflow publish`` does.

Files: ``.csv`` with a header row naming the attributes, or ``.facts``/``.tsv``
(tab-separated, no header, Soufflé's format) whose attribute names come from the program.
With a program, values are typed per the relation's declaration and a bad value is an error
at ``file:line``; without one (CSV only), values that read as integers or floats are sent as
JSON numbers and the rest as strings. Each fact becomes one message: value = JSON object of
its attributes (plus ``"op": "delete"`` with ``--delete``), key = the fact itself.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from fixflow.checker.ast import Attribute, Program
from fixflow.pipeline.config import Config
from fixflow.pipeline.messages import OP_FIELD, Op, Value, encode_fact, fact_key

log = logging.getLogger(__name__)

TAB_SEPARATED = (".facts", ".tsv")
SEND_TIMEOUT_S = 60.0


class PublishError(ValueError):
    """A file or relation that cannot be published; the message says where and why."""


@dataclass(frozen=True, slots=True)
class FactFile:
    attributes: tuple[Attribute, ...]
    facts: list[tuple[Value, ...]]


@dataclass(frozen=True, slots=True)
class PublishResult:
    relation: str
    topic: str
    count: int
    created_topic: bool

    def __str__(self) -> str:
        return f"published {self.count} facts to topic {self.topic}"


def relation_attributes(program: Program, relation: str) -> tuple[Attribute, ...]:
    declaration = program.declaration(relation)
    if declaration is None:
        declared = ", ".join(d.relation for d in program.declarations) or "none"
        raise PublishError(
            f"relation {relation!r} is not declared in {program.file} (declared: {declared})"
        )
    if relation not in program.inputs:
        log.warning("%s is not an .input relation of %s", relation, program.file)
    return declaration.attributes


def read_fact_file(path: Path, attributes: Sequence[Attribute] | None) -> FactFile:
    """The facts of a .csv or .facts/.tsv file, typed by ``attributes`` when given."""
    if not path.is_file():
        raise PublishError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv(path, attributes)
    if suffix in TAB_SEPARATED:
        if attributes is None:
            raise PublishError(
                f"{path}: a {suffix} file has no header; pass --program "
                "PROG.dl so the attribute names come from its .decl"
            )
        return FactFile(tuple(attributes), list(_typed_rows(path, _tsv_rows(path), attributes)))
    raise PublishError(
        f"{path}: unknown file type {suffix or '(none)'!r} (expected .csv, .facts or .tsv)"
    )


def _tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    with path.open(encoding="utf-8", newline="") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if line:
                yield number, line.split("\t")


def _read_csv(path: Path, attributes: Sequence[Attribute] | None) -> FactFile:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise PublishError(f"{path}:1: empty file: expected a header row naming the attributes")
        header = [name.strip() for name in header]
        rows = [(reader.line_num, row) for row in reader if row]
    if attributes is None:
        inferred = tuple(Attribute(name, "symbol") for name in header)
        return FactFile(
            inferred,
            [tuple(_guess(v) for v in row) for row in _checked_width(path, rows, inferred)],
        )
    order = _header_order(path, header, attributes)
    reordered = [
        (n, [row[i] for i in order]) if len(row) == len(header) else (n, row) for n, row in rows
    ]
    return FactFile(tuple(attributes), list(_typed_rows(path, reordered, attributes)))


def _header_order(path: Path, header: list[str], attributes: Sequence[Attribute]) -> list[int]:
    names = [a.name for a in attributes]
    if sorted(header) != sorted(names) or len(set(header)) != len(header):
        raise PublishError(
            f"{path}:1: header {', '.join(header)} does not name the declared "
            f"attributes {', '.join(names)}"
        )
    return [header.index(name) for name in names]


def _checked_width(
    path: Path, rows: list[tuple[int, list[str]]], attributes: Sequence[Attribute]
) -> Iterator[list[str]]:
    for number, row in rows:
        _check_width(path, number, row, attributes)
        yield row


def _check_width(path: Path, number: int, row: list[str], attributes: Sequence[Attribute]) -> None:
    if len(row) != len(attributes):
        names = ", ".join(a.name for a in attributes)
        raise PublishError(
            f"{path}:{number}: expected {len(attributes)} values ({names}), got {len(row)}"
        )


def _typed_rows(
    path: Path, rows: Iterable[tuple[int, list[str]]], attributes: Sequence[Attribute]
) -> Iterator[tuple[Value, ...]]:
    for number, row in rows:
        _check_width(path, number, row, attributes)
        yield tuple(_typed(path, number, a, text) for a, text in zip(attributes, row, strict=True))


def _typed(path: Path, line: int, attribute: Attribute, text: str) -> Value:
    value = parse_value(text, attribute.type)
    if value is None:
        raise PublishError(
            f"{path}:{line}: value {text!r} of attribute {attribute.name!r} is "
            f"not a {attribute.type}"
        )
    return value


def parse_value(text: str, type_name: str) -> Value | None:
    """``text`` as declared type ``type_name``, or None when it is not one."""
    if type_name == "symbol":
        return text
    text = text.strip()
    try:
        if type_name == "number":
            number = int(text)
            return number if -(2**63) <= number < 2**63 else None
        real = float(text)
        return real if math.isfinite(real) else None
    except ValueError:
        return None


def _guess(text: str) -> Value:
    for type_name in ("number", "float"):
        value = parse_value(text, type_name)
        if value is not None:
            return value
    return text


def publish_facts(
    config: Config,
    relation: str,
    path: str | Path,
    *,
    delete: bool = False,
    program: Program | None = None,
) -> PublishResult:
    """Publish every fact of ``path`` to the relation's topic (created if missing)."""
    from fixflow.pipeline.broker import ensure_topics, reachable

    attributes = relation_attributes(program, relation) if program is not None else None
    facts = read_fact_file(Path(path), attributes)
    if delete and any(a.name == OP_FIELD for a in facts.attributes):
        raise PublishError(
            f"{relation} has an attribute named {OP_FIELD!r}: its messages cannot carry deletes"
        )
    if not reachable(config.kafka.bootstrap_servers):
        hint = " (for the embedded broker: fixflow broker start)" if config.kafka.embedded else ""
        raise PublishError(f"cannot reach Kafka at {config.kafka.bootstrap_servers}{hint}")
    topic = config.kafka.topic(relation)
    created = bool(ensure_topics(config, [topic]))
    op: Op = "delete" if delete else "insert"
    count = send_facts(config, topic, facts, op)
    log.info("published %d facts (%s) to %s", count, op, topic)
    return PublishResult(relation, topic, count, created)


def send_facts(config: Config, topic: str, facts: FactFile, op: Op = "insert") -> int:
    """Send the facts keyed by their values; raise PublishError if any send failed."""
    from kafka import KafkaProducer

    failures: list[BaseException] = []
    producer = KafkaProducer(
        bootstrap_servers=config.kafka.bootstrap_servers, acks="all", linger_ms=5, retries=5
    )
    try:
        for values in facts.facts:
            future = producer.send(
                topic,
                key=fact_key(values).encode("utf-8"),
                value=encode_fact(facts.attributes, values, op).encode("utf-8"),
            )
            future.add_errback(failures.append)
        producer.flush(timeout=SEND_TIMEOUT_S)
    finally:
        producer.close(timeout=SEND_TIMEOUT_S)
    if failures:
        raise PublishError(
            f"{len(failures)} of {len(facts.facts)} facts were not published "
            f"to {topic}: {failures[0]}"
        )
    return len(facts.facts)
