"""Progress lines for long evaluations, shared by `eval`, `run` and `demo`.

Short work stays quiet: a stratum prints once it has run `PROGRESS_AFTER_SECONDS`, then at
most one line every `PROGRESS_EVERY_SECONDS`, on stderr (stdout keeps the results).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fixflow.operators.core import Progress

PROGRESS_AFTER_SECONDS = 5.0
PROGRESS_EVERY_SECONDS = 5.0


class RoundPrinter:
    """A `Progress` callback: a line per round once a stratum runs long, throttled."""

    def __init__(self, label: str = "") -> None:
        self.label = label
        self.stratum_started: dict[int, float] = {}
        self.last_print = 0.0
        self.last: dict[int, Progress] = {}
        """The last round of every stratum (its engine figures go into the summary)."""

    def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        if self._starts_again(progress):
            # A stream evaluates the same strata batch after batch: time each evaluation.
            self.stratum_started[progress.stratum] = now
        self.last[progress.stratum] = progress
        started = self.stratum_started[progress.stratum]
        if now - started < PROGRESS_AFTER_SECONDS or now - self.last_print < PROGRESS_EVERY_SECONDS:
            return
        self.last_print = now
        print(f"  {self.label}{describe_round(progress)}", file=sys.stderr, flush=True)

    def _starts_again(self, progress: Progress) -> bool:
        previous = self.last.get(progress.stratum)
        return (
            previous is None
            or progress.round <= previous.round
            or progress.strategy != previous.strategy
        )


def describe_round(progress: Progress) -> str:
    measure = progress.measure
    return (
        f"stratum {progress.stratum} ({', '.join(progress.relations)}, "
        f"{progress.strategy}): round {progress.round}, {progress.pending} pending"
        + ("" if measure is None else f", measure {measure:.3g}")
        + engine_figures(progress.detail)
    )


def engine_figures(detail: Mapping[str, float]) -> str:
    """The async engine's figures of a stage, for progress lines ("" for sync rounds)."""
    if not detail:
        return ""
    return (
        f", {int(detail.get('local_iterations', 0))} local iterations, "
        f"{int(detail.get('messages', 0))} messages, "
        f"beta {detail.get('beta_min', 0):.0f}-{detail.get('beta_max', 0):.0f}, "
        f"cut {int(detail.get('cut', 0))}"
    )
