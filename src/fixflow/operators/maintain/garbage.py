"""The frames an epoch replaced, freed at the start of the next one."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame

from fixflow.operators.materialize import live_rdds, release_frame


class Garbage:
    """Replaced rows and spent deltas, whose blocks are released one epoch late: the
    consumer evaluates the reported changes, which read them."""

    def __init__(self) -> None:
        self._frames: list[DataFrame] = []

    def add(self, frames: Iterable[DataFrame]) -> None:
        self._frames += frames

    def collect(self, live: list[DataFrame]) -> None:
        """Release every frame added so far, except the blocks ``live`` frames read."""
        live_blocks = live_rdds(live)
        for frame in self._frames:
            release_frame(frame, live_blocks)
        self._frames = []
