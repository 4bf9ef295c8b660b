"""Spark helpers the ``mra`` updates share (``mra``'s improve and correction, and the
retraction's Spark backend in ``mra_retract``): relation rows keyed ``k0..``, the rule
bodies that seed a relation, a recursive body derived over a frontier, and the resume on
the run's engine."""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fixflow.checker import ast
from fixflow.checker.model import MraSpec
from fixflow.operators.core import StratumView
from fixflow.operators.engines.program import (
    MraProgram,
    aux_frame,
    head_aux_columns,
    output_column,
)
from fixflow.operators.epoch import Outcome, UpdateContext
from fixflow.operators.materialize import reading_checkpoints_of
from fixflow.operators.plan import Version
from fixflow.operators.relation import Relation
from fixflow.operators.spark_backend import SparkBackend, positional

log = logging.getLogger(__name__)


def mra_spec_of(view: StratumView) -> MraSpec:
    spec = view.mra_spec()
    assert spec is not None, "the MRA strategy runs only where mra_spec() is known"
    return spec


def key_columns(spec: MraSpec) -> list[str]:
    return [positional(p) for p in spec.key_positions]


def keyed(program: MraProgram, rows: DataFrame, wits: bool = False) -> DataFrame:
    """Positional relation rows as ``k0..`` (and ``w0..``)."""
    keys = zip(program.keys, program.spec.key_positions, strict=True)
    columns = [F.col(positional(p)).alias(k) for k, p in keys]
    return rows.select(*columns, *((f"w{j}" for j in range(len(program.keys))) if wits else ()))


def seed_bodies(spec: MraSpec) -> list[tuple[ast.Rule, ast.Body]]:
    """X⁰ and C: the rule bodies that seed the relation."""
    bodies = [(spec.head, b) for b in spec.constant_bodies]
    return bodies + [(r, b) for r in spec.init_rules for b in r.bodies]


def derive(
    ctx: UpdateContext,
    program: MraProgram,
    i: int,
    relation_of: dict[int, str],
    frontier: DataFrame,
    heads: DataFrame | None = None,
) -> DataFrame:
    """Recursive body ``i`` over ``frontier`` (positional relation rows) with its atoms
    reading ``relation_of``'s names: candidates ``k0.., v, w0..``. The auxiliary side is
    broadcast: it is an epoch's changed rows, or cut down to the rows leading to the keys
    ``heads`` (``k0..``, few) where the head copies its keys from it."""
    body = program.recursive_body(i, relation_of) if relation_of else program.bodies[i]
    tables = {}
    if body.aux_plan is not None:
        aux = aux_frame(body, ctx.backend)
        columns = head_aux_columns(body, program.keys)
        if heads is not None and columns is not None:
            aux = aux.join(F.broadcast(heads.toDF(*columns)), columns, "left_semi")
        small = relation_of or (heads is not None and columns is not None)
        tables[body.aux_name] = F.broadcast(aux) if small else aux
    rows = frontier.select(*(positional(p) for p in range(len(program.types))))

    def source(relation: str, version: Version) -> DataFrame:
        if version == "aux":
            return tables[relation]
        if version == "delta" and relation == program.relation:
            return rows
        return ctx.frames.source(relation, version)

    derived = SparkBackend(ctx.spark, source).run(body.plan)
    names = [*program.keys, "v", *(f"w{j}" for j in range(len(program.keys)))]
    return derived.select(*(F.col(output_column(n)).alias(n) for n in names))


def resume(ctx: UpdateContext, seed: DataFrame, rows: DataFrame | None = None) -> Outcome:
    """Resume the relation from ``rows`` (default: its current rows; with witnesses when
    kept) or its carried state with ``seed`` (candidates or corrections ``k0.., v``)."""
    spec = mra_spec_of(ctx)
    relation = spec.relation
    program = MraProgram(spec, ctx.catalog.types)
    original = ctx.frames.full[relation]
    # The budget counts propagation rounds; the seed's merge comes on top of them.
    budget = min(ctx.max_iterations, ctx.round_budget + 1 if ctx.round_budget else 1 << 62)
    outcome = ctx.engine.resume(
        program,
        ctx.engine_env(),
        original if rows is None else rows,
        seed if rows is not None else program.candidates(seed),
        budget,
        ctx.round,
        carried=ctx.carried.get(relation),
    )
    # Relations: the garbage collection walks their plans as live, then as replaced.
    current = reading_checkpoints_of(outcome.rows.select(*original.columns), outcome.rows)
    left = {relation: outcome.state} if outcome.capped else {}
    if outcome.capped and ctx.round_budget is None:  # the Maintainer warns
        log.info("%s: hit the iteration cap (%d rounds)", relation, ctx.max_iterations)
    changes = {relation: ctx.changes(original, current)}
    witnessed: dict[str, DataFrame] = {}
    if rows is not None:
        witnessed[relation] = Relation.of(outcome.state.witnessed_rows())
    capped = outcome.capped and ctx.round_budget is None  # else: carried on, not cut short
    return Outcome(
        {relation: current},
        changes,
        outcome.rounds,
        carried=left,
        witnessed=witnessed,
        capped=capped,
    )
