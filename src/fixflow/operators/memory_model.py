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


def resolved_memory(setting: int | str) -> int:
    """``[engine] memory`` as bytes: ``auto`` is the machine's physical memory."""
    return physical_memory() if setting == "auto" else int(setting)


def driver_bytes(rows: int) -> int:
    """The model's bytes per input row, times ``rows``: what a stratum's inputs add to the
    driver's peak (``fixflow_state_bytes`` of a stream's held rows)."""
    return DRIVER_BYTES_PER_ROW * rows


def driver_peak(rows: int) -> int:
    """The model's peak resident bytes of a stratum in the driver over ``rows`` input
    rows: ``DRIVER_FIXED_BYTES`` + ``DRIVER_BYTES_PER_ROW`` x rows."""
    return DRIVER_FIXED_BYTES + driver_bytes(rows)


def auto_local_rows(memory: int | None = None) -> int:
    """``local_rows = "auto"``: the input rows the driver's share of ``memory`` (default:
    the machine's) holds by the memory model, rounded down to a million, at least one
    million."""
    budget = DRIVER_MEMORY_SHARE * (physical_memory() if memory is None else memory)
    rows = int((budget - DRIVER_FIXED_BYTES) // DRIVER_BYTES_PER_ROW)
    return max(1_000_000, rows // 1_000_000 * 1_000_000)


def resolved_local_rows(setting: int | str, memory: int | None = None) -> int:
    """A ``local_rows`` setting as rows: ``auto`` by the memory model over ``memory``
    bytes (default: the machine's), an integer as is."""
    return auto_local_rows(memory) if setting == "auto" else int(setting)
