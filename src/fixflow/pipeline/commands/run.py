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
    from fixflow.pipeline.broker import BrokerError
    from fixflow.pipeline.broker_watch import BrokerUnavailable
    from fixflow.pipeline.metrics import MetricsPortBusy
    from fixflow.pipeline.stream import failure_summary

    if not Path(args.program).is_file():
        print(f"fixflow run: {args.program}: no such file", file=sys.stderr)
        return 2
    try:
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


def _run(config: Config, program: str, available_now: bool) -> int:
    from fixflow.pipeline.commands.progress import RoundPrinter
    from fixflow.pipeline.session import Session

    with Session(config, program) as session:
        print(session.describe())
        session.stream.on_batch = session.print_batch
        session.stream.on_round = RoundPrinter()
        if available_now:
            session.stream.run_available_now()
            session.stream.settle()  # async consistency: converge before exiting
        else:
            from fixflow.pipeline.stream import run_until_stopped

            query = session.stream.start()
            run_until_stopped(session.stream, query, broker_watch=session.broker_watch)
        print(f"stopped after {len(session.stream.reports)} batch(es)")
    return 0
