"""What an epoch hands the next besides the relations' rows: the engine states of MRA
relations with pending deltas (async consistency) and the rows, with witnesses, of
min/max MRA relations that keep them (``EvalOptions.witness``)."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame

from fixflow.checker.model import Stratum
from fixflow.operators.engines.base import MraState
from fixflow.operators.maintain.garbage import Garbage


class CarriedState:
    """Pending MRA deltas and witnessed rows, by relation; what either replaces goes to
    ``garbage``."""

    def __init__(self, garbage: Garbage) -> None:
        self.garbage = garbage
        self.pending: dict[str, MraState] = {}
        """MRA relations with pending deltas: their engine states (async consistency)."""
        self.witnessed: dict[str, DataFrame] = {}
        """min/max MRA relations with ``EvalOptions.witness``: their rows with witnesses
        ``w0..`` (the Maintainer's frames hold a projection of them)."""

    def carry(self, stratum: Stratum, left: dict[str, MraState]) -> None:
        """Record which of the stratum's MRA relations still have pending deltas."""
        for relation in stratum.relations:
            previous = self.pending.pop(relation, None)
            if previous is not None and previous is not left.get(relation):
                self.garbage.add([previous.rows()])
        self.pending.update(left)

    def witness(self, stratum: Stratum, witnessed: Mapping[str, DataFrame]) -> None:
        """Record the stratum's relations kept with witnesses (the others lose theirs)."""
        for relation in stratum.relations:
            previous = self.witnessed.pop(relation, None)
            if previous is not None and previous is not witnessed.get(relation):
                self.garbage.add([previous])
        self.witnessed.update(witnessed)

    def pending_of(self, stratum: Stratum) -> dict[str, MraState]:
        return {r: self.pending[r] for r in stratum.relations if r in self.pending}

    def witnessed_of(self, stratum: Stratum) -> dict[str, DataFrame]:
        return {r: self.witnessed[r] for r in stratum.relations if r in self.witnessed}

    def drop_all(self) -> None:
        """Forget every pending delta and witness: the whole program is re-evaluated."""
        self.garbage.add([state.rows() for state in self.pending.values()])
        self.pending = {}
        self.garbage.add(self.witnessed.values())
        self.witnessed = {}

    def live_frames(self) -> list[DataFrame]:
        """The frames this state reads: their blocks must outlive the epoch."""
        return [*self.witnessed.values(), *(s.rows() for s in self.pending.values())]
