"""The elastic switch (PPDP'21): when an incremental update costs more than re-evaluating
its stratum. An update still running after ``switch_fraction`` × the last bootstrap of
its stratum is abandoned between rounds and the stratum bootstrapped (``deadline``); a
change predicted to cost that much goes to a bootstrap at once (``outgrown``), and an
abandoned update teaches the switch to predict so for changes as large (``learn``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from fixflow.checker.model import Analysis, Stratum

log = logging.getLogger(__name__)

LESSON_EPOCHS = 4
"""How many epochs that change a stratum an abandoned update's lesson lasts."""


@dataclass
class Lesson:
    """An update abandoned by the elastic switch: changes at least ``share`` of their input
    go straight to a bootstrap for the next ``epochs_left`` epochs of the stratum."""

    share: float
    epochs_left: int = LESSON_EPOCHS


class EdbChange(NamedTuple):
    """How much of an EDB input an epoch changed (``Inputs.changes_of``)."""

    relation: str
    facts: int
    """Facts inserted or deleted this epoch."""
    before: int
    """Facts before the epoch."""


class ElasticSwitch:
    """Per stratum, the budget of its updates (from its last bootstrap) and what the
    switch learned from updates it abandoned."""

    def __init__(self, analysis: Analysis, switch_fraction: float) -> None:
        self.analysis = analysis
        self.switch_fraction = switch_fraction
        self.bootstrap_seconds: dict[int, float] = {}
        """Per stratum, what its last bootstrap cost: the evaluation, storing and diffing."""
        self.lessons: dict[int, Lesson] = {}
        """Per stratum, what the elastic switch learned from an update it abandoned."""

    def measured(self, stratum: int, seconds: float) -> None:
        """A bootstrap of stratum ``stratum`` took ``seconds``: its updates' new budget."""
        self.bootstrap_seconds[stratum] = seconds

    def deadline(self, stratum: Stratum, started: float) -> float:
        """When an update of ``stratum`` started at ``started`` is abandoned (never before
        the stratum's first bootstrap was measured)."""
        budget = self.switch_fraction * self.bootstrap_seconds.get(stratum.index, float("inf"))
        return started + budget

    def outgrown(self, stratum: Stratum, changes: Sequence[EdbChange]) -> str:
        """Why the elastic switch predicts that an update costs more than a bootstrap, or
        "". An input fact changed this epoch costs an update at least what a bootstrap
        pays per fact, so a change larger than ``switch_fraction`` x the inputs' facts
        before the epoch (a first batch into an empty EDB, a bulk load) goes to a bootstrap
        at once rather than after a first, wasted round. So does a change no smaller (as a
        share of its input) than one whose update this stratum abandoned lately: that
        update paid a whole budget before its bootstrap, which the prediction saves.
        (Not asked for a stratum of one-to-one copies, whose update maps the change and so
        costs less than a bootstrap of any size: ``nonrecursive.copies_only``.)"""
        lesson = self.lessons.get(stratum.index)
        if lesson is not None:
            lesson.epochs_left -= 1
            if lesson.epochs_left < 0:
                del self.lessons[stratum.index]  # forgotten: the next update is tried again
                lesson = None
        for rel, size, before in changes:
            name = self.analysis.input_relation(rel)
            if size > self.switch_fraction * max(before, 1):
                return f"the change of {name} ({size} facts) outgrows its {before} facts before"
            if lesson is not None and size / max(before, 1) >= lesson.share:
                return (
                    f"the change of {name} ({size} of {before} facts) is no smaller than "
                    f"one whose update was abandoned ({lesson.share:.2%} of its input)"
                )
        return ""

    def learn(self, stratum: Stratum, changes: Sequence[EdbChange]) -> None:
        """An update of ``changes`` ran past its budget: predict the same of changes at
        least as large (relative to their inputs) for the next ``LESSON_EPOCHS`` epochs
        that change the stratum. Forgetting matters: one slow update (a cold JVM, a busy
        machine) must not send every later change of that size to a bootstrap."""
        shares = [size / max(before, 1) for _, size, before in changes]
        if not shares:
            return  # only lower strata changed: no input share to compare with
        share = max(shares)
        known = self.lessons.get(stratum.index)
        self.lessons[stratum.index] = Lesson(min(share, known.share) if known else share)
        log.info(
            "stratum %d: the elastic switch bootstraps changes of %.2f%% of an input or more "
            "for the next %d epochs",
            stratum.index,
            100 * self.lessons[stratum.index].share,
            LESSON_EPOCHS,
        )
