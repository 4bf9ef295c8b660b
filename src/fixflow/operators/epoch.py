"""One epoch's changes, and the context an incremental update runs in.

An epoch takes a micro-batch's net changes of the EDB (``Change``: added and removed rows)
and brings every stratum up to date. An update method (one per evaluation class, in
``fixflow.operators.strategies``) gets an ``UpdateContext``: a ``StratumRun`` whose frames
are the current rows (the stratum's inputs already new, its own relations still old), plus
the changes of the stratum's inputs, readable by rule bodies under derived names:

- ``R`` the current (new) rows, ``R@old`` the rows before the epoch,
  ``R@add`` / ``R@del`` the epoch's added / removed rows.

It returns an ``Outcome`` (the stratum relations' new rows and their changes) or raises
``Abandon``: between rounds once the elastic switch's deadline has passed, or when it finds
its method does not apply after all; the Maintainer then bootstraps the stratum.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fixflow.checker import ast
from fixflow.operators.change import Change
from fixflow.operators.core import StratumRun, atoms_over, compacted
from fixflow.operators.engines.base import MraState, RoundInfo
from fixflow.operators.materialize import Materializer
from fixflow.operators.plan import Plan
from fixflow.operators.spark_backend import join_on, positional, set_minus, spark_type

if TYPE_CHECKING:
    from fixflow.operators.driver.copies import DriverCopies


class Abandon(Exception):
    """The update gives up: the stratum is bootstrapped instead. ``switched``: because it
    ran past the elastic switch's budget (not because its method did not apply)."""

    def __init__(self, reason: str, switched: bool = False) -> None:
        super().__init__(reason)
        self.switched = switched


SIDE = "#side"


def stored_delta(
    materializer: Materializer, added: DataFrame, removed: DataFrame
) -> Change[DataFrame]:
    """A ``Change`` of ``added`` and ``removed`` rows, materialized and counted in ONE job
    (an epoch has several deltas; a job costs more than these rows): both sides are tagged
    and stored together, each is a projection of that store."""
    tagged = added.withColumn(SIDE, F.lit(True)).unionByName(
        removed.select(*added.columns).withColumn(SIDE, F.lit(False))
    )
    side = F.col(SIDE)
    stored = materializer.store(
        compacted(tagged),
        [
            F.count(F.when(side, 1)).alias("added"),
            F.count(F.when(~side, 1)).alias("removed"),
        ],
    )
    frame = stored.frame
    return Change(
        frame.where(side).drop(SIDE),
        frame.where(~side).drop(SIDE),
        counts=(int(stored.metric("added")), int(stored.metric("removed"))),
        stored=True,
    )


def changes_between(
    materializer: Materializer, old: DataFrame, new: DataFrame
) -> Change[DataFrame]:
    """Rows only in ``new`` (added) and only in ``old`` (removed), materialized: two
    relations' rows, so neither side needs EXCEPT's distinct."""
    return stored_delta(materializer, set_minus(new, old), set_minus(old, new))


@dataclass
class Outcome:
    frames: dict[str, DataFrame]
    """New rows of every stratum relation."""
    deltas: dict[str, Change[DataFrame]]
    rounds: int = 1
    note: str = ""
    carried: dict[str, MraState] = field(default_factory=dict)
    """MRA states left with pending deltas because the round budget ran out."""
    witnessed: dict[str, DataFrame] = field(default_factory=dict)
    """min/max MRA relations kept with their witnesses: rows plus ``w0..``."""
    capped: bool = False
    """The round cap stopped the update before it converged: the rows are partial."""


class UpdateContext(StratumRun):
    """A ``StratumRun`` for an incremental update of one stratum in one epoch."""

    def __init__(
        self,
        run: StratumRun,
        old: Mapping[str, DataFrame],
        deltas: Mapping[str, Change[DataFrame]],
        *,
        deadline: float,
        carried: Mapping[str, MraState] | None = None,
        round_budget: int | None = None,
        witnessed: Mapping[str, DataFrame] | None = None,
        copies: DriverCopies | None = None,
    ) -> None:
        super().__init__(
            run.report,
            run.stratum,
            run.frames,
            run.materializer,
            options=run.options,
            engine=run.engine,
            partitions=run.partitions,
        )
        self.old = dict(old)
        """Rows before the epoch of every changed input."""
        self.deltas = dict(deltas)
        """Changes of the stratum's inputs (only non-empty ones)."""
        self.deadline = deadline
        self.carried = dict(carried or {})
        """MRA states an earlier round-bounded update left with pending deltas (async)."""
        self.round_budget = round_budget
        """Rounds an MRA resume may run in this epoch (async consistency); None: to the end."""
        self.witnessed = dict(witnessed or {})
        """min/max MRA relations' current rows with their witnesses ``w0..`` (the
        ``mra-retract`` update trims the witness forest on deletions)."""
        self.copies = copies
        """Rows the driver holds of the Maintainer's frames, when small min/max relations
        may be retracted there (``EvalOptions.local_rows``); None: always on Spark."""
        for rel, delta in self.deltas.items():
            self.frames.named[f"{rel}@add"] = delta.added
            self.frames.named[f"{rel}@del"] = delta.removed
            self.frames.named[f"{rel}@old"] = self.old[rel]

    # ------------------------------------------------------------ the epoch

    @property
    def insert_only(self) -> bool:
        return all(d.n_removed == 0 for d in self.deltas.values())

    def negates_changed(self) -> bool:
        """A changed input occurs negated in one of the stratum's bodies."""
        return any(
            isinstance(lit, ast.Negation) and lit.atom.relation in self.deltas
            for rule in self.stratum.rules
            for body in rule.bodies
            for lit in body.literals
        )

    def round(self, info: RoundInfo) -> None:
        # A round that left nothing pending ended its loop: the work is done, and
        # abandoning it now would only add a bootstrap to it.
        if info.pending and time.monotonic() > self.deadline:
            raise Abandon("ran past the elastic switch's budget", switched=True)

    def changes(self, old: DataFrame, new: DataFrame) -> Change[DataFrame]:
        return changes_between(self.materializer, old, new)

    def delta(self, added: DataFrame, removed: DataFrame) -> Change[DataFrame]:
        return stored_delta(self.materializer, added, removed)

    def no_change(self, relation: str) -> Change[DataFrame]:
        return self.delta(self.frames.empty(relation), self.frames.empty(relation))

    # ------------------------------------------------------------ delta rules

    def inserted_rows(self, relation: str) -> list[Plan]:
        """Head rows the epoch's insertions derive: per body, one delta rule per atom over
        a changed input, that atom reading the added rows (telescoping is not needed:
        with insertions only, every other atom reads the new rows, a superset)."""
        return [
            self.rule_rows(rule, body, relation_of={i: self.projected_delta(body, i, "add")})
            for rule in self.rules(relation)
            for body in rule.bodies
            for i in atoms_over(body, self.deltas)
        ]

    def telescoped(self, body: ast.Body, target: int, kind: str) -> dict[int, str]:
        """Telescoping delta term: atom ``target`` reads ``R@kind``; changed atoms before it
        read the new rows, after it the old rows (so the terms sum to new − old exactly)."""
        mapping: dict[int, str] = {}
        for i in atoms_over(body, self.deltas):
            if i == target:
                mapping[i] = self.projected_delta(body, i, kind)
            elif i > target:
                mapping[i] = f"{_atom(body, i).relation}@old"
        return mapping

    def before(self, body: ast.Body) -> dict[int, str]:
        """Every changed atom of ``body`` reading its rows before the epoch."""
        return {i: f"{_atom(body, i).relation}@old" for i in atoms_over(body, self.deltas)}

    def projected_delta(self, body: ast.Body, index: int, kind: str) -> str:
        """The name of an atom's added/removed rows. With ``_`` arguments a row change need
        not change the atom's projection, so the delta is taken on the projection."""
        atom = _atom(body, index)
        rel = atom.relation
        wild = [i for i, a in enumerate(atom.args) if isinstance(a, ast.Wildcard)]
        if not wild:
            return f"{rel}@{kind}"
        name = f"{rel}@{kind}#{'.'.join(map(str, wild))}"
        named = self.frames.named
        if name not in named:
            types = self.catalog[rel].types

            def project(frame: DataFrame) -> DataFrame:
                return frame.select(
                    *(
                        (
                            F.lit(None).cast(spark_type(t)) if i in wild else F.col(positional(i))
                        ).alias(positional(i))
                        for i, t in enumerate(types)
                    )
                ).distinct()

            other = named[f"{rel}@old"] if kind == "add" else self.frames.full[rel]
            columns = [positional(i) for i in range(len(types)) if i not in wild]
            delta = project(named[f"{rel}@{kind}"])
            named[name] = join_on(delta, project(other), columns, "left_anti")
        return name


def _atom(body: ast.Body, index: int) -> ast.Atom:
    atom = body.literals[index]
    assert isinstance(atom, ast.Atom)
    return atom
