"""Small programs, many rules and strata: `fixflow eval` wall time (whole process, JVM
start included) and Spark jobs, per program (issue #13: a 40-rule, 10-stratum program over
a few hundred facts in <= 15 s on 2 cores).

    .venv/bin/python bench/bench_small.py --repeats 3 --markdown

Programs are generated here (deterministic) so the bench needs nothing outside the repo:
- ``strata40``: 10 strata of 4 rules each over 300 edges of a 100-node DAG. Stratum k
  copies the previous stratum's pairs, closes them under ``edge`` (recursive), drops the
  pairs whose target is marked for k (negation: the next stratum must wait), and counts
  per source (a non-recursive aggregate, an output).
- ``tc_small``: the transitive closure of the same edges (one recursive stratum).
- ``nonlinear45``: ``n(x+1) :- n(x), n(0), x < 45.`` (45 rounds, two recursive atoms).
- ``sssp_small``, ``pagerank_small``: `mra` strata (min; sum with a termination clause)
  over the same edges; ``--modes sync,spark,driver`` also runs them in sync rounds.

Each program runs twice per repeat, in the same run: ``spark`` (``--local-rows 0``: every
stratum on Spark, as before the driver path existed) and ``driver`` (the default: strata of
up to ``--local-rows`` rows run in the driver, ``fixflow.operators.driver``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchlib import log, machine, write_report
from pyspark.sql import SparkSession

NODES, EDGES, STRATA = 100, 300, 10


def _edges(seed: int = 7) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < EDGES:
        a, b = sorted(rng.sample(range(NODES), 2))
        if b - a <= 8:  # a DAG of short hops: closures of a few thousand pairs
            pairs.add((a, b))
    return sorted(pairs)


def _marks(seed: int = 11) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return sorted({(rng.randrange(NODES), k) for k in range(1, STRATA + 1) for _ in range(5)})


def strata40() -> tuple[str, dict[str, list[tuple[int, ...]]]]:
    lines = [
        ".decl edge(x: number, y: number)",
        ".input edge",
        ".decl mark(x: number, k: number)",
        ".input mark",
    ]
    for k in range(1, STRATA + 1):
        prev = "edge" if k == 1 else f"s{k - 1}"
        lines += [
            f".decl t{k}(x: number, y: number)",
            f".decl s{k}(x: number, y: number)",
            f".decl c{k}(x: number, n: number)",
            f".output c{k}",
            f"t{k}(x, y) :- {prev}(x, y).",
            f"t{k}(x, z) :- t{k}(x, y), edge(y, z).",
            f"s{k}(x, y) :- t{k}(x, y), !mark(y, {k}).",
            f"c{k}(x, count[*]) :- s{k}(x, _).",
        ]
    return "\n".join(lines) + "\n", {"edge": list(_edges()), "mark": list(_marks())}


def tc_small() -> tuple[str, dict[str, list[tuple[int, ...]]]]:
    program = """\
.decl edge(x: number, y: number)
.input edge
.decl path(x: number, y: number)
.output path
path(x, y) :- edge(x, y).
path(x, z) :- path(x, y), edge(y, z).
"""
    return program, {"edge": list(_edges())}


def nonlinear45() -> tuple[str, dict[str, list[tuple[int, ...]]]]:
    program = """\
.decl n(x: number)
.output n
n(0).
n(x + 1) :- n(x), n(0), x < 45.
"""
    return program, {}


def sssp_small() -> tuple[str, dict[str, list[tuple[int, ...]]]]:
    """An `mra` min stratum: shortest distances from node 0 over the same edges."""
    program = """\
.decl edge(x: number, y: number, w: float)
.input edge
.decl dist(x: number, d: float)
.output dist
dist(x, d) :- x = 0, d = 0.0.
dist(y, min[d]) :- dist(x, dx), edge(x, y, w), d = dx + w.
"""
    edges = [(a, b, float(1 + (a * 7 + b) % 5)) for a, b in _edges()]
    return program, {"edge": edges}


def pagerank_small() -> tuple[str, dict[str, list[tuple[int, ...]]]]:
    """An `mra` sum stratum with a termination clause: PageRank over the same edges."""
    program = """\
.decl edge(x: number, y: number)
.input edge
.decl node(x: number)
.decl degree(x: number, n: number)
.decl rank(x: number, r: float)
.output rank
node(x) :- edge(x, _).
node(y) :- edge(_, y).
degree(x, count[*]) :- edge(x, _).
rank(x, sum[r]) :- node(x), r = 0.15
                 ; rank(y, ry), edge(y, x), degree(y, n), r = 0.85 * ry / n
                 ; {sum[Δr] < 0.0001}.
"""
    return program, {"edge": list(_edges())}


PROGRAMS = {
    "strata40": strata40,
    "tc_small": tc_small,
    "nonlinear45": nonlinear45,
    "sssp_small": sssp_small,
    "pagerank_small": pagerank_small,
}


def write_case(directory: Path, name: str) -> Path:
    program, facts = PROGRAMS[name]()
    (directory / "facts").mkdir(parents=True, exist_ok=True)
    (directory / "program.dl").write_text(program)
    for relation, rows in facts.items():
        text = "".join("\t".join(map(str, row)) + "\n" for row in rows)
        (directory / "facts" / f"{relation}.facts").write_text(text)
    return directory / "program.dl"


MODES = {
    "spark": ["--local-rows", "0"],
    "driver": [],
    "sync": ["--local-rows", "0", "--engine", "sync"],
}
"""How each program is evaluated: every stratum on Spark (`mra` strata on the default
hybrid engine: a stage), small strata in the driver (the default), or every stratum on
Spark with `mra` strata in sync rounds (a job a round)."""


def eval_args(program: Path, out: Path, mode: str) -> list[str]:
    return ["eval", str(program), "-F", str(program.parent / "facts"), "-D", str(out), *MODES[mode]]


def wall_time(program: Path, out: Path, timeout: float, mode: str) -> float:
    """One whole `fixflow eval` process, JVM start included (infinity when it times out)."""
    command = [sys.executable, "-m", "fixflow.pipeline.cli", *eval_args(program, out, mode)]
    started = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return float("inf")
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{program}: fixflow eval failed:\n{result.stderr[-2000:]}")
    return elapsed


def spark_jobs(
    spark: SparkSession, program: Path, out: Path, timeout: float, mode: str
) -> int | None:
    """The Spark jobs one evaluation runs (in this process, on a warm session); None when
    a whole-process run did not finish within ``timeout``."""
    from fixflow.pipeline.cli import main as fixflow

    if wall_time(program, out, timeout, mode) == float("inf"):
        return None
    group = f"bench-small-{program.parent.name}-{time.monotonic_ns()}"
    spark.sparkContext.setJobGroup(group, group)
    code = fixflow(eval_args(program, out, mode))
    if code != 0:
        raise SystemExit(f"{program}: in-process eval failed with exit code {code}")
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))
    spark.sparkContext.setJobGroup("", "")
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--modes", default="spark,driver", help=f"of {', '.join(MODES)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/fixflow-bench-small"))
    parser.add_argument("--markdown", action="store_true", help="report to stdout")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("SMALL_RESULTS.md"))
    args = parser.parse_args()
    from fixflow.pipeline.spark import make_session

    spark = make_session(conf={"spark.ui.retainedJobs": "100000"})
    rows = []
    for name in args.programs.split(","):
        program = write_case(args.work / name, name)
        for mode in args.modes.split(","):
            out = args.work / name / f"out-{mode}"
            jobs = spark_jobs(spark, program, out / "jobs", args.timeout, mode)
            times = []
            for repeat in range(args.repeats if jobs is not None else 0):
                times.append(wall_time(program, out / str(repeat), args.timeout, mode))
                log(f"{name} ({mode}): run {repeat + 1}/{args.repeats} {times[-1]:.1f} s")
            load = Path("/proc/loadavg").read_text().split()[0]
            rows.append((name, mode, times, jobs, load))
    report = [
        "# Small programs: `fixflow eval` wall time (whole process) and Spark jobs",
        "",
        f"Machine: {machine()}",
        "",
        "| program | strata on | median wall | min–max | Spark jobs | load (1 min) |",
        "|---|---|---|---|---|---|",
    ]
    for name, mode, times, jobs, load in rows:
        if jobs is None:
            report.append(f"| {name} | {mode} | > {args.timeout:.0f} s (timed out) | | | {load} |")
            continue
        span = f"{min(times):.1f}–{max(times):.1f} s"
        median = statistics.median(times)
        report.append(f"| {name} | {mode} | {median:.1f} s | {span} | {jobs} | {load} |")
    write_report("\n".join(report) + "\n", args)


if __name__ == "__main__":
    main()
