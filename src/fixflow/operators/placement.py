"""Where each stratum runs, decided once, as data.

``place(run, sizes)`` answers, before a stratum runs, the question every other module used
to answer for itself by trying and failing: does this stratum run in the driver (numpy
kernels, no Spark job), in one Spark task (the driver's loop of a ``set``,
``aggregate-seminaive`` or ``naive`` stratum, one job: ``task_stratum``) or on Spark, on
which MRA engine, over how many shards — and why.
It is the only code that reads ``EvalOptions.local_rows`` and, for that choice, the
engine's ``mode`` and ``shards``. A ``Placement`` is logged once per stratum, kept in the
stratum's statistics, and printed by ``fixflow eval --explain``.

The rules are data (``DRIVER_RULES``): each returns why the driver cannot run the stratum,
or None. The first that refuses places the stratum on Spark; when none refuses and the
stratum's inputs fit in ``local_rows`` rows, it runs in the driver. ``placement_table()``
renders the rules for docs/architecture.md (a test keeps the two equal).

The one decision left to the run is ``Outgrown``: a stratum whose rows grow past
``local_rows`` in the driver (or ``task_rows`` in a task) goes to Spark. A semi-naive loop
(``set``, ``aggregate-seminaive``) continues there from the round it reached (its rows and
last delta become Spark frames: the loop is one, over two backends); an ``mra`` or naive
stratum restarts from its inputs (the engine's MonoTable on Spark cannot yet be seeded
from the driver's shard loop).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from fixflow.checker.model import Report
from fixflow.operators.compiler import combine_plan
from fixflow.operators.core import EvalOptions, StratumView
from fixflow.operators.engines import kernels
from fixflow.operators.engines.async_support import shard_keys
from fixflow.operators.engines.async_support import unsupported as stage_unsupported
from fixflow.operators.engines.batches import Batch
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.epoch import UpdateContext
from fixflow.operators.memory_model import resolved_local_rows
from fixflow.operators.plan import Plan, relations_read
from fixflow.operators.strategies import seminaive
from fixflow.operators.thresholds import LOCAL_ROWS

log = logging.getLogger(__name__)

Sizes = Callable[[str], int | None]
"""A relation's rows when the driver holds them (or can collect them) within
``local_rows``; None when it cannot."""


class Outgrown(Exception):
    """A driver stratum grew past ``local_rows``: it continues on Spark (the one change of
    placement during a run). ``reached``: where a semi-naive loop was, so Spark continues
    from there (None: the stratum restarts on Spark from its inputs)."""

    def __init__(self, reason: str, reached: Reached | None = None) -> None:
        super().__init__(reason)
        self.reached = reached


@dataclass(frozen=True)
class Reached:
    """A semi-naive loop in the driver after ``rounds`` rounds: every relation's rows and
    the delta of the last round."""

    full: Mapping[str, Batch]
    delta: Mapping[str, Batch]
    rounds: int


@dataclass(frozen=True)
class Placement:
    """Where a stratum runs: ``where`` is ``driver``, ``task`` (one Spark task runs the
    driver's loop) or ``spark``; ``engine`` the MRA engine
    of an ``mra`` stratum (None for other classes); ``shards`` the tasks an async or hybrid
    stage runs on (0: one per Spark core); ``why`` one line."""

    where: str
    engine: str | None
    shards: int
    why: str

    @property
    def in_driver(self) -> bool:
        return self.where == "driver"

    @property
    def kind(self) -> tuple[str, str | None, int]:
        """The placement without its reason."""
        return (self.where, self.engine, self.shards)

    def describe(self) -> str:
        """``driver, hybrid engine, 1 shard — inputs 3 rows <= local_rows 100000``."""
        parts = [self.where]
        if self.engine is not None:
            parts.append(f"{self.engine} engine")
            if self.engine != "sync":
                parts.append(_shards(self.shards))
        return f"{', '.join(parts)} — {self.why}"


def _shards(n: int) -> str:
    if n == 0:
        return "a shard per Spark core"
    return "1 shard" if n == 1 else f"{n} shards"


# ---------------------------------------------------------------- the rules


def _local_rows_off(run: StratumView) -> str | None:
    if run.options.local_rows <= 0:
        return "local_rows is 0: every stratum runs on Spark"
    return None


def _index_refusal(run: StratumView) -> str | None:
    """The naive loops run an iteration-indexed relation in the driver; the MRA shard loop
    and the semi-naive loop do not."""
    if bootstrap_method(run) == "naive" or not run.stratum.recursive:
        return None
    if any(e.index_pos is not None for e in run.entries()):
        return "an iteration-indexed `mra` or semi-naive relation runs on Spark"
    return None


def _engine_refusal(run: StratumView) -> str | None:
    """An ``mra`` stratum runs in the driver on the hybrid engine's shard loop, with one
    shard; the sync engine and several shards are Spark's."""
    if bootstrap_method(run) != "mra":
        return None
    options = run.options.engine_options
    if options.mode == "sync":
        return "the sync engine runs an `mra` stratum on Spark, a job a round"
    if options.shards > 1:
        return f"{options.shards} shards were asked for"
    return stage_unsupported(run.mra_program)


def _kernel_refusal(run: StratumView) -> str | None:
    """A plan the numpy backend cannot run (Soufflé's functors, string operators)."""
    return next((r for r in map(kernels.unsupported, driver_plans(run)) if r), None)


DRIVER_RULES: tuple[tuple[str, str, Callable[[StratumView], str | None]], ...] = (
    ("local_rows = 0", "Spark", _local_rows_off),
    ("iteration-indexed `mra` or semi-naive relation", "Spark", _index_refusal),
    ("`mra` on the sync engine, > 1 shard, or a stage that cannot shard", "Spark", _engine_refusal),
    ("a plan the numpy kernels cannot run", "Spark", _kernel_refusal),
)
"""(condition, where, rule): why the driver cannot run a stratum, tried in order."""


def place(run: StratumView, sizes: Sizes) -> Placement:
    """Where ``run``'s stratum runs, and why (see the module's docstring)."""
    for _, _, rule in DRIVER_RULES:
        reason = rule(run)
        if reason is not None:
            return off_driver(run, reason)
    limit = run.options.local_rows
    held = 0
    for relation in inputs_of(run):
        rows = sizes(relation)
        if rows is None:
            return off_driver(run, f"input `{relation}` has more than local_rows {limit} rows")
        held += rows
    if held > limit:  # the memory model counts every input row the stratum holds
        return off_driver(run, f"inputs {held} rows > local_rows {limit}")
    engine = "hybrid" if bootstrap_method(run) == "mra" else None
    return Placement("driver", engine, 1, f"inputs {held} rows <= local_rows {limit}")


TASK_METHODS = ("set", "aggregate-seminaive", "naive")
"""The bootstraps whose loop ``driver.stratum.LocalStratum`` runs in one Spark task as in the driver
(an ``mra`` stratum off the driver runs on the MRA engines' sharded tasks instead)."""


def off_driver(run: StratumView, why: str) -> Placement:
    """``run`` where the driver refused it: its loop in one Spark task (``task_stratum``)
    when it has one the kernels run, else on Spark."""
    if _task_refusal(run) is None:
        return Placement("task", None, 1, f"{why}; its loop runs in one Spark task")
    return on_spark(run, why)


def _task_refusal(run: StratumView) -> str | None:
    if bootstrap_method(run) not in TASK_METHODS:
        return "not a semi-naive or naive loop"
    if run.options.task_rows <= 0:
        return "task_rows is 0"
    return _index_refusal(run) or _kernel_refusal(run)


def on_spark(run: StratumView, why: str) -> Placement:
    """``run`` on Spark: an ``mra`` stratum on the configured engine (async and hybrid run
    a relation whose stages cannot be sharded on sync)."""
    if bootstrap_method(run) != "mra":
        return Placement("spark", None, 1, why)
    options = run.options.engine_options
    if options.mode != "sync":
        reason = stage_unsupported(run.mra_program)
        if reason is not None:
            return Placement("spark", "sync", 1, f"{why}; on sync: {reason}")
    return Placement("spark", options.mode, options.shards, why)


def outgrown(run: StratumView, where: str, reason: str, rounds: int | None) -> Placement:
    """The placement of a stratum that outgrew the driver's ``local_rows`` or the task's
    ``task_rows`` (``where``): on Spark, continued after ``rounds`` or (None) restarted."""
    if rounds is None:
        return on_spark(run, f"outgrew {where}: {reason}; restarted on Spark")
    return on_spark(run, f"outgrew {where}: {reason}; continued on Spark after {rounds} rounds")


# ---------------------------------------------------------------- an epoch's retraction


def place_retraction(ctx: UpdateContext, program: MraProgram) -> Placement:
    """Where an ``mra-retract`` update runs: in the driver (``driver.retraction``) when the
    Maintainer keeps driver copies and the stage runs there as one shard, else on Spark.
    The relation's and its inputs' sizes are checked as the update reads them
    (``Outgrown``)."""
    options = ctx.options.engine_options
    refusals = (
        (ctx.copies is None, "local_rows is 0: no driver copies"),
        (options.mode == "sync", "the sync engine runs on Spark"),
        (options.shards > 1, f"{options.shards} shards were asked for"),
        (program.relation in ctx.carried, "deltas are pending from an earlier epoch"),
    )
    reason = next((why for refused, why in refusals if refused), None)
    reason = reason or stage_unsupported(program) or _witness_refusal(program)
    if reason is not None:
        return Placement("spark", options.mode, options.shards, reason)
    limit = 0 if ctx.copies is None else ctx.copies.limit
    return Placement("driver", "hybrid", 1, f"driver copies of at most {limit} rows")


def _witness_refusal(program: MraProgram) -> str | None:
    if shard_keys(program) != program.keys:
        return "a witness is not the key an auxiliary row joins on"
    plans = [*program.init_plans, *program.constant_plans]
    plans += [b.aux_plan for b in program.bodies if b.aux_plan is not None]
    for plan in plans:
        other = sorted(f"{r} ({v})" for r, v in relations_read(plan) if v != "full")
        if other:
            return f"a plan reads {', '.join(other)}"
        reason = kernels.unsupported(plan)
        if reason is not None:
            return reason
    return None


# ---------------------------------------------------------------- what a stratum is


def bootstrap_method(run: StratumView) -> str:
    """The bootstrap ``run`` follows, on either backend: its class, except that an ``mra``
    stratum over several relations is ``aggregate-seminaive`` (min/max) or ``naive``, a
    ``set`` stratum with aggregates is ``aggregate-seminaive``, and an iteration-indexed
    ``aggregate-seminaive`` one is ``naive``."""
    strategy, entries = run.strategy, run.entries()
    if strategy == "nonrecursive":
        return "nonrecursive"
    if strategy == "mra" and run.mra_spec() is not None:
        return "mra"
    if strategy in ("set", "mra") and all(e.aggregate is None for e in entries):
        return "set"
    improving = all(e.aggregate in (None, "min", "max") for e in entries)
    if strategy == "set" or (strategy == "mra" and improving):
        return "aggregate-seminaive"
    if strategy == "aggregate-seminaive" and all(e.index_pos is None for e in entries):
        return "aggregate-seminaive"
    return "naive"


def driver_plans(run: StratumView) -> Iterator[Plan]:
    """Every plan the driver would run for ``run``'s stratum."""
    method = bootstrap_method(run)
    if method == "mra":
        program = run.mra_program
        yield from (*program.init_plans, *program.constant_plans)
        yield from (b.aux_plan for b in program.bodies if b.aux_plan is not None)
        return
    for relation in run.relations:
        entry = run.entry(relation)
        if method == "nonrecursive":
            plans: Sequence[Plan] = run.body_plans(relation)
            if plans:
                yield combine_plan(entry, plans)
            continue
        exits = seminaive.exit_rules(run)[relation]
        for plans in (exits, seminaive.delta_rules(run, relation)):
            if plans:
                yield combine_plan(entry, plans)


def inputs_of(run: StratumView) -> list[str]:
    """The relations outside the stratum that its plans read."""
    members = set(run.relations)
    read = {r for plan in driver_plans(run) for r, _ in relations_read(plan)}
    return sorted(read - members)


# ---------------------------------------------------------------- the table


def placement_table() -> str:
    """``DRIVER_RULES`` as a Markdown table (docs/architecture.md, checked by a test)."""
    lines = ["| tried in order: the stratum... | runs on |", "| --- | --- |"]
    lines += [f"| {condition} | {where} |" for condition, where, _ in DRIVER_RULES]
    lines.append("| reads inputs of more than `local_rows` rows together | Spark |")
    lines.append("| otherwise | driver (an `mra` stratum: the hybrid shard loop, 1 shard) |")
    lines.append(
        "| on Spark by the above, a `set`, `aggregate-seminaive` or `naive` loop the kernels "
        "run, `task_rows` > 0 | one Spark task (`task_stratum`): the driver's loop, one job |"
    )
    lines.append(
        "| grows past `local_rows` (driver) or `task_rows` (task) while it runs (`Outgrown`) "
        "| Spark: a semi-naive loop continues from its rounds, an `mra` or naive loop "
        "restarts |"
    )
    return "\n".join(lines)


def log_placement(run: StratumView, placement: Placement) -> None:
    log.info(
        "stratum %d (%s, %s): %s",
        run.stratum.index,
        ", ".join(run.relations),
        run.strategy,
        placement.describe(),
    )


# ---------------------------------------------------------------- settings per placement


@dataclass(frozen=True)
class Setting:
    """Options that put strata on one kind of placement: the driver, Spark with the sync
    engine, or Spark with sharded stages (hybrid) over ``shards`` tasks."""

    name: str
    local_rows: int
    mode: str
    shards: int

    def options(self, base: EvalOptions) -> EvalOptions:
        engine = replace(base.engine_options, mode=self.mode, shards=self.shards)
        return replace(base, local_rows=self.local_rows, engine_options=engine)


SETTINGS = (
    Setting("spark-sync", 0, "sync", 0),
    Setting("spark-sharded-1", 0, "hybrid", 1),
    Setting("spark-sharded-2", 0, "hybrid", 2),
    Setting("driver", resolved_local_rows(LOCAL_ROWS), "hybrid", 1),
)
"""Every kind of placement ``place`` returns, and options that choose it (the goldens run
on each a program admits: ``admitted_settings``)."""


def placements(report: Report, options: EvalOptions) -> list[Placement]:
    """Each stratum's placement under ``options`` when every input is small (what a test
    over small facts gets)."""
    views = [StratumView(report, stratum, options) for stratum in report.strata]
    return [place(view, lambda _: 0) for view in views]


def admitted_settings(report: Report, base: EvalOptions) -> list[Setting]:
    """The settings that place ``report``'s strata differently from every earlier one: the
    placements a program admits (a program without an ``mra`` stratum runs the same on
    the sync and the sharded settings)."""
    seen: set[tuple[tuple[str, str | None, int], ...]] = set()
    admitted = []
    for setting in SETTINGS:
        found = placements(report, setting.options(base))
        kinds = tuple(p.kind for p in found)
        if kinds not in seen:
            seen.add(kinds)
            admitted.append(setting)
    return admitted
