"""The memory model in use: ``local_rows = "auto"`` as rows, from the machine's memory and
the constants of ``operators.thresholds`` (which imports nothing, so that the configuration
reads its defaults without loading anything)."""

import os

from fixflow.operators.thresholds import (
    DRIVER_BYTES_PER_ROW,
    DRIVER_FIXED_BYTES,
    DRIVER_MEMORY_SHARE,
)


def physical_memory() -> int:
    """The machine's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def auto_local_rows(memory: int | None = None) -> int:
    """``local_rows = "auto"``: the input rows the driver's share of ``memory`` (default:
    the machine's) holds by the memory model, rounded down to a million, at least one
    million."""
    budget = DRIVER_MEMORY_SHARE * (physical_memory() if memory is None else memory)
    rows = int((budget - DRIVER_FIXED_BYTES) // DRIVER_BYTES_PER_ROW)
    return max(1_000_000, rows // 1_000_000 * 1_000_000)


def resolved_local_rows(setting: int | str) -> int:
    """A ``local_rows`` setting as rows: ``auto`` by the memory model, an integer as is."""
    return auto_local_rows() if setting == "auto" else int(setting)
