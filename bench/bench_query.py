"""Wall time of `fixflow query` and `fixflow show`, the whole process as a user runs it (not a
test).

Builds a lake laid out like the real one (``lakehouse.ProgramLake``:
``<lake>/<program>/results/<relation>``) holding two result tables written with deltalake:
``sssp`` (node, dist) of 10,000 rows in program ``bench_sssp`` and ``cc`` (node, label) of
2,369 rows in program ``bench_cc``, and a config file whose ``[lake] path`` is that lake.
Then, per table and case, it starts the real CLI (this venv's ``fixflow`` script, a new
process every time) --repeats times and reports the median and min-max wall time from
spawn to exit, plus the machine load (os.getloadavg) when the case started:

  query all  : ``SELECT * FROM <rel> ORDER BY node``, every row printed as a table
  query agg  : ``SELECT count(*), min(...), max(...) FROM <rel> WHERE ...``
  show       : ``fixflow show <rel> --limit 0`` (every row, sorted, with the commit info)
  spark      : ``query all`` with ``--engine spark``, the JVM baseline (--no-spark skips)

and once, as the floor under every DataFusion row, ``imports``: a Python process that
only imports what the query path imports (the CLI, results, pyarrow, deltalake).

Every run must exit 0 and print the expected row count; a failure (e.g. exit 134, the
deltalake abort at exit of issue #11) is reported and fails the benchmark.

    .venv/bin/python bench/bench_query.py                  # writes bench/QUERY_RESULTS.md
    .venv/bin/python bench/bench_query.py --repeats 9 --no-spark --markdown

Progress goes to stderr; the report to --out (default bench/QUERY_RESULTS.md) or, with
--markdown, to stdout only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from fixflow.pipeline.lake.lakehouse import ProgramLake, append_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import machine

ROOT = Path(__file__).resolve().parent.parent
FIXFLOW = Path(sys.executable).parent / "fixflow"
TARGET_S = 1.0
IMPORTS = (
    "import fixflow.pipeline.cli, fixflow.pipeline.cli.commands.query, "
    "fixflow.pipeline.lake.results"
)


@dataclass(frozen=True)
class Table:
    program: str
    relation: str
    rows: int
    value: str
    """The second column: what `query agg` aggregates."""


TABLES = (Table("bench_sssp", "sssp", 10_000, "dist"), Table("bench_cc", "cc", 2_369, "label"))


@dataclass
class Row:
    table: Table
    case: str
    engine: str
    argv: list[str]
    """The command line, without the program: `fixflow` unless it starts with ``-c``."""
    expect: str
    """A line the output must contain (the row count)."""
    load: float = 0.0
    times: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def build_lake(root: Path) -> Path:
    """The lake and a config pointing at it; returns the config file."""
    for table in TABLES:
        nodes = pa.array(range(1, table.rows + 1), pa.int64())
        values = (
            pa.array([n * 0.25 for n in range(table.rows)], pa.float64())
            if table.value == "dist"
            else pa.array([n % 97 for n in range(table.rows)], pa.int64())
        )
        rows = pa.table({"node": nodes, table.value: values})
        append_rows(ProgramLake(str(root / "lake"), table.program).results(table.relation), rows)
    conf = root / "lake.toml"
    conf.write_text(f'[lake]\npath = "{root / "lake"}"\n')
    return conf


def cases(conf: Path, spark: bool) -> list[Row]:
    rows = [Row(Table("-", "-", 0, "-"), "imports", "-", ["-c", IMPORTS + "; print('ok')"], "ok")]
    for t in TABLES:
        everything = f"SELECT * FROM {t.relation} ORDER BY node"
        agg = (
            f"SELECT count(*) AS n, min({t.value}) AS lo, max({t.value}) AS hi "
            f"FROM {t.relation} WHERE node % 2 = 0"
        )
        scope = ["--conf", str(conf)]
        n = f"({t.rows} rows)"
        rows.append(Row(t, "query all", "datafusion", ["query", everything, *scope], n))
        rows.append(Row(t, "query agg", "datafusion", ["query", agg, *scope], "(1 row)"))
        show = ["show", t.relation, "--limit", "0", *scope]
        rows.append(Row(t, "show", "datafusion", show, f"{t.rows} rows"))
        if spark:
            argv = ["query", everything, "--engine", "spark", *scope]
            rows.append(Row(t, "query all", "spark", argv, n))
    return rows


def measure(row: Row, repeats: int) -> None:
    row.load = os.getloadavg()[0]
    for _ in range(repeats):
        program = sys.executable if row.argv[0] == "-c" else str(FIXFLOW)
        start = time.perf_counter()
        done = subprocess.run(
            [program, *row.argv], capture_output=True, text=True, cwd=ROOT, timeout=600
        )
        row.times.append(time.perf_counter() - start)
        if done.returncode != 0 or row.expect not in done.stdout.splitlines():
            row.failures.append(f"exit {done.returncode}: {done.stderr.strip()[-300:]}")
    print(
        f"{row.table.relation:5} {row.case:9} {row.engine:10} median "
        f"{statistics.median(row.times):.3f} s, load {row.load:.2f}",
        file=sys.stderr,
    )


def report(rows: list[Row], command: str, loads: tuple[tuple[float, ...], ...]) -> str:
    start, end = (" / ".join(f"{v:.2f}" for v in load) for load in loads)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# `fixflow query` and `fixflow show` wall time (bench/bench_query.py)",
        "",
        f"Machine: {machine()}.",
        "",
        f"Run: `.venv/bin/python {command}` on {when}; "
        f"load average (1/5/15 min) {start} at the start, {end} at the end.",
        "Wall time of the whole `fixflow` process (spawn to exit, Python start-up and imports "
        f"included), {len(rows[0].times)} runs per row; a lake laid out like the real one "
        "(`<lake>/<program>/results/<relation>`, written with deltalake).",
        "",
        "| table | rows | case | engine | median (s) | min-max (s) | load (1 min) | failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.table.relation} | {r.table.rows or '-'} | {r.case} | {r.engine} "
            f"| {statistics.median(r.times):.3f} | {min(r.times):.3f}-{max(r.times):.3f} "
            f"| {r.load:.2f} | {len(r.failures)} |"
        )
    lines += ["", verdict(rows), "", *NOTES]
    return "\n".join(lines) + "\n"


NOTES = (
    "*query all* prints every row as an aligned table (10,000 lines for sssp), so it includes",
    "the formatting; *query agg* prints one row; *show* sorts and prints every row and reads",
    "the last commit's metadata. *imports* is a Python process that only imports the query",
    "path's modules: the part of every DataFusion row that does not depend on the table.",
    "The load column is the 1-minute load average when the row started: on 2 cores a load",
    "above 2 means the runs shared the CPUs with other work, which stretches the Spark rows",
    "(a JVM start) most.",
)


def verdict(rows: list[Row]) -> str:
    default = [r for r in rows if r.engine == "datafusion"]  # not the imports-only floor
    worst = max(statistics.median(r.times) for r in default)
    text = f"Target: every DataFusion case ≤ {TARGET_S:.0f} s; slowest median {worst:.3f} s"
    spark = [f"{statistics.median(r.times):.1f}" for r in rows if r.engine == "spark"]
    if spark:
        text += f"; the Spark baseline's medians: {' and '.join(spark)} s"
    return text + "."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per row (default 5)")
    parser.add_argument("--no-spark", action="store_true", help="skip the --engine spark rows")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "QUERY_RESULTS.md")
    parser.add_argument("--markdown", action="store_true", help="report to stdout only")
    args = parser.parse_args()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fixflow-bench-query-") as work:
        rows = cases(build_lake(Path(work)), spark=not args.no_spark)
        for row in rows:
            measure(row, args.repeats)
    command = " ".join(["bench/bench_query.py", *sys.argv[1:]])
    text = report(rows, command, (load_start, os.getloadavg()))
    if args.markdown:
        print(text, end="")
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    failed = [f for r in rows for f in r.failures]
    for failure in failed:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
