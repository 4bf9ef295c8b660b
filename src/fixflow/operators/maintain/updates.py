"""The incremental update methods, cheapest first, and the choice among them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fixflow.operators.core import EvalOptions
from fixflow.operators.epoch import Outcome, UpdateContext
from fixflow.operators.strategies import aggregate_seminaive, dred, mra, nonrecursive, seminaive


@dataclass(frozen=True)
class UpdateMethod:
    """An incremental update method: its name (``update:<name>`` in reports), when it
    applies to a stratum's epoch, and how it runs."""

    name: str
    applies: Callable[[UpdateContext], bool]
    run: Callable[[UpdateContext], Outcome]
    resumes: bool = False
    """It can carry an MRA relation's pending deltas on (async consistency)."""


UPDATES: tuple[UpdateMethod, ...] = (
    UpdateMethod("delta-rules", nonrecursive.delta_rules_applies, nonrecursive.delta_rules),
    UpdateMethod(
        "affected-groups", nonrecursive.affected_groups_applies, nonrecursive.affected_groups
    ),
    UpdateMethod("seminaive", seminaive.update_applies, seminaive.update),
    UpdateMethod("continuation", aggregate_seminaive.update_applies, aggregate_seminaive.update),
    UpdateMethod("dred", dred.set_applies, dred.update),
    UpdateMethod("dred-groups", dred.groups_applies, dred.update),
    UpdateMethod("mra-retract", mra.retract_applies, mra.retract, resumes=True),
    UpdateMethod("mra-improve", mra.improve_applies, mra.improve, resumes=True),
    UpdateMethod("mra-correction", mra.correction_applies, mra.correction, resumes=True),
)
"""Every update method, cheapest first: the first that applies runs."""


def chosen(ctx: UpdateContext, options: EvalOptions) -> UpdateMethod | None:
    """The cheapest exact update method for this stratum and change, or None."""
    if any(r in options.strategy for r in ctx.relations):
        return None  # a forced strategy is honoured by re-evaluation
    if any(e.index_pos is not None for e in ctx.entries()) or ctx.negates_changed():
        return None  # no method updates an iteration index or under a changed negation
    for method in UPDATES:
        # Pending deltas go with a bootstrap (which converges) unless the method
        # carries them on.
        if (method.resumes or not ctx.carried) and method.applies(ctx):
            return method
    return None
