"""``mra-retract`` in the driver: a small min/max relation updated without a Spark job.

On Spark a retraction costs about a dozen jobs (the witness walk, the re-seeding joins, the
auxiliary rows packed again, the stage, the change diff) whose fixed cost is most of an
epoch: on a 100k-edge road grid the shard's loop itself runs 0.03-0.2 s of a 2.5 s update.
When the relation and the inputs of its recursive bodies hold at most
``EvalOptions.local_rows`` rows, the Maintainer runs the same retraction
(``strategies.mra_retract.retract_on``) here, over numpy batches, with the same kernels and
shard loop a Spark task runs (``engines.shard_loop``): ``DriverRetraction`` is its driver
backend.

- roots: keys whose witness is the source of an auxiliary row the epoch removed (found per
  changed input, ``_changed_aux``), and keys without a witness whose X⁰/C candidate is
  gone; the witness walk is ``witness.invalidated_rows``, the numpy walk Spark's task runs;
- seeds: the surviving sources of auxiliary rows into a reset key, and of auxiliary rows
  the epoch added, are pending (the loop derives their candidates), and X⁰/C are merged
  as messages;
- the resume: one ``ShardLoop.in_driver`` from the surviving rows.

The rows are handed back to Spark as local relations (no job), and ``copies.DriverCopies`` keeps
the driver's copy of every frame it made or read on the frame (``Relation.batch``), so the next
epoch finds them without collecting. A frame that holds none is collected (one job, at most
``local_rows`` + 1 rows). Whether a retraction runs here is ``placement.place_retraction``'s
decision; one that grows past ``local_rows`` (``placement.Outgrown``) runs on Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pyarrow as pa

from fixflow.checker.ast import TypeName
from fixflow.operators.driver.copies import DriverCopies, hand_over, plain_rows
from fixflow.operators.driver.stratum import seed_candidates, seed_messages, witnessed_rows
from fixflow.operators.engines.async_support import (
    _head_key_columns,
    _join_key_columns,
    _scan_of,
    stage_params,
)
from fixflow.operators.engines.base import RoundInfo
from fixflow.operators.engines.batches import Batch, concat
from fixflow.operators.engines.joins import JoinIndex, anti_join
from fixflow.operators.engines.kernels import Kernel
from fixflow.operators.engines.program import MraProgram, RecursiveBody
from fixflow.operators.engines.shard_loop import DESTINATION, ShardLoop
from fixflow.operators.engines.shard_table import LocalTable
from fixflow.operators.epoch import Outcome, UpdateContext
from fixflow.operators.placement import Outgrown
from fixflow.operators.plan import Aggregate, AntiJoin, Fixpoint, Plan, children, relations_read
from fixflow.operators.witness import ROOT, invalidated_rows

Sources = Callable[[str], Batch]
"""A relation's rows (positional columns ``c0..``) as the update reads them."""


# ---------------------------------------------------------------- the retraction


@dataclass(frozen=True)
class DriverSeed:
    """What one seeding step hands the driver's loop (``resume`` joins the steps' parts, so
    that the surviving rows are searched once per body, as one step would)."""

    sources: tuple[Batch, ...]
    """Per recursive body, auxiliary rows whose surviving sources propagate again (the loop
    derives their candidates)."""
    every_seed: bool
    """Whether every X⁰/C candidate (``DriverRetraction._seeds``) is merged as a message."""


class DriverRetraction:
    """``mra_retract.retract_on``'s primitives over the driver's numpy batches, with the
    kernels and shard loop a Spark task runs. Rows are positional (``c0..``) with their
    witness (``c<arity>..``); keys are rows of the relation; a seed marks survivors pending
    rather than deriving their candidates: the loop derives them, as it would anyway.
    ``Outgrown`` past ``copies.limit`` rows."""

    def __init__(self, ctx: UpdateContext, program: MraProgram, copies: DriverCopies) -> None:
        self.ctx, self.program, self.copies = ctx, program, copies
        self.limit = copies.limit
        spec = program.spec
        self.arity = len(program.types)
        self.key_cols = [f"c{p}" for p in spec.key_positions]
        self.wit_cols = [f"c{self.arity + j}" for j in range(len(program.keys))]
        self.joins = [
            _join_key_columns(program, i, _scan_of(b)) for i, b in enumerate(program.bodies)
        ]
        self.dests = [
            _head_key_columns(program, b, _scan_of(b), program.keys) for b in program.bodies
        ]

    # ------------------------------------------------------------ the primitives

    def witnessed(self) -> Batch:
        return self.copies.rows(self.ctx.witnessed[self.program.relation], self._witnessed_types())

    def roots(self, state: Batch) -> Batch | None:
        lost = [self._changed_aux(body, new, "del") for body, new in self._bodies]
        found = self._lost_witness(state, lost) | self._lost_seed(state)
        return state.take(np.flatnonzero(found)) if found.any() else None

    def invalidated(self, state: Batch, roots: Batch) -> tuple[Batch, int]:
        keys = {f"k{j}": c for j, c in enumerate(self.key_cols)}
        wits = {f"w{j}": c for j, c in enumerate(self.wit_cols)}
        has_wit = state.mask(self.wit_cols[0]) if self.wit_cols else np.zeros(state.n, bool)
        table = pa.table(
            {
                **{k: np.concatenate([state.cols[c], roots.cols[c]]) for k, c in keys.items()},
                **{
                    w: pa.array(
                        np.concatenate([state.cols[c], roots.cols[c]]),
                        mask=~np.r_[has_wit, np.zeros(roots.n, bool)],
                    )
                    for w, c in wits.items()
                },
                ROOT: np.r_[np.zeros(state.n, bool), np.ones(roots.n, bool)],
            }
        )
        rows = invalidated_rows(table, list(keys), list(wits))
        gone = state.take(rows[rows < state.n])
        return gone, gone.n

    def surviving(self, state: Batch, gone: Batch) -> Batch:
        return state.take(np.flatnonzero(~_member(state, self.key_cols, gone)))

    def reseeded(self, surviving: Batch, gone: Batch) -> list[DriverSeed]:
        """The sources of auxiliary rows into ``gone`` are pending. X⁰/C for its keys are
        among the messages ``inserted`` merges (all of them), so none are picked here."""
        into = [
            rows.take(
                np.flatnonzero(_member(_renamed(rows, dests, self.key_cols), self.key_cols, gone))
            )
            for (_, rows), dests in zip(self._bodies, self.dests, strict=True)
        ]
        return [DriverSeed(tuple(into), every_seed=False)]

    def inserted(self, surviving: Batch) -> list[DriverSeed]:
        """The sources of gained auxiliary rows are pending; every X⁰/C candidate over the
        new inputs is merged (those the insertions did not derive improve nothing)."""
        gained = tuple(self._changed_aux(body, new, "add") for body, new in self._bodies)
        return [DriverSeed(gained, every_seed=True)]

    def resume(self, state: Batch, surviving: Batch, seeds: list[DriverSeed]) -> Outcome:
        pending = np.zeros(surviving.n, dtype=bool)
        for body, joins in enumerate(self.joins):
            parts = [seed.sources[body] for seed in seeds if seed.sources[body].n]
            if parts:
                pending |= self._sources(surviving, concat(parts), joins)
        every = any(seed.every_seed for seed in seeds)
        messages = self._seeds if every else self._seeds.take(_NONE)
        rows, loop = self._loop(surviving, pending, messages)
        detail = {"local_iterations": float(loop.iterations), "propagated": float(loop.propagated)}
        self.ctx.round(RoundInfo(1, 0, None, detail))
        return self._outcome(state, rows)

    # ------------------------------------------------------------ inputs

    def _types(self, relation: str) -> tuple[TypeName, ...]:
        return self.ctx.catalog.types[relation]

    def _witnessed_types(self) -> list[TypeName]:
        return [*self.program.types, *self.program.key_types]

    def _new(self, relation: str) -> Batch:
        """A changed input's copy is changed with it (``Maintainer._changed``)."""
        return self.copies.rows(self.ctx.frames.full[relation], self._types(relation))

    def _old(self, relation: str) -> Batch:
        if relation not in self.ctx.deltas:
            return self._new(relation)
        frame = self.ctx.old[relation]
        found = self.copies.held(frame)
        if found is None:  # the new rows with the change undone
            delta, types = self.ctx.deltas[relation], self._types(relation)
            found = self.copies.before(self._new(relation), delta, types)
            self.copies.keep_on(frame, found)  # a Maintainer frame: kept for the next call
        return found

    @cached_property
    def _bodies(self) -> list[tuple[RecursiveBody, Batch]]:
        """Each recursive body with its auxiliary rows over the new inputs."""
        return [(body, self._aux(body, self._new)) for body in self.program.bodies]

    @cached_property
    def _seeds(self) -> Batch:
        """X⁰ and C's candidates over the new inputs: ``k0..``, ``v``."""
        return seed_candidates(self.program, lambda plan: _sources(plan, self._new))

    def _changed_aux(self, body: RecursiveBody, new: Batch, kind: str) -> Batch:
        """The auxiliary rows the epoch removed (``del``) or added (``add``), or more: when
        the auxiliary plan only filters, joins and projects, a removed row derives from a
        removed fact of some input with the others as they were (an added one from an
        added fact, the others as they are now), so it is found among those derivations,
        per changed input, without building the auxiliary side twice. Roots found from a
        row that was not removed only reset keys that re-seeding restores, and a survivor
        made pending by a row that was not added only propagates again."""
        plan = body.aux_plan
        assert plan is not None
        if not _row_by_row(plan):  # exactly: the difference of the whole sides
            old = self._aux(body, self._old)
            return _rows_minus(old, new) if kind == "del" else _rows_minus(new, old)
        parts = [new.take(_NONE)]
        for changed in sorted({r for r, _ in relations_read(plan) if r in self.ctx.deltas}):

            def read(relation: str, changed: str = changed) -> Batch:
                if relation == changed:
                    delta, types = self.ctx.deltas[relation], self._types(relation)
                    return self.copies.side(delta, kind == "add", types)
                return self._old(relation) if kind == "del" else self._new(relation)

            parts.append(self._aux(body, read))
        return concat(parts)

    def _aux(self, body: RecursiveBody, read: Sources) -> Batch:
        """A body's auxiliary rows (``c0..``), every one in the one shard; not deduplicated
        (min and max are idempotent)."""
        assert body.aux_plan is not None
        plan = replace(body.aux_plan, distinct=False)
        batch = Kernel(plan).run(_sources(plan, read))
        out = Batch(
            batch.n, {f"c{i}": batch.cols[n] for i, (n, _) in enumerate(body.aux_plan.schema)}
        )
        out.valid = {
            f"c{i}": batch.valid[n]
            for i, (n, _) in enumerate(body.aux_plan.schema)
            if n in batch.valid
        }
        out.cols[DESTINATION] = np.zeros(batch.n, dtype=np.int32)
        if out.n > self.limit:
            raise Outgrown(f"it reads more than {self.limit} rows")
        return out

    # ------------------------------------------------------------ roots and sources

    def _lost_witness(self, state: Batch, lost: list[Batch]) -> np.ndarray:
        """Rows whose witness is the source of a lost auxiliary row leading to them."""
        found = np.zeros(state.n, dtype=bool)
        names = tuple([*self.key_cols, *self.wit_cols])
        for rows, joins, dests in zip(lost, self.joins, self.dests, strict=True):
            if not rows.n:
                continue
            assert joins is not None and dests is not None
            pairs = Batch(
                rows.n,
                {
                    **{k: rows.cols[f"c{d}"] for k, d in zip(self.key_cols, dests, strict=True)},
                    **{w: rows.cols[f"c{s}"] for w, s in zip(self.wit_cols, joins, strict=True)},
                },
            )
            found |= JoinIndex.build(pairs, names).matches(state, names)
        return found

    def _lost_seed(self, state: Batch) -> np.ndarray:
        """Rows without a witness whose X⁰/C candidate is no longer derived."""
        unwitnessed = ~state.mask(self.wit_cols[0]) if self.wit_cols else np.ones(state.n, bool)
        seeds, value = self._seeds, f"c{self.program.spec.value_pos}"
        names = tuple([*self.key_cols, value])
        renamed = Batch(
            seeds.n,
            {
                **{c: seeds.cols[f"k{j}"] for j, c in enumerate(self.key_cols)},
                value: seeds.cols["v"],
            },
        )
        return unwitnessed & ~JoinIndex.build(renamed, names).matches(state, names)

    def _sources(self, surviving: Batch, rows: Batch, joins: Sequence[int] | None) -> np.ndarray:
        """Survivors that are the source of an auxiliary row of ``rows``."""
        return _member(surviving, self.key_cols, _renamed(rows, joins, self.key_cols))

    # ------------------------------------------------------------ the loop

    def _loop(
        self, surviving: Batch, pending: np.ndarray, messages: Batch
    ) -> tuple[Batch, ShardLoop]:
        program, ctx = self.program, self.ctx
        params = stage_params(
            program, ctx.options.engine_options, witness=True, shards=1, hybrid=True
        )
        keys = [surviving.cols[c] for c in self.key_cols]
        acc = surviving.cols[f"c{program.spec.value_pos}"]
        has_wit = surviving.mask(self.wit_cols[0])
        wits = [surviving.cols[c] for c in self.wit_cols]
        table = LocalTable(params, keys, acc, (pending, acc.copy()), [*wits, has_wit])
        seeds = seed_messages(program, messages, witness=True)
        aux = [rows for _, rows in self._bodies]
        loop = ShardLoop.in_driver(params, aux, seeds, row_limit=self.limit, table=table)
        loop.run()  # hybrid parameters: to local quiescence (or the row limit)
        if len(loop.table) > self.limit:
            raise Outgrown(f"it grew past {self.limit} rows")
        if loop.has_pending:  # the loop's guard (``LOCAL_ITERATION_CAP``) stopped it
            raise Outgrown("the local loop stopped with deltas pending")
        return witnessed_rows(program, loop.table), loop

    # ------------------------------------------------------------ handing over

    def _outcome(self, before: Batch, after: Batch) -> Outcome:
        ctx, program = self.ctx, self.program
        relation, types = program.relation, program.types
        spark = ctx.spark
        columns = tuple(f"c{i}" for i in range(self.arity))
        witnessed, rows = hand_over(spark, types, program.key_types, after, self.copies)
        plain_after = self.copies.held(rows)
        assert plain_after is not None
        delta = self.copies.delta(spark, plain_rows(before, columns), plain_after, types)
        return Outcome(
            {relation: rows},
            {relation: delta},
            1,
            note="in the driver",
            witnessed={relation: witnessed},
        )


_NONE = np.zeros(0, dtype=np.int64)
"""Row indices that take no row: an empty batch with the columns of another."""


# ---------------------------------------------------------------- helpers


def _sources(plan: Plan, read: Sources) -> dict[tuple[str, str], Batch]:
    found: dict[tuple[str, str], Batch] = {}
    for relation, version in relations_read(plan):
        assert version == "full", "place_retraction admits plans over full relations only"
        found[(relation, version)] = read(relation)
    return found


def _row_by_row(plan: Plan) -> bool:
    """Whether ``plan`` only scans, filters, joins, projects and unites (no negation or
    aggregate, whose rows a change elsewhere can take away or alter)."""
    if isinstance(plan, AntiJoin | Aggregate | Fixpoint):
        return False
    return all(_row_by_row(child) for child in children(plan))


def _rows_minus(left: Batch, right: Batch) -> Batch:
    columns = tuple(c for c in left.cols if c != DESTINATION)
    return anti_join(left, right, columns)


def _renamed(rows: Batch, positions: Sequence[int] | None, names: Sequence[str]) -> Batch:
    """``rows``' columns ``c<position>`` as ``names``."""
    assert positions is not None
    return Batch(rows.n, {n: rows.cols[f"c{p}"] for n, p in zip(names, positions, strict=True)})


def _member(rows: Batch, names: Sequence[str], keys: Batch) -> np.ndarray:
    """Whether each row's ``names`` columns are a row of ``keys`` (same column names)."""
    if keys.n == 0 or rows.n == 0:
        return np.zeros(rows.n, dtype=bool)
    on = tuple(names)
    return JoinIndex.build(Batch(keys.n, {n: keys.cols[n] for n in on}), on).matches(rows, on)
