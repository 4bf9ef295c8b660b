"""The MRA bootstrap of the sharded engines, written once over its two backends.

An ``mra`` relation from empty on the ``async``/``hybrid`` engine (``bootstrap_on``): each
recursive body's auxiliary side (``aux_sides``), X⁰ and C's seed candidates, then *stages*
(``run_stages``) until nothing is pending, the termination clause holds (consulted at most
every ``check_interval_ms``) or the cap; a sum whose deltas could be summed in another
order to another value (``order_dependence``) runs again in round order (``round_ordered``).
A backend (``MraBackend``) holds the rows and says what a stage is: on Spark
(``async_engine.SparkShards``) frames, auxiliary rows packed in blocks per shard, every
stage in one job whose tasks each keep a shard's loop and stop by the same ``StageRule``
(the driver replays their stages through it; the engine's resumes run the same job); in
the driver (``driver.stratum.DriverMra``) numpy batches, one shard's loop, a stage one run of it.

Not shared, for structural reasons: how a backend shards and starts (the driver has one
shard: no assignment, labels or blocks; only Spark runs an iteration-indexed start, as
``placement.place`` keeps indexed relations there) and how each reads its rows back (a
stage frame, the loop's table): the caller reads its backend.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from fixflow.checker import ast
from fixflow.operators.engines.async_support import UNBOUNDED, order_dependence
from fixflow.operators.engines.base import EngineOptions, OnRound, RoundInfo
from fixflow.operators.engines.program import MraProgram, RecursiveBody
from fixflow.operators.rounds import clause_holds

log = logging.getLogger(__name__)

R = TypeVar("R")
"""A backend's rows: a Spark frame, or a numpy batch."""


class OrderDependent(Exception):
    """A sum whose value may depend on the order deltas are propagated in."""

    def __init__(self, relation: str, reason: str) -> None:
        super().__init__(f"{relation}: {reason}")
        self.relation = relation
        self.reason = reason


@dataclass(frozen=True)
class Stage:
    """After a stage: pending deltas and messages, the clause's measure of them, the
    round's detail, the order-dependence watch so far (F′'s gain, negative deltas) and
    when it ended (seconds into the run, by the clock of whoever ran it)."""

    pending: int
    measure: float | None
    detail: Mapping[str, float]
    gain: float
    negative: int
    at: float


@dataclass(frozen=True)
class Stop:
    """The stages end here (``capped``: the cap stopped them short of convergence)."""

    capped: bool


@dataclass(frozen=True)
class StageRule:
    """What follows a stage: another, or the end (nothing pending, the termination clause
    consulted at most every ``check_interval_ms``, the cap), or ``OrderDependent``.

    A pure function of the stages it is shown, so the tasks of a barrier run
    (``engines.shard_run``), which decide among themselves when to stop, and the driver,
    which replays their stages to log them, decide alike."""

    relation: str
    g: str
    clause: ast.Termination | None
    check_interval_ms: float
    max_stages: int
    round_order: bool

    def after(self, count: int, stage: Stage, checked: float) -> tuple[Stop | None, float]:
        """After stage ``count``: whether to stop, and when the clause was last consulted
        (``checked``: until now; -``UNBOUNDED`` before the first time)."""
        reason = order_dependence(self.g, stage.gain, stage.negative)
        if reason is not None and not self.round_order:
            raise OrderDependent(self.relation, reason)
        if stage.pending == 0:
            return Stop(capped=False), checked
        if self.clause is not None and (stage.at - checked) * 1000.0 >= self.check_interval_ms:
            checked = stage.at
            if _holds(self.clause, stage.measure):
                return Stop(capped=False), checked
        if count >= self.max_stages:
            # The clause may not have been consulted this stage (check_interval_ms): a
            # stage that meets it converged, whatever the cap.
            return Stop(capped=not _holds(self.clause, stage.measure)), checked
        return None, checked


def stage_rule(
    program: MraProgram, options: EngineOptions, max_stages: int, round_order: bool
) -> StageRule:
    return StageRule(
        program.relation,
        program.g,
        program.spec.termination,
        options.check_interval_ms,
        max_stages,
        round_order,
    )


class Stages(Protocol):
    """A started run: its shards' loops, one stage at a time."""

    @property
    def round_order(self) -> bool: ...

    def stage(self, rule: StageRule) -> Stage:
        """The next stage (``rule``: where the stages will stop, for a backend that runs
        them all at once)."""
        ...

    def end(self, abandoned: bool) -> None:
        """Free what only the stages read (``abandoned``: the state too)."""
        ...


class MraBackend(Stages, Protocol[R]):
    """Where the rows live; after ``start``, the run's stages and their state."""

    def aux(self, body: RecursiveBody, distinct: bool) -> R:
        """The body's auxiliary side, positional columns ``c0..``."""
        ...

    def seeds(self) -> R:
        """X⁰ and C's candidates ``k0.., v``."""
        ...

    def start(self, aux: list[R], seeds: R, round_order: bool) -> None:
        """The shards' loops, assigned afresh (``round_order``: one shard, no priority)."""
        ...


def aux_sides(program: MraProgram, backend: MraBackend[R]) -> list[R]:
    """Distinct for sums, where a duplicate would count a contribution twice; min and max
    are idempotent and skip what removing duplicates costs (a shuffle on Spark)."""
    return [backend.aux(body, distinct=program.g == "sum") for body in program.bodies]


def bootstrap_on(
    program: MraProgram,
    backend: MraBackend[R],
    options: EngineOptions,
    max_stages: int,
    on_round: OnRound,
    round_order: bool = False,
) -> tuple[int, bool, str | None]:
    """The bootstrap, once for both backends (``round_order``: known to need it): the
    last run's stages, whether the cap stopped them, and why it ran again in round order
    (None: it did not); ``backend`` holds the last run's state."""
    aux, seeds = aux_sides(program, backend), backend.seeds()
    backend.start(aux, seeds, round_order)
    try:
        return (*run_stages(program, backend, options, max_stages, on_round), None)
    except OrderDependent as error:
        log.info("%s: again in round order: %s", program.relation, error.reason)
        backend.start(aux, seeds, round_order=True)
        return (*run_stages(program, backend, options, max_stages, on_round), error.reason)


def run_stages(
    program: MraProgram, stages: Stages, options: EngineOptions, max_stages: int, on_round: OnRound
) -> tuple[int, bool]:
    """(stages run, whether the cap stopped them); ``OrderDependent`` when a sum outside
    round order meets ``order_dependence``."""
    try:
        done = _stages(program, stages, options, max_stages, on_round)
    except BaseException:
        stages.end(abandoned=True)
        raise
    stages.end(abandoned=False)
    return done


def _stages(
    program: MraProgram, stages: Stages, options: EngineOptions, max_stages: int, on_round: OnRound
) -> tuple[int, bool]:
    rule = stage_rule(program, options, max_stages, stages.round_order)
    count, checked = 0, -UNBOUNDED
    while True:
        count += 1
        stage = stages.stage(rule)
        on_round(RoundInfo(count, stage.pending, stage.measure, stage.detail))
        stop, checked = rule.after(count, stage, checked)
        if stop is not None:
            return count, stop.capped


def _holds(clause: ast.Termination | None, measure: float | None) -> bool:
    return clause is not None and measure is not None and clause_holds(clause, measure)


def in_round_order(options: EngineOptions, shards: int) -> bool:
    """One shard without priority: every local iteration propagates every pending delta
    and merges what it derived afterwards, a synchronous round, so the series is summed in
    the order rounds sum it."""
    return shards == 1 and not options.priority


def round_ordered(options: EngineOptions) -> EngineOptions:
    return replace(options, shards=1, priority=False)
