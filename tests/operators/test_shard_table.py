"""engines.shard_table: the frontier a shard's MonoTable hands out is taken from the rows
touched since the last one (not a scan of the table), and is the same as a scan's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fixflow.operators.engines.shard_table import LocalTable, StageParams


def _params(g: str, priority: bool) -> StageParams:
    return StageParams(
        relation="r",
        arity=2,
        key_positions=(0,),
        value_pos=1,
        index_pos=None,
        key_types=("number",),
        value_type="float",
        g=g,
        witness=False,
        plans=(),
        aux_types=(),
        dest_columns=(),
        beta={},
        beta0=1.0,
        tau=1.0,
        priority=priority,
        portion=0.3,
        local_bound=None,
    )


def _scanned(table: LocalTable) -> np.ndarray:
    """The frontier as a scan of the whole table takes it."""
    idx = np.flatnonzero(table.pending)
    p = table.params
    if p.priority and len(idx) > 64:
        keep = max(1, math.ceil(p.portion * len(idx)))
        rank = {"min": table.delta[idx], "max": -table.delta[idx]}.get(
            p.g, -np.abs(table.delta[idx])
        )
        idx = idx[np.argpartition(rank, keep - 1)[:keep]]
    return idx


@pytest.mark.parametrize("g", ["min", "sum"])
@pytest.mark.parametrize("priority", [False, True])
@pytest.mark.parametrize("seeded", [False, True])
def test_the_frontier_from_touched_rows_is_the_frontier_of_a_scan(
    g: str, priority: bool, seeded: bool
) -> None:
    rng = np.random.default_rng(11)
    keys = np.arange(0, 4000, 2, dtype=np.int64)
    pending = (rng.random(len(keys)) < 0.1, rng.random(len(keys)))
    table = LocalTable(
        _params(g, priority), [keys], rng.random(len(keys)) + 1, pending if seeded else None
    )
    table.reserve([np.arange(1, 400, 2, dtype=np.int64)])  # rows move: the next scan is full
    for step in range(60):
        count = int(rng.integers(1, 300))
        if step % 7 == 3:  # now and then keys the table does not hold: an insert
            candidates = rng.integers(0, 8000, count).astype(np.int64)
        else:  # keys in place: the rows touched are tracked
            candidates = rng.choice(table.columns[0], count)
        table.merge([candidates], rng.random(count) * 2, [])
        assert np.array_equal(table.pending_rows(), np.flatnonzero(table.pending))
        expected = _scanned(table)
        idx, _ = table.take_frontier()
        assert np.array_equal(idx, expected)
        assert not table.pending[idx].any()
        assert table.has_pending == bool(table.pending.any())
