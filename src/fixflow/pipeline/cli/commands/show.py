"""`fixflow show RELATION [--limit N] [--conf FILE] [--program STEM | --results DIR]`.

Prints a result relation sorted by its columns, its row count, and the Delta version and
Fixflow metadata (batch, offsets, provisional flag, partial: a stratum stopped by an
iteration cap) of its last commit. Reads with
deltalake and the DataFusion it bundles: no JVM, so it answers in well under a second.
"""

from __future__ import annotations

import argparse
import sys

from fixflow.pipeline.cli.commands.query import add_scope_arguments
from fixflow.pipeline.config import ConfigError, add_conf_argument, config_from_args
from fixflow.pipeline.object_store import StorageError, use_location

HELP = "print a result relation"
PREFIX = "fixflow show"
DEFAULT_LIMIT = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("relation", metavar="RELATION", help="an .output relation")
    parser.add_argument(
        "--limit",
        metavar="N",
        type=_non_negative,
        default=DEFAULT_LIMIT,
        help=f"print at most N rows (default {DEFAULT_LIMIT}; 0: all)",
    )
    add_scope_arguments(parser)
    add_conf_argument(parser)


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    from fixflow.pipeline.lake.results import (
        ResultsError,
        find_results,
        format_table,
        last_commit,
        read_result,
        sorted_rows,
    )

    try:
        config = config_from_args(args)
        use_location(config.lake, args.results)
        table = find_results(config.lake.path, args.program, args.results).resolve(args.relation)
        rows = sorted_rows(read_result(table))
        commit = last_commit(table)
    except (ConfigError, ResultsError, StorageError) as error:
        print(f"{PREFIX}: {error}", file=sys.stderr)
        return 1
    shown = rows if args.limit == 0 else rows.slice(0, args.limit)
    print(f"{table.qualified_name}  ({table.path})")
    print(format_table(shown))
    print(_count_line(rows.num_rows, shown.num_rows))
    for line in commit.describe():
        print(line)
    return 0


def _count_line(total: int, shown: int) -> str:
    noun = "row" if total == 1 else "rows"
    if shown < total:
        return f"{total} {noun} (first {shown} shown; --limit 0 for all)"
    return f"{total} {noun}"
