"""`fixflow publish RELATION FILE [--delete] [--program PROG.dl] [--conf FILE]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fixflow.pipeline.config import ConfigError, add_conf_argument, config_from_args

if TYPE_CHECKING:  # the parser is imported where used, only with --program
    from fixflow.checker.ast import Program
    from fixflow.pipeline.publish.files import PublishResult
    from fixflow.pipeline.publish.producer import Progress

HELP = "publish facts from a CSV/TSV file to Kafka"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("relation", metavar="RELATION", help="relation (topic = prefix + name)")
    parser.add_argument(
        "file", metavar="FILE", help=".csv with a header row, or tab-separated .facts/.tsv"
    )
    parser.add_argument(
        "--delete",
        action="store_true",
        help='publish deletions ("op": "delete") instead of insertions',
    )
    parser.add_argument(
        "--program",
        metavar="PROG.dl",
        default=None,
        help="type the values per the relation's .decl (needed for .facts)",
    )
    add_conf_argument(parser)


def run(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    from fixflow.checker.diagnostics import CheckError
    from fixflow.pipeline.publish.fact_rows import PublishError
    from fixflow.pipeline.publish.files import publish_facts

    try:
        config = config_from_args(args)
        program = _load_program(args.program) if args.program else None
        result = publish_facts(
            config,
            args.relation,
            args.file,
            delete=args.delete,
            program=program,
            progress=_print_progress,
        )
    except (ConfigError, PublishError, CheckError) as error:
        print(f"fixflow publish: {error}", file=sys.stderr)
        return 1
    except KafkaError as error:
        print(
            f"fixflow publish: cannot reach Kafka at {_servers(args)}: {error}"
            "\n(for the embedded broker: fixflow broker start)",
            file=sys.stderr,
        )
        return 1
    print(result)
    if args.program is None:
        print(f"fixflow publish: {_typing_note(result, config.lake.path)}", file=sys.stderr)
    return 0


def _typing_note(result: PublishResult, lake: str) -> str:
    """Without --program, which declaration the values were checked against, if any."""
    if result.typed_by is not None:
        return f"values checked against the .decl of {result.relation} in {result.typed_by}"
    return (
        f"values not checked: no --program, and no program run on the lake {lake} declares "
        f"{result.relation} (integers and floats sent as numbers, the rest as text)"
    )


def _print_progress(progress: Progress) -> None:
    # Long publishes say how far they are, every few seconds, on stderr (stdout keeps
    # the one result line).
    print(f"fixflow publish: {progress}", file=sys.stderr, flush=True)


def _load_program(path: str) -> Program:
    from fixflow.checker.parser import parse
    from fixflow.pipeline.publish.fact_rows import PublishError

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise PublishError(f"{path}: cannot read program: {error.strerror}") from error
    return parse(text, path)


def _servers(args: argparse.Namespace) -> str:
    try:
        return config_from_args(args).kafka.bootstrap_servers
    except ConfigError:
        return "?"
