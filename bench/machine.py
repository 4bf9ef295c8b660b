"""The machine a benchmark ran on, for the reports' headers (not a test)."""

from __future__ import annotations

import os
import platform
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
