"""Numpy batches: the rows the kernels (``engines.kernels``) and the driver's loops pass
around, columns of equal length with validity masks, and their conversion from Arrow."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from fixflow.checker.ast import TypeName

ANNOTATION = "@"
"""Prefix of row annotations: carried along by every operator, never computed on."""

NUMPY_TYPES = {"number": np.int64, "float": np.float64, "symbol": object}


@dataclass
class Batch:
    """Equally long columns; ``valid[name]`` (absent: all valid) marks non-null values."""

    n: int
    cols: dict[str, np.ndarray] = field(default_factory=dict)
    valid: dict[str, np.ndarray] = field(default_factory=dict)

    def take(self, index: np.ndarray) -> Batch:
        return Batch(
            len(index),
            {k: v[index] for k, v in self.cols.items()},
            {k: v[index] for k, v in self.valid.items()},
        )

    def rows(self, start: int, stop: int) -> Batch:
        """Rows ``start..stop``, as views (``take`` copies)."""
        return Batch(
            stop - start,
            {k: v[start:stop] for k, v in self.cols.items()},
            {k: v[start:stop] for k, v in self.valid.items()},
        )

    def mask(self, name: str) -> np.ndarray:
        found = self.valid.get(name)
        return found if found is not None else np.ones(self.n, dtype=bool)

    def annotations(self) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.cols.items() if k.startswith(ANNOTATION)}


def concat(batches: list[Batch]) -> Batch:
    """Row-wise concatenation of batches with the same columns."""
    if len(batches) == 1:
        return batches[0]
    names = list(batches[0].cols)
    cols = {k: np.concatenate([b.cols[k] for b in batches]) for k in names}
    masked = {k for b in batches for k in b.valid}
    valid = {k: np.concatenate([b.mask(k) for b in batches]) for k in masked}
    return Batch(sum(b.n for b in batches), cols, valid)


ARROW_TYPES: dict[TypeName, pa.DataType] = {
    "number": pa.int64(),
    "float": pa.float64(),
    "symbol": pa.string(),
}


def table_rows(table: pa.Table, types: Sequence[TypeName]) -> Batch:
    """An Arrow table's columns (by position, cast to ``types``) as a batch, ``c0..``."""
    batch = Batch(table.num_rows)
    for i, (column, type_) in enumerate(zip(table.columns, types, strict=True)):
        column = column.cast(ARROW_TYPES[type_])
        if column.null_count:
            batch.valid[f"c{i}"] = column.is_valid().to_numpy(zero_copy_only=False)
            column = column.fill_null("" if type_ == "symbol" else 0)
        values = column.to_numpy(zero_copy_only=False)
        batch.cols[f"c{i}"] = values.astype(NUMPY_TYPES[type_], copy=False)
    return batch
