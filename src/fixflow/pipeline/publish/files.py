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
from fixflow.pipeline.kafka.messages import Op, Value, is_one_symbol

if TYPE_CHECKING:  # the producer (and confluent_kafka) is imported where used
    from fixflow.pipeline.publish.fact_columns import FactColumns
    from fixflow.pipeline.publish.producer import Progress

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
    typed_by: str | None = None
    """Where the declaration the values were checked against came from (None: guessed)."""

    def __str__(self) -> str:
        return f"published {self.count} facts to topic {self.topic}"


@dataclass(frozen=True, slots=True)
class Declaration:
    """The attributes a relation's facts are read and typed by, and where they were found."""

    attributes: tuple[Attribute, ...]
    found_in: str


def find_declaration(config: Config, relation: str, program: Program | None) -> Declaration | None:
    """The relation's declaration in ``program`` (``--program``), else in the programs run
    on the configured lake (``fixflow run`` keeps a copy of each); None when neither has it.
    Programs of the lake that declare it differently make it an error."""
    if program is not None:
        return Declaration(relation_attributes(program, relation), program.file)
    from fixflow.pipeline.lake.lakehouse import ProgramLake, program_sources

    found: dict[str, list[str]] = {}  # "src: number, ..." -> the programs declaring so
    attributes_of: dict[str, tuple[Attribute, ...]] = {}
    for stem, text in program_sources(config.lake.path).items():
        attributes = _input_attributes(text, ProgramLake(config.lake.path, stem).source, relation)
        if attributes is not None:
            reading = _describe(attributes)
            found.setdefault(reading, []).append(stem)
            attributes_of[reading] = attributes
    if len(found) > 1:
        readings = "; ".join(f"{', '.join(s)}: {relation}({r})" for r, s in found.items())
        raise PublishError(
            f"the programs in the lake {config.lake.path} declare {relation} differently "
            f"({readings}); pass --program PROG.dl to say which one the file is for"
        )
    if not found:
        return None
    ((reading, stems),) = found.items()
    where = f"the lake's program{'s' if len(stems) > 1 else ''} {', '.join(stems)}"
    return Declaration(attributes_of[reading], where)


def _input_attributes(text: str, path: str, relation: str) -> tuple[Attribute, ...] | None:
    from fixflow.checker.diagnostics import CheckError
    from fixflow.checker.parser import parse

    try:
        program = parse(text, path)
    except CheckError as error:  # a lake's copy that no longer parses is not a declaration
        log.warning("ignoring %s: %s", path, error)
        return None
    declaration = program.declaration(relation)
    if declaration is None or relation not in program.inputs:
        return None
    return declaration.attributes


def _describe(attributes: Sequence[Attribute]) -> str:
    return ", ".join(f"{a.name}: {a.declared or a.type}" for a in attributes)


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
                f"{path}: a {suffix} file has no header and no program run on the lake "
                "declares its relation; pass --program PROG.dl so the attribute names "
                "come from its .decl"
            )
        rows = _tsv_rows(path, is_one_symbol(attributes))
        return FactFile(tuple(attributes), list(_typed_rows(path, rows, attributes)))
    raise PublishError(
        f"{path}: unknown file type {suffix or '(none)'!r} (expected .csv, .facts or .tsv)"
    )


def _tsv_rows(path: Path, one_symbol: bool) -> Iterator[tuple[int, list[str]]]:
    """Blank lines are skipped, except for one ``symbol`` column: there they are ""."""
    with path.open(encoding="utf-8", newline="") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if line or one_symbol:
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
    from fixflow.pipeline.broker.embedded import ensure_topics, reachable
    from fixflow.pipeline.publish.fact_columns import check_op, encode_messages
    from fixflow.pipeline.publish.producer import Publisher

    declaration = find_declaration(config, relation, program)
    op: Op = "delete" if delete else "insert"
    up = reachable(config.kafka.bootstrap_servers)
    # The producer connects while the file is read (see Publisher); file errors still come
    # first, before an unreachable broker.
    with Publisher(config) if up else nullcontext(None) as publisher:
        clock = [time.perf_counter()]
        facts = _read_declared(Path(path), declaration, program is None)
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
    typed_by = declaration.found_in if declaration is not None else None
    return PublishResult(relation, topic, count, created, typed_by)


def _read_declared(path: Path, declaration: Declaration | None, from_lake: bool) -> FactColumns:
    """The file's facts, typed by the declaration; an error names a declaration that came
    from the lake (the user did not name it)."""
    from fixflow.pipeline.publish.fact_columns import read_columns

    attributes = declaration.attributes if declaration is not None else None
    try:
        return read_columns(path, attributes)
    except PublishError as error:
        if declaration is None or not from_lake:
            raise
        raise PublishError(f"{error} (declaration from {declaration.found_in})") from error


def _unreachable(config: Config) -> PublishError:
    hint = " (for the embedded broker: fixflow broker start)" if config.kafka.embedded else ""
    return PublishError(f"cannot reach Kafka at {config.kafka.bootstrap_servers}{hint}")
