"""Throughput of `fixflow publish` from a CSV (issue #11: >= 50k facts/s on 2 cores).

Not a test. Per size (--sizes), a CSV of N edge facts ``src,dst,w`` (``edge(src: number,
dst: number, w: float)``, seeded) is published --repeats times by the real `fixflow
publish` command (a new process each time, run with -v for its time split) and --repeats
times by bench/publish_baseline.py (the command as it was before issue #11: row-at-a-time
reading and encoding, one kafka-python send per fact), the two alternating, each run into
a fresh topic of the embedded Tansu broker (started on a free port as the tests start it).
After each run the broker's end offsets must add up to N; then the topic is deleted.
facts/s = N / wall time of the whole process (interpreter start-up, reading, encoding,
topic creation, sending, acknowledgements).

Then, on the smallest size:
  profile   cProfile of both commands: the functions with the most own time;
  readers   parsing the CSV alone: csv.reader (what publish uses) vs pyarrow.csv, and how
            many float values pyarrow's string cast writes differently from json.dumps;
  settings  the send step alone (pre-encoded messages, in this process) with variations of
            the librdkafka settings (linger, batch size, compression, idempotence), and
            kafka-python's send loop with the old and with large batches.

Machine load (os.getloadavg) is recorded at the start and end of the run and per row.

    .venv/bin/python bench/bench_publish.py                     # 200k and 1M, 3 runs each
    .venv/bin/python bench/bench_publish.py --sizes 50k --repeats 1 --markdown   # quick

Progress goes to stderr; the report to --out (default bench/PUBLISH_RESULTS.md) or, with
--markdown, to stdout only.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import platform
import pstats
import random
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import log, median_s

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "bench" / "publish_baseline.py"
PROGRAM = ".decl edge(src: number, dst: number, w: float)\n.input edge\n"
SPLIT = re.compile(r"read ([\d.]+)s, encode ([\d.]+)s, (?:topic [\d.]+s, )?send ([\d.]+)s")
COMMANDS = ("baseline", "fixflow")
SETTINGS: dict[str, dict[str, Any]] = {
    "as shipped": {},
    "linger.ms=5": {"linger.ms": 5},
    "linger.ms=100": {"linger.ms": 100},
    "batch.num.messages=100000": {"batch.num.messages": 100_000},
    "enable.idempotence=false": {"enable.idempotence": False},
    "compression.type=lz4": {"compression.type": "lz4"},
    "compression.type=zstd": {"compression.type": "zstd"},
    "compression.type=snappy": {"compression.type": "snappy"},
    "compression.type=gzip": {"compression.type": "gzip"},
}
"""librdkafka variations measured on the send step (each beside the shipped settings)."""
KAFKA_PYTHON: dict[str, dict[str, Any]] = {
    "kafka-python, old settings (linger_ms=5)": {},
    "kafka-python, batch_size=1MiB, linger_ms=50": {"batch_size": 1 << 20, "linger_ms": 50},
}


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    split: tuple[float, float, float]
    """read+type, encode, send (seconds, as the command logged them)."""


@dataclass
class Row:
    size: int
    command: str
    runs: list[Run] = field(default_factory=list)
    load: float = 0.0

    def median(self, value: Callable[[Run], float]) -> float:
        return statistics.median(value(r) for r in self.runs)

    @property
    def rates(self) -> list[float]:
        return [self.size / r.wall_s for r in self.runs]


# ------------------------------------------------------------------------ the setup


def write_csv(path: Path, n: int, seed: int = 11) -> None:
    """N edges over N/8 nodes; weights with up to 3 decimals, some integral (``7.0``)."""
    rng = random.Random(seed)
    nodes = max(2, n // 8)
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write("src,dst,w\n")
        for _ in range(n):
            w = rng.randrange(1, 100_000) / 1000
            handle.write(f"{rng.randrange(nodes)},{rng.randrange(nodes)},{w}\n")


@contextmanager
def embedded_broker(directory: Path) -> Iterator[Any]:
    """Tansu on a free port, as tests/conftest.py starts it; yields the Config."""
    from fixflow.pipeline.broker.embedded import start_broker, stop_broker
    from fixflow.pipeline.config import default_config

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = default_config()
    config = replace(
        base,
        kafka=replace(base.kafka, bootstrap_servers=f"127.0.0.1:{port}"),
        lake=replace(base.lake, path=str(directory / "lake")),
    )
    start_broker(config)
    try:
        yield config
    finally:
        stop_broker(config)


def write_conf(config: Any, directory: Path, prefix: str) -> Path:
    path = directory / f"{prefix}conf.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{config.kafka.bootstrap_servers}"\n'
        f'topic_prefix = "{prefix}"\n[lake]\npath = "{config.lake.path}"\n'
    )
    return path


def command_line(command: str, arguments: list[str], profile_to: Path | None = None) -> list[str]:
    """The process to run; under cProfile (writing ``profile_to``) when given."""
    python = [sys.executable]
    if profile_to is not None:
        python += ["-m", "cProfile", "-o", str(profile_to)]
    if command == "baseline":
        return [*python, str(BASELINE), *arguments]
    if profile_to is not None:
        return [*python, "-m", "fixflow.pipeline.cli", "-v", "publish", *arguments]
    # The installed console script: the command a user runs.
    return [str(Path(sys.executable).with_name("fixflow")), "-v", "publish", *arguments]


def publish_arguments(csv_path: Path, conf: Path, program: Path) -> list[str]:
    return ["edge", str(csv_path), "--program", str(program), "--conf", str(conf)]


# ------------------------------------------------------------------------ the runs


def run_once(command: list[str]) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    match = SPLIT.search(done.stderr)
    if match is None:
        raise SystemExit(f"no time split in the output of {' '.join(command)}:\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    read, encode, send = (float(g) for g in match.groups())
    return Run(wall, cpu, (read, encode, send))


def broker_count(config: Any, topic: str) -> int:
    """Records in ``topic`` as the streaming source sees them: its end offsets (which
    probe the last batch, since Tansu reports the base offset of the last batch + 1)."""
    from fixflow.pipeline.kafka.broker_view import end_offsets

    return sum(end_offsets(config.kafka, [topic])[topic].values())


def delete_topic(config: Any, topic: str) -> None:
    """Tansu keeps topics in memory: drop each run's once it is counted."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=config.kafka.bootstrap_servers)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()


def measure(config: Any, work: Path, sizes: list[int], repeats: int) -> list[Row]:
    program = work / "prog.dl"
    rows = []
    for size in sizes:
        csv_path = work / f"edges_{size}.csv"
        write_csv(csv_path, size)
        by_command = {c: Row(size, c, load=os.getloadavg()[0]) for c in COMMANDS}
        for repeat in range(repeats):
            for command, row in by_command.items():
                prefix = f"{command}{size}r{repeat}."
                conf = write_conf(config, work, prefix)
                run = run_once(command_line(command, publish_arguments(csv_path, conf, program)))
                count = broker_count(config, f"{prefix}edge")
                if count != size:
                    raise SystemExit(f"{prefix}edge holds {count} records, not {size}")
                delete_topic(config, f"{prefix}edge")
                row.runs.append(run)
                log(f"  {size} {command}: {run.wall_s:.2f}s ({size / run.wall_s:,.0f}/s)")
        rows.extend(by_command.values())
    return rows


# ------------------------------------------------------------------------ the analyses


def profile(config: Any, work: Path, size: int, top: int = 14) -> dict[str, str]:
    """Own-time top functions of each command under cProfile (one run each)."""
    csv_path, program = work / f"edges_{size}.csv", work / "prog.dl"
    found = {}
    for command in COMMANDS:
        output = work / f"{command}.prof"
        conf = write_conf(config, work, f"prof{command}.")
        run = run_once(command_line(command, publish_arguments(csv_path, conf, program), output))
        delete_topic(config, f"prof{command}.edge")
        text = io.StringIO()
        stats = pstats.Stats(str(output), stream=text)
        stats.strip_dirs().sort_stats("tottime").print_stats(top)
        body = text.getvalue().split("ncalls", 1)[-1]
        split = ", ".join(
            f"{n} {v:.2f}s" for n, v in zip(("read", "encode", "send"), run.split, strict=True)
        )
        found[command] = f"wall {run.wall_s:.2f}s under cProfile ({split})\n\n   ncalls{body}"
    return found


def readers(work: Path, size: int, repeats: int = 3) -> dict[str, float | int]:
    """Seconds (medians) of parsing the CSV, and of parsing and typing it into Python
    values, with the csv module (what publish does) and with pyarrow.csv; and how many float
    values pyarrow's string cast writes differently from json.dumps."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from fixflow.checker.parser import parse
    from fixflow.pipeline.publish.fact_columns import read_columns
    from fixflow.pipeline.publish.files import relation_attributes

    path = work / f"edges_{size}.csv"
    attributes = relation_attributes(parse(PROGRAM, "prog.dl"), "edge")
    found: dict[str, float | int] = {
        "csv.reader": median_s(repeats, lambda: _csv_rows(path)),
        "pyarrow.csv": median_s(repeats, lambda: _arrow_table(path)),
        "csv typed": median_s(repeats, lambda: read_columns(path, attributes)),
        "pyarrow typed": median_s(repeats, lambda: _arrow_columns(path)),
    }
    table = _arrow_table(path)
    floats = table.column("w").to_pylist()
    arrow_text = pc.cast(table.column("w"), pa.string()).to_pylist()
    found["rows"] = table.num_rows
    found["differ"] = sum(a != repr(f) for a, f in zip(arrow_text, floats, strict=True))
    return found


def _csv_rows(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(filter(None, csv.reader(handle)))


def _arrow_table(path: Path) -> Any:
    """The declared types, no null values: as close to publish's reading as pyarrow gets."""
    import pyarrow as pa
    from pyarrow import csv as pa_csv

    types = {"src": pa.int64(), "dst": pa.int64(), "w": pa.float64()}
    options = pa_csv.ConvertOptions(column_types=types, null_values=[], strings_can_be_null=False)
    return pa_csv.read_csv(path, convert_options=options)


def _arrow_columns(path: Path) -> list[list[Any]]:
    table = _arrow_table(path)
    return [table.column(name).to_pylist() for name in ("src", "dst", "w")]


def settings(
    config: Any, work: Path, size: int, repeats: int
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Seconds of the send step alone, per producer variation; and, per variation, what
    went wrong when the streaming source's consumer counted the records."""
    from fixflow.checker.parser import parse
    from fixflow.pipeline.broker.embedded import ensure_topics
    from fixflow.pipeline.publish.fact_columns import encode_messages, read_columns
    from fixflow.pipeline.publish.files import relation_attributes

    attributes = relation_attributes(parse(PROGRAM, "prog.dl"), "edge")
    messages = encode_messages(read_columns(work / f"edges_{size}.csv", attributes))
    variants: list[tuple[str, Callable[[str], float]]] = [
        (f"confluent-kafka, {name}", partial(librdkafka_send, config, messages, override))
        for name, override in SETTINGS.items()
    ]
    variants += [
        (name, partial(kafka_python_send, config, messages, override))
        for name, override in KAFKA_PYTHON.items()
    ]
    timings: dict[str, list[float]] = {}
    problems: dict[str, str] = {}
    for index, (name, send) in enumerate(variants):
        for repeat in range(repeats):
            topic = f"settings{index}r{repeat}"
            ensure_topics(config, [topic])
            timings.setdefault(name, []).append(send(topic))
            problems[name] = consumer_problem(config, topic, size)
            delete_topic(config, topic)
        log(f"  {name}: {statistics.median(timings[name]):.2f}s {problems[name]}")
    return timings, problems


def librdkafka_send(config: Any, messages: Any, override: dict[str, Any], topic: str) -> float:
    """Seconds of ``Publisher.send`` with the shipped settings changed by ``override``."""
    from fixflow.pipeline.publish import producer

    shipped = producer.producer_settings
    producer.producer_settings = lambda c: {**shipped(c), **override}  # type: ignore[assignment]
    try:
        with producer.Publisher(config) as publisher:
            # Ready, as it is once a big file is read: the idempotent producer's id is
            # acquired on a 500 ms timer after it starts (see producer.Publisher).
            time.sleep(1.0)
            started = time.perf_counter()
            publisher.send(topic, messages)
            return time.perf_counter() - started
    finally:
        producer.producer_settings = shipped  # type: ignore[assignment]


def kafka_python_send(config: Any, messages: Any, override: dict[str, Any], topic: str) -> float:
    """Seconds of the baseline's send loop (its KafkaProducer's start included)."""
    sys.path.insert(0, str(BASELINE.parent))
    import publish_baseline

    started = time.perf_counter()
    publish_baseline.send(config, topic, messages.keys, messages.values, **override)
    return time.perf_counter() - started


def consumer_problem(config: Any, topic: str, size: int) -> str:
    """Empty if the streaming source's consumer counts ``size`` records in ``topic``."""
    try:
        count = broker_count(config, topic)
    except Exception as error:  # e.g. UnsupportedCodecError: no lz4 library
        return f"consumer fails: {type(error).__name__}: {str(error).split(': ')[-1]}"
    return "" if count == size else f"consumer counts {count:,} records, not {size:,}"


# ------------------------------------------------------------------------ the report

NOTES_MARKER = "<!-- notes below are kept when the benchmark rewrites this file -->"


def row_table(rows: list[Row]) -> list[str]:
    lines = [
        "| facts | command | runs | facts/s median | facts/s min-max | wall median (s) "
        "| CPU median (s) | read+type (s) | encode (s) | send (s) | other (s) | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        read, encode, send = (row.median(lambda r, i=i: r.split[i]) for i in range(3))
        wall = row.median(lambda r: r.wall_s)
        rates = row.rates
        lines.append(
            f"| {row.size:,} | {row.command} | {len(row.runs)} "
            f"| **{statistics.median(rates):,.0f}** | {min(rates):,.0f}-{max(rates):,.0f} "
            f"| {wall:.2f} | {row.median(lambda r: r.cpu_s):.2f} | {read:.2f} | {encode:.2f} "
            f"| {send:.2f} | {row.median(lambda r: r.wall_s - sum(r.split)):.2f} "
            f"| {row.load:.2f} |"
        )
    return lines


def speedups(rows: list[Row]) -> list[str]:
    lines = []
    for size in sorted({r.size for r in rows}):
        by = {r.command: statistics.median(r.rates) for r in rows if r.size == size}
        base = next(r for r in rows if r.size == size and r.command == "baseline")
        wall = base.median(lambda r: r.wall_s)
        shares = ", ".join(
            f"{name} {100 * base.median(lambda r, i=i: r.split[i]) / wall:.0f}%"
            for i, name in enumerate(("read+type", "encode", "send"))
        )
        lines.append(
            f"- {size:,} facts: fixflow {by['fixflow']:,.0f}/s vs baseline "
            f"{by['baseline']:,.0f}/s = {by['fixflow'] / by['baseline']:.1f}x "
            f"(baseline wall time: {shares})."
        )
    return lines


def report(
    args: argparse.Namespace,
    rows: list[Row],
    analyses: dict[str, Any],
    loads: tuple[tuple[float, ...], tuple[float, ...]],
) -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    start, end = (" / ".join(f"{v:.2f}" for v in load) for load in loads)
    lines = [
        "# `fixflow publish` throughput (bench/bench_publish.py)",
        "",
        f"Machine: nproc {os.cpu_count()}, memory {memory:.1f} GiB, {platform.platform()}.",
        "",
        f"Run: `{' '.join(['.venv/bin/python bench/bench_publish.py', *sys.argv[1:]])}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Load average (1/5/15 min) "
        f"at the start {start}, at the end {end}; the load column is the 1-min average when "
        "the row started (the benchmark itself adds about 1).",
        "",
        "Whole command, a new process per run, into the embedded Tansu broker (memory "
        "storage) on this machine; `baseline` = bench/publish_baseline.py, the command "
        "before issue #11. facts/s = facts / wall time; CPU = user + system time of the "
        "process (librdkafka's threads included); read+type, encode and send as the command "
        "logged them; other = the rest of the wall time (interpreter start-up and imports, "
        "config, topic creation, producer close). Every run's topic was checked to hold "
        "every fact (the streaming source's end offsets, which probe the last batch).",
        "",
        *row_table(rows),
        "",
        *speedups(rows),
    ]
    return "\n".join([*lines, *analysis_sections(analyses), ""])


def analysis_sections(analyses: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if "profile" in analyses:
        size, found = analyses["profile"]
        lines += ["", f"## cProfile, {size:,} facts (own time, top functions)", ""]
        for command, text in found.items():
            lines += [f"`{command}`: {text.splitlines()[0]}", "", "```", *text.splitlines()[2:]]
            lines += ["```", ""]
    if "readers" in analyses:
        size, found = analyses["readers"]
        lines += [
            f"## Reading the {size:,}-fact CSV alone (in this process, medians of 3)",
            "",
            "| reader | parse only (s) | parse and type into Python values (s) |",
            "|---|---|---|",
            f"| csv.reader + map(int/float) per column (publish's) | {found['csv.reader']:.3f} "
            f"| {found['csv typed']:.3f} |",
            f"| pyarrow.csv.read_csv (declared types) + to_pylist | {found['pyarrow.csv']:.3f} "
            f"| {found['pyarrow typed']:.3f} |",
            "",
            f"pyarrow's string cast of the float column differs from `json.dumps` in "
            f"{found['differ']:,} of {found['rows']:,} values (e.g. `7` for `7.0`, `1e-7` "
            "for `1e-07`): its columns would still need Python's `repr` per value.",
            "",
        ]
    if "settings" in analyses:
        size, (timings, problems) = analyses["settings"]
        lines += [
            f"## Producer settings: the send step alone, {size:,} pre-encoded messages",
            "",
            "In this process, one producer per run (its start-up included). Each confluent-kafka "
            "row changes one setting of the shipped ones (`producer.producer_settings`). "
            "The last column: what kafka-python's consumer (the streaming source's) made of "
            "the topic.",
            "",
            "| producer | runs | send median (s) | messages/s | consumer |",
            "|---|---|---|---|---|",
        ]
        for name, values in timings.items():
            median = statistics.median(values)
            problem = problems.get(name) or "reads every record"
            lines.append(
                f"| {name} | {len(values)} | {median:.2f} | {size / median:,.0f} | {problem} |"
            )
    return lines


def kept_notes(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return ""
    return text[text.index(NOTES_MARKER) :] if NOTES_MARKER in text else ""


# ------------------------------------------------------------------------ main


def size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="200k,1M", help="comma list, e.g. 200k,1M")
    parser.add_argument("--repeats", type=int, default=3, help="runs per size and command")
    parser.add_argument("--settings-repeats", type=int, default=3)
    parser.add_argument("--no-analyses", action="store_true", help="only the CLI runs")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "PUBLISH_RESULTS.md")
    parser.add_argument("--markdown", action="store_true", help="report to stdout only")
    args = parser.parse_args()
    sizes = sorted(size(s) for s in args.sizes.split(","))
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-publish-") as tmp:
        work = Path(tmp)
        (work / "prog.dl").write_text(PROGRAM)
        with embedded_broker(work) as config:
            log(f"broker at {config.kafka.bootstrap_servers}")
            rows = measure(config, work, sizes, args.repeats)
            analyses: dict[str, Any] = {}
            if not args.no_analyses:
                log("profile, readers, producer settings")
                analyses["profile"] = (sizes[0], profile(config, work, sizes[0]))
                analyses["readers"] = (sizes[0], readers(work, sizes[0]))
                timings = settings(config, work, sizes[0], args.settings_repeats)
                analyses["settings"] = (sizes[0], timings)
    text = report(args, rows, analyses, (load_start, os.getloadavg()))
    if args.markdown:
        print(text)
        return
    notes = kept_notes(args.out)
    args.out.write_text(text + ("\n" + notes if notes else ""), encoding="utf-8")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
