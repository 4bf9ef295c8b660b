"""Deletions without re-evaluation, the acceptance test: random epochs of insertions and
deletions on tiny graphs over SSSP, CC, widest path, PageRank, TC, SG and Attend. After
every epoch the Maintainer's relations equal the reference oracle's evaluation of the
current facts (exactly for the fixpoint programs, within the termination tolerance for
PageRank) and the recursive stratum ran an incremental update (``update:...``), not a
bootstrap. The elastic switch is off (a huge ``switch_fraction``, as in ``run_epochs``), so
a bootstrap means that no update method took the change.

A state is a set of facts; a *unit* is what one change toggles: a fact, an undirected edge
(both directions, CC) or a PageRank vertex (deleting it deletes its edges too). Each epoch
deletes up to ``MAX_CHANGES`` present units and inserts up to as many absent ones, and
changes something. Shrinking is off: a sequence costs seconds of Spark jobs, and the
failure message names the program, the epoch, its changes and the strategy.

Slow: an epoch is a few Spark jobs (~1 s on 2 cores) and a sequence also bootstraps, so a
sequence costs ~30 s. ``make test`` runs ``EXAMPLES`` = 2 sequences per program (about 8
minutes for the module); ``make test-deep`` runs 18 (``FIXFLOW_DELETION_EXAMPLES=18``, about
an hour), as before every change to the update strategies.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from fixflow.operators.core import EvalOptions
from fixflow.operators.maintain import Epoch

from .helpers import Row, report_of
from .test_maintain import Facts, Step, run_epochs

OPTIONS: tuple[EvalOptions, ...] = (
    EvalOptions(witness=True, local_rows=0),
    EvalOptions(witness=True, local_rows=100_000),
)
"""The Maintainer's options, as the stream pipeline sets them: with the min/max witness
(the predecessor key that gave each value), which retraction needs; and with
``local_rows``, as ``[engine] local_rows`` sets it: min/max retractions in the driver."""

MIN_MAX = {"sssp", "cc", "widest_path"}
"""The cases whose retraction runs in the driver with ``local_rows`` (the others do not
read it: they run as without it)."""

EXAMPLES = int(os.environ.get("FIXFLOW_DELETION_EXAMPLES", "2"))
"""Random sequences per program."""
EPOCHS = 8
"""Epochs per sequence: 7 programs x 2 x 8 = 112 epochs per option (1,008 in make
test-deep)."""
MAX_CHANGES = 2
"""Units deleted, and units inserted, per epoch at most."""
INITIAL = 10
"""Units present at the start at most."""

PAGERANK_EPS = 1e-6
"""powerlog_p2b_pagerank's termination clause: sum |Δr| < 1e-6."""
PAGERANK_TOL = 2 * 2 * 0.85 / (1 - 0.85) * PAGERANK_EPS
"""An evaluation that stops when a round changes the ranks by less than ε in sum is within
c/(1-c)·ε of the limit (c = 0.85, the L1 contraction); the oracle and the Maintainer each
are, so they differ by at most twice that; twice again for the incremental corrections,
each of which stops by the same clause (about 2.3e-5)."""

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"

Fact = tuple[str, Row]
Unit = frozenset[Fact]
State = frozenset[Fact]


@dataclass(frozen=True)
class Case:
    name: str
    example: str
    """examples/<example>.dl"""
    units: tuple[Unit, ...]
    base: State = frozenset()
    """Facts of every initial state (before the random units)."""
    tol: float = 0.0
    insertable: Callable[[State, Unit], bool] = field(default=lambda _state, _unit: True)
    repair: Callable[[State], State] = field(default=lambda state: state)
    """What a deletion takes along (PageRank: the edges of a deleted vertex)."""

    @property
    def text(self) -> str:
        return (EXAMPLES_DIR / f"{self.example}.dl").read_text()

    @property
    def inputs(self) -> list[str]:
        return sorted({rel for unit in self.units for rel, _ in unit})


# ---------------------------------------------------------------- the programs


def pairs(nodes: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(1, nodes + 1) for b in range(1, nodes + 1) if a != b]


def weight(a: int, b: int) -> float:
    """A fixed weight per edge, 1.0 to 5.0 (sums of such are exact)."""
    return float((a * 7 + b * 3) % 5 + 1)


def one(relation: str, row: Row) -> Unit:
    return frozenset({(relation, row)})


def weighted_edges(nodes: int) -> tuple[Unit, ...]:
    return tuple(one("edge", (a, b, weight(a, b))) for a, b in pairs(nodes))


def undirected_edges(nodes: int) -> tuple[Unit, ...]:
    return tuple(frozenset({("edge", (a, b)), ("edge", (b, a))}) for a, b in pairs(nodes) if a < b)


def vertices(relation: str, nodes: int) -> tuple[Unit, ...]:
    return tuple(one(relation, (v,)) for v in range(1, nodes + 1))


def arcs(relation: str, nodes: int) -> tuple[Unit, ...]:
    return tuple(one(relation, pair) for pair in pairs(nodes))


def node_set(state: Iterable[Fact]) -> set[object]:
    return {row[0] for rel, row in state if rel == "node"}


def edges_between_nodes(state: State, unit: Unit) -> bool:
    nodes = node_set(state)
    return all(rel != "edge" or {row[0], row[1]} <= nodes for rel, row in unit)


def drop_dangling_edges(state: State) -> State:
    """A deleted vertex takes its in- and out-edges along."""
    nodes = node_set(state)
    return frozenset(f for f in state if f[0] != "edge" or {f[1][0], f[1][1]} <= nodes)


PAGERANK_NODES = 6

CASES = (
    Case("sssp", "powerlog_p1_sssp", weighted_edges(6)),
    Case("cc", "powerlog_p3_cc", undirected_edges(7)),
    Case("widest_path", "widest_path", vertices("source", 6) + weighted_edges(6)),
    Case(
        "pagerank",
        "powerlog_p2b_pagerank",
        vertices("node", PAGERANK_NODES) + arcs("edge", PAGERANK_NODES),
        base=frozenset(u for unit in vertices("node", PAGERANK_NODES) for u in unit),
        tol=PAGERANK_TOL,
        insertable=edges_between_nodes,
        repair=drop_dangling_edges,
    ),
    Case("tc", "dcd_tc", arcs("arc", 6)),
    Case("sg", "dcd_sg", arcs("arc", 7)),
    Case("attend", "dcd_attend", vertices("organizer", 7) + arcs("friend", 7)),
)


# ---------------------------------------------------------------- random epochs


def union(units: Iterable[Unit]) -> State:
    return frozenset(fact for unit in units for fact in unit)


def draw_initial(data: st.DataObject, case: Case) -> State:
    units = data.draw(st.sets(st.sampled_from(case.units), max_size=INITIAL), label="initial")
    return case.repair(case.base | union(units))


def draw_next(data: st.DataObject, case: Case, state: State) -> State:
    """The state after one epoch, never the same: some present units deleted, then some
    absent ones (not those just deleted) inserted, at least one if nothing was deleted."""
    present = [u for u in case.units if u <= state]
    deleted = data.draw(some(present, 0), label="delete")
    after = case.repair(state - union(deleted))
    absent = [
        u for u in case.units if not u <= after and u not in deleted and case.insertable(after, u)
    ]
    inserted = data.draw(some(absent, 0 if deleted else 1), label="insert")
    return after | union(inserted)


def some(units: list[Unit], at_least: int) -> st.SearchStrategy[frozenset[Unit]]:
    if not units:
        return st.just(frozenset())
    return st.frozensets(st.sampled_from(units), min_size=at_least, max_size=MAX_CHANGES)


def by_relation(facts: Iterable[Fact]) -> dict[str, list[Row]]:
    rows: dict[str, list[Row]] = {}
    for rel, row in sorted(facts):
        rows.setdefault(rel, []).append(row)
    return rows


def draw_sequence(data: st.DataObject, case: Case) -> tuple[Facts, list[Step]]:
    """Initial facts (every input relation, maybe empty) and the net (inserts, deletes) of
    each epoch that changes something."""
    state = draw_initial(data, case)
    facts: Facts = {rel: [] for rel in case.inputs} | by_relation(state)
    steps: list[Step] = []
    for _ in range(EPOCHS):
        after = draw_next(data, case, state)
        steps.append((by_relation(after - state), by_relation(state - after)))
        state = after
    return facts, steps


# ---------------------------------------------------------------- the check


@cache
def recursive_strata(text: str) -> frozenset[int]:
    return frozenset(s.index for s in report_of(text).strata if s.recursive)


def describe(step: Step) -> str:
    inserts, deletes = step
    return f"inserts {dict(inserts)}, deletes {dict(deletes)}"


def expect_updates(case: Case, steps: list[Step]) -> Callable[[int, Epoch], None]:
    """After an epoch (whose results were checked): its recursive strata were updated."""
    recursive = recursive_strata(case.text)

    def check(number: int, epoch: Epoch) -> None:
        for stratum in epoch.strata:
            if stratum.stratum in recursive:
                note = f" ({stratum.note})" if stratum.note else ""
                assert stratum.strategy.startswith("update:"), (
                    f"{case.name}: epoch {number} ran {stratum.strategy!r}{note} for "
                    f"{', '.join(stratum.relations)}, not an update; "
                    f"the epoch: {describe(steps[number])}"
                )

    return check


SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow],
)


def _option_id(options: EvalOptions) -> str:
    return "witness-driver" if options.local_rows else "witness"


@pytest.mark.parametrize(
    ("case", "options"),
    [
        pytest.param(c, o, id=f"{c.name}-{_option_id(o)}")
        for c in CASES
        for o in OPTIONS
        if not o.local_rows or c.name in MIN_MAX
    ],
)
def test_deletions_are_incremental(spark: SparkSession, case: Case, options: EvalOptions) -> None:
    epochs: list[int] = []

    @SETTINGS
    @given(data=st.data())
    def sequence(data: st.DataObject) -> None:
        facts, steps = draw_sequence(data, case)
        check = expect_updates(case, steps)
        ran = run_epochs(
            spark, case.text, facts, steps, tol=case.tol, engine=False, options=options, check=check
        )
        epochs.append(len(ran))

    sequence()
    # Hypothesis ran the sequences asked for, every epoch of them.
    assert len(epochs) >= EXAMPLES and set(epochs) == {EPOCHS}, epochs
