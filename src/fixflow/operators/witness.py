"""The min/max witness forest: which keys a deletion invalidates (KickStarter's trimming).

A min/max MRA relation kept with its witness has, per key, the key of the recursive atom
whose value gave it its value (``w0..``; null when X⁰ or C gave it). Witnesses point from
a key to an earlier-settled one, so they form a forest whose roots were seeded. A key's
value is still derivable after a deletion exactly when its witness chain avoids every
deleted fact; ``descendants`` finds the keys whose chain passes through an invalidated
root.

The walk is a breadth-first search over the whole forest, so it runs as ONE Spark task
(``mapInArrow`` over a single partition) with numpy: on a road-like graph a chain is
hundreds of keys long, and one Spark job per level would cost seconds. Nothing stays in
the worker: the task reads the witness rows and emits the invalidated keys.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

ROOT = "#root"


def descendants(witnessed: DataFrame, roots: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The keys (columns ``keys``) of ``witnessed`` whose witness chain (``w0..``, one per
    key column) passes through a key of ``roots`` (columns ``keys``), roots included."""
    wits = [f"w{j}" for j in range(len(keys))]
    rows = witnessed.select(*keys, *wits, F.lit(False).alias(ROOT)).unionByName(
        roots.select(*keys, *(F.lit(None).alias(w) for w in wits), F.lit(True).alias(ROOT))
    )
    schema = StructType([f for f in rows.schema.fields if f.name in keys])

    def walk(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        collected = [b for b in batches if b.num_rows]
        if collected:
            table = pa.Table.from_batches(collected)
            yield from _invalidated(table, list(keys), wits).to_batches()

    return rows.coalesce(1).mapInArrow(walk, schema)


def _invalidated(table: pa.Table, keys: list[str], wits: list[str]) -> pa.Table:
    return table.select(keys).take(pa.array(invalidated_rows(table, keys, wits)))


def invalidated_rows(table: pa.Table, keys: list[str], wits: list[str]) -> np.ndarray:
    """The rows of ``table`` (keys, witnesses and ``ROOT``, as ``descendants`` builds it)
    that are not roots and whose witness chain passes through a root: their indices."""
    is_root = table.column(ROOT).to_numpy(zero_copy_only=False)
    has_wit = table.column(wits[0]).is_valid().to_numpy(zero_copy_only=False) & ~is_root
    key_ids, wit_ids = _ids(table, keys, wits, has_wit)
    n = int(max(key_ids.max(initial=-1), wit_ids.max(initial=-1))) + 1
    # Children of each key in CSR form: the keys whose witness it is.
    children = np.flatnonzero(has_wit)
    parents = wit_ids[children]
    order = np.argsort(parents, kind="stable")
    children, parents = key_ids[children[order]], parents[order]
    starts = np.searchsorted(parents, np.arange(n + 1))
    seen = np.zeros(n, dtype=bool)
    frontier = np.unique(key_ids[is_root])
    seen[frontier] = True
    while len(frontier):
        counts = starts[frontier + 1] - starts[frontier]
        offsets = np.repeat(starts[frontier] - np.cumsum(counts) + counts, counts)
        reached = children[offsets + np.arange(counts.sum())]
        frontier = np.unique(reached[~seen[reached]])
        seen[frontier] = True
    # One row per invalidated key that has a row (roots without one are not keys).
    return np.flatnonzero(~is_root & seen[key_ids])


def _ids(
    table: pa.Table, keys: list[str], wits: list[str], has_wit: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids of every row's key and of its witness (-1 where it has none)."""
    key_values = _values(table, keys)
    wit_values = _values(table, wits)[has_wit]
    _, inverse = np.unique(np.concatenate([key_values, wit_values]), return_inverse=True)
    inverse = inverse.reshape(-1)
    wit_ids = np.full(table.num_rows, -1, dtype=np.int64)
    wit_ids[has_wit] = inverse[len(key_values) :]
    return inverse[: len(key_values)], wit_ids


def _values(table: pa.Table, columns: list[str]) -> np.ndarray:
    """One comparable value per row: the column itself, or tuples for several columns."""
    arrays = [_filled(table.column(c)).to_numpy(zero_copy_only=False) for c in columns]
    if len(arrays) == 1:
        return arrays[0]
    out = np.empty(table.num_rows, dtype=object)
    out[:] = list(zip(*arrays, strict=True))
    return out


def _filled(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Nulls (rows without a witness, masked out later) replaced by a value of the type."""
    if not column.null_count:
        return column
    return column.fill_null("" if pa.types.is_string(column.type) else 0)
