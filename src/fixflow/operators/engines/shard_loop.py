"""One shard's local asynchronous loop (A3's AsyncTable, PowerLog §5.3): in a Spark task
of a sharded run (``engines.shard_run``), or in the driver for a small stratum
(``operators.driver``).

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

import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from fixflow.operators.engines.batches import Batch, concat
from fixflow.operators.engines.blocks import BLOB, decode, layout_rows
from fixflow.operators.engines.kernels import Kernel
from fixflow.operators.engines.shard_table import LocalTable, StageParams, numpy_type

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


def _slice_keys(aux_rows: int, keys: int) -> int:
    """Frontier keys per slice: ``SLICE_CANDIDATES`` over the mean auxiliary rows per key of
    the table (a key's candidates are its auxiliary rows; a table still growing overstates
    that mean, but its frontier is as small: at most ``aux_rows / SLICE_CANDIDATES``
    slices)."""
    fanout = max(1.0, aux_rows / max(1, keys))
    return max(1, int(SLICE_CANDIDATES / fanout))


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
        """The only shard of a small relation, run in the driver (``operators.driver``):
        ``table``'s rows (default: none yet), every body's auxiliary rows with
        ``DESTINATION`` 0, and the seeds (columns ``k0..``, ``acc``, and ``wit0..`` when
        witnesses are kept) as its messages. A loop resumed from ``table`` reserves no
        keys: its keys are there already but for the few an update reset."""
        loop = cls.__new__(cls)
        loop.params = params
        loop.row_limit = row_limit
        if table is None:
            keys: list[np.ndarray] = [np.zeros(0, dtype=numpy_type(t)) for t in params.key_types]
            table = LocalTable(params, keys, np.zeros(0, dtype=numpy_type(params.value_type)))
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
            self.table.reserve([k.astype(numpy_type(t)) for k, t in zip(keys, types, strict=True)])

    # ------------------------------------------------------------ the loop

    def run(self) -> tuple[float, int]:
        """Merge the messages, iterate to a flush; (seconds, local iterations)."""
        started = time.perf_counter()
        p = self.params
        self._merge_messages()
        while self.table.has_pending and self.iterations < LOCAL_ITERATION_CAP:
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
        values: np.ndarray = batch.cols["v"].astype(numpy_type(p.value_type))
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
        return self.table.has_pending

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
            values: np.ndarray = batch.cols["v"].astype(numpy_type(p.value_type))
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
            f"c{i}": np.zeros(0, dtype=numpy_type(t)) for i, t in enumerate(types)
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
    return column.to_numpy(zero_copy_only=False).astype(numpy_type(type_name))
