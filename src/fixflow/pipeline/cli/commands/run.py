"""`fixflow run PROG.dl [--conf FILE] [--available-now]`: the streaming pipeline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fixflow.pipeline.config import Config, ConfigError, add_conf_argument, config_from_args

HELP = "run the streaming pipeline: Kafka -> incremental maintenance -> Delta"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", metavar="PROG.dl", help="the Fixflow program")
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="process everything published so far, then exit 0",
    )
    add_conf_argument(parser)


def run(args: argparse.Namespace) -> int:
    from pyspark.errors import StreamingQueryException

    from fixflow.checker.diagnostics import CheckError
    from fixflow.pipeline.broker.processes import BrokerError
    from fixflow.pipeline.stream.broker_watch import BrokerUnavailable
    from fixflow.pipeline.stream.metrics import MetricsPortBusy
    from fixflow.pipeline.stream.running import failure_summary

    if not Path(args.program).is_file():
        print(f"fixflow run: {args.program}: no such file", file=sys.stderr)
        return 2
    try:
        nullary = _nullary_input(Path(args.program))
        if nullary is not None:
            print(f"fixflow run: {nullary}", file=sys.stderr)
            return 1
        config = config_from_args(args)
        return _run(config, args.program, args.available_now)
    except ConfigError as error:
        print(f"fixflow run: {error}", file=sys.stderr)
        return 1
    except CheckError as error:
        print(error, file=sys.stderr)
        return 1
    except (BrokerError, BrokerUnavailable, MetricsPortBusy) as error:
        print(f"fixflow run: {error}", file=sys.stderr)
        return 1
    except StreamingQueryException as error:
        if getattr(args, "verbose", 0):
            raise
        print(f"fixflow run: the stream stopped: {failure_summary(error)}", file=sys.stderr)
        return 1


def _nullary_input(program_file: Path) -> str | None:
    """Why the stream refuses the program, if it has a nullary input: a topic's records
    carry the fields of a tuple, and a nullary relation's one tuple has none (`fixflow
    eval` reads its facts file; docs/language.md)."""
    from fixflow.checker import load
    from fixflow.checker.ast import InputDirective

    report = load(program_file.read_text(encoding="utf-8"), str(program_file))
    schemas = report.analysis.schemas
    for item in report.analysis.program.items:
        if isinstance(item, InputDirective) and not schemas.get(item.relation, (None,)):
            return (
                f"{item.span}: nullary input relation `{item.relation}` is not supported by "
                "the stream (only by `fixflow eval`): derive it from a relation with "
                "attributes instead"
            )
    return None


def _run(config: Config, program: str, available_now: bool) -> int:
    from fixflow.pipeline.cli.commands.progress import RoundPrinter
    from fixflow.pipeline.stream.session import Session

    with Session(config, program) as session:
        print(session.describe())
        session.stream.on_batch = session.print_batch
        session.stream.on_round = RoundPrinter()
        if available_now:
            session.stream.run_available_now()
            session.stream.settle()  # async consistency: converge before exiting
        else:
            from fixflow.pipeline.stream.running import run_until_stopped

            query = session.stream.start()
            run_until_stopped(session.stream, query, broker_watch=session.broker_watch)
        print(f"stopped after {len(session.stream.reports)} batch(es)")
    return 0
