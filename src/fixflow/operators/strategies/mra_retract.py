"""``mra-retract``: a min/max relation kept with its witness updated for an epoch with
insertions and deletions (KickStarter-style trimming, then one resume), written once
(``retract_on``) over two backends:

- ``SparkRetraction`` (below): Spark frames; the witness walk is one Spark task
  (``witness.descendants``) and the resume runs on the run's engine;
- ``driver.retraction.DriverRetraction``: the driver's numpy batches, the kernels and the shard
  loop a Spark task runs, where ``placement.place_retraction`` puts it; it raises
  ``Outgrown`` past ``local_rows`` and the caller (``mra.retract``) runs this on Spark.

The steps: roots (keys a deleted fact supported directly) → the keys whose witness chain
passes through a root (the walk) → the surviving rows → seeds (the invalidated keys
re-seeded from their surviving in-neighbours and X⁰/C, plus the insertions' candidates)
→ one resume to the fixpoint. Surviving values are still derivable (their chain survived)
and no worse than before, so resuming from them converges to the new fixpoint.
"""

from __future__ import annotations

import logging
from typing import Protocol, TypeVar

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fixflow.checker import ast
from fixflow.operators.core import atoms_over, union_by_name
from fixflow.operators.engines.program import MraProgram, output_column
from fixflow.operators.epoch import Abandon, Outcome, UpdateContext
from fixflow.operators.plan import Plan
from fixflow.operators.strategies.mra_frames import (
    derive,
    key_columns,
    keyed,
    mra_spec_of,
    resume,
    seed_bodies,
)
from fixflow.operators.witness import descendants

log = logging.getLogger(__name__)

Rows = TypeVar("Rows")
"""The relation's rows with their witnesses, as the backend holds them."""
Keys = TypeVar("Keys")
"""A set of the relation's keys, as the backend holds them."""
Seed = TypeVar("Seed")
"""What one seeding step hands the resume, as the backend holds it."""


class RetractionBackend(Protocol[Rows, Keys, Seed]):
    """The primitives ``retract_on`` calls, on Spark frames or the driver's batches."""

    def witnessed(self) -> Rows:
        """The relation's rows with their witnesses before the epoch."""
        ...

    def roots(self, state: Rows) -> Keys | None:
        """Keys a deleted fact supported directly: a recursive derivation through a deleted
        row matching the key's witness, or a lost X⁰/C derivation of a key without a
        witness. None when no deleted fact can have supported a key."""
        ...

    def invalidated(self, state: Rows, roots: Keys) -> tuple[Keys, int]:
        """The keys whose witness chain passes through a root (roots included), and how
        many."""
        ...

    def surviving(self, state: Rows, gone: Keys) -> Rows:
        """``state`` without the rows of ``gone``'s keys."""
        ...

    def reseeded(self, surviving: Rows, gone: Keys) -> list[Seed]:
        """Seeds for the keys ``gone``: F′ over their surviving in-neighbours under the new
        facts, and X⁰/C."""
        ...

    def inserted(self, surviving: Rows) -> list[Seed]:
        """Seeds from the epoch's insertions: F′ over the surviving keys through added
        rows (with witnesses), and X⁰/C over added rows."""
        ...

    def resume(self, state: Rows, surviving: Rows, seeds: list[Seed]) -> Outcome:
        """The relation resumed from ``surviving`` with ``seeds`` to its fixpoint, and the
        change from ``state``."""
        ...


def retract_on(backend: RetractionBackend[Rows, Keys, Seed], ctx: UpdateContext) -> Outcome:
    """The epoch's insertions and deletions retracted and propagated on ``backend``."""
    relation = mra_spec_of(ctx).relation
    state = backend.witnessed()
    surviving, seeds = state, []
    roots = backend.roots(state)
    if roots is not None:  # None: no deleted fact supported a key, nothing to walk
        if relation in ctx.carried:
            # Pending deltas carry values the witnesses do not explain yet: re-evaluate.
            raise Abandon("a deletion while deltas are pending")
        gone, n_gone = backend.invalidated(state, roots)
        log.info("%s: %d key(s) lost their witness chain", relation, n_gone)
        if n_gone:
            surviving = backend.surviving(state, gone)
            seeds += backend.reseeded(surviving, gone)
    seeds += backend.inserted(surviving)
    return backend.resume(state, surviving, seeds)


# ---------------------------------------------------------------- on Spark


class SparkRetraction:
    """The retraction's primitives over Spark frames: keys are ``k0..`` frames, rows are
    positional with ``w0..``, and a seed is a frame of candidates ``k0.., v[, w0..]``."""

    def __init__(self, ctx: UpdateContext, program: MraProgram) -> None:
        self.ctx, self.program = ctx, program

    def witnessed(self) -> DataFrame:
        return self.ctx.witnessed[self.program.relation]

    def roots(self, state: DataFrame) -> DataFrame | None:
        ctx, program = self.ctx, self.program
        spec, frames = program.spec, []
        wits = [f"w{j}" for j in range(len(program.keys))]
        with_witness = keyed(program, state, wits=True)
        for i, body in enumerate(spec.recursive_bodies):
            for j in _changed_atoms(ctx, body, "del", skip=spec.recursive_atom_index[i]):
                derived = derive(ctx, program, i, _through(ctx, body, j, "del"), state)
                # The whole table on the streamed side: the derivations are few (broadcast).
                matched = with_witness.join(
                    F.broadcast(derived), [*program.keys, *wits], "left_semi"
                )
                frames.append(matched.select(*program.keys))
        seeded = with_witness.where(F.col("w0").isNull()).select(*program.keys)
        for rule, body in seed_bodies(spec):
            for j in _changed_atoms(ctx, body, "del"):
                plan = ctx.rule_rows(rule, body, relation_of=_through(ctx, body, j, "del"))
                rows = keyed(program, ctx.head_rows(spec.relation, plan))
                frames.append(seeded.join(F.broadcast(rows), list(program.keys), "left_semi"))
        return union_by_name(frames) if frames else None

    def invalidated(self, state: DataFrame, roots: DataFrame) -> tuple[DataFrame, int]:
        program = self.program
        walked = descendants(keyed(program, state, wits=True), roots, program.keys)
        return self.ctx.materializer.keep_counted(walked)

    def surviving(self, state: DataFrame, gone: DataFrame) -> DataFrame:
        positions = key_columns(self.program.spec)
        return state.join(F.broadcast(gone.toDF(*positions)), positions, "left_anti")

    def reseeded(self, surviving: DataFrame, gone: DataFrame) -> list[DataFrame]:
        ctx, program = self.ctx, self.program
        keys = list(program.keys)
        small = F.broadcast(gone)
        seeds = [
            derive(ctx, program, i, {}, surviving, heads=gone).join(small, keys, "left_semi")
            for i in range(len(program.bodies))
        ]
        for plan in (*program.init_plans, *program.constant_plans):
            seeds.append(_plan_candidates(ctx, plan).join(small, keys, "left_semi"))
        return seeds

    def inserted(self, surviving: DataFrame) -> list[DataFrame]:
        ctx, program = self.ctx, self.program
        spec, seeds = program.spec, []
        for i, body in enumerate(spec.recursive_bodies):
            for j in _changed_atoms(ctx, body, "add", skip=spec.recursive_atom_index[i]):
                seeds.append(derive(ctx, program, i, _through(ctx, body, j, "add"), surviving))
        for rule, body in seed_bodies(spec):
            for j in _changed_atoms(ctx, body, "add"):
                plan = ctx.rule_rows(rule, body, relation_of=_through(ctx, body, j, "add"))
                seeds.append(program.candidates(ctx.head_rows(spec.relation, plan)))
        return seeds

    def resume(self, state: DataFrame, surviving: DataFrame, seeds: list[DataFrame]) -> Outcome:
        return resume(self.ctx, self._candidate_union(seeds), rows=surviving)

    def _candidate_union(self, frames: list[DataFrame]) -> DataFrame:
        """Candidates ``k0.., v, w0..`` (a missing witness is null)."""
        program = self.program
        names = [*program.keys, "v", *(f"w{j}" for j in range(len(program.keys)))]
        union = program.candidates(self.ctx.frames.empty(program.relation))
        for other in frames:
            union = union.unionByName(other, allowMissingColumns=True)
        missing = [n for n in names if n not in union.columns]
        return union.select(*union.columns, *(F.lit(None).alias(n) for n in missing))


def _changed_atoms(
    ctx: UpdateContext, body: ast.Body, kind: str, skip: int | None = None
) -> list[int]:
    """Atoms of ``body`` over an input that gained (``add``) or lost (``del``) rows."""
    found = []
    for j in atoms_over(body, ctx.deltas):
        atom = body.literals[j]
        assert isinstance(atom, ast.Atom)
        delta = ctx.deltas[atom.relation]
        if j != skip and (delta.n_added if kind == "add" else delta.n_removed):
            found.append(j)
    return found


def _through(ctx: UpdateContext, body: ast.Body, j: int, kind: str) -> dict[int, str]:
    """Derivations through atom ``j``'s added (deleted) rows, every other changed atom
    reading its new (old) rows. Not the telescoped terms of a sum: a min/max candidate must
    be derived from facts that hold now, and a root from facts that held before."""
    others = ctx.before(body) if kind == "del" else {}
    return {**others, j: ctx.projected_delta(body, j, kind)}


def _plan_candidates(ctx: UpdateContext, plan: Plan) -> DataFrame:
    """An X⁰/C plan's rows (``k0.., v``) over the current inputs."""
    frame = ctx.backend.run(plan)
    return frame.select(*(F.col(output_column(n)).alias(n) for n, _ in plan.schema))
