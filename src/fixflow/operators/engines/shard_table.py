"""A shard's MonoTable in memory (``LocalTable``: its keys kept sorted, with acc, pending
flag, delta and witness per key) and the parameters a shard's loop runs with
(``StageParams``): what ``engines.shard_loop`` iterates over, in a Spark task or the driver.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fixflow.operators.engines.key_groups import (
    KeyPacking,
    distinct_rows,
    group_starts,
    identity,
)
from fixflow.operators.plan import Plan
from fixflow.operators.thresholds import FRONTIER_SCAN_SHARE, SLOT_SORT_SHARE


@dataclass(frozen=True)
class StageParams:
    """Everything a shard's loop needs (shipped with a run's tasks, small)."""

    relation: str
    arity: int
    key_positions: tuple[int, ...]
    value_pos: int
    index_pos: int | None
    key_types: tuple[str, ...]
    value_type: str
    g: str
    witness: bool
    plans: tuple[tuple[Plan, str], ...]
    """Per recursive body: its round plan and the name of its auxiliary table."""
    aux_types: tuple[tuple[str, ...], ...]
    """Per body, the types of its auxiliary columns ``c0..``."""
    dest_columns: tuple[tuple[int, ...], ...]
    """Per body, the auxiliary columns its head key copies: the keys a shard can reach."""
    beta: dict[tuple[int, int], float]
    """Flush size per (source, destination) buffer; absent: ``beta0``."""
    beta0: float
    tau: float
    """Seconds a stage may run locally before its buffers are flushed."""
    priority: bool
    portion: float
    local_bound: float | None
    """Sum programs with a termination clause: the local pending mass below which a shard
    stops iterating (the rest is left to the clause); None: run to quiescence."""
    local_func: str = "sum"


# ---------------------------------------------------------------- the local MonoTable


def numpy_type(type_name: str) -> type:
    return {"number": np.int64, "float": np.float64}.get(type_name, object)


def changes_acc(acc: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Whether a sum's pending delta still changes its key's value in floating point
    (acc + Δ != acc; an integer delta always does unless 0). A delta that does not stays
    unpropagated: later ones add to it, exactly, until it matters, and a sum without a
    termination clause stops at its float fixpoint instead of propagating ever smaller
    deltas (a contraction by 0.85 takes thousands of rounds to reach 0.0). What is left
    unpropagated is below half a unit in the last place of each key's value."""
    if not np.issubdtype(delta.dtype, np.floating):
        return delta != 0
    return (delta != 0) & (acc + delta != acc)


class LocalTable:
    """A shard's keys kept sorted, with acc, pending flag, delta and witness per key."""

    def __init__(
        self,
        params: StageParams,
        keys: list[np.ndarray],
        acc: np.ndarray,
        delta: tuple[np.ndarray, np.ndarray] | None = None,
        wits: list[np.ndarray] | None = None,
    ) -> None:
        """``delta``: (pending flags, pending deltas); ``wits``: the witness columns and,
        last, whether each row has a witness (a key seeded by X⁰ or C has none)."""
        self.params = params
        self.packing = KeyPacking.fitting(keys) if len(keys) > 1 else None
        """How a key of several integer columns is one int64 (None: one column, or
        tuples, compared in Python)."""
        order = np.argsort(self._sort_key(keys), kind="stable")
        self.columns = [c[order] for c in keys]
        self.sort_key = self._sort_key(self.columns)
        self._index: pd.Index | None = None
        """The hash index of a one-column ``sort_key`` (``positions``), until an insert."""
        self.acc = acc[order]
        n = len(order)
        self.present = np.ones(n, dtype=bool)
        """False for keys reserved in advance that no candidate has reached yet."""
        self.pending = np.zeros(n, dtype=bool)
        self.delta = np.zeros(n, dtype=self.acc.dtype)
        self._touched: list[np.ndarray] | None = []
        self._ordered: np.ndarray | None = None
        """Rows that became pending since the frontier was last taken (a superset of the
        pending rows), so that taking it costs the frontier, not the table (a road grid's
        frontier is tens of rows of 1M, for thousands of local iterations); None: not
        known (after rows moved), the next frontier scans the table."""
        if delta is not None:
            pending, values = delta
            self.pending = pending[order]
            self.delta = values[order].astype(self.acc.dtype)
            self._touched = None
        self.wits: list[np.ndarray] = [np.zeros(n, dtype=numpy_type(t)) for t in self._wit_types()]
        self.has_wit = np.zeros(n, dtype=bool)
        if wits and len(wits) == len(self.wits) + 1:
            for j, w in enumerate(wits[:-1]):
                self.wits[j] = w[order].astype(self.wits[j].dtype)
            self.has_wit = wits[-1][order]

    def _wit_types(self) -> tuple[str, ...]:
        return self.params.key_types if self.params.witness else ()

    def _sort_key(self, keys: list[np.ndarray]) -> np.ndarray:
        """The keys as one sortable column: itself, packed codes (each key inside the
        packing: ``_fit``) or tuples."""
        if len(keys) == 1:
            return keys[0]
        if self.packing is not None:
            return self.packing.codes(keys)
        out = np.empty(len(keys[0]), dtype=object)
        out[:] = list(zip(*keys, strict=True))
        return out

    def __len__(self) -> int:
        return len(self.sort_key)

    # ------------------------------------------------------------ merging candidates

    def reserve(self, keys: list[np.ndarray]) -> None:
        """Make room for keys candidates may reach, so that merges find them in place
        instead of inserting (an insert moves every array: O(keys) per iteration)."""
        if not len(keys[0]):
            return
        first = distinct_rows(keys)
        keys = [k[first] for k in keys]
        new = self.positions(keys) < 0
        self._fit(keys)
        unique = self._sort_key(keys)
        values = np.zeros(int(new.sum()), dtype=self.acc.dtype)
        where = np.searchsorted(self.sort_key, unique[new])
        self._insert(where, [k[new] for k in keys], values, [], present=False)

    def positions(self, keys: list[np.ndarray]) -> np.ndarray:
        """Each key's row in the table, -1 where it has none: a hash lookup for keys of one
        column (on R-MAT 10M, ``searchsorted`` took 2.4 s per 10M lookups, the hash 0.2 s),
        a binary search for tuples."""
        if len(keys) == 1:
            if self._index is None:
                self._index = pd.Index(self.sort_key)
            return self._index.get_indexer(keys[0])
        inside = None if self.packing is None else self.packing.inside(keys)
        if inside is not None and not inside.all():  # keys outside the packing are absent
            pos = np.full(len(inside), -1, dtype=np.int64)
            pos[inside] = self.positions([k[inside] for k in keys])
            return pos
        sort_key = self._sort_key(keys)
        pos = np.searchsorted(self.sort_key, sort_key)
        found = pos < len(self)
        found[found] = self.sort_key[pos[found]] == sort_key[found]
        return np.where(found, pos, -1)

    def _fit(self, keys: list[np.ndarray]) -> None:
        """Pack again when ``keys`` (about to be inserted) fall outside the packing: the
        order of the rows stays, their codes change."""
        if self.packing is None or self.packing.inside(keys).all():
            return
        both = [np.concatenate([c, k]) for c, k in zip(self.columns, keys, strict=True)]
        self.packing = KeyPacking.fitting(both)
        self.sort_key = self._sort_key(self.columns)
        self._index = None

    def merge(self, keys: list[np.ndarray], values: np.ndarray, wits: list[np.ndarray]) -> int:
        """acc ← G(acc, candidates): improved (min/max) or changed (sum) keys become
        pending. Returns how many keys became pending."""
        if len(values) == 0:
            return 0
        if len(keys) == 1 and self._by_position(values):
            pos = self.positions(keys)
            if (pos >= 0).all():
                # Every key in place (reserved): G by position in one pass, not a sort of
                # the candidates (PageRank on 1M edges: 12.7 of 21 s; R-MAT 10M SSSP 6 of 25 s).
                return self._merge_in_place(pos, values, wits)
        keys, values, wits = self.combined(keys, values, wits)
        pos = self.positions(keys)
        found = pos >= 0
        touched = self._update_existing(pos[found], values[found], [w[found] for w in wits])
        new = ~found
        fresh = [k[new] for k in keys]
        self._fit(fresh)
        where = np.searchsorted(self.sort_key, self._sort_key(fresh))
        self._insert(where, fresh, values[new], [w[new] for w in wits])
        return touched + int(new.sum())

    def _by_position(self, values: np.ndarray) -> bool:
        """Whether G can combine ``values`` by position: an integer sum by ``bincount``
        would pass through float64, and a NaN has no best."""
        if self.params.g == "sum":
            return self.acc.dtype.kind == "f"
        return values.dtype.kind != "f" or not np.isnan(values).any()

    def _merge_in_place(self, pos: np.ndarray, values: np.ndarray, wits: list[np.ndarray]) -> int:
        """``merge`` of candidates whose keys are all in the table, at rows ``pos``."""
        hit, slot = _slots(pos, len(self))
        if self.params.g == "sum":
            sums = np.bincount(slot, weights=values, minlength=len(hit))
            return self._update_existing(hit, sums.astype(self.acc.dtype), [])
        reduce = np.minimum if self.params.g == "min" else np.maximum
        best = np.full(len(hit), identity(self.params.g, values.dtype), dtype=values.dtype)
        reduce.at(best, slot, values)
        # The first candidate reaching each row's best gives its witness.
        rows = np.arange(len(values))
        first = np.full(len(hit), len(values), dtype=np.int64)
        winners = np.flatnonzero(values == best[slot])
        np.minimum.at(first, slot[winners], rows[winners])
        return self._update_existing(hit, values[first], [w[first] for w in wits])

    def combined(
        self, keys: list[np.ndarray], values: np.ndarray, wits: list[np.ndarray]
    ) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray]]:
        """G over candidates with the same key (the best one keeps its witness)."""
        g = self.params.g
        # By the key columns (then rank): numpy's lexsort, not a sort of tuples in Python
        # (21.7 of 30 s of even/odd walks keyed (node, parity) on 1M edges).
        if len(keys) > 1:
            ranked = (values if g == "min" else -values,) if g != "sum" else ()
            order = np.lexsort((*ranked, *reversed(keys)))
        else:
            order = np.argsort(keys[0])
        starts = group_starts([k[order] for k in keys])
        ordered_values = values[order]
        if g == "sum":
            return _firsts(keys, wits, order[starts], np.add.reduceat(ordered_values, starts))
        if len(keys) > 1:  # ordered by (key, rank): each group's first is its best
            return _firsts(keys, wits, order[starts], ordered_values[starts])
        reduce = np.minimum if g == "min" else np.maximum
        best = reduce.reduceat(ordered_values, starts)
        group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(order)]))
        hits = np.flatnonzero(ordered_values == best[group])
        first_hits = hits[np.r_[True, group[hits[1:]] != group[hits[:-1]]]]
        return _firsts(keys, wits, order[first_hits], best)

    def _update_existing(self, pos: np.ndarray, values: np.ndarray, wits: list[np.ndarray]) -> int:
        if self.params.g == "sum":
            self.acc[pos] = np.where(self.present[pos], self.acc[pos], 0) + values
            self.present[pos] = True
            self.delta[pos] += values
            self.pending[pos] = changes_acc(self.acc[pos], self.delta[pos])
            self._touch(pos)
            return int(np.count_nonzero(values))
        better = values < self.acc[pos] if self.params.g == "min" else values > self.acc[pos]
        better |= ~self.present[pos]
        pos, values = pos[better], values[better]
        self.acc[pos] = values
        self.present[pos] = True
        self.delta[pos] = values
        self.pending[pos] = True
        self._touch(pos)
        if self.wits and len(wits) == len(self.wits) + 1:
            for column, w in zip(self.wits, wits, strict=False):
                column[pos] = w[better]
            self.has_wit[pos] = wits[-1][better]
        return len(pos)

    def _insert(
        self,
        pos: np.ndarray,
        keys: list[np.ndarray],
        values: np.ndarray,
        wits: list[np.ndarray],
        present: bool = True,
    ) -> None:
        if len(pos) == 0:
            return
        self.present = np.insert(self.present, pos, present)
        self.columns = [np.insert(c, pos, k) for c, k in zip(self.columns, keys, strict=True)]
        self.sort_key = np.insert(self.sort_key, pos, self._sort_key(keys))
        self._index = None
        self.acc = np.insert(self.acc, pos, values.astype(self.acc.dtype))
        self.delta = np.insert(self.delta, pos, values.astype(self.delta.dtype))
        fresh = (values != 0 if self.params.g == "sum" else True) if present else False
        self.pending = np.insert(self.pending, pos, fresh)
        self._touched = None  # rows moved
        known = len(wits) == len(self.wits) + 1
        for j, column in enumerate(self.wits):
            filler = wits[j] if known else np.zeros(len(pos), dtype=column.dtype)
            self.wits[j] = np.insert(column, pos, filler)
        self.has_wit = np.insert(self.has_wit, pos, wits[-1] if known else False)

    # ------------------------------------------------------------ the frontier

    def _touch(self, pos: np.ndarray) -> None:
        if self._touched is not None and len(pos):
            self._touched.append(pos)

    def pending_rows(self) -> np.ndarray:
        """The pending rows, in order: from the rows touched since the last frontier
        when they are known and few, else by a scan of the table (numbering many touched
        rows costs more than scanning the flags: CC on grid_1m touches ~1/50 of its rows
        an iteration)."""
        touched = self._touched
        many = touched is not None and sum(map(len, touched)) * FRONTIER_SCAN_SHARE > len(self)
        if touched is None or many:
            idx = np.flatnonzero(self.pending)
        elif not touched:
            idx = np.zeros(0, dtype=np.int64)
        else:
            known = len(touched) == 1 and touched[0] is self._ordered
            rows = touched[0] if known else np.unique(np.concatenate(touched))
            idx = rows[self.pending[rows]]
        self._remember([idx])
        return idx

    def _remember(self, touched: list[np.ndarray]) -> None:
        """``touched`` as the rows to look at next; one array is in order, distinct."""
        self._touched = touched
        self._ordered = touched[0] if len(touched) == 1 else None

    @property
    def has_pending(self) -> bool:
        return len(self.pending_rows()) > 0

    def take_frontier(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions, deltas) of the keys to propagate now; they stop being pending."""
        idx = self.pending_rows()
        params = self.params
        if params.priority and len(idx) > 64:
            keep = max(1, math.ceil(params.portion * len(idx)))
            rank = {"min": self.delta[idx], "max": -self.delta[idx]}.get(
                params.g, -np.abs(self.delta[idx])
            )
            picked = np.argpartition(rank, keep - 1)[:keep]
            rest = np.ones(len(idx), dtype=bool)
            rest[picked] = False
            self._remember([idx[rest]])
            idx = idx[picked]
        else:
            self._remember([])
        deltas = self.delta[idx].copy()
        self.pending[idx] = False
        if params.g == "sum":
            self.delta[idx] = 0
        return idx, deltas

    def local_measure(self) -> float:
        pending = np.abs(self.delta[self.pending]).astype(np.float64)
        if len(pending) == 0:
            return 0.0
        func = self.params.local_func
        if func == "max":
            return float(pending.max())
        if func == "min":
            return float(pending.min())
        return float(pending.mean() if func == "avg" else pending.sum())


def _slots(pos: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows ``pos`` hits, in order, and each candidate's index among them.

    Few candidates (a road grid's frontier: tens of rows of a 1M-row table, for 1,261 local
    iterations) are numbered by sorting them; many (PageRank: every row) by counting over
    the table, which costs the table's size and no sort."""
    if len(pos) * SLOT_SORT_SHARE < rows:
        return np.unique(pos, return_inverse=True)
    counts = np.bincount(pos, minlength=rows)
    hit = np.flatnonzero(counts)
    slot_of_row = np.zeros(rows, dtype=np.int64)
    slot_of_row[hit] = np.arange(len(hit))
    return hit, slot_of_row[pos]


def _firsts(
    keys: list[np.ndarray], wits: list[np.ndarray], rows: np.ndarray, values: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray]]:
    """One candidate per key: the keys and witnesses of ``rows``, with G's ``values``."""
    return [k[rows] for k in keys], values, [w[rows] for w in wits]


# ---------------------------------------------------------------- one shard
