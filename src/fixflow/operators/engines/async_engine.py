"""The sharded asynchronous MRA engine (PowerLog §5.3, A3 §5–6) on Spark.

The MonoTable is split into shards that keep neighbours together (``engines.sharding``
computes the assignment from the graph of the recursive bodies, once per bootstrap, and
keeps it for updates). A *stage* is one Spark job: every task owns one shard and runs the
local asynchronous loop of ``engines.shard_loop`` over vectorized kernels compiled from
the same round plans the sync engine runs on Spark, until it is locally quiescent, one of
its per-destination buffers holds β updates, or its time budget τ is spent. The buffers
leave the task as message rows for their destination shards; the next stage merges them.
A stage is therefore worth many synchronous rounds: on a road-like graph the local loops
follow the shortest paths inside a shard and only the cut is crossed at stage boundaries.

The stage frame (one row layout for everything, see ``Layout``) is checkpointed between
stages, hash-partitioned by shard; the auxiliary rows are checkpointed once with the same
partitioning, so the union of both hands each task exactly its shard without a shuffle of
the auxiliary side. Nothing lives in a Python worker between stages.

Modes: ``async`` flushes buffers by PowerLog's adaptive β rule and τ; ``hybrid`` lets every
shard run to local quiescence before exchanging (synchronous between shards, asynchronous
inside). Both run a stratum whose plans do not compile to kernels on the sync engine and
say why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, ByteType, IntegerType, StructField, StructType

from fixflow.checker.ast import TypeName
from fixflow.operators.engines import blocks, kernels
from fixflow.operators.engines.base import (
    EngineEnv,
    EngineOptions,
    MraEngine,
    MraOutcome,
    MraState,
    OnRound,
    RoundInfo,
)
from fixflow.operators.engines.blocks import BLOB
from fixflow.operators.engines.program import MraProgram, RecursiveBody, plain_column
from fixflow.operators.engines.shard_loop import (
    AUX,
    MESSAGE,
    STATE,
    STATS,
    StageParams,
    run_stage,
)
from fixflow.operators.materialize import Stored
from fixflow.operators.plan import Plan, Project, Scan, Version
from fixflow.operators.rounds import clause_holds, constant_value, measure_column, session_conf
from fixflow.operators.spark_backend import SparkBackend, column_name, positional, spark_type

log = logging.getLogger(__name__)

UNBOUNDED = float("inf")


# ---------------------------------------------------------------- what compiles


def stage_params(
    program: MraProgram,
    options: EngineOptions,
    *,
    witness: bool,
    shards: int,
    hybrid: bool,
    beta: dict[tuple[int, int], float] | None = None,
) -> StageParams:
    """What a shard's local loop needs (``shard_loop.StageParams``): a Spark task's, or
    the driver's for a small stratum (``operators.local``). Hybrid flushes only at local
    quiescence: no τ, no β."""
    buffer = options.buffer
    return StageParams(
        relation=program.relation,
        arity=len(program.types),
        key_positions=program.spec.key_positions,
        value_pos=program.spec.value_pos,
        index_pos=program.spec.index_pos,
        key_types=program.key_types,
        value_type=program.value_type,
        g=program.g,
        witness=witness,
        plans=tuple((body.plan, body.aux_name or "") for body in program.bodies),
        aux_types=aux_types(program),
        dest_columns=tuple(
            tuple(_head_key_columns(program, body, _scan_of(body), program.keys) or ())
            for body in program.bodies
        ),
        beta={} if hybrid else dict(beta or {}),
        beta0=UNBOUNDED if hybrid else float(buffer.initial),
        tau=UNBOUNDED if hybrid else buffer.interval_ms / 1000.0,
        priority=options.priority,
        portion=options.schedule_portion,
        local_bound=_local_bound(program, shards),
        local_func=program.spec.termination.func if program.spec.termination else "sum",
    )


def aux_types(program: MraProgram) -> tuple[tuple[TypeName, ...], ...]:
    """Per recursive body, the types of its auxiliary columns ``c0..``."""
    out = []
    for body in program.bodies:
        assert body.aux_plan is not None
        out.append(tuple(t for _, t in body.aux_plan.schema))
    return tuple(out)


def _aux_scan(body: RecursiveBody) -> Scan | None:
    from fixflow.operators.plan import children

    stack = [body.plan]
    while stack:
        node = stack.pop()
        if isinstance(node, Scan) and node.version == "aux":
            return node
        stack.extend(children(node))
    return None


def _scan_of(body: RecursiveBody) -> Scan:
    scan = _aux_scan(body)
    assert scan is not None, "checked by unsupported()"
    return scan


def unsupported(program: MraProgram) -> str | None:
    """Why ``program`` cannot run on the async engine, or None."""
    for i, body in enumerate(program.bodies):
        reason = _body_unsupported(program, i, body)
        if reason is not None:
            return f"recursive body {i + 1}: {reason}"
    return None


def _body_unsupported(program: MraProgram, i: int, body: RecursiveBody) -> str | None:
    scan = _aux_scan(body)
    if scan is None:
        return "no auxiliary atom to shard by"
    reason = kernels.unsupported(body.plan)
    if reason is not None:
        return reason
    if _join_key_columns(program, i, scan) is None:
        return "the auxiliary side joins on no key column of the recursive atom"
    if _head_key_columns(program, body, scan) is None:
        return "a head key is computed, not copied from the auxiliary side"
    return None


def shard_keys(program: MraProgram) -> tuple[str, ...]:
    """The key columns shards are cut by: those whose variable in the recursive atom every
    body's auxiliary side joins on (all of them for SSSP's ``sssp(X, _)``; only ``Z`` for
    APSP's ``path(X, Z, _), edge(Z, Y, _)``), so each auxiliary row belongs to one shard."""
    from fixflow.checker import ast

    chosen = []
    for j, pos in enumerate(program.spec.key_positions):
        joined = True
        for i, body in enumerate(program.bodies):
            atom = program.spec.recursive_bodies[i].literals[program.spec.recursive_atom_index[i]]
            assert isinstance(atom, ast.Atom)
            arg, scan = atom.args[pos], _aux_scan(body)
            joined &= isinstance(arg, ast.Var) and scan is not None and arg.name in scan.columns
        if joined:
            chosen.append(program.keys[j])
    return tuple(chosen)


def _join_key_columns(program: MraProgram, i: int, scan: Scan) -> list[int] | None:
    """Positions in the aux scan of the recursive atom's shard-key variables."""
    from fixflow.checker import ast

    atom = program.spec.recursive_bodies[i].literals[program.spec.recursive_atom_index[i]]
    assert isinstance(atom, ast.Atom)
    keys = shard_keys(program)
    if not keys:
        return None
    positions = []
    for j, pos in enumerate(program.spec.key_positions):
        arg = atom.args[pos]
        if program.keys[j] in keys and isinstance(arg, ast.Var):
            positions.append(scan.columns.index(arg.name))
    return positions


def _head_key_columns(
    program: MraProgram, body: RecursiveBody, scan: Scan, keys: Sequence[str] | None = None
) -> list[int] | None:
    """Positions in the aux scan of the columns the head copies into ``keys`` (default:
    the shard keys, i.e. where its candidates go); None when one is computed."""
    assert isinstance(body.plan, Project)
    outputs = dict(body.plan.outputs)
    positions = []
    for key in shard_keys(program) if keys is None else keys:
        name = plain_column(outputs[key])
        if name is None or name not in scan.columns:
            return None
        positions.append(scan.columns.index(name))
    return positions


# ---------------------------------------------------------------- shards


def murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of a 32-bit integer (Murmur3 x86_32, seed 42), as a signed int."""
    mask = 0xFFFFFFFF
    k1 = (value & mask) * 0xCC9E2D51 & mask
    k1 = ((k1 << 15) | (k1 >> 17)) & mask
    k1 = k1 * 0x1B873593 & mask
    h1 = seed ^ k1
    h1 = ((h1 << 13) | (h1 >> 19)) & mask
    h1 = (h1 * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & mask
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def shard_labels(shards: int) -> list[int]:
    """One label per shard such that Spark's hash partitioning into ``shards`` partitions
    sends each label to a partition of its own (shard i → partition i)."""
    labels: dict[int, int] = {}
    candidate = 0
    while len(labels) < shards:
        labels.setdefault(murmur3_int(candidate) % shards, candidate)
        candidate += 1
    return [labels[p] for p in range(shards)]


@dataclass
class ShardMap:
    """Key → shard label: the locality-aware assignment, with a hash fallback for keys it
    does not know (new keys of later updates)."""

    shards: int
    labels: list[int]
    assignment: DataFrame | None = None
    """(key, shard index) for single-column keys; None: hash sharding only."""
    method: str = "hash"
    cut: int | None = None
    links: int | None = None

    def label(self, frame: DataFrame, keys: Sequence[str], out: str) -> DataFrame:
        """``frame`` with column ``out`` = the shard label of the key columns ``keys``."""
        if self.shards == 1:  # nothing to hash or look up
            return frame.withColumn(out, F.lit(self.labels[0]))
        fallback = F.pmod(F.xxhash64(*(F.col(k) for k in keys)), F.lit(self.shards))
        index: Column = fallback
        if self.assignment is not None and len(keys) == 1:
            lookup = self.assignment.select(
                F.col("key").alias("#key"), F.col("shard").alias("#shard")
            )
            frame = frame.join(lookup, frame[keys[0]] == lookup["#key"], "left")
            index = F.coalesce(F.col("#shard").cast("long"), fallback)
        labels = F.array(*(F.lit(x) for x in self.labels))
        labelled = frame.withColumn(out, F.element_at(labels, (index + 1).cast("int")))
        return labelled.drop("#key", "#shard")


# ---------------------------------------------------------------- the row layout


@dataclass(frozen=True)
class Layout:
    """The columns of a stage frame: state and message rows use the key, value and witness
    columns; auxiliary and statistics rows carry an Arrow block (``engines.blocks``)."""

    program: MraProgram
    witness: bool
    aux_types: tuple[tuple[TypeName, ...], ...]

    @property
    def schema(self) -> StructType:
        p = self.program
        fields = [StructField("shard", IntegerType()), StructField("kind", ByteType())]
        fields += [StructField(k, spark_type(t)) for k, t in zip(p.keys, p.key_types, strict=True)]
        fields += [StructField(n, spark_type(p.value_type)) for n in ("acc", "delta")]
        if self.witness:
            fields += [StructField(f"wit{j}", spark_type(t)) for j, t in enumerate(p.key_types)]
        fields.append(StructField(BLOB, BinaryType()))
        return StructType(fields)

    def conform(self, frame: DataFrame) -> DataFrame:
        """``frame`` with every layout column, in order (missing ones null)."""
        return frame.select(
            *(
                (F.col(f.name) if f.name in frame.columns else F.lit(None))
                .cast(f.dataType)
                .alias(f.name)
                for f in self.schema.fields
            )
        )


# ---------------------------------------------------------------- state


@dataclass
class AsyncState:
    """The stage frame after a run (``MraState``)."""

    stored: Stored
    program: MraProgram
    shard_map: ShardMap
    layout: Layout
    pending: int
    stages: int
    env: EngineEnv

    @property
    def frame(self) -> DataFrame:
        return self.stored.frame

    @property
    def has_pending(self) -> bool:
        return self.pending > 0

    def rows(self) -> DataFrame:
        return relation_rows(self.program, self._state(), F.col("acc"), self.stages)

    def pending_rows(self) -> DataFrame:
        state = self._state().where(F.col("delta").isNotNull())
        rows = relation_rows(self.program, state, F.col("acc"), None, extra=[F.col("delta")])
        messages = self.frame.where(F.col("kind") == MESSAGE)
        typed = F.lit(None).cast(spark_type(self.program.value_type))
        in_flight = relation_rows(self.program, messages, typed, None, extra=[F.col("acc")])
        return rows.unionByName(in_flight)

    def propagated_rows(self) -> DataFrame:
        value = F.col("acc") - F.coalesce(F.col("delta"), F.lit(0))
        return relation_rows(self.program, self._state(), value, None)

    def witnessed_rows(self) -> DataFrame:
        wits = [F.col(f"wit{j}") for j in range(len(self.program.keys))]
        if not self.layout.witness:
            wits = [F.lit(None).cast(spark_type(t)) for t in self.program.key_types]
        return relation_rows(self.program, self._state(), F.col("acc"), self.stages, wits=wits)

    def release(self) -> None:
        self.env.materializer.release(self.stored)

    def _state(self) -> DataFrame:
        return self.frame.where((F.col("kind") == STATE) & F.col("acc").isNotNull())


def relation_rows(
    program: MraProgram,
    frame: DataFrame,
    value: Column,
    index: int | None,
    extra: Sequence[Column] = (),
    wits: Sequence[Column] = (),
) -> DataFrame:
    """Stage-frame rows as positional relation rows (``pending`` from ``extra``, the
    witness ``w0..`` from ``wits``)."""
    spec = program.spec
    cols: dict[int, Column] = {
        pos: F.col(k) for k, pos in zip(program.keys, spec.key_positions, strict=True)
    }
    cols[spec.value_pos] = value.cast(spark_type(program.value_type))
    if spec.index_pos is not None:
        cols[spec.index_pos] = F.lit(index or 0).cast("long")
    out = [cols[i].alias(positional(i)) for i in range(len(program.types))]
    out += [c.cast(spark_type(program.value_type)).alias("pending") for c in extra]
    out += [c.alias(f"w{j}") for j, c in enumerate(wits)]
    return frame.select(*out)


# ---------------------------------------------------------------- the engine


@dataclass
class _Run:
    """One bootstrap or resume: the program, its layout, shards and auxiliary rows."""

    program: MraProgram
    env: EngineEnv
    layout: Layout
    shard_map: ShardMap
    aux: Stored
    beta: dict[tuple[int, int], float] = field(default_factory=dict)
    gain: float = 0.0
    """Sum programs: the largest gain of F′ any shard observed (``order_dependence``)."""
    negative: int = 0
    """Sum programs: negative deltas propagated so far."""


class AsyncEngine:
    """``MraEngine`` running shards' local loops inside Spark tasks."""

    def __init__(self, hybrid: bool = False) -> None:
        self.hybrid = hybrid
        self.name = "hybrid" if hybrid else "async"
        self.shard_maps: dict[str, ShardMap] = {}
        """Per relation, the assignment computed at its bootstrap (kept for updates)."""

    # ------------------------------------------------------------ MraEngine

    def bootstrap(
        self, program: MraProgram, env: EngineEnv, max_rounds: int, on_round: OnRound
    ) -> MraOutcome:
        self.shard_maps.pop(program.relation, None)
        with _planning(env):
            run = self._prepare(program, env)
            if program.indexed:
                return self._stages(run, self._indexed_start(run), max_rounds, on_round)
            seeds = self._candidates(run, [*program.init_plans, *program.constant_plans])
            return self._stages(run, self._messages(run, seeds), max_rounds, on_round)

    def resume(
        self,
        program: MraProgram,
        env: EngineEnv,
        rows: DataFrame,
        seed: DataFrame,
        max_rounds: int,
        on_round: OnRound,
        carried: object | None = None,
    ) -> MraOutcome:
        with _planning(env):
            run = self._prepare(program, env)
            messages = self._messages(run, seed)
            if isinstance(carried, AsyncState):
                base = carried.frame.where(F.col("kind") < AUX)
            else:
                base = self._state_rows(run, rows)
            try:
                return self._stages(run, base.union(messages), max_rounds, on_round)
            finally:
                if isinstance(carried, AsyncState):
                    carried.release()

    # ------------------------------------------------------------ preparation

    def _prepare(self, program: MraProgram, env: EngineEnv) -> _Run:
        reason = unsupported(program)
        if reason is not None:
            raise kernels.KernelUnsupported(reason)
        backend = SparkBackend(env.spark, env.source)
        aux = self._aux_tables(program, backend)
        if program.g == "sum":
            # A duplicate auxiliary row would count a contribution twice; min and max are
            # idempotent, so they skip the shuffle that removing duplicates costs.
            aux = [t.distinct() for t in aux]
        witness = env.witness and program.g != "sum"
        layout = Layout(program, witness, aux_types(program))
        known = self.shard_maps.get(program.relation)
        if (known.shards if known is not None else env.options.shards) <= 1:
            run = self._single_shard(program, env, layout, aux, counted=known is None)
            if run is not None:
                return run
        return self._sharded(program, env, layout, aux)

    def _single_shard(
        self,
        program: MraProgram,
        env: EngineEnv,
        layout: Layout,
        aux: list[DataFrame],
        counted: bool,
    ) -> _Run | None:
        """One shard needs neither an assignment nor a partitioning: the auxiliary rows
        are packed and stored in one job, counted on the way when the shard count is
        still to be chosen (None: they are too many for one shard)."""
        single = ShardMap(1, shard_labels(1))
        observations = [Observation() for _ in aux]
        frames = self._labelled_aux(program, layout, single, aux)
        labelled = [
            frame.observe(o, F.count(F.lit(1)).alias("n"))
            for frame, o in zip(frames, observations, strict=True)
        ]
        stored = env.materializer.store(self._packed(layout, labelled))
        rows = sum(int(o.get.get("n") or 0) for o in observations)
        if counted and _shard_count(env, rows) > 1:
            env.materializer.release(stored)
            return None
        self.shard_maps[program.relation] = single
        return _Run(program, env, layout, single, stored)

    def _sharded(
        self, program: MraProgram, env: EngineEnv, layout: Layout, aux: list[DataFrame]
    ) -> _Run:
        """Several shards: the auxiliary rows are stored, assigned to shards by the graph
        they form (at the bootstrap; kept for updates), then packed and stored
        partitioned by shard."""
        count = [F.count(F.lit(1)).alias("n")]
        tables = [env.materializer.store(t, count) for t in aux]
        frames = [t.frame for t in tables]
        shard_map = self.shard_maps.get(program.relation)
        if shard_map is None:
            rows = sum(int(t.metric("n")) for t in tables)
            shard_map = self._shard_map(program, env, frames, _shard_count(env, rows))
            self.shard_maps[program.relation] = shard_map
        labelled = self._labelled_aux(program, layout, shard_map, frames)
        stored = self._partitioned(env, self._packed(layout, labelled), shard_map)
        for table in tables:
            env.materializer.release(table)
        return _Run(program, env, layout, shard_map, stored)

    @staticmethod
    def _partitioned(env: EngineEnv, packed: DataFrame, shard_map: ShardMap) -> Stored:
        """The packed auxiliary rows checkpointed hash-partitioned by shard: materialized,
        then partitioned and materialized again (a checkpoint keeps the partitioning by
        shard only when the plan it stores is a plain exchange; the second job moves a
        few blocks)."""
        stored = env.materializer.store(packed)
        try:
            return env.materializer.store(stored.frame.repartition(shard_map.shards, "shard"))
        finally:
            env.materializer.release(stored)

    @staticmethod
    def _aux_tables(program: MraProgram, backend: SparkBackend) -> list[DataFrame]:
        tables = []
        for body in program.bodies:
            assert body.aux_plan is not None
            frame = backend.run(replace(body.aux_plan, distinct=False))
            tables.append(frame.toDF(*(positional(i) for i in range(len(frame.columns)))))
        return tables

    def _shard_map(
        self, program: MraProgram, env: EngineEnv, aux: list[DataFrame], shards: int
    ) -> ShardMap:
        shard_map = ShardMap(shards, shard_labels(shards))
        if len(shard_keys(program)) != 1:
            return shard_map
        links = None
        for i, (body, frame) in enumerate(zip(program.bodies, aux, strict=True)):
            scan = _aux_scan(body)
            assert scan is not None
            src = _join_key_columns(program, i, scan)
            dst = _head_key_columns(program, body, scan)
            assert src is not None and dst is not None
            pairs = frame.select(
                F.col(positional(src[0])).alias("src"), F.col(positional(dst[0])).alias("dst")
            )
            links = pairs if links is None else links.union(pairs)
        return _assign(shard_map, links)

    def _labelled_aux(
        self, program: MraProgram, layout: Layout, shard_map: ShardMap, aux: list[DataFrame]
    ) -> list[DataFrame]:
        """Each body's auxiliary rows ``shard, dshard, c0..``: labelled with their shard
        and the shard of the key they lead to."""
        out = []
        for i, (body, frame) in enumerate(zip(program.bodies, aux, strict=True)):
            scan = _aux_scan(body)
            assert scan is not None
            src = [positional(p) for p in _join_key_columns(program, i, scan) or []]
            dst = [positional(p) for p in _head_key_columns(program, body, scan) or []]
            labelled = shard_map.label(frame, src, "shard")
            labelled = shard_map.label(labelled, dst, "dshard")
            types = zip(frame.columns, layout.aux_types[i], strict=True)
            out.append(
                labelled.select(
                    "shard",
                    F.col("dshard").cast("int"),
                    *(F.col(c).cast(spark_type(t)) for c, t in types),
                )
            )
        return out

    @staticmethod
    def _packed(layout: Layout, labelled: list[DataFrame]) -> DataFrame:
        """The labelled auxiliary rows as layout rows, one block per shard and
        ``BLOCK_ROWS`` rows (the body's index in the block's metadata)."""
        arrow_schema = _arrow_schema(layout.schema)
        parts = [
            frame.mapInArrow(
                partial(blocks.pack, arrow_schema, AUX, {"body": str(i)}), layout.schema
            )
            for i, frame in enumerate(labelled)
        ]
        union = parts[0]
        for other in parts[1:]:
            union = union.union(other)
        return union

    def _candidates(
        self, run: _Run, plans: Sequence[Plan], backend: SparkBackend | None = None
    ) -> DataFrame:
        program = run.program
        backend = backend or SparkBackend(run.env.spark, run.env.source)
        frames = []
        for plan in plans:
            frame = backend.run(plan)
            frames.append(
                frame.select(
                    *(F.col(column_name(k)).alias(k) for k in program.keys),
                    F.col(column_name("v")).alias("v"),
                )
            )
        if not frames:
            schema = ", ".join(
                [
                    f"{k} {spark_type(t).simpleString()}"
                    for k, t in zip(program.keys, program.key_types, strict=True)
                ]
                + [f"v {spark_type(program.value_type).simpleString()}"]
            )
            return run.env.spark.createDataFrame([], schema)
        union = frames[0]
        for other in frames[1:]:
            union = union.union(other)
        return union

    def _indexed_start(self, run: _Run) -> DataFrame:
        """An iteration-indexed relation (PowerLog Program 2 → 2.b): the table holds X⁰ and
        the first delta is G(C ∪ F′(X⁰)) minus X⁰ (sum, G⁻ = subtraction) or the
        candidates themselves (min/max), derived once on Spark; then stages as usual."""
        program, env = run.program, run.env
        x0 = _grouped(program, self._candidates(run, program.init_plans))
        frontier = relation_rows(program, x0.withColumnRenamed("v", "acc"), F.col("acc"), 0)
        tables = dict(
            zip(
                (b.aux_name for b in program.bodies),
                self._aux_tables(program, SparkBackend(env.spark, env.source)),
                strict=True,
            )
        )

        def source(relation: str, version: Version) -> DataFrame:
            if version == "aux":
                return tables[relation]
            if version == "delta" and relation == program.relation:
                return frontier
            return env.source(relation, version)

        backend = SparkBackend(env.spark, source)
        plans = [b.plan for b in program.bodies]
        first = _grouped(
            program,
            self._candidates(run, plans, backend).union(
                self._candidates(run, program.constant_plans)
            ),
        )
        if program.g == "sum":
            old = x0.withColumnRenamed("v", "old")
            first = first.join(old, list(program.keys), "full_outer").select(
                *program.keys,
                (F.coalesce(F.col("v"), F.lit(0)) - F.coalesce(F.col("old"), F.lit(0))).alias("v"),
            )
        return self._state_rows(run, frontier).union(self._messages(run, first))

    def _messages(self, run: _Run, candidates: DataFrame) -> DataFrame:
        """Candidates ``k0.., v`` (and witnesses ``w0..`` when given) as message rows."""
        labelled = run.shard_map.label(candidates, list(shard_keys(run.program)), "shard")
        rows = labelled.select(
            "shard",
            F.lit(MESSAGE).alias("kind"),
            *run.program.keys,
            F.col("v").alias("acc"),
            *_witness_columns(run, candidates),
        )
        return run.layout.conform(rows)

    def _state_rows(self, run: _Run, rows: DataFrame) -> DataFrame:
        """Relation rows (with their witnesses ``w0..`` when given) as state rows."""
        spec = run.program.spec
        named = rows.select(
            *(
                F.col(positional(p)).alias(k)
                for k, p in zip(run.program.keys, spec.key_positions, strict=True)
            ),
            F.col(positional(spec.value_pos)).alias("acc"),
            *_witness_columns(run, rows),
        )
        labelled = run.shard_map.label(named, list(shard_keys(run.program)), "shard")
        return run.layout.conform(labelled.withColumn("kind", F.lit(STATE)))

    # ------------------------------------------------------------ stages

    def _params(self, run: _Run) -> StageParams:
        return stage_params(
            run.program,
            run.env.options,
            witness=run.layout.witness,
            shards=run.shard_map.shards,
            hybrid=self.hybrid,
            beta=run.beta,
        )

    def _stage(self, run: _Run, frame: DataFrame) -> Stored:
        layout = run.layout
        arrow_schema = _arrow_schema(layout.schema)
        kernel = partial(run_stage, self._params(run), arrow_schema)
        union = frame.union(run.aux.frame)
        if run.shard_map.shards == 1:
            # One task reads everything: no exchange, before the stage or after it.
            out = union.coalesce(1).mapInArrow(kernel, layout.schema)
            return run.env.materializer.store(out, _stage_metrics(run.program))
        if union.rdd.getNumPartitions() != run.shard_map.shards:
            raise RuntimeError("stage frame and auxiliary rows are not partitioned alike")
        out = union.mapInArrow(kernel, layout.schema)
        out = out.repartition(run.shard_map.shards, "shard")
        return run.env.materializer.store(out, _stage_metrics(run.program))

    def _stages(
        self, run: _Run, frame: DataFrame, max_rounds: int, on_round: OnRound
    ) -> MraOutcome:
        program, env = run.program, run.env
        started, last_check = time.monotonic(), -UNBOUNDED
        stage, capped = 0, False
        stored = Stored(frame)
        if run.shard_map.shards > 1:
            # Materialized first: a shard column the optimizer could fold to a constant
            # would not partition like the auxiliary rows.
            stored = env.materializer.store(frame)
            frame = stored.frame.repartition(run.shard_map.shards, "shard")
        try:
            while True:
                stage += 1
                new = self._stage(run, frame)
                env.materializer.release(stored)
                stored = new
                pending, measure, detail = self._observe(run, stored)
                on_round(RoundInfo(stage, pending, measure, detail))
                reason = None
                if not _in_round_order(run):
                    reason = order_dependence(program.g, run.gain, run.negative)
                if reason is not None:
                    env.materializer.release(stored)
                    raise OrderDependent(program.relation, reason)
                if pending == 0:
                    break
                if program.spec.termination is not None and self._due(env, last_check):
                    last_check = time.monotonic()
                    if measure is not None and clause_holds(program.spec.termination, measure):
                        break
                if stage >= max_rounds:
                    # The clause may not have been consulted this stage (check_interval_ms):
                    # a stage that meets it converged, whatever the cap.
                    clause = program.spec.termination
                    capped = not (
                        clause is not None and measure is not None and clause_holds(clause, measure)
                    )
                    break
                frame = stored.frame.where(F.col("kind") < AUX)
        finally:
            env.materializer.release(run.aux)
        log.info(
            "%s: %d stage(s), %.2f s, %s shards (%s, cut %s)",
            program.relation,
            stage,
            time.monotonic() - started,
            run.shard_map.shards,
            run.shard_map.method,
            run.shard_map.cut,
        )
        state = AsyncState(stored, program, run.shard_map, run.layout, pending, stage, env)
        return MraOutcome(state.rows(), stage, capped, state)

    @staticmethod
    def _due(env: EngineEnv, last_check: float) -> bool:
        """The termination clause is consulted at most every ``check_interval_ms``."""
        return (time.monotonic() - last_check) * 1000.0 >= env.options.check_interval_ms

    def _observe(self, run: _Run, stored: Stored) -> tuple[int, float | None, dict[str, float]]:
        metrics = stored.metrics
        pending = int(metrics.get("pending") or 0) + int(metrics.get("messages") or 0)
        measure = metrics.get("m")
        stats = [
            row for blob in metrics.get("stats") or [] for row in blocks.decode(blob).to_pylist()
        ]
        detail = self._adapt(run, stats)
        _observe_signs(run, stats)
        detail["messages"] = float(metrics.get("messages") or 0)
        detail["cut"] = float(run.shard_map.cut or 0)
        per_shard = {int(row["shard"]): int(row["s_propagated"]) for row in stats}
        detail["propagated"] = float(sum(per_shard.values()))
        return pending, None if measure is None else float(measure), detail

    def _adapt(self, run: _Run, stats: list[dict[str, Any]]) -> dict[str, float]:
        """PowerLog's rule per buffer: when its fill rate |B|/ΔT leaves the band
        [β/(r·τ), r·β/τ], β becomes α·τ·|B|/ΔT."""
        buffer = run.env.options.buffer
        tau = buffer.interval_ms / 1000.0
        iterations = 0.0
        for row in stats:
            src, dst = int(row["shard"]), int(row["s_dst"])
            count, seconds = float(row["s_count"]), float(row["s_seconds"])
            iterations = max(iterations, float(row["s_iters"]))
            if dst < 0 or self.hybrid:
                continue
            beta = run.beta.get((src, dst), float(buffer.initial))
            rate = count / max(seconds, 1e-6)
            if rate > buffer.r * beta / tau or rate < beta / (buffer.r * tau):
                run.beta[(src, dst)] = max(1.0, buffer.alpha * tau * rate)
        betas = list(run.beta.values()) or [float(buffer.initial)]
        return {
            "local_iterations": iterations,
            "beta_min": min(betas),
            "beta_max": max(betas),
        }


class OrderDependent(Exception):
    """A sum whose value may depend on the order deltas are propagated in."""

    def __init__(self, relation: str, reason: str) -> None:
        super().__init__(f"{relation}: {reason}")
        self.relation = relation
        self.reason = reason


GAIN_MARGIN = 1e-6
"""Gains this close to 1 count as 1 (a stochastic F′ measures 1 up to rounding)."""


def _observe_signs(run: _Run, stats: list[dict[str, Any]]) -> None:
    per_shard: dict[int, tuple[float, int]] = {}
    for row in stats:
        per_shard[int(row["shard"])] = (float(row["s_gain"] or 0), int(row["s_negative"] or 0))
    for gain, negative in per_shard.values():
        run.gain = max(run.gain, gain)
        run.negative += negative


def order_dependence(g: str, gain: float, negative: int) -> str | None:
    """Why this sum's result could depend on the order of propagation, or None.

    The accumulated deltas form a series; the async engine sums it in a different order
    than rounds do. Terms of one sign (PageRank, Katz from nonnegative seeds) sum to the
    same value in any order. Terms of both signs (an iteration-indexed start
    ``F(X⁰) − X⁰``, corrections after deletions) do so when the series converges
    absolutely, which holds when F′ shrinks every delta (gain < 1). A gain of 1 with mixed
    signs is a conditionally convergent series: another order, another sum (belief
    propagation with a stochastic F′ ends anywhere between 0 and the synchronous value)."""
    if g != "sum" or negative == 0 or gain < 1.0 - GAIN_MARGIN:
        return None
    return (
        f"deltas of both signs and an F′ that does not shrink them (gain {gain:.3f} ≥ 1): "
        "the sum could depend on the order of propagation"
    )


def _in_round_order(run: _Run) -> bool:
    """One shard without priority scheduling: every local iteration propagates every
    pending delta and merges what it derived afterwards, which is a synchronous round, so
    the series is summed in the order rounds sum it."""
    return run.shard_map.shards == 1 and not run.env.options.priority


ROWS_PER_SHARD = 2_000_000
"""With ``[engine] shards = 0``: auxiliary rows per shard before another core gets one.
Every stage ships each shard's auxiliary rows to its task and every cut edge may cost a
stage, so a shard must hold enough work to pay for that: on 2 cores a 1M-row grid ran
SSSP in one shard in a fraction of the time two shards exchanging across a cut took."""


def _witness_columns(run: _Run, frame: DataFrame) -> list[Column]:
    """``frame``'s witness columns ``w0..`` as the layout's ``wit0..`` (none when the
    layout keeps no witness or ``frame`` has none)."""
    names = [f"w{j}" for j in range(len(run.program.keys))]
    if not run.layout.witness or not all(n in frame.columns for n in names):
        return []
    return [F.col(n).alias(f"wit{j}") for j, n in enumerate(names)]


def _shard_count(env: EngineEnv, aux_rows: int) -> int:
    if env.options.shards > 0:
        return env.options.shards
    cores = env.spark.sparkContext.defaultParallelism
    return max(1, min(cores, -(-aux_rows // ROWS_PER_SHARD)))


def _grouped(program: MraProgram, candidates: DataFrame) -> DataFrame:
    """G over candidates ``k0.., v`` per key."""
    g = {"min": F.min, "max": F.max, "sum": F.sum}[program.g]
    return candidates.groupBy(*program.keys).agg(g("v").alias("v"))


def _planning(env: EngineEnv) -> AbstractContextManager[None]:
    """Adaptive execution hides the hash partitioning of a checkpointed plan and re-plans
    exchanges, which would break the partition-aligned union of the stage frame with the
    auxiliary rows: it is off while the engine runs."""
    return session_conf(env.spark, {"spark.sql.adaptive.enabled": "false"})


def _local_bound(program: MraProgram, shards: int) -> float | None:
    """Sum programs with a clause ``measure < bound``: a shard stops iterating once its own
    pending measure is below bound / (2 · shards) (sum, count) or bound / 2 (max, avg)."""
    termination = program.spec.termination
    if program.g != "sum" or termination is None or termination.op not in ("<", "<="):
        return None
    bound = constant_value(termination.bound)
    share = 2.0 * shards if termination.func in ("sum", "count") else 2.0
    return bound / share


def _stage_metrics(program: MraProgram) -> list[Column]:
    kind = F.col("kind")
    pending = (kind == STATE) & F.col("delta").isNotNull()
    metrics = [
        F.count(F.when(pending, 1)).alias("pending"),
        F.count(F.when(kind == MESSAGE, 1)).alias("messages"),
        F.collect_list(F.when(kind == STATS, F.col(BLOB))).alias("stats"),
    ]
    if program.spec.termination is not None:
        change = F.when(pending, F.col("delta")).when(kind == MESSAGE, F.col("acc"))
        metrics.append(
            measure_column(program.spec.termination.func, F.abs(change).cast("double")).alias("m")
        )
    return metrics


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)


def _assign(shard_map: ShardMap, links: DataFrame | None) -> ShardMap:
    """The locality-aware assignment of ``engines.sharding`` (hash when there is no graph)."""
    if links is None or shard_map.shards == 1:
        return shard_map
    from fixflow.operators.engines import sharding

    assignment = sharding.assign(links, shard_map.shards)
    shard_map.assignment = assignment.frame
    shard_map.method = assignment.method
    shard_map.cut = assignment.cut
    shard_map.links = assignment.links
    return shard_map


class ShardedEngine:
    """``[engine] mode = "async"`` or ``"hybrid"``: the async engine for every MRA relation
    whose round plans compile to kernels, the sync engine for the others. A sum whose value
    could depend on the order of propagation (``OrderDependent``) is run again in round
    order: one shard, no priority. The choice and its reason are logged once per relation
    and kept in ``choices``."""

    def __init__(self, hybrid: bool) -> None:
        from fixflow.operators.engines.sync import SyncEngine

        self.sharded = AsyncEngine(hybrid)
        self.sync = SyncEngine()
        self.name = self.sharded.name
        self.choices: dict[str, tuple[str, str]] = {}
        """Per relation: (engine that runs it, why)."""
        self.order_dependent: dict[str, str] = {}
        """Relations the async engine runs in round order (``OrderDependent``), with why."""

    def _engine(self, program: MraProgram) -> MraEngine:
        reason = unsupported(program)
        ordered = self.order_dependent.get(program.relation)
        if reason:
            choice = (self.sync.name, reason)
        elif ordered:
            choice = (self.name, f"in round order, one shard without priority: {ordered}")
        else:
            choice = (self.name, "its plans compile to kernels")
        if self.choices.get(program.relation) != choice:
            self.choices[program.relation] = choice
            level = logging.WARNING if reason and self.name == "async" else logging.INFO
            log.log(level, "%s runs on the %s engine: %s", program.relation, *choice)
        return self.sync if reason else self.sharded

    def _env(self, program: MraProgram, env: EngineEnv) -> EngineEnv:
        if program.relation not in self.order_dependent:
            return env
        return replace(env, options=replace(env.options, shards=1, priority=False))

    def bootstrap(
        self, program: MraProgram, env: EngineEnv, max_rounds: int, on_round: OnRound
    ) -> MraOutcome:
        engine = self._engine(program)
        try:
            return engine.bootstrap(program, self._env(program, env), max_rounds, on_round)
        except OrderDependent as error:
            self.order_dependent[program.relation] = error.reason
            return self.bootstrap(program, env, max_rounds, on_round)

    def resume(
        self,
        program: MraProgram,
        env: EngineEnv,
        rows: DataFrame,
        seed: DataFrame,
        max_rounds: int,
        on_round: OnRound,
        carried: MraState | None = None,
    ) -> MraOutcome:
        engine = self._engine(program)
        try:
            return engine.resume(
                program, self._env(program, env), rows, seed, max_rounds, on_round, carried
            )
        except OrderDependent as error:
            # The carried state summed in another order: evaluate the current inputs afresh.
            self.order_dependent[program.relation] = error.reason
            return self.bootstrap(program, env, max_rounds, on_round)
