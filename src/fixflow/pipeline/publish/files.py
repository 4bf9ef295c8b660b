"""Publishing facts from files to Kafka: what ``fixflow publish`` does.

Files: ``.csv`` with a header row naming the attributes, or ``.facts``/``.tsv``
(tab-separated, no header, Soufflé's format) whose attribute names come from the program.
With a program, values are typed per the relation's declaration and a bad value is an error
at ``file:line``; without one (CSV only), values that read as integers or floats are sent as
JSON numbers and the rest as strings. Each fact becomes one message: value = JSON object of
its attributes (plus ``"op": "delete"`` with ``--delete``), key = the fact itself.

The stages, each in its module, in the order a fact goes through them: ``fact_rows`` (the
reference reader, one row at a time, and ``PublishError``), ``fact_columns`` (the reader and
encoder ``publish_facts`` uses, a column at a time), ``producer`` (sends the messages). This
module finds the declaration and runs the stages.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fixflow.checker.ast import Attribute, Program
from fixflow.pipeline.config import Config
from fixflow.pipeline.kafka.messages import Op
from fixflow.pipeline.object_store import use_lake
from fixflow.pipeline.publish.fact_rows import PublishError

if TYPE_CHECKING:  # the producer (and confluent_kafka) is imported where used
    from fixflow.pipeline.publish.fact_columns import FactColumns
    from fixflow.pipeline.publish.producer import Progress

log = logging.getLogger(__name__)


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

    use_lake(config.lake)
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
    from fixflow.pipeline.kafka_security import KafkaAccessError, check_access, secured
    from fixflow.pipeline.publish.fact_columns import check_op, encode_messages
    from fixflow.pipeline.publish.producer import Publisher

    declaration = find_declaration(config, relation, program)
    op: Op = "delete" if delete else "insert"
    up = reachable(config.kafka)
    if up and secured(config.kafka):
        try:  # refused credentials fail now, not after a send's 60 s timeout
            check_access(config.kafka)
        except KafkaAccessError as error:
            raise PublishError(str(error)) from None
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
