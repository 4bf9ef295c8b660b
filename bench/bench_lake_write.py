"""A result on Spark written into a Delta table by the driver's path (``toArrow``, then
delta-rs) and by Spark tasks (``lake/task_write.py``: Parquet files from the tasks, one
commit by the driver): wall time of the write and the driver's peak resident memory during
it. Each run is a process of its own (``--one``), so peaks do not mix; the frame is
materialized (``localCheckpoint``) before the clock starts, as an evaluated relation is.
Not a test.

    .venv/bin/python bench/bench_lake_write.py --rows 1000000 10000000 --repeats 3 \
        --out bench/SCALE_RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from benchlib import log, machine, write_report

PATHS = ("driver", "tasks")
ROWS_PER_PARTITION = 250_000
"""As ``operators.rounds.ROWS_PER_PARTITION`` sizes an evaluated relation's partitions."""


def _vm(field: str) -> int:
    """A ``/proc/self/status`` figure in bytes (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def one(path: str, rows: int, where: str) -> dict[str, float]:
    """One write in this process: seconds and the driver's peak RSS while writing."""
    from fixflow.checker.ast import Attribute
    from fixflow.pipeline.lake.delta import table_schema, to_arrow, write_table
    from fixflow.pipeline.lake.task_write import by_tasks, write_frame
    from fixflow.pipeline.spark import make_session

    spark = make_session("local[2]", "bench-lake-write")
    partitions = max(1, rows // ROWS_PER_PARTITION)
    frame = (
        spark.range(0, rows, numPartitions=partitions)
        .selectExpr("id AS c0", "CAST(id % 1000 AS DOUBLE) * 0.5 AS c1")
        .localCheckpoint(eager=True)
    )
    attributes = (Attribute("node", "number"), Attribute("dist", "float"))
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) restarts from now
    before = _vm("VmRSS")
    started = time.perf_counter()
    if where == "driver":
        table = to_arrow(frame, attributes)
        write_table(path, table, attributes)
        written = table.num_rows
        del table
    else:
        assert by_tasks(frame, 0)  # the path's check: one job over at most 1 row here
        done = write_frame(path, frame, table_schema(attributes), "overwrite")
        assert done is not None
        written = done.rows
    seconds = time.perf_counter() - started
    peak = _vm("VmHWM")
    assert written == rows, (written, rows)
    spark.stop()
    return {"seconds": seconds, "rss_before": before, "peak": peak}


def run(rows: int, where: str) -> dict[str, float]:
    directory = tempfile.mkdtemp(prefix="bench-lake-write-")
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--one", where, "--rows", str(rows), "--path", directory],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": f"src{os.pathsep}bench"},
        )
        result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
        return result
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", choices=PATHS)
    parser.add_argument("--path")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(str(Path(args.path) / "t"), args.rows[0], args.one)))
        return
    load_before = os.getloadavg()[0]
    lines = [
        "| rows | path | write (s), median | runs (s) | driver RSS before (GB) | "
        "driver peak during the write (GB), median |",
        "|---|---|---|---|---|---|",
    ]
    for rows in args.rows:
        found: dict[str, list[dict[str, float]]] = {p: [] for p in PATHS}
        for attempt in range(args.repeats):
            for where in PATHS:  # alternated, so the load falls on both alike
                result = run(rows, where)
                log(f"{rows} rows, {where}, run {attempt + 1}: {result}")
                found[where].append(result)
        for where in PATHS:
            runs = found[where]
            seconds = [r["seconds"] for r in runs]
            lines.append(
                f"| {rows:,} | {where} | {statistics.median(seconds):.2f} | "
                + ", ".join(f"{s:.2f}" for s in seconds)
                + f" | {statistics.median(r['rss_before'] for r in runs) / 1e9:.2f} | "
                f"{statistics.median(r['peak'] for r in runs) / 1e9:.2f} |"
            )
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = (
        f"## Run: a result on Spark written to Delta, the driver's path against tasks\n\n"
        f"{stamp}; {machine()}; load {load_before:.2f} before, {os.getloadavg()[0]:.2f} "
        f"after (another engineer benchmarked on the machine at the same time); medians of "
        f"{args.repeats}, each run a process of its own; a (number, float) relation "
        f"materialized in {ROWS_PER_PARTITION:,}-row partitions before the clock starts. "
        "`driver`: `toArrow`, then delta-rs; `tasks`: the threshold's check, Parquet "
        "files from the tasks, one commit (`bench/bench_lake_write.py`).\n\n"
    )
    write_report(header + "\n".join(lines) + "\n", args)


if __name__ == "__main__":
    main()
