"""Many rows carried as one Spark row: Arrow IPC blocks in the stage layout's ``blob`` column.

Spark hands rows to a Python worker field by field (JVM rows → Arrow), so a task that
received every auxiliary row of its shard as a row of its own paid that conversion for the
whole graph: on a 2M-edge graph about 1.5 s of a single task's time. The auxiliary rows
never change during a run, so they are packed once, when the run is prepared, into blocks
of up to ``BLOCK_ROWS`` rows; a run's task then reads a few dozen binary values. The blocks
are ordinary rows of a checkpointed DataFrame, which is what a retried run starts from.

The same Arrow IPC bytes (``encode``, ``decode``) carry the messages the tasks of a run send
one another (``engines.shard_exchange``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

BLOCK_ROWS = 131_072
"""Rows per block: a few MB per Spark row."""

BLOB = "blob"
"""The layout's binary column holding a block."""


def encode(table: pa.Table, metadata: dict[str, str] | None = None) -> bytes:
    """``table`` as Arrow IPC stream bytes (``metadata`` kept in its schema)."""
    if metadata:
        table = table.replace_schema_metadata(metadata)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def decode(blob: bytes) -> pa.Table:
    """The table a block holds."""
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def layout_rows(
    schema: pa.Schema, n: int, shard: int, kind: int, cols: dict[str, object]
) -> pa.Table:
    """``n`` rows of the stage layout: ``shard`` and ``kind`` constant, ``cols`` given,
    every other column null."""
    arrays = []
    for field in schema:
        if field.name == "shard":
            arrays.append(pa.array(np.full(n, shard, dtype=np.int32)))
        elif field.name == "kind":
            arrays.append(pa.array(np.full(n, kind, dtype=np.int8)))
        elif field.name in cols:
            arrays.append(pa.array(cols[field.name], type=field.type))
        else:
            arrays.append(pa.nulls(n, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def pack(
    schema: pa.Schema, kind: int, metadata: dict[str, str], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function packing rows ``shard, …`` into layout rows of ``kind``:
    per shard label, blocks of the other columns (with ``metadata``)."""
    collected = list(batches)
    if not collected:
        return
    for label, mine in by_shard(pa.Table.from_batches(collected)):
        mine = mine.drop(["shard"])
        blobs = [
            encode(mine.slice(start, BLOCK_ROWS), metadata)
            for start in range(0, len(mine), BLOCK_ROWS)
        ]
        table = layout_rows(schema, len(blobs), label, kind, {BLOB: blobs})
        yield from table.to_batches()


def by_shard(rows: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    """``rows`` split by their ``shard`` label (not copied when there is one label)."""
    shard = rows.column("shard").to_numpy()
    labels = np.unique(shard)
    for label in labels:
        yield int(label), rows if len(labels) == 1 else rows.filter(pa.array(shard == label))
