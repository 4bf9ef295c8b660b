"""The `fixflow` command line. Each subcommand lives in ``pipeline/cli/commands/<name>.py`` and
exposes ``HELP: str``, ``add_arguments(parser)`` and ``run(args) -> int``; modules are imported
lazily so that `fixflow check` never pays for starting Spark."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

from fixflow.pipeline.errors import UserFacingError

COMMANDS: dict[str, str] = {
    "check": "analyze a program and report the MRA condition check",
    "eval": "evaluate a program once over fact files, writing Delta tables",
    "run": "run the streaming pipeline: Kafka -> incremental maintenance -> Delta",
    "publish": "publish facts from a CSV/TSV file to Kafka",
    "query": "run SQL over the result tables",
    "show": "print a result relation",
    "explain": "print the derivation of one result row, down to the input facts",
    "broker": "start/stop/status of the embedded development Kafka broker",
    "demo": "the main job on the embedded default, end to end",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fixflow", description="Fixflow: a continuous Datalog engine on Apache Spark."
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    parser.add_argument(
        "--version",
        action=_PrintVersion,
        nargs=0,
        help="Fixflow's version and those of the components it runs on",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module = _command_module(name)
        if module is not None:
            module.add_arguments(command_parser)
    return parser


class _PrintVersion(argparse.Action):
    """Like argparse's "version" action, without its line wrapping."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_line())
        parser.exit()


COMPONENTS = ("pyspark", "deltalake", "kafka-python", "confluent-kafka", "z3-solver", "pyarrow")


def version_line() -> str:
    """``fixflow 0.1.0 (pyspark 4.0.1, ...)``, from the installed distributions' metadata
    (no component is imported, so it answers at once)."""
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "missing"

    parts = ", ".join(f"{name} {of(name)}" for name in COMPONENTS)
    return f"fixflow {of('fixflow')} ({parts})"


def _command_module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"fixflow.pipeline.cli.commands.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"fixflow.pipeline.cli.commands.{name}":
            return None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    module = _command_module(args.command)
    if module is None:
        print(f"fixflow {args.command}: not available in this build", file=sys.stderr)
        return 2
    try:
        return int(module.run(args))
    except KeyboardInterrupt:
        return 130
    except UserFacingError as error:
        if args.verbose:
            raise
        print(f"fixflow {args.command}: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # the last resort: one line, the traceback only with -v
        if args.verbose:
            raise
        print(f"fixflow {args.command}: {one_line(error)} (-v: traceback)", file=sys.stderr)
        return 1


def one_line(error: BaseException) -> str:
    """``Type: first line of the message``."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
