"""`fixflow eval` of every bundled example, whole process: the wall time a user waits for
`fixflow eval examples/<name>.dl -F tests/programs/<name>/facts -D out`, and whether the run
started Spark (a program whose strata all run in the driver starts no JVM).

    .venv/bin/python bench/bench_examples.py --repeats 5 [--baseline-src OTHER/src]

With ``--baseline-src`` the same runs are timed, interleaved, with another checkout's
``src`` first on ``PYTHONPATH`` (e.g. a worktree of an earlier commit): a before/after
measured in one sitting. Medians of ``--repeats``; machine load before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import log, machine, write_report

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--examples", nargs="*", help="names (default: every example)")
    parser.add_argument("--baseline-src", type=Path, help="another checkout's src directory")
    parser.add_argument("--markdown", action="store_true", help="report to stdout")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "SMALL_RESULTS.md")
    args = parser.parse_args()
    names = args.examples or sorted(p.stem for p in (ROOT / "examples").glob("*.dl"))
    before = os.getloadavg()
    sources = {"now": ROOT / "src"}
    if args.baseline_src:
        sources["baseline"] = args.baseline_src.resolve()
    times: dict[tuple[str, str], list[float]] = {}
    spark: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="fixflow-examples-") as scratch:
        for name in names:
            for repeat in range(args.repeats):
                for label, src in sources.items():
                    out = Path(scratch) / f"{name}_{label}_{repeat}"
                    seconds, started = timed(name, src, out)
                    times.setdefault((name, label), []).append(seconds)
                    if label == "now":
                        spark[name] = started
            log(f"{name}: {[round(t, 2) for t in times[(name, 'now')]]}")
    write_report(report(names, sources, times, spark, before, os.getloadavg(), args), args)


def timed(name: str, src: Path, out: Path) -> tuple[float, bool]:
    """Seconds of one `fixflow -v eval` of the example, and whether it started Spark."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    program = ROOT / "examples" / f"{name}.dl"
    facts = ROOT / "tests" / "programs" / name / "facts"
    command = [sys.executable, "-m", "fixflow.pipeline.cli", "-v", "eval", str(program)]
    started = time.perf_counter()
    done = subprocess.run(
        [*command, "-F", str(facts), "-D", str(out)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr.strip()[-400:]}")
    return seconds, "Spark not started" not in done.stderr


def report(
    names: list[str],
    sources: dict[str, Path],
    times: dict[tuple[str, str], list[float]],
    spark: dict[str, bool],
    before: tuple[float, float, float],
    after: tuple[float, float, float],
    args: argparse.Namespace,
) -> str:
    labels = list(sources)
    head = " | ".join(f"{label} (s)" for label in labels)
    lines = [
        "# `fixflow eval` of every example, whole process",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; load "
        f"{before[0]:.2f} before, {after[0]:.2f} after; medians of {args.repeats}"
        + (f"; baseline: {sources['baseline']}" if "baseline" in sources else "")
        + ".",
        "",
        f"| example | Spark started | {head} |",
        "|---|---|" + "---|" * len(labels),
    ]
    for name in names:
        medians = " | ".join(f"{statistics.median(times[(name, lb)]):.2f}" for lb in labels)
        lines.append(f"| {name} | {'yes' if spark[name] else 'no'} | {medians} |")
    driver = [statistics.median(times[(n, "now")]) for n in names if not spark[n]]
    if driver:
        lines += [
            "",
            f"{len(driver)} of {len(names)} examples start no JVM; their median whole-process "
            f"time: {statistics.median(driver):.2f} s (max {max(driver):.2f} s).",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
