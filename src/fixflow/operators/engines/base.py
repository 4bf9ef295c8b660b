"""The MRA engine seam: what every engine (``sync``, ``async``) offers the strategies.

An MRA relation is compiled once into an ``MraProgram`` (``engines.program``): key columns
``k0..``, the value ``v``, G, and per recursive body a *round plan* in the plan IR that reads
the frontier (``Scan(relation, "delta")``, the relation's positional columns) joined with
the body's pre-joined auxiliary side (``Scan(aux_name, "aux")``). Engines differ only in how
they run those plans: ``sync`` runs one Spark job per round over the whole MonoTable;
``async`` runs local loops inside Spark tasks over shards of it, with vectorized kernels
compiled from the same plans.

Strategies (bootstrap and update, ``operators/strategies``) talk to an engine only through
``MraEngine.bootstrap`` / ``MraEngine.resume`` and read its state only through
``MraState``'s accessors: nothing outside an engine names its physical columns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pyspark.sql import DataFrame, SparkSession

from fixflow.operators.materialize import Materializer
from fixflow.operators.spark_backend import Source

if TYPE_CHECKING:
    from fixflow.operators.engines.program import MraProgram


@dataclass(frozen=True)
class BufferOptions:
    """PowerLog's adaptive flush buffers (async engine): initial β, time budget τ, α, r."""

    initial: int = 1024
    interval_ms: int = 100
    alpha: float = 0.8
    r: float = 2.0


@dataclass(frozen=True)
class EngineOptions:
    """Every knob of the MRA engines (``[engine]`` and ``[buffer]`` in the config)."""

    mode: str = "sync"
    """``sync``, ``async`` or ``hybrid`` (async where the round plans compile to kernels)."""
    shards: int = 0
    """Shards of the MonoTable for ``async``; 0 = one per Spark core."""
    priority: bool = True
    schedule_portion: float = 0.5
    check_interval_ms: int = 1000
    buffer: BufferOptions = field(default_factory=BufferOptions)


@dataclass(frozen=True)
class RoundInfo:
    """Progress after one round (sync) or one stage (async) of an MRA relation."""

    round: int
    pending: int
    measure: float | None
    detail: Mapping[str, float] = field(default_factory=dict)
    """Engine-specific figures of the round: async reports ``local_iterations``,
    ``messages``, ``beta_min``/``beta_max``, ``cut`` and ``propagated`` (frontier deltas
    its shards' local iterations propagated) here."""


@dataclass(frozen=True)
class EngineEnv:
    """The Spark plumbing an engine runs in."""

    spark: SparkSession
    source: Source
    """Reads the stratum's input relations (positional columns) by (name, version)."""
    materializer: Materializer
    """Every materialization goes through it, so jobs are counted."""
    partitions: int
    witness: bool = False
    """min/max: keep the predecessor's key that gave each value (retraction needs it)."""
    options: EngineOptions = field(default_factory=EngineOptions)


class MraState(Protocol):
    """An engine's MonoTable after a run: read only through these accessors."""

    @property
    def has_pending(self) -> bool:
        """Deltas are still pending (capped, or a round budget ran out)."""
        ...

    def rows(self) -> DataFrame:
        """The relation's rows, positional columns ``c0..`` (an index column holds the last
        round), keys without a value left out."""
        ...

    def pending_rows(self) -> DataFrame:
        """Keys with a pending delta: positional key columns, the value column (acc so far)
        and ``pending`` (the delta not yet propagated)."""
        ...

    def propagated_rows(self) -> DataFrame:
        """For sum: acc − pending as positional rows (what has been propagated so far)."""
        ...

    def witnessed_rows(self) -> DataFrame:
        """``rows()`` plus the min/max witness ``w0..``: the key of the recursive atom whose
        value gave the key its value (null when X⁰ or C gave it, or no witness is kept)."""
        ...

    def release(self) -> None:
        """Free the Spark blocks holding this state."""
        ...

    @property
    def frame(self) -> DataFrame:
        """The engine's physical table, for inspection (tests, debugging) only: its columns
        are the engine's own."""
        ...


@dataclass
class MraOutcome:
    rows: DataFrame
    """The relation in declared positional columns (index column set to the round)."""
    rounds: int
    """Rounds (sync) or stages (async): Spark jobs of the propagation."""
    capped: bool
    state: MraState


OnRound = Callable[[RoundInfo], None]


class MraEngine(Protocol):
    """Runs one compiled MRA relation to its fixpoint, termination clause or cap."""

    name: str

    def bootstrap(
        self, program: MraProgram, env: EngineEnv, max_rounds: int, on_round: OnRound
    ) -> MraOutcome:
        """From empty: X⁰ and C seed the table, then rounds until done."""
        ...

    def resume(
        self,
        program: MraProgram,
        env: EngineEnv,
        rows: DataFrame,
        seed: DataFrame,
        max_rounds: int,
        on_round: OnRound,
        carried: MraState | None = None,
    ) -> MraOutcome:
        """Continue from ``rows`` (positional relation rows, no index; with the witness
        ``w0..`` when the caller keeps it) after the inputs changed. ``seed``: candidates
        ``k0.., v`` (min/max: new candidate values, with ``w0..`` when known; sum: signed
        corrections). ``carried`` replaces ``rows`` when an earlier bounded resume
        left deltas pending: they stay pending. ``max_rounds`` counts the seed's merge."""
        ...
