"""Small strata in the driver: the numpy backend of the one compiler, without Spark jobs.

A Spark job costs tens to hundreds of milliseconds whatever its size, and a stratum costs at
least one job per round (``materialize``): a program of many small strata and rounds pays
that cost hundreds of times for a few thousand rows. When a stratum's inputs are small and
already in the driver, ``Bootstrap`` runs it here instead, over numpy batches
(``engines.kernels``), and hands its rows to Spark as a local relation (no job either):

- the same plans as on Spark: ``exit_rules``/``delta_rules`` of ``strategies.seminaive``,
  ``combine_plan`` (G) of ``core``, compiled by the kernel backend instead of the Spark one;
- non-recursive strata: G over every body, once; ``set`` strata (recursion without
  aggregates) and ``aggregate-seminaive`` strata (non-linear and mutual recursion): the
  one semi-naive loop, new = derived − all, or the groups whose value changes; ``mra``
  strata on the ``async`` or ``hybrid`` engine with one shard: that engine's bootstrap
  (``engines.mra_bootstrap``) over ``DriverMra``, one shard's loop (``ShardLoop.in_driver``)
  seeded and fed by the kernels, as a Spark task would run it.
  Which strata run here is ``placement.place``'s decision, made before the stratum runs;
  a stratum that grows past the limit raises ``placement.Outgrown``: a semi-naive loop
  continues on Spark from the round it reached, an ``mra`` one restarts there;
- ``EvalOptions.local_rows`` bounds the rows of each input a local stratum reads and the
  rows it holds (``fixflow eval --local-rows``, default 2,000,000; 0, the API's default, turns
  the path off).

Inputs given as Arrow tables (``fixflow eval``) are read directly; a Spark frame is collected
once (no job for a local relation). Rows handed back to Spark are local relations, made only
when a Spark stratum or a caller reads them, so a later Spark stratum reads them as any other
input. Results equal the Spark path's (tests/operators/test_local.py compares them
on every example program).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import pandas as pd
import pyarrow as pa

from fixflow.checker import ast
from fixflow.checker.catalog import RelationEntry
from fixflow.operators.compiler import combine_plan, head_columns
from fixflow.operators.core import StratumRun
from fixflow.operators.driver.rows import empty_rows
from fixflow.operators.engines.async_support import stage_params
from fixflow.operators.engines.batches import ARROW_TYPES, NUMPY_TYPES, Batch, concat
from fixflow.operators.engines.joins import HeldKeys, JoinIndex, anti_join
from fixflow.operators.engines.kernels import Kernel, relation_rows
from fixflow.operators.engines.mra_bootstrap import (
    Stage,
    StageRule,
    bootstrap_on,
    in_round_order,
    round_ordered,
)
from fixflow.operators.engines.program import MraProgram, RecursiveBody
from fixflow.operators.engines.shard_loop import (
    DESTINATION,
    SLICE_CANDIDATES,
    ShardLoop,
    valid_candidates,
)
from fixflow.operators.engines.shard_table import LocalTable
from fixflow.operators.placement import Outgrown, Reached, bootstrap_method
from fixflow.operators.plan import Plan, Scan, relations_read, scans
from fixflow.operators.strategies import naive
from fixflow.operators.strategies.aggregate_seminaive import growth_for
from fixflow.operators.strategies.seminaive import exit_rules, semi_naive

Fetch = Callable[[str], Batch | None]
"""A relation's rows in the driver (collected from Spark if need be); None when it holds
more rows than the limit."""


# ---------------------------------------------------------------- one stratum


class LocalStratum:
    """A stratum evaluated over batches: ``sources`` holds every relation it may read."""

    def __init__(self, run: StratumRun, sources: Fetch, limit: int) -> None:
        self.run = run
        self.fetch = sources
        self.full: dict[str, Batch] = {}
        self.delta: dict[str, Batch] = {}
        self.witnessed: dict[str, Batch] = {}
        """min/max MRA relations with ``EvalOptions.witness``: their rows with witnesses
        (``witnessed_rows``), as a stream's retraction needs them."""
        self.limit = limit
        self.capped = False
        """The round cap stopped the stratum before its fixpoint (its rows are partial)."""
        self.held: dict[str, tuple[Batch, HeldKeys]] = {}
        """Per set relation of a semi-naive loop: the rows ``full`` held when its keys were
        last added, and those keys (``new_rows`` anti-joins a round against them)."""
        self.kernels: dict[Plan, Kernel] = {}
        """A round's plans compiled once for the loop: each keeps its joins' indexes of
        sources that do not change between rounds (``Kernel.kept``)."""
        self.widest = 0
        """The most rows one operator of the last ``derive`` held (``Kernel.widest``)."""
        self.slice_rows: dict[str, int] = {}
        """Per relation, the rows of its delta the last slice of ``bounded`` would read."""

    def bootstrap(self) -> tuple[dict[str, Batch], int]:
        """Every relation of the stratum, and the rounds it took (``placement.place`` has
        put the stratum here: its class has a loop here and the kernels run its plans)."""
        method = bootstrap_method(self.run)
        if method == "nonrecursive":
            for relation in self.run.relations:
                self.full[relation] = self.derive(relation, self.run.body_plans(relation))
            return {r: self.full[r] for r in self.run.relations}, 1
        if method == "mra":
            return self.mra()
        if method == "naive":
            done = naive.bootstrap_on(self.run, DriverNaive(self))
            self.capped = done.capped
            return {r: self.full[r] for r in self.run.relations}, done.rounds
        return self.seminaive()

    def seminaive(self) -> tuple[dict[str, Batch], int]:
        """``set`` and ``aggregate-seminaive`` strata: the one semi-naive loop
        (``strategies.seminaive.semi_naive``) over batches, with the growth of
        ``strategies.aggregate_seminaive``: a set relation gains new tuples, a min/max
        relation the groups whose value improves, a count/sum/mean relation the groups
        whose recomputed row changed; a changed group replaces its row."""
        run = self.run
        for relation in run.relations:
            self.full[relation] = self.empty(relation)
        steps = {r: partial(growth_for(run.entry(r)).step, run, r) for r in run.relations}
        rounds, self.capped = semi_naive(run, exit_rules(run), steps, self)
        return {r: self.full[r] for r in run.relations}, rounds

    # ``RoundBackend``: the semi-naive loop's driver side.

    def changed(self, relation: str, plans: list[Plan]) -> Batch:
        return self.new_rows(relation, plans)

    def advance(self, relation: str, new: Batch) -> int:
        before = self.full[relation]
        self.full[relation] = self.grown(relation, new)
        self.delta[relation] = new
        held = self.held.get(relation)
        if held is not None and held[0] is before:  # a set grows by its new rows
            held[1].add(new)
            self.held[relation] = (self.full[relation], held[1])
        return new.n

    def held_keys(self, relation: str, on: tuple[str, ...]) -> HeldKeys:
        """The keys of ``full[relation]``, kept up to date by ``advance`` (made afresh
        when ``full`` was replaced some other way)."""
        rows = self.full[relation]
        held = self.held.get(relation)
        if held is None or held[0] is not rows or held[1].on != on:
            keys = HeldKeys(on)
            keys.add(rows)
            held = self.held[relation] = (rows, keys)
        return held[1]

    def after_round(self, rounds: int) -> None:
        try:
            self.check_size()
        except Outgrown as error:  # Spark continues from here (``seminaive.resumed``)
            raise Outgrown(str(error), Reached(self.full, self.delta, rounds)) from None

    def mra(self) -> tuple[dict[str, Batch], int]:
        """An MRA relation as the sharded engines bootstrap it (``engines.mra_bootstrap``),
        with one shard in the driver (``DriverMra``)."""
        program = self.run.mra_program
        backend = DriverMra(self, program)
        rounds, self.capped, _ = bootstrap_on(
            program, backend, backend.options, self.run.max_iterations, self.run.round
        )
        reached = witnessed_rows(program, backend.loop.table)  # witnesses only if kept
        arity = len(program.types)
        rows = Batch(reached.n, {c: v for c, v in reached.cols.items() if int(c[1:]) < arity})
        self.full[program.relation] = rows
        if backend.witness:
            self.witnessed[program.relation] = reached
        self.check_size()
        return {program.relation: rows}, rounds

    def new_rows(self, relation: str, plans: Sequence[Plan]) -> Batch:
        """The derived rows that are new: tuples not held yet (set; count/sum/mean, whose
        rounds recompute every group: ``RecomputingGrowth``), or groups whose value
        improves on the held one (min/max, ``rounds.improves``)."""
        entry = self.run.entry(relation)
        if entry.aggregate is None:
            derived = self.bounded(relation, plans)
            return self.held_keys(relation, tuple(derived.cols)).lacking(derived)
        if entry.aggregate not in ("min", "max"):
            derived = self.derive(relation, plans)
            return anti_join(derived, self.full[relation], tuple(derived.cols))
        assert entry.value_pos is not None
        value = f"c{entry.value_pos}"
        derived = self.bounded(relation, plans)
        return improved(derived, self.full[relation], _keys(entry), value, entry.aggregate)

    def bounded(self, relation: str, plans: Sequence[Plan]) -> Batch:
        """``derive`` of a set or min/max relation, reading the round's delta in slices so
        that a kernel run holds about ``SLICE_CANDIDATES`` rows (the slices sized by the
        rows the last one held), the slices' rows combined by G again (``recombined``):
        joining a large delta with a relation's every row (``path(X, Z), path(Z, Y)`` on a
        900-node grid) made ~10^8 candidates in one run, past 23 GB. Plans that do not
        read exactly one delta each run whole."""
        deltas = [[r for r, v in scans(plan) if v == "delta"] for plan in plans]
        if not plans or any(len(read) != 1 for read in deltas):
            return self.derive(relation, plans)
        by_delta: dict[str, list[Plan]] = {}
        for plan, (delta,) in zip(plans, deltas, strict=True):
            by_delta.setdefault(delta, []).append(plan)
        parts: list[Batch] = []
        for delta, group in by_delta.items():
            for part in self._slices(relation, group, delta):
                parts.append(part)
                if len(parts) > 1 and sum(p.n for p in parts) > SLICE_CANDIDATES:
                    parts = [self.recombined(relation, parts)]
        return parts[0] if len(parts) == 1 else self.recombined(relation, parts)

    def _slices(self, relation: str, plans: list[Plan], delta: str) -> Iterator[Batch]:
        """``derive`` over consecutive slices of ``delta``'s rows (one, when it is small)."""
        rows, whole = self.slice_rows.get(delta, FIRST_SLICE), self.delta[delta]
        start = 0
        try:
            while True:
                stop = whole.n if whole.n - start <= rows else start + rows
                self.delta[delta] = whole if stop - start == whole.n else whole.rows(start, stop)
                yield self.derive(relation, plans)
                rows = max(1, (stop - start) * SLICE_CANDIDATES // max(self.widest, 1))
                start = stop
                if start >= whole.n:
                    break
        finally:
            self.delta[delta] = whole
        self.slice_rows[delta] = rows

    def recombined(self, relation: str, parts: list[Batch]) -> Batch:
        """G over rows that G gave already: a set's distinct union, each group's best."""
        entry = self.run.entry(relation)
        scan = Scan(relation, "delta", head_columns(len(entry.types)), entry.types)
        plan = combine_plan(entry, [scan])
        rows = self.kernel(plan).run({(relation, "delta"): concat(parts)})
        return relation_rows(entry, plan, rows)

    def grown(self, relation: str, new: Batch) -> Batch:
        """The relation with the round's new rows: improved groups replace their rows."""
        entry = self.run.entry(relation)
        held = self.full[relation]
        if entry.aggregate is not None:
            held = anti_join(held, new, _keys(entry))
        return concat([held, new])

    def derive(self, relation: str, plans: Sequence[Plan]) -> Batch:
        """G over head-row plans, in the relation's positional columns and types; an
        aggregate without a group over no bindings is no row (as ``StratumRun.combine``)."""
        entry = self.run.entry(relation)
        if not plans:
            return self.empty(relation)
        plan = combine_plan(entry, plans)
        kernel = self.kernel(plan)
        rows = relation_rows(entry, plan, kernel.run(self.sources(plan)))
        self.widest = kernel.widest
        return rows

    def kernel(self, plan: Plan) -> Kernel:
        """``plan`` compiled once for the loop (``kernels``)."""
        kernel = self.kernels.get(plan)
        if kernel is None:
            kernel = self.kernels[plan] = Kernel(plan)
        return kernel

    def sources(self, plan: Plan) -> dict[tuple[str, str], Batch]:
        found: dict[tuple[str, str], Batch] = {}
        for relation, version in relations_read(plan):
            table = self.delta if version == "delta" else self.full
            if relation not in table and version == "full":
                fetched = self.fetch(relation)
                assert fetched is not None, "placement.place sized every input"
                table[relation] = fetched
            found[(relation, version)] = table[relation]
        return found

    def empty(self, relation: str) -> Batch:
        return empty_rows(self.run.entry(relation).types)

    def check_size(self) -> None:
        held = sum(self.full[r].n for r in self.run.relations)
        if held > self.limit:
            raise Outgrown(f"it grew past {self.limit} rows")


class DriverMra:
    """``mra_bootstrap.MraBackend`` in the driver: numpy batches and one shard's loop
    (``ShardLoop.in_driver``) as a Spark task would run it; a stage is one run of the loop
    (to local quiescence or the clause's local bound), stopped by the row limit."""

    def __init__(self, stratum: LocalStratum, program: MraProgram) -> None:
        self.stratum = stratum
        self.program = program
        self.options = stratum.run.options.engine_options
        self.witness = stratum.run.options.witness and program.g in ("min", "max")

    def aux(self, body: RecursiveBody, distinct: bool) -> Batch:
        """All in the one shard (0)."""
        assert body.aux_plan is not None
        plan = replace(body.aux_plan, distinct=distinct)
        batch = Kernel(plan).run(self.stratum.sources(plan))
        out = Batch(batch.n, {f"c{i}": batch.cols[n] for i, (n, _) in enumerate(plan.schema)})
        out.cols[DESTINATION] = np.broadcast_to(np.int32(0), batch.n)  # no memory per row
        return out

    def seeds(self) -> Batch:
        return seed_candidates(self.program, self.stratum.sources)

    def start(self, aux: list[Batch], seeds: Batch, round_order: bool) -> None:
        options = round_ordered(self.options) if round_order else self.options
        self.round_order = in_round_order(options, 1)
        self.params = stage_params(
            self.program, options, witness=self.witness, shards=1, hybrid=True
        )
        messages = seed_messages(self.program, seeds, self.witness)
        limit = self.stratum.limit
        self.loop = ShardLoop.in_driver(self.params, aux, messages, row_limit=limit)
        self.started = time.monotonic()

    def stage(self, rule: StageRule) -> Stage:
        """One run of the loop; ``rule`` stops the stages between runs (``_stages``)."""
        loop = self.loop
        loop.iterations = loop.propagated = 0  # a stage's own guard and counts, as a task's
        loop.run()  # to quiescence, the clause's local bound, the row limit or the guard
        if len(loop.table) > self.stratum.limit:
            raise Outgrown(f"it grew past {self.stratum.limit} rows")
        table, clause = loop.table, self.program.spec.termination
        change = np.abs(table.delta[table.pending]).astype(np.float64)
        measure = None if clause is None else _measure(clause.func, change)
        beta = float(self.options.buffer.initial)  # what a hybrid stage on Spark reports
        detail = {
            "local_iterations": float(loop.iterations),
            "beta_min": beta,
            "beta_max": beta,
            "propagated": float(loop.propagated),
        }
        at = time.monotonic() - self.started
        return Stage(int(table.pending.sum()), measure, detail, loop.gain, loop.negative, at)

    def end(self, abandoned: bool) -> None:
        """Nothing to free: the loop's arrays go with it."""


class DriverNaive:
    """``naive.NaiveBackend`` over a driver stratum's batches."""

    def __init__(self, stratum: LocalStratum) -> None:
        self.stratum = stratum
        for relation in stratum.run.relations:
            if stratum.run.entry(relation).index_pos is None:
                stratum.full[relation] = stratum.empty(relation)

    def derive(
        self, relation: str, rules: list[ast.Rule] | None = None, iteration: int | None = None
    ) -> Batch:
        plans = self.stratum.run.body_plans(relation, rules, iteration)
        return self.stratum.derive(relation, plans)

    def replace(
        self, relation: str, new: Batch, index: int | None = None, compare: bool = True
    ) -> tuple[int, float]:
        stratum, entry = self.stratum, self.stratum.run.entry(relation)
        if entry.index_pos is not None:
            new.cols[f"c{entry.index_pos}"] = np.full(new.n, index, dtype=np.int64)
            new.valid.pop(f"c{entry.index_pos}", None)
        old = stratum.full.get(relation, stratum.empty(relation))
        stratum.full[relation] = new
        stratum.check_size()
        if not compare:
            return 0, 0.0
        clause = naive.clause_of(stratum.run, relation)
        return difference(entry, old, new, "sum" if clause is None else clause.func)


def difference(entry: RelationEntry, old: Batch, new: Batch, func: str) -> tuple[int, float]:
    """As ``naive._difference`` on Spark: the rows that differ between ``old`` and ``new``
    (iteration index ignored) and the termination clause's ``func`` over |Δ| per key (a
    set relation: the number of rows that differ)."""
    if entry.aggregate is None or entry.value_pos is None:
        columns = tuple(f"c{i}" for i in range(len(entry.types)) if i != entry.index_pos)
        changed = anti_join(old, new, columns).n + anti_join(new, old, columns).n
        return changed, float(changed)
    keys = [f"c{i}" for i in entry.key_positions]
    value = f"c{entry.value_pos}"
    merged = pd.merge(
        _frame(old, keys, value),
        _frame(new, keys, value),
        on=keys,
        how="outer",
        suffixes=("_o", "_n"),
    )
    o, n = merged[f"{value}_o"], merged[f"{value}_n"]
    differs = o.isna() | n.isna() | (o != n)
    change = (n.fillna(0).astype(float) - o.fillna(0).astype(float)).abs()
    return int(differs.sum()), _measure(func, change.to_numpy(dtype=float))


def _frame(batch: Batch, keys: list[str], value: str) -> pd.DataFrame:
    columns = {k: batch.cols[k] for k in keys}
    values = pd.Series(
        batch.cols[value], dtype=object if batch.cols[value].dtype == object else None
    )
    columns[value] = values.where(batch.mask(value), None) if value in batch.valid else values
    return pd.DataFrame(columns)


def _measure(func: str, change: np.ndarray) -> float:
    """``rounds.measure_column`` over numpy: the clause's aggregate of |Δ| (0 over none)."""
    if change.size == 0:
        return 0.0
    match func:
        case "sum":
            return float(change.sum())
        case "max":
            return float(change.max())
        case "min":
            return float(change.min())
        case "count":
            return float(np.count_nonzero(change))
    return float(change.mean())


FIRST_SLICE = 8_192
"""The delta rows a loop's first slice reads (``LocalStratum.bounded``), before the rows a
slice held are known (then each slice is sized by the last one's): a round of fewer runs
whole, as every round of a road grid's reachability (hundreds of rows) does; a fan-out of
up to ~120 rows per delta row keeps it within ``SLICE_CANDIDATES``."""


def _keys(entry: RelationEntry) -> tuple[str, ...]:
    return tuple(f"c{i}" for i in entry.key_positions)


def improved(derived: Batch, held: Batch, keys: tuple[str, ...], value: str, func: str) -> Batch:
    """The rows of ``derived`` (one per group) whose value is better under ``func`` (min or
    max) than the group's row in ``held``, or whose group ``held`` lacks; a null value is
    no candidate (as ``ImprovingGrowth``)."""
    derived = derived.take(np.flatnonzero(derived.mask(value)))
    better = np.ones(derived.n, dtype=bool)
    if held.n and derived.n:
        rows, old = JoinIndex.build(held, keys).probe(derived, keys)
        new, was = derived.cols[value][rows], held.cols[value][old]
        better[rows] = new < was if func == "min" else new > was
    return derived.take(np.flatnonzero(better))


def seed_candidates(
    program: MraProgram, sources: Callable[[Plan], Mapping[tuple[str, str], Batch]]
) -> Batch:
    """X⁰ and C's valid candidates over the kernels: columns ``k0..``, ``v``."""
    names = [*program.keys, "v"]
    parts = []
    for plan in [*program.init_plans, *program.constant_plans]:
        batch = Kernel(plan).run(sources(plan))
        parts.append(valid_candidates(batch, len(program.keys)))
    if not parts:
        types = [*program.key_types, program.value_type]
        parts = [
            Batch(0, {n: np.zeros(0, NUMPY_TYPES[t]) for n, t in zip(names, types, strict=True)})
        ]
    found = concat(parts)
    return Batch(found.n, {n: found.cols[n] for n in names}, {})


def seed_messages(program: MraProgram, seeds: Batch, witness: bool) -> pa.Table:
    """X⁰ and C's candidates (``seed_candidates``) as the shard loop's messages: ``k0..``,
    ``acc``, and with ``witness`` a null witness ``wit0..`` (no recursive atom gave them)."""
    columns = {**{k: seeds.cols[k] for k in program.keys}, "acc": seeds.cols["v"]}
    if witness:
        for j, type_ in enumerate(program.key_types):
            columns[f"wit{j}"] = pa.nulls(seeds.n, type=ARROW_TYPES[type_])
    return pa.table(columns)


def witnessed_rows(program: MraProgram, table: LocalTable) -> Batch:
    """A loop's reached keys as relation rows (``c0..``) followed, when the loop keeps
    witnesses, by their witness (``c<arity>..``, valid where a recursive atom gave the
    value)."""
    spec, keep = program.spec, np.flatnonzero(table.present)
    arity = len(program.types)
    rows = Batch(len(keep))
    for position, key in zip(spec.key_positions, table.columns, strict=True):
        rows.cols[f"c{position}"] = key[keep]
    rows.cols[f"c{spec.value_pos}"] = table.acc[keep]
    for j, wit in enumerate(table.wits):
        rows.cols[f"c{arity + j}"] = wit[keep]
        rows.valid[f"c{arity + j}"] = table.has_wit[keep]
    return rows


@dataclass(frozen=True)
class LocalRun:
    """A stratum bootstrapped in the driver."""

    rows: dict[str, Batch]
    rounds: int
    witnessed: dict[str, Batch]
    """``LocalStratum.witnessed``."""
    capped: bool = False
    """``LocalStratum.capped``."""


def run_locally(run: StratumRun, sources: Fetch, limit: int) -> LocalRun:
    """Bootstrap ``run``'s stratum, placed in the driver (``placement.place``): its
    relations' rows and rounds; ``Outgrown`` when it grows past ``limit`` rows. ``sources``
    gives the rows of a relation the stratum reads."""
    stratum = LocalStratum(run, sources, limit)
    rows, rounds = stratum.bootstrap()
    return LocalRun(rows, rounds, stratum.witnessed, stratum.capped)
