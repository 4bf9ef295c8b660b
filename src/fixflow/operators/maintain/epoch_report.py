"""What an epoch reports: per stratum, which strategy ran and what it cost
(``StratumEpoch``); per output relation, its change (``Epoch.changes``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fixflow.checker.model import Stratum
from fixflow.operators.evaluate import StratumStats
from fixflow.operators.maintain.publish import RelationChange


@dataclass
class StratumEpoch:
    """What one stratum did in one epoch."""

    stratum: int
    relations: tuple[str, ...]
    strategy: str
    """``unchanged``, ``bootstrap`` or the name of an incremental update method."""
    rounds: int = 0
    seconds: float = 0.0
    note: str = ""
    jobs: int = 0
    """Spark jobs of the stratum's materializations in this epoch."""
    capped: bool = False
    """A round cap stopped the stratum before it converged this epoch."""
    cap: int | None = None
    """The stratum's round cap when it stopped there (``core.round_cap``)."""


@dataclass
class Epoch:
    changes: dict[str, RelationChange] = field(default_factory=dict)
    """Per output relation that changed."""
    strata: list[StratumEpoch] = field(default_factory=list)
    seconds: float = 0.0
    provisional: bool = False
    """Async consistency: some MRA relation still has pending deltas (its rows are not yet
    the fixpoint of the current facts); later epochs carry them on."""
    partial: list[StratumEpoch] = field(default_factory=list)
    """The strata whose rows are partial after this epoch (``Maintainer.partial``)."""

    @property
    def rounds(self) -> int:
        return sum(s.rounds for s in self.strata)


def bootstrap_epoch(stats: StratumStats) -> StratumEpoch:
    """A stratum's epoch that re-evaluated it (``evaluate.Bootstrap``'s statistics)."""
    note = "hit the iteration cap" if stats.capped else ("in the driver" if stats.local else "")
    return StratumEpoch(
        stats.stratum,
        stats.relations,
        "bootstrap",
        stats.rounds,
        stats.seconds,
        note,
        stats.jobs,
        stats.capped,
        stats.cap,
    )


def unchanged_epoch(stratum: Stratum) -> StratumEpoch:
    """A stratum's epoch that left it alone."""
    return StratumEpoch(stratum.index, stratum.relations, "unchanged")
