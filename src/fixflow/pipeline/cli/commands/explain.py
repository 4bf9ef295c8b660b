"""`fixflow explain RELATION KEY... [--lake DIR] [--program STEM | --results DIR] [--conf FILE]`.

Prints why one result row holds: one derivation, a line per derived fact in Datalog syntax,
``fact  <-  premises`` down to input facts and seeds (``pipeline.lake.explain``). KEY gives
the row's key columns (every column but an aggregated value), in declared order. Reads the
lake with delta-rs: no JVM.
"""

from __future__ import annotations

import argparse
import sys

from fixflow.pipeline.config import ConfigError, add_conf_argument, config_from_args
from fixflow.pipeline.object_store import StorageError, use_location

HELP = "print the derivation of one result row, down to the input facts"
PREFIX = "fixflow explain"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("relation", metavar="RELATION", help="an .output relation")
    parser.add_argument(
        "key", nargs="+", metavar="KEY", help="the row's key columns, in declared order"
    )
    parser.add_argument(
        "--lake", metavar="DIR", default=None, help="the lake (default: [lake] path)"
    )
    parser.add_argument(
        "--program",
        metavar="STEM",
        default=None,
        help="the program's directory in the lake (sssp for sssp.dl); needed when several "
        "programs have results of RELATION",
    )
    parser.add_argument(
        "--results",
        metavar="DIR",
        default=None,
        help="read the OUT_DIR of `fixflow eval --explainable` instead of a lake",
    )
    add_conf_argument(parser)


def run(args: argparse.Namespace) -> int:
    from fixflow.pipeline.lake.explain import ExplainFailed, explain_in_lake, explain_in_output

    if args.results is not None and (args.lake is not None or args.program is not None):
        print(
            f"{PREFIX}: --results DIR reads an eval's output: no --lake or --program",
            file=sys.stderr,
        )
        return 1
    try:
        config = config_from_args(args)
        location = use_location(config.lake, args.results or args.lake)
        if args.results is not None:
            explanation = explain_in_output(location, args.relation, args.key)
        else:
            explanation = explain_in_lake(location, args.program, args.relation, args.key)
    except (ConfigError, ExplainFailed, StorageError) as error:
        print(f"{PREFIX}: {error}", file=sys.stderr)
        return 1
    if explanation.snapshot:
        print(f"// the lake as of {explanation.snapshot}")
    print(explanation)
    return 0
