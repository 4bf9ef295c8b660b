"""engines.shard_table: the frontier a shard's MonoTable hands out is taken from the rows
touched since the last one (not a scan of the table), and is the same as a scan's."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _pair_params() -> StageParams:
    return replace(
        _params("min", False),
        arity=3,
        key_positions=(0, 1),
        value_pos=2,
        key_types=("number", "number"),
    )


_KEY = st.one_of(st.integers(-5, 5), st.integers(-(2**40), 2**40), st.integers(-(2**62), 2**62))
_BATCHES = st.lists(
    st.lists(st.tuples(_KEY, _KEY, st.integers(0, 100)), min_size=1, max_size=20),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(seed=st.lists(st.tuples(_KEY, _KEY, st.integers(0, 100)), max_size=10), batches=_BATCHES)
def test_a_table_of_pair_keys_keeps_the_best_value_of_each_pair_in_tuple_order(
    seed: list[tuple[int, int, int]], batches: list[list[tuple[int, int, int]]]
) -> None:
    """Pairs of integers are packed into one int64 while their ranges allow (packed again
    when a merge brings keys outside; tuples past 62 bits): whatever the packing, the
    table holds the best value per pair, its rows in the pairs' order, and finds exactly
    the pairs it holds."""
    best: dict[tuple[int, int], int] = {}
    for x, y, v in seed:
        best[(x, y)] = min(v, best.get((x, y), v))
    firsts = {(x, y): v for x, y, v in reversed(seed)}  # the table keeps a seed row per pair
    rows = list(firsts)
    table = LocalTable(
        _pair_params(),
        [
            np.array([r[0] for r in rows], dtype=np.int64),
            np.array([r[1] for r in rows], dtype=np.int64),
        ],
        np.array([best[r] for r in rows], dtype=np.int64),
    )
    for batch in batches:
        for x, y, v in batch:
            best[(x, y)] = min(v, best.get((x, y), v))
        columns = [np.array([b[i] for b in batch], dtype=np.int64) for i in range(2)]
        table.merge(columns, np.array([b[2] for b in batch], dtype=np.int64), [])
        held = list(zip(table.columns[0].tolist(), table.columns[1].tolist(), strict=True))
        assert held == sorted(best)
        assert dict(zip(held, table.acc.tolist(), strict=True)) == best
        probes = [*best, (7, 2**61), (-(2**62), 3)]
        found = table.positions(
            [np.array([p[i] for p in probes], dtype=np.int64) for i in range(2)]
        )
        assert [held[f] if f >= 0 else None for f in found] == [
            p if p in best else None for p in probes
        ]
