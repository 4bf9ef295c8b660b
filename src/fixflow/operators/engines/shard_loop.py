"""One shard's local asynchronous loop (A3's AsyncTable, PowerLog §5.3): in a Spark task
of a sharded run (``engines.shard_run``), or in the driver for a small stratum
(``operators.local``).

A task of a sharded run starts from the rows of its shard: the shard's MonoTable rows (key,
``acc``, pending ``delta``, witness), the messages other shards sent it (candidate values for
its keys) and its auxiliary rows (the pre-joined rest of each recursive body, annotated with
the shard of the key each row leads to; packed in Arrow blocks, ``engines.blocks``). It keeps
them in memory for the whole run (one Spark job) and, superstep after superstep,

1. merges the messages into its keys with G (min/max keep improvements, sum adds);
2. iterates locally: the pending keys (with priority scheduling, the best
   ``schedule_portion`` of them by G's order) form a frontier, the round kernels compiled
   from the rule bodies (``engines.kernels``) derive candidates, candidates for this shard
   are merged at once and candidates for other shards collect in per-destination buffers;
3. stops when nothing local is pending, a buffer holds β updates, or the time budget τ is
   spent (``run``), and hands its buffers, combined by key with G, to the exchange
   (``outgoing``); ``next_stage`` then clears them and the stage's counts.

At the end of the run the task emits its table (``state_rows``) in the stage layout.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from fixflow.operators.engines.blocks import BLOB, decode, layout_rows
from fixflow.operators.engines.kernels import Batch, Kernel, concat
from fixflow.operators.engines.key_groups import distinct_rows, group_starts
from fixflow.operators.plan import Plan

STATE, MESSAGE, AUX, STATS = 0, 1, 2, 3
"""Row kinds of a stage frame."""

DESTINATION = "@dshard"
"""The annotation of an auxiliary row: the shard of the key its candidates go to."""

SLICE_CANDIDATES = 1_000_000
"""About how many candidates one slice of a frontier derives (``ShardLoop._iterate``): a
frontier of R-MAT 10M's SSSP reached 11M candidates, ~1.2 GB of transient columns, which
decided the run's peak memory; slices keep that bounded whatever the graph's size."""

LOCAL_ITERATION_CAP = 1_000_000
"""Local iterations per stage at most (a guard; τ normally ends a stage first)."""


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


def _numpy_type(type_name: str) -> type:
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
        if delta is not None:
            pending, values = delta
            self.pending = pending[order]
            self.delta = values[order].astype(self.acc.dtype)
        self.wits: list[np.ndarray] = [np.zeros(n, dtype=_numpy_type(t)) for t in self._wit_types()]
        self.has_wit = np.zeros(n, dtype=bool)
        if wits and len(wits) == len(self.wits) + 1:
            for j, w in enumerate(wits[:-1]):
                self.wits[j] = w[order].astype(self.wits[j].dtype)
            self.has_wit = wits[-1][order]

    def _wit_types(self) -> tuple[str, ...]:
        return self.params.key_types if self.params.witness else ()

    @staticmethod
    def _sort_key(keys: list[np.ndarray]) -> np.ndarray:
        if len(keys) == 1:
            return keys[0]
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
        sort_key = self._sort_key(keys)
        pos = np.searchsorted(self.sort_key, sort_key)
        found = pos < len(self)
        found[found] = self.sort_key[pos[found]] == sort_key[found]
        return np.where(found, pos, -1)

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
        where = np.searchsorted(self.sort_key, self._sort_key([k[new] for k in keys]))
        self._insert(where, [k[new] for k in keys], values[new], [w[new] for w in wits])
        return touched + int(new.sum())

    def _by_position(self, values: np.ndarray) -> bool:
        """Whether G can combine ``values`` by position: an integer sum by ``bincount``
        would pass through float64, and a NaN has no best."""
        if self.params.g == "sum":
            return self.acc.dtype.kind == "f"
        return values.dtype.kind != "f" or not np.isnan(values).any()

    def _merge_in_place(self, pos: np.ndarray, values: np.ndarray, wits: list[np.ndarray]) -> int:
        """``merge`` of candidates whose keys are all in the table, at rows ``pos``."""
        hit = np.flatnonzero(np.bincount(pos, minlength=len(self)))
        if self.params.g == "sum":
            sums = np.bincount(pos, weights=values, minlength=len(self))
            return self._update_existing(hit, sums[hit].astype(self.acc.dtype), [])
        reduce = np.minimum if self.params.g == "min" else np.maximum
        best = np.full(len(self), _identity(self.params.g, values.dtype), dtype=values.dtype)
        reduce.at(best, pos, values)
        # The first candidate reaching each row's best gives its witness.
        rows = np.arange(len(values))
        first = np.full(len(self), len(values), dtype=np.int64)
        winners = np.flatnonzero(values == best[pos])
        np.minimum.at(first, pos[winners], rows[winners])
        chosen = first[hit]
        return self._update_existing(hit, values[chosen], [w[chosen] for w in wits])

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
            return int(np.count_nonzero(values))
        better = values < self.acc[pos] if self.params.g == "min" else values > self.acc[pos]
        better |= ~self.present[pos]
        pos, values = pos[better], values[better]
        self.acc[pos] = values
        self.present[pos] = True
        self.delta[pos] = values
        self.pending[pos] = True
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
        known = len(wits) == len(self.wits) + 1
        for j, column in enumerate(self.wits):
            filler = wits[j] if known else np.zeros(len(pos), dtype=column.dtype)
            self.wits[j] = np.insert(column, pos, filler)
        self.has_wit = np.insert(self.has_wit, pos, wits[-1] if known else False)

    # ------------------------------------------------------------ the frontier

    def take_frontier(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions, deltas) of the keys to propagate now; they stop being pending."""
        idx = np.flatnonzero(self.pending)
        params = self.params
        if params.priority and len(idx) > 64:
            keep = max(1, math.ceil(params.portion * len(idx)))
            rank = {"min": self.delta[idx], "max": -self.delta[idx]}.get(
                params.g, -np.abs(self.delta[idx])
            )
            idx = idx[np.argpartition(rank, keep - 1)[:keep]]
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


def _slice_keys(aux_rows: int, keys: int) -> int:
    """Frontier keys per slice: ``SLICE_CANDIDATES`` over the mean auxiliary rows per key of
    the table (a key's candidates are its auxiliary rows; a table still growing overstates
    that mean, but its frontier is as small: at most ``aux_rows / SLICE_CANDIDATES``
    slices)."""
    fanout = max(1.0, aux_rows / max(1, keys))
    return max(1, int(SLICE_CANDIDATES / fanout))


def _identity(g: str, dtype: np.dtype) -> float | int:
    """The value no candidate of ``dtype`` is worse than, for G = min or max."""
    if dtype.kind == "f":
        return math.inf if g == "min" else -math.inf
    limits = np.iinfo(dtype)
    return int(limits.max if g == "min" else limits.min)


def _firsts(
    keys: list[np.ndarray], wits: list[np.ndarray], rows: np.ndarray, values: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray]]:
    """One candidate per key: the keys and witnesses of ``rows``, with G's ``values``."""
    return [k[rows] for k in keys], values, [w[rows] for w in wits]


# ---------------------------------------------------------------- one shard


class ShardLoop:
    row_limit: int | None = None
    """In the driver: ``run`` stops once the table holds more keys (the stratum then runs
    on Spark) instead of growing without bound in the driver's memory."""

    def __init__(self, params: StageParams, shard: int, rows: pa.Table) -> None:
        """A Spark task's shard: its rows of the stage frame (state, messages, blocks)."""
        self.params = params
        kind = rows.column("kind").to_numpy()
        self._start(
            shard,
            self._state(rows.filter(pa.array(kind == STATE))),
            self._aux_batches(rows, kind),
            rows.filter(pa.array(kind == MESSAGE)),
        )

    @classmethod
    def in_driver(
        cls,
        params: StageParams,
        aux: list[Batch],
        seeds: pa.Table,
        row_limit: int,
        table: LocalTable | None = None,
    ) -> ShardLoop:
        """The only shard of a small relation, run in the driver (``operators.local``):
        ``table``'s rows (default: none yet), every body's auxiliary rows with
        ``DESTINATION`` 0, and the seeds (columns ``k0..``, ``acc``, and ``wit0..`` when
        witnesses are kept) as its messages. A loop resumed from ``table`` reserves no
        keys: its keys are there already but for the few an update reset."""
        loop = cls.__new__(cls)
        loop.params = params
        loop.row_limit = row_limit
        if table is None:
            keys: list[np.ndarray] = [np.zeros(0, dtype=_numpy_type(t)) for t in params.key_types]
            table = LocalTable(params, keys, np.zeros(0, dtype=_numpy_type(params.value_type)))
            loop._start(0, table, aux, seeds)
        else:
            loop._start(0, table, aux, seeds, reserve=False)
        return loop

    def _start(
        self,
        shard: int,
        table: LocalTable,
        aux: list[Batch],
        messages: pa.Table,
        reserve: bool = True,
    ) -> None:
        self.shard = shard
        self.table = table
        self.kernels = self._kernels(aux)
        self.aux_rows = sum(batch.n for batch in aux)
        if reserve:
            self._reserve()
        self.messages = messages
        self.buffers: dict[int, list[Batch]] = {}
        self.buffered: dict[int, int] = {}
        self.iterations = 0
        self.gain = 0.0
        """Sum programs: the largest Σ|candidates| / Σ|frontier deltas| of an iteration."""
        self.negative = 0
        """Sum programs: how many negative deltas this stage propagated."""
        self.propagated = 0
        """Frontier deltas the local iterations of this stage propagated."""

    def _state(self, rows: pa.Table) -> LocalTable:
        p = self.params
        keys = [_numpy(rows, f"k{j}", t) for j, t in enumerate(p.key_types)]
        delta = rows.column("delta")
        # Pending deltas carried from the previous stage stay pending.
        pending = (
            delta.is_valid().to_numpy(zero_copy_only=False),
            delta.fill_null(0).to_numpy(zero_copy_only=False),
        )
        return LocalTable(
            p, keys, _numpy(rows, "acc", p.value_type), pending, _row_witness(rows, p)
        )

    def _aux_batches(self, rows: pa.Table, kind: np.ndarray) -> list[Batch]:
        """Each body's auxiliary rows, from the blocks of the stage frame."""
        blocks: dict[int, list[pa.Table]] = {}
        for blob in rows.filter(pa.array(kind == AUX)).column(BLOB).to_pylist():
            table = decode(blob)
            blocks.setdefault(int((table.schema.metadata or {})[b"body"]), []).append(table)
        types = self.params.aux_types
        return [_aux_batch(blocks.get(b, []), types[b]) for b in range(len(self.params.plans))]

    def _kernels(self, aux: list[Batch]) -> list[tuple[Kernel, dict]]:
        kernels = []
        for (plan, aux_name), batch in zip(self.params.plans, aux, strict=True):
            sources = {(aux_name, "aux"): batch}
            kernel = Kernel(plan)
            kernel.prepare(sources)
            kernels.append((kernel, sources))
        return kernels

    def _reserve(self) -> None:
        """Reserve the keys this shard's auxiliary rows lead to."""
        for (_, sources), columns in zip(self.kernels, self.params.dest_columns, strict=True):
            if not columns:
                continue  # a head key computed from the frontier: not known in advance
            batch = next(iter(sources.values()))
            mine = np.flatnonzero(batch.cols[DESTINATION] == self.shard)
            keys = [batch.cols[f"c{c}"][mine] for c in columns]
            types = self.params.key_types
            self.table.reserve([k.astype(_numpy_type(t)) for k, t in zip(keys, types, strict=True)])

    # ------------------------------------------------------------ the loop

    def run(self) -> tuple[float, int]:
        """Merge the messages, iterate to a flush; (seconds, local iterations)."""
        started = time.perf_counter()
        p = self.params
        self._merge_messages()
        while self.table.pending.any() and self.iterations < LOCAL_ITERATION_CAP:
            if p.local_bound is not None and self.table.local_measure() < p.local_bound:
                break
            self._iterate()
            self.iterations += 1
            if self._flush_due(time.perf_counter() - started):
                break
            if self.row_limit is not None and len(self.table) > self.row_limit:
                break
        return time.perf_counter() - started, self.iterations

    def _merge_messages(self) -> None:
        p, rows = self.params, self.messages
        if not len(rows):
            return
        self.messages = rows.slice(0, 0)  # merged once: a later run (the driver's) adds none
        keys = [_numpy(rows, f"k{j}", t) for j, t in enumerate(p.key_types)]
        self.table.merge(keys, _numpy(rows, "acc", p.value_type), _row_witness(rows, p))

    def _iterate(self) -> None:
        """Propagate the frontier a slice at a time (``_slice_keys``), so that the
        candidates of one slice, not of the whole frontier, are in memory at once."""
        idx, deltas = self.table.take_frontier()
        self.propagated += len(idx)
        step = _slice_keys(self.aux_rows, len(self.table))
        derived = 0.0
        for start in range(0, len(idx), step):
            derived += self._propagate(idx[start : start + step], deltas[start : start + step])
        if self.params.g == "sum":
            self._observe_gain(deltas, derived)

    def _propagate(self, idx: np.ndarray, deltas: np.ndarray) -> float:
        """Derive and merge the candidates of frontier keys ``idx``; their Σ|value|."""
        p = self.params
        cols: dict[str, np.ndarray] = {}
        for j, pos in enumerate(p.key_positions):
            cols[f"c{pos}"] = self.table.columns[j][idx]
        cols[f"c{p.value_pos}"] = deltas
        if p.index_pos is not None:
            cols[f"c{p.index_pos}"] = np.zeros(len(idx), dtype=np.int64)
        frontier = Batch(len(idx), cols)
        derived = []
        for kernel, sources in self.kernels:
            derived.append(kernel.run({**sources, (p.relation, "delta"): frontier}))
        candidates = valid_candidates(concat(derived), len(p.key_positions))
        mass = float(np.abs(candidates.cols["v"]).sum()) if p.g == "sum" else 0.0
        here = candidates.cols[DESTINATION] == self.shard
        if here.all():  # one shard (the driver's): no copy of every candidate
            self._merge_batch(candidates)
            return mass
        self._merge_batch(candidates.take(np.flatnonzero(here)))
        self._buffer(candidates.take(np.flatnonzero(~here)))
        return mass

    def _observe_gain(self, deltas: np.ndarray, derived: float) -> None:
        """Track what decides whether the order of propagation may change a sum: deltas of
        both signs, and an F′ that does not shrink them (see ``async_support.order_dependence``):
        ``derived`` is Σ|candidates| of the whole frontier."""
        mass = float(np.abs(deltas).sum())
        if mass > 0:
            self.gain = max(self.gain, derived / mass)
        self.negative += int(np.count_nonzero(deltas < 0))

    def _merge_batch(self, batch: Batch) -> None:
        p = self.params
        keys = [batch.cols[f"k{j}"] for j in range(len(p.key_positions))]
        values: np.ndarray = batch.cols["v"].astype(_numpy_type(p.value_type))
        self.table.merge(keys, values, _witness(batch, p))

    def _buffer(self, remote: Batch) -> None:
        if remote.n == 0:
            return
        dest = remote.cols[DESTINATION]
        for d in np.unique(dest):
            part = remote.take(np.flatnonzero(dest == d))
            self.buffers.setdefault(int(d), []).append(part)
            self.buffered[int(d)] = self.buffered.get(int(d), 0) + part.n

    def _flush_due(self, elapsed: float) -> bool:
        """A buffer holds β updates, or τ is spent while something waits to be sent (with
        nothing buffered the shard keeps going: a flush would exchange nothing)."""
        if not self.buffered:
            return False
        if elapsed >= self.params.tau:
            return True
        beta = self.params.beta
        return any(
            n >= beta.get((self.shard, d), self.params.beta0) for d, n in self.buffered.items()
        )

    # ------------------------------------------------------------ output

    @property
    def has_pending(self) -> bool:
        return bool(self.table.pending.any())

    def receive(self, messages: pa.Table) -> None:
        """Message rows (stage layout) merged when ``run`` starts."""
        self.messages = messages

    def next_stage(self) -> None:
        """Forget what the last stage sent and counted (its buffers are on their way)."""
        self.buffers, self.buffered = {}, {}
        self.iterations = self.propagated = self.negative = 0
        self.gain = 0.0

    def outgoing(self, schema: pa.Schema) -> dict[int, pa.Table]:
        """Per destination shard, its buffers as message rows of the stage layout."""
        return dict(self._message_rows(schema))

    def state_rows(self, schema: pa.Schema) -> pa.Table:
        t = self.table
        keep = np.flatnonzero(t.present)
        cols: dict[str, object] = {f"k{j}": c[keep] for j, c in enumerate(t.columns)}
        cols["acc"] = t.acc[keep]
        cols["delta"] = pa.array(t.delta[keep], mask=~t.pending[keep])
        for j, w in enumerate(t.wits):
            cols[f"wit{j}"] = pa.array(w[keep], mask=~t.has_wit[keep])
        return layout_rows(schema, len(keep), self.shard, STATE, cols)

    def _message_rows(self, schema: pa.Schema) -> Iterator[tuple[int, pa.Table]]:
        p = self.params
        for dest, parts in self.buffers.items():
            batch = concat(parts)
            keys = [batch.cols[f"k{j}"] for j in range(len(p.key_positions))]
            values: np.ndarray = batch.cols["v"].astype(_numpy_type(p.value_type))
            keys, values, wits = self.table.combined(keys, values, _witness(batch, p))
            cols: dict[str, object] = {f"k{j}": k for j, k in enumerate(keys)}
            cols["acc"] = values
            if wits:
                for j, w in enumerate(wits[:-1]):
                    cols[f"wit{j}"] = pa.array(w, mask=~wits[-1])
            yield dest, layout_rows(schema, len(values), dest, MESSAGE, cols)


def _aux_batch(tables: list[pa.Table], types: tuple[str, ...]) -> Batch:
    """A body's auxiliary rows from its blocks: columns ``c0..`` and the destination."""
    if not tables:
        cols: dict[str, np.ndarray] = {
            f"c{i}": np.zeros(0, dtype=_numpy_type(t)) for i, t in enumerate(types)
        }
        cols[DESTINATION] = np.zeros(0, dtype=np.int32)
        return Batch(0, cols)
    rows = pa.concat_tables(tables)
    cols = {f"c{i}": rows.column(f"c{i}").to_numpy(zero_copy_only=False) for i in range(len(types))}
    cols[DESTINATION] = rows.column("dshard").to_numpy(zero_copy_only=False)
    return Batch(len(rows), cols)


def _witness(batch: Batch, p: StageParams) -> list[np.ndarray]:
    """The candidates' witness columns and their validity (last), or none when the rule
    gives no witness."""
    names = [f"w{j}" for j in range(len(p.key_positions))]
    if not p.witness or not all(n in batch.cols for n in names):
        return []
    return [*(batch.cols[n] for n in names), batch.mask(names[0])]


def _row_witness(rows: pa.Table, p: StageParams) -> list[np.ndarray]:
    """Witness columns of state or message rows and their validity (last): a null witness
    (a key seeded by X⁰ or C) stays null."""
    if not p.witness:
        return []
    wits = [_numpy(rows, f"wit{j}", t) for j, t in enumerate(p.key_types)]
    return [*wits, rows.column("wit0").is_valid().to_numpy(zero_copy_only=False)]


def valid_candidates(batch: Batch, keys: int) -> Batch:
    """Candidates whose key and value are not null (a null candidate contributes nothing)."""
    names = [f"k{j}" for j in range(keys)] + ["v"]
    keep = np.ones(batch.n, dtype=bool)
    for name in names:
        keep &= batch.mask(name)
        values = batch.cols[name]
        if values.dtype.kind == "f":
            keep &= ~np.isnan(values)
    return batch if keep.all() else batch.take(np.flatnonzero(keep))


def _numpy(rows: pa.Table, name: str, type_name: str) -> np.ndarray:
    column = rows.column(name)
    if column.null_count:
        column = column.fill_null(0 if type_name != "symbol" else "")
    return column.to_numpy(zero_copy_only=False).astype(_numpy_type(type_name))
