"""Arrow blocks carried in one Spark row each: round trip, and packing per shard."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from fixflow.operators.engines import blocks
from fixflow.operators.engines.blocks import BLOB

LAYOUT = pa.schema(
    [
        ("shard", pa.int32()),
        ("kind", pa.int8()),
        ("k0", pa.int64()),
        (BLOB, pa.binary()),
    ]
)


def test_a_block_round_trips_its_rows_types_nulls_and_metadata() -> None:
    table = pa.table(
        {
            "c0": pa.array([1, None, 3], pa.int64()),
            "c1": pa.array(["a", "b", None]),
            "c2": pa.array([0.5, 1.5, 2.5]),
        }
    )
    back = blocks.decode(blocks.encode(table, {"body": "2"}))
    assert back.to_pydict() == table.to_pydict()
    assert back.schema.types == table.schema.types
    assert back.schema.metadata == {b"body": b"2"}


def _packed(shard: np.ndarray, value: np.ndarray) -> pa.Table:
    batch = pa.record_batch({"shard": pa.array(shard, pa.int32()), "c0": pa.array(value)})
    out = list(blocks.pack(LAYOUT, 2, {"body": "0"}, iter([batch])))
    return pa.Table.from_batches(out, schema=LAYOUT)


def test_pack_gives_each_shard_its_own_blocks_and_loses_no_row() -> None:
    shard = np.array([5, 7, 5, 9, 7, 5], dtype=np.int32)
    value = np.arange(6, dtype=np.int64)
    packed = _packed(shard, value)
    assert packed.column("kind").to_pylist() == [2, 2, 2]
    assert packed.column("k0").null_count == 3
    by_shard = {
        s: blocks.decode(b).column("c0").to_pylist()
        for s, b in zip(
            packed.column("shard").to_pylist(), packed.column(BLOB).to_pylist(), strict=True
        )
    }
    assert by_shard == {5: [0, 2, 5], 7: [1, 4], 9: [3]}


def test_pack_splits_a_shard_into_blocks_of_at_most_block_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(blocks, "BLOCK_ROWS", 4)
    packed = _packed(np.zeros(10, dtype=np.int32), np.arange(10, dtype=np.int64))
    sizes = [len(blocks.decode(b)) for b in packed.column(BLOB).to_pylist()]
    assert sizes == [4, 4, 2]
    rows = [v for b in packed.column(BLOB).to_pylist() for v in blocks.decode(b)["c0"].to_pylist()]
    assert rows == list(range(10))


def test_pack_of_no_rows_gives_no_block() -> None:
    assert list(blocks.pack(LAYOUT, 2, {}, iter([]))) == []
