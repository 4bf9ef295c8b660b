"""The one change type: ``Change``, a relation's rows added and removed in one epoch.

One ``Change`` flows from ingest through maintenance to the commit; what holds its rows
depends on where it is, not its type (as Differential Dataflow has one kind of update):

- **ingest** (``pipeline.stream.ingest``): the batch's net change of each EDB relation, as
  Arrow tables of its declared columns, counted;
- **maintenance** (``operators.maintain``, every strategy's ``UpdateContext.deltas`` and
  ``Outcome.deltas``): each relation's change as Spark frames in positional columns (most
  of them ``Relation``s, carrying their driver rows when the driver holds them), counted;
- **the commit** (``maintain.publish.RelationChange``): each output relation's change
  against what the consumer holds, as frames of its result columns, keyed: a row of
  ``added`` replaces the consumer's row with its key, ``removed`` holds only the key
  columns of the rows gone. For a set relation (its key is the whole row) that is the
  plain reading.

A change with ``counts`` is net: its added rows were absent and its removed rows present
before, without duplicates, and these are their numbers (normalization and the
Maintainer's stores guarantee it; a caller's change without counts is made net at the cost
of Spark jobs). A change of frames that was never counted says so when asked for its
counts, instead of running a job.

Nothing here imports Spark: the Arrow half of ingest uses it without a JVM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

Rows = TypeVar("Rows")


@dataclass(frozen=True)
class Change(Generic[Rows]):
    """``added`` and ``removed`` rows of one relation (see the module for what holds them)."""

    added: Rows
    removed: Rows
    counts: tuple[int, int] | None = None
    """(added, removed) rows, when counted; a counted change is net (see the module)."""
    stored: bool = False
    """Whether ``added`` is (a projection of) a store of the epoch's materializer; a
    caller's net EDB rows are not, until the relation's new segment stores them."""

    @property
    def counted(self) -> bool:
        return self.counts is not None

    @property
    def n_added(self) -> int:
        return self._counts()[0]

    @property
    def n_removed(self) -> int:
        return self._counts()[1]

    @property
    def empty(self) -> bool:
        return self.n_added == 0 and self.n_removed == 0

    @property
    def frames(self) -> tuple[Rows, Rows]:
        return (self.added, self.removed)

    def _counts(self) -> tuple[int, int]:
        if self.counts is None:
            raise ValueError("this change was not counted (counting it would run a job)")
        return self.counts


def inserted(rows: Rows) -> Change[Rows | None]:
    """A change that only adds ``rows`` (not counted: made net by the Maintainer)."""
    return Change(rows, None)


def deleted(rows: Rows) -> Change[Rows | None]:
    """A change that only removes ``rows`` (not counted: made net by the Maintainer)."""
    return Change(None, rows)


def by_relation(
    added: Mapping[str, Rows],
    removed: Mapping[str, Rows],
    counts: Mapping[str, tuple[int, int]] | None = None,
) -> dict[str, Change[Rows | None]]:
    """Per relation, the change of its ``added`` and ``removed`` rows (a side it is missing
    from is None), counted by ``counts`` when given (then they must be net, see the
    module): the shape ``Maintainer.apply`` takes, from two mappings."""
    return {
        r: Change(added.get(r), removed.get(r), None if counts is None else counts.get(r, (0, 0)))
        for r in {**added, **removed}
    }
