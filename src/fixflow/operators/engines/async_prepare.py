"""What an async run starts from on Spark: its auxiliary rows (``mra_bootstrap.aux_sides``),
assigned to shards, packed into blocks and stored partitioned by shard (``prepared``), and
its first stage frame: seeds as message rows, current relation rows as state rows
(``seed_candidates``, ``messages``, ``state_rows``, ``indexed_start``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial

import pyarrow as pa
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from fixflow.operators.engines import blocks
from fixflow.operators.engines.async_support import (
    _head_key_columns,
    _join_key_columns,
    aux_scan,
    aux_types,
    shard_keys,
)
from fixflow.operators.engines.base import EngineEnv
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.engines.shard_loop import AUX, MESSAGE, STATE
from fixflow.operators.engines.shard_map import ShardMap, assigned, shard_count, shard_labels
from fixflow.operators.engines.stage_frame import (
    AsyncRun,
    Layout,
    relation_rows,
    witness_columns,
)
from fixflow.operators.materialize import Stored
from fixflow.operators.plan import Plan, Version
from fixflow.operators.spark_backend import SparkBackend, column_name, positional, spark_type


def prepared(
    program: MraProgram, env: EngineEnv, shard_maps: dict[str, ShardMap], aux: list[DataFrame]
) -> AsyncRun:
    """A run of ``program`` over its auxiliary sides ``aux`` (``mra_bootstrap.aux_sides``),
    stored as blocks of their shards. The shard assignment is the one in ``shard_maps``
    (kept from the relation's bootstrap), else computed and recorded there."""
    witness = env.witness and program.g != "sum"
    layout = Layout(program, witness, aux_types(program))
    known = shard_maps.get(program.relation)
    if (known.shards if known is not None else env.options.shards) <= 1:
        run = _single_shard(program, env, layout, aux, shard_maps, counted=known is None)
        if run is not None:
            return run
    return _sharded(program, env, layout, aux, shard_maps)


def _single_shard(
    program: MraProgram,
    env: EngineEnv,
    layout: Layout,
    aux: list[DataFrame],
    shard_maps: dict[str, ShardMap],
    counted: bool,
) -> AsyncRun | None:
    """One shard needs neither an assignment nor a partitioning: the auxiliary rows
    are packed and stored in one job, counted on the way when the shard count is
    still to be chosen (None: they are too many for one shard)."""
    single = ShardMap(1, shard_labels(1))
    observations = [Observation() for _ in aux]
    counted_aux = [
        frame.observe(o, F.count(F.lit(1)).alias("n"))
        for frame, o in zip(aux, observations, strict=True)
    ]
    stored = env.materializer.store(_packed(_labelled_aux(program, layout, single, counted_aux)))
    rows = sum(int(o.get.get("n") or 0) for o in observations)
    if counted and shard_count(env, rows) > 1:
        env.materializer.release(stored)
        return None
    shard_maps[program.relation] = single
    return AsyncRun(program, env, layout, single, stored)


def _sharded(
    program: MraProgram,
    env: EngineEnv,
    layout: Layout,
    aux: list[DataFrame],
    shard_maps: dict[str, ShardMap],
) -> AsyncRun:
    """Several shards: the auxiliary rows are stored, assigned to shards by the graph
    they form (at the bootstrap; kept for updates), then packed and stored
    partitioned by shard."""
    count = [F.count(F.lit(1)).alias("n")]
    tables = [env.materializer.store(t, count) for t in aux]
    frames = [t.frame for t in tables]
    shard_map = shard_maps.get(program.relation)
    if shard_map is None:
        rows = sum(int(t.metric("n")) for t in tables)
        shard_map = _shard_map(program, env, frames, shard_count(env, rows), rows)
        shard_maps[program.relation] = shard_map
    labelled = _labelled_aux(program, layout, shard_map, frames)
    stored = _partitioned(env, _packed(labelled), shard_map)
    for table in tables:
        env.materializer.release(table)
    return AsyncRun(program, env, layout, shard_map, stored)


def _partitioned(env: EngineEnv, packed: DataFrame, shard_map: ShardMap) -> Stored:
    """The packed auxiliary rows checkpointed hash-partitioned by shard (one job: the
    exchange moves a few blocks)."""
    return env.materializer.store(packed.repartition(shard_map.shards, "shard"))


def _shard_map(
    program: MraProgram, env: EngineEnv, aux: list[DataFrame], shards: int, rows: int
) -> ShardMap:
    shard_map = ShardMap(shards, shard_labels(shards))
    if len(shard_keys(program)) != 1:
        return shard_map
    links = None
    for i, (body, frame) in enumerate(zip(program.bodies, aux, strict=True)):
        scan = aux_scan(body)
        assert scan is not None
        src = _join_key_columns(program, i, scan)
        dst = _head_key_columns(program, body, scan)
        assert src is not None and dst is not None
        pairs = frame.select(
            F.col(positional(src[0])).alias("src"), F.col(positional(dst[0])).alias("dst")
        )
        links = pairs if links is None else links.union(pairs)
    return assigned(shard_map, links, rows)


def _labelled_aux(
    program: MraProgram, layout: Layout, shard_map: ShardMap, aux: list[DataFrame]
) -> list[DataFrame]:
    """Each body's auxiliary rows ``shard, dshard, c0..``, labelled with their shard and
    the shard of the key they lead to, as layout rows packed in blocks (``_packed``):
    keys the assignment holds are looked up in the packing task itself (one pass over the
    rows, no join)."""
    arrow_schema = arrow_schema_of(layout.schema)
    out = []
    for i, (body, frame) in enumerate(zip(program.bodies, aux, strict=True)):
        scan = aux_scan(body)
        assert scan is not None
        src = [positional(p) for p in _join_key_columns(program, i, scan) or []]
        dst = [positional(p) for p in _head_key_columns(program, body, scan) or []]
        hashed, looked_up = shard_map.hashed(frame, [(src, "shard"), (dst, "dshard")])
        types = zip(frame.columns, layout.aux_types[i], strict=True)
        rows = hashed.select(
            *(
                F.col(name).cast("int")
                for name in ("shard", "dshard")
                if name not in dict(looked_up).values()
            ),
            *(F.col(c).cast(spark_type(t)) for c, t in types),
        )
        task = partial(_pack, arrow_schema, {"body": str(i)}, shard_map.lookup(looked_up))
        out.append(rows.mapInArrow(task, layout.schema))
    return out


def _pack(
    schema: pa.Schema,
    metadata: dict[str, str],
    lookup: Callable[[pa.RecordBatch], pa.RecordBatch],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function labelling (``lookup``) and packing auxiliary rows."""
    return blocks.pack(schema, AUX, metadata, map(lookup, batches))


def _packed(labelled: list[DataFrame]) -> DataFrame:
    """The auxiliary rows of every body as layout rows, one block per shard and
    ``BLOCK_ROWS`` rows (the body's index in the block's metadata)."""
    union = labelled[0]
    for other in labelled[1:]:
        union = union.union(other)
    return union


def seed_candidates(
    program: MraProgram, env: EngineEnv, plans: Sequence[Plan], backend: SparkBackend | None = None
) -> DataFrame:
    """The candidates ``k0.., v`` the ``plans`` derive (X⁰, C, or F′ over a frontier)."""
    backend = backend or SparkBackend(env.spark, env.source)
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
        return env.spark.createDataFrame([], schema)
    union = frames[0]
    for other in frames[1:]:
        union = union.union(other)
    return union


def indexed_start(run: AsyncRun, aux: list[DataFrame]) -> DataFrame:
    """An iteration-indexed relation (PowerLog Program 2 → 2.b): the table holds X⁰ and
    the first delta is G(C ∪ F′(X⁰)) minus X⁰ (sum, G⁻ = subtraction) or the
    candidates themselves (min/max), derived once on Spark over the auxiliary sides
    ``aux``; then stages as usual."""
    program, env = run.program, run.env
    x0 = grouped(program, seed_candidates(program, env, program.init_plans))
    frontier = relation_rows(program, x0.withColumnRenamed("v", "acc"), F.col("acc"), 0)
    tables = dict(zip((b.aux_name for b in program.bodies), aux, strict=True))

    def source(relation: str, version: Version) -> DataFrame:
        if version == "aux":
            return tables[relation]
        if version == "delta" and relation == program.relation:
            return frontier
        return env.source(relation, version)

    backend = SparkBackend(env.spark, source)
    plans = [b.plan for b in program.bodies]
    first = grouped(
        program,
        seed_candidates(program, env, plans, backend).union(
            seed_candidates(program, env, program.constant_plans)
        ),
    )
    if program.g == "sum":
        old = x0.withColumnRenamed("v", "old")
        first = first.join(old, list(program.keys), "full_outer").select(
            *program.keys,
            (F.coalesce(F.col("v"), F.lit(0)) - F.coalesce(F.col("old"), F.lit(0))).alias("v"),
        )
    return state_rows(run, frontier).union(messages(run, first))


def messages(run: AsyncRun, candidates: DataFrame) -> DataFrame:
    """Candidates ``k0.., v`` (and witnesses ``w0..`` when given) as message rows."""
    labelled = run.shard_map.label(candidates, [(list(shard_keys(run.program)), "shard")])
    rows = labelled.select(
        "shard",
        F.lit(MESSAGE).alias("kind"),
        *run.program.keys,
        F.col("v").alias("acc"),
        *witness_columns(run, candidates),
    )
    return run.layout.conform(rows)


def state_rows(run: AsyncRun, rows: DataFrame) -> DataFrame:
    """Relation rows (with their witnesses ``w0..`` when given) as state rows."""
    spec = run.program.spec
    named = rows.select(
        *(
            F.col(positional(p)).alias(k)
            for k, p in zip(run.program.keys, spec.key_positions, strict=True)
        ),
        F.col(positional(spec.value_pos)).alias("acc"),
        *witness_columns(run, rows),
    )
    labelled = run.shard_map.label(named, [(list(shard_keys(run.program)), "shard")])
    return run.layout.conform(labelled.withColumn("kind", F.lit(STATE)))


def grouped(program: MraProgram, candidates: DataFrame) -> DataFrame:
    """G over candidates ``k0.., v`` per key."""
    g = {"min": F.min, "max": F.max, "sum": F.sum}[program.g]
    return candidates.groupBy(*program.keys).agg(g("v").alias("v"))


def arrow_schema_of(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)
