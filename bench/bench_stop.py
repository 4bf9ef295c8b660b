"""How long `fixflow run` takes to stop after SIGTERM while records are queued (not a test).

A backlog of ``--batches`` x ``--per-batch`` facts (transitive closure over disjoint arcs,
so a batch costs about the same whatever its place) is published to a Tansu broker of the
benchmark's own; `fixflow run` (whole process, the per-trigger limit fixed at
``--per-batch``, not adaptive) is started on it, and SIGTERM is sent a random moment
(0-1 s) after the first batch line. Per repeat: seconds from the signal to the process's
exit, the batches that ran and committed, and the median batch time printed by the run.
The stop is right when the batches committed are exactly the ones the run printed and the
backlog was not drained. Medians over ``--repeats``; the machine load before and after.

    .venv/bin/python bench/bench_stop.py --repeats 3 --markdown
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchlib import free_port, log, machine, write_report

from fixflow.pipeline.broker.embedded import start_broker, stop_broker
from fixflow.pipeline.config import default_config
from fixflow.pipeline.lake.lakehouse import ProgramLake, batch_commits

FIXFLOW = Path(sys.executable).parent / "fixflow"
PROGRAM = """.decl arc(src: number, dst: number)
.input arc
.decl tc(src: number, dst: number)
.output tc
tc(X, Y) :- arc(X, Y).
tc(X, Y) :- tc(X, Z), arc(Z, Y).
"""
BATCH = re.compile(r"^batch (\d+): \d+ records.*\[([\d.]+) s\]$", re.MULTILINE)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--per-batch", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path("bench/STOP_RESULTS.md"))
    parser.add_argument("--markdown", action="store_true", help="the report to stdout only")
    return parser.parse_args()


def one_stop(root: Path, port: int, args: argparse.Namespace, seed: int) -> dict[str, float]:
    """One run stopped by SIGTERM: its timings and batch counts."""
    program, conf = root / "tc.dl", root / "run.toml"
    program.write_text(PROGRAM)
    conf.write_text(
        f'[kafka]\nbootstrap_servers = "127.0.0.1:{port}"\nembedded = false\n'
        f'topic_prefix = "stop{seed}."\n[lake]\npath = "{root / "lake"}"\n'
        '[spark.conf]\n"spark.ui.enabled" = false\n"spark.sql.shuffle.partitions" = 4\n'
        f"[stream]\ntrigger_ms = 100\nmax_records_per_trigger = {args.per_batch}\n"
        "adaptive = false\n[metrics]\nenabled = false\n"
    )
    facts = root / "arc.csv"
    total = args.batches * args.per_batch
    facts.write_text("src,dst\n" + "".join(f"{2 * i},{2 * i + 1}\n" for i in range(total)))
    publish = [str(FIXFLOW), "publish", "arc", str(facts), "--program", str(program)]
    subprocess.run([*publish, "--conf", str(conf)], check=True, capture_output=True)
    output = root / "run.out"
    with output.open("wb") as sink:
        run = subprocess.Popen(
            [str(FIXFLOW), "run", str(program), "--conf", str(conf)],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    while not BATCH.search(output.read_text(errors="replace")):
        if run.poll() is not None:
            raise RuntimeError(output.read_text()[-3000:])
        time.sleep(0.05)
    time.sleep(random.Random(seed).uniform(0.0, 1.0))
    signalled = time.monotonic()
    run.send_signal(signal.SIGTERM)
    code = run.wait(timeout=600)
    exited = time.monotonic() - signalled
    text = output.read_text(errors="replace")
    printed = [(int(b), float(s)) for b, s in BATCH.findall(text)]
    lake = ProgramLake(str(root / "lake"), "tc")
    committed = sorted(int(c["fixflow.batch_id"]) for c in batch_commits(lake.edb("arc")))
    exact = code == 0 and committed == [b for b, _ in printed] and len(printed) < args.batches
    return {
        "exit_s": exited,
        "batches": len(printed),
        "batch_s": statistics.median(s for _, s in printed),
        "exact": float(exact),
    }


def main() -> None:
    args = arguments()
    load_before = os.getloadavg()
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        config = default_config()
        config = replace(
            config,
            kafka=replace(config.kafka, bootstrap_servers=f"127.0.0.1:{port}"),
            lake=replace(config.lake, path=str(Path(scratch) / "broker")),
        )
        start_broker(config)
        try:
            rows = []
            for repeat in range(args.repeats):
                root = Path(scratch) / f"run{repeat}"
                root.mkdir()
                rows.append(one_stop(root, port, args, repeat))
                log(f"repeat {repeat + 1}: {rows[-1]}")
        finally:
            stop_broker(config)
    load_after = os.getloadavg()
    lines = [
        "# Stopping `fixflow run` with records queued (bench/bench_stop.py)",
        "",
        f"{machine()}; load (1/5/15 min) {load_before} before, {load_after} after.",
        f"Backlog {args.batches} batches x {args.per_batch} facts; SIGTERM 0-1 s after the "
        "first batch line.",
        "",
        "| repeat | SIGTERM -> exit (s) | batches run | median batch (s) | exact stop |",
        "|---|---|---|---|---|",
    ]
    for i, row in enumerate(rows, 1):
        lines.append(
            f"| {i} | {row['exit_s']:.2f} | {row['batches']:.0f} | {row['batch_s']:.2f} | "
            f"{'yes' if row['exact'] else 'no'} |"
        )
    median = statistics.median(r["exit_s"] for r in rows)
    lines += ["", f"Median SIGTERM -> exit: {median:.2f} s.", ""]
    write_report("\n".join(lines), args)


if __name__ == "__main__":
    main()
