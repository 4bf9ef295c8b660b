"""Publishing facts from files to Kafka: what ``fixflow publish`` does.

Files: ``.csv`` with a header row naming the attributes, or ``.facts``/``.tsv``
(tab-separated, no header, Soufflé's format) whose attribute names come from the program.
With a program, values are typed per the relation's declaration and a bad value is an error
at ``file:line``; without one (CSV only), values that read as integers or floats are sent as
JSON numbers and the rest as strings. Each fact becomes one message: value = JSON object of
its attributes (plus ``"op": "delete"`` with ``--delete``), key = the fact itself.

The reader here goes one row at a time and is the reference: ``fact_columns`` reads and
encodes a column at a time (what ``publish_facts`` uses) and falls back to it to report an
error at its ``file:line``. ``producer`` sends the messages.
"""

from __future__ import annotations

import csv
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fixflow.checker.ast import Attribute, Program
from fixflow.pipeline.config import Config
from fixflow.pipeline.messages import Op, Value

if TYPE_CHECKING:  # the producer (and confluent_kafka) is imported where used
    from fixflow.pipeline.producer import Progress

log = logging.getLogger(__name__)

TAB_SEPARATED = (".facts", ".tsv")


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
            [tuple(guess_value(v) for v in row) for row in _checked_width(path, rows, inferred)],
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


def guess_value(text: str) -> Value:
    """A value of a CSV read without a program: an integer, else a float, else the text."""
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
    progress: Callable[[Progress], None] | None = None,
) -> PublishResult:
    """Publish every fact of ``path`` to the relation's topic (created if missing).

    The file is read and checked whole before anything is sent: a bad value anywhere
    publishes nothing. ``progress`` is called every few seconds while sending."""
    from fixflow.pipeline.broker import ensure_topics, reachable
    from fixflow.pipeline.fact_columns import check_op, encode_messages, read_columns
    from fixflow.pipeline.producer import Publisher

    attributes = relation_attributes(program, relation) if program is not None else None
    op: Op = "delete" if delete else "insert"
    up = reachable(config.kafka.bootstrap_servers)
    # The producer connects while the file is read (see Publisher); file errors still come
    # first, before an unreachable broker.
    with Publisher(config) if up else nullcontext(None) as publisher:
        clock = [time.perf_counter()]
        facts = read_columns(Path(path), attributes)
        check_op(relation, facts.attributes, op)
        clock.append(time.perf_counter())
        if publisher is None:
            raise _unreachable(config)
        messages = encode_messages(facts, op)
        del facts  # not needed while sending: its memory goes back before the send
        clock.append(time.perf_counter())
        topic = config.kafka.topic(relation)
        created = bool(ensure_topics(config, [topic]))
        clock.append(time.perf_counter())
        count = publisher.send(topic, messages, progress)
        clock.append(time.perf_counter())
    # The time split, one line: bench/bench_publish.py reads it (fixflow -v publish).
    read, encode, topic_s, send = (b - a for a, b in itertools.pairwise(clock))
    log.info(
        "published %d facts (%s) to %s: read %.3fs, encode %.3fs, topic %.3fs, send %.3fs",
        *(count, op, topic, read, encode, topic_s, send),
    )
    return PublishResult(relation, topic, count, created)


def _unreachable(config: Config) -> PublishError:
    hint = " (for the embedded broker: fixflow broker start)" if config.kafka.embedded else ""
    return PublishError(f"cannot reach Kafka at {config.kafka.bootstrap_servers}{hint}")
