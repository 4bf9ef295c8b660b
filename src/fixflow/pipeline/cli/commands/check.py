"""`fixflow check PROG.dl [--json]`: analysis and MRA condition report.

Exit codes: 0 for a valid program (whatever the verdicts), 1 when it has errors, 2 when
the file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "analyze a program and report the MRA condition check"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", type=Path, help="the Datalog program (.dl)")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the human report"
    )


def run(args: argparse.Namespace) -> int:
    from fixflow.checker import CheckError, load
    from fixflow.checker.diagnostics import render_all
    from fixflow.checker.report import human, to_json

    path: Path = args.program
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"fixflow check: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        report = load(source, str(path))
    except CheckError as error:
        if args.json:
            print(json.dumps(to_json(None, error.diagnostics), ensure_ascii=False, indent=2))
        print(render_all(error.diagnostics, source), file=sys.stderr)
        return 1
    diagnostics = list(report.diagnostics)
    warnings = [d for d in diagnostics if d.severity == "warning"]
    if args.json:
        print(json.dumps(to_json(report, diagnostics), ensure_ascii=False, indent=2))
    else:
        print(human(report))
    if warnings:
        print(render_all(warnings, source), file=sys.stderr)
    return 0
