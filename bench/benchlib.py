"""What the benchmarks share: progress lines, the machine for the reports' headers, and
where a report goes (not a test)."""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path


def machine() -> str:
    memory = "unknown"
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kib = int(meminfo.read_text().split("MemTotal:")[1].split()[0])
        memory = f"{kib / 1024 / 1024:.1f} GiB"
    cpu = platform.processor() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    return f"nproc {os.cpu_count()}, memory {memory}, CPU {cpu}, {platform.platform()}"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a broker of the benchmark's own)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def median_s(repeats: int, work: Callable[[], object]) -> float:
    """The median wall seconds of ``repeats`` calls of ``work``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def log(message: str) -> None:
    """A progress line on stderr (stdout may carry the report)."""
    print(message, file=sys.stderr, flush=True)


def write_report(text: str, args: argparse.Namespace) -> None:
    """The report to stdout with ``--markdown``, else to ``--out``: appended as a new
    section when the file exists (the results files keep every session's runs and their
    commentary; a run must not erase them), written whole when it does not."""
    if args.markdown:
        sys.stdout.write(text)
        return
    out: Path = args.out
    if out.exists():
        section = text.replace("# ", "## Run: ", 1) if text.startswith("# ") else text
        with out.open("a", encoding="utf-8") as results:
            results.write("\n" + section)
        log(f"appended to {out}")
    else:
        out.write_text(text, encoding="utf-8")
        log(f"wrote {out}")
