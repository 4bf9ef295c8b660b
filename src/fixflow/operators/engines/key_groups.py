"""Keys grouped by their columns, for the shard loop's tables and the kernels' join indexes.

A key of several columns is compared as the tuple of its values. Sorting or deduplicating
an object array of such tuples runs in Python, one comparison at a time (on 1M edges: 10 s
of 16 for even/odd walks tagged by relation, 21.7 of 30 s by parity); numpy's ``lexsort``
over the columns gives the same order in C.

A key of several integer columns is packed into one int64 whose order is the tuples' order
(``KeyPacking``), so a table of such keys is searched in C as well: the shard loop's binary
search over tuples took 13.3 of 17 s of all-pairs shortest paths on a 900-node grid.

A key of one column is grouped by hashing, not sorting: on 10M rows ``pd.factorize`` takes
0.3 s and a counting sort of its codes 0.5 s, where ``argsort(kind="stable")`` took 1.7 s
and ``lexsort`` 1.9 s (R-MAT 10M SSSP in the driver: 9 of 25 s went to such sorts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fixflow.operators.thresholds import SCIPY_SORT_ROWS


def distinct_rows(keys: list[np.ndarray]) -> np.ndarray:
    """One row per distinct key (its first), in key order."""
    if len(keys) > 1:
        order = np.lexsort(tuple(reversed(keys)))
        return order[group_starts([k[order] for k in keys])]
    codes, uniques = pd.factorize(keys[0], use_na_sentinel=False)
    first = np.full(len(uniques), len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    return first[np.argsort(np.asarray(uniques), kind="stable")]


def group_starts(ordered: list[np.ndarray]) -> np.ndarray:
    """Where each run of equal keys starts, in key columns sorted together."""
    change = np.arange(len(ordered[0])) == 0
    for column in ordered:
        change[1:] |= column[1:] != column[:-1]
    return np.flatnonzero(change)


def grouped_order(codes: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """A stable counting sort of ``codes`` (each in ``0..groups-1``): (order, starts), the
    rows of code ``c`` being ``order[starts[c]:starts[c + 1]]`` in their original order.
    SciPy's CSR construction is that sort, in C and O(rows + groups); fewer than
    ``SCIPY_SORT_ROWS`` rows are sorted by numpy, which gives the same and spares a
    small program SciPy's import."""
    rows = len(codes)
    if rows < SCIPY_SORT_ROWS:
        starts = np.zeros(groups + 1, dtype=np.int32)
        np.cumsum(np.bincount(codes, minlength=groups), out=starts[1:])
        return np.argsort(codes, kind="stable").astype(np.int32), starts
    import scipy.sparse  # here, not at the top: see SCIPY_SORT_ROWS

    matrix = scipy.sparse.csr_matrix(
        (np.ones(rows, dtype=np.int8), (codes, np.arange(rows))), shape=(groups, rows)
    )
    return matrix.indices, matrix.indptr  # int32 below 2**31 rows: half an index's memory


def identity(g: str, dtype: np.dtype) -> float | int:
    """The value no value of ``dtype`` is worse than, for G = min or max: where a group's
    best starts before ``ufunc.at`` reduces its values into it."""
    if dtype.kind == "f":
        return math.inf if g == "min" else -math.inf
    limits = np.iinfo(dtype)
    return int(limits.max if g == "min" else limits.min)


PACKED_BITS = 62
"""A packed key stays below 2**62: room for the slack without overflowing int64."""


@dataclass(frozen=True)
class KeyPacking:
    """Integer key columns as one int64: column i's value minus ``lows[i]`` is a digit of
    base ``spans[i]``, the first column the most significant, so codes sort as the tuples
    do. Each column's range gets as much slack again on either side, so that keys a loop
    reaches later rarely need a new packing (``fitting`` again)."""

    lows: tuple[int, ...]
    spans: tuple[int, ...]

    @classmethod
    def fitting(cls, columns: list[np.ndarray]) -> KeyPacking | None:
        """A packing of every key in ``columns``; None when a column is not integers or
        the codes would not fit in ``PACKED_BITS``."""
        if any(c.dtype.kind != "i" for c in columns):
            return None
        lows, spans = [], []
        for column in columns:
            low, high = (int(column.min()), int(column.max())) if len(column) else (0, 0)
            width = high - low + 1
            lows.append(low - width)
            spans.append(3 * width)
        if min(lows) < -(2**PACKED_BITS) or math.prod(spans) >= 2**PACKED_BITS:
            return None
        return cls(tuple(lows), tuple(spans))

    def inside(self, columns: list[np.ndarray]) -> np.ndarray:
        """Whether each key has a code in this packing."""
        ok = np.ones(len(columns[0]), dtype=bool)
        for column, low, span in zip(columns, self.lows, self.spans, strict=True):
            ok &= (column >= low) & (column < low + span)
        return ok

    def columns(self, codes: np.ndarray) -> list[np.ndarray]:
        """The key columns of ``codes`` (``codes``' inverse)."""
        digits = []
        for low, span in zip(reversed(self.lows), reversed(self.spans), strict=True):
            codes, digit = np.divmod(codes, span)
            digits.append(digit + low)
        return digits[::-1]

    def codes(self, columns: list[np.ndarray]) -> np.ndarray:
        """The keys' codes (each key ``inside``)."""
        code = np.zeros(len(columns[0]), dtype=np.int64)
        for column, low, span in zip(columns, self.lows, self.spans, strict=True):
            code = code * span + (column.astype(np.int64) - low)
        return code
