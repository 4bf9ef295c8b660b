"""`fixflow run PROG.dl [--conf FILE] [--available-now]`: the streaming pipeline, a user of
the Python API (``Program.stream`` over the program's Kafka topics)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fixflow.pipeline.config import Config, ConfigError, add_conf_argument, config_from_args

if TYPE_CHECKING:
    from fixflow.pipeline.api import Program

HELP = "run the streaming pipeline: Kafka -> incremental maintenance -> Delta"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", metavar="PROG.dl", help="the Fixflow program")
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="process everything published so far, then exit 0",
    )
    parser.add_argument(
        "--on-data-loss",
        choices=("fail", "resume"),
        default=None,
        help="what to do when records were lost before the stream read them (a restarted "
        "in-memory broker): stop with an error (fail), or go on from what the broker holds "
        "now (resume); overrides [kafka] on_data_loss for this run",
    )
    add_conf_argument(parser)


def run(args: argparse.Namespace) -> int:
    from pyspark.errors import StreamingQueryException

    from fixflow.pipeline.api import FixflowError, Program, ProgramError
    from fixflow.pipeline.api.stream import refuse_nullary_inputs
    from fixflow.pipeline.broker.processes import BrokerError
    from fixflow.pipeline.engine_settings import refuse_beyond_memory
    from fixflow.pipeline.errors import UserFacingError
    from fixflow.pipeline.lake.lakehouse import ProgramLake, table_rows
    from fixflow.pipeline.lake.lease import refuse_if_held
    from fixflow.pipeline.object_store import use_lake
    from fixflow.pipeline.stream.metrics import MetricsPortBusy
    from fixflow.pipeline.stream.running import failure_summary

    if not Path(args.program).is_file():
        print(f"fixflow run: {args.program}: no such file", file=sys.stderr)
        return 2
    try:
        program = Program.from_file(args.program)
        refuse_nullary_inputs(program.report)  # before anything starts
        config = config_from_args(args)
        if args.on_data_loss is not None:
            kafka = replace(config.kafka, on_data_loss=args.on_data_loss)
            config = replace(config, kafka=kafka)
        use_lake(config.lake)  # an object store that does not answer: before Spark starts
        lake = ProgramLake.of(config.lake, Path(program.name).stem)
        refuse_if_held(lake)
        # The facts the lake holds are what the first batch loads: refused before Spark.
        edb = {r: table_rows(lake.edb(r)) for r in program.report.analysis.program.inputs}
        refuse_beyond_memory(config, program.report, edb)
        return _run(config, program, args.available_now)
    except ProgramError as error:
        print(error.render(), file=sys.stderr)
        return 1
    except (ConfigError, FixflowError, UserFacingError, BrokerError, MetricsPortBusy) as error:
        print(f"fixflow run: {error}", file=sys.stderr)
        return 1
    except StreamingQueryException as error:
        if getattr(args, "verbose", 0):
            raise
        print(f"fixflow run: the stream stopped: {failure_summary(error)}", file=sys.stderr)
        return 1


def _run(config: Config, program: Program, available_now: bool) -> int:
    """The program's stream through the Python API (``Program.stream`` over the ``[kafka]``
    topics), on the session, broker and metrics endpoint ``stream.session.Session`` starts."""
    from fixflow.pipeline.api.stream import AVAILABLE_NOW
    from fixflow.pipeline.cli.commands.progress import RoundPrinter
    from fixflow.pipeline.stream.running import run_until_stopped
    from fixflow.pipeline.stream.session import Session, print_batch

    analysed = program.report.analysis.program
    with Session(config, program.name, analysed, available_now=available_now) as session:
        print(session.describe())
        query = program.stream(
            session.spark,
            config,
            trigger=AVAILABLE_NOW if available_now else None,
            metrics=session.metrics,
            on_batch=print_batch,
            on_round=RoundPrinter(),
        )
        # (available_now: the query ends by itself, async deltas carried on to the end)
        run_until_stopped(query, broker_watch=session.broker_watch)
        print(f"stopped after {len(query.reports)} batch(es)")
    return 0
