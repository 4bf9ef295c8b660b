"""The async engine's stage frame: one row layout for state, message, auxiliary and
statistics rows (``Layout``), the frame a run leaves behind (``AsyncState``, the engine's
``MraState``), and what one bootstrap or resume works on (``AsyncRun``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, ByteType, IntegerType, StructField, StructType

from fixflow.checker.ast import TypeName
from fixflow.operators.engines.base import EngineEnv
from fixflow.operators.engines.blocks import BLOB
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.engines.shard_loop import MESSAGE, STATE
from fixflow.operators.engines.shard_map import ShardMap
from fixflow.operators.materialize import Stored
from fixflow.operators.spark_backend import positional, spark_type


@dataclass(frozen=True)
class Layout:
    """The columns of a stage frame: state and message rows use the key, value and witness
    columns; auxiliary rows carry an Arrow block (``engines.blocks``), the statistics row
    the stages of the run as JSON (``engines.shard_run``)."""

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


@dataclass
class AsyncRun:
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


def witness_columns(run: AsyncRun, frame: DataFrame) -> list[Column]:
    """``frame``'s witness columns ``w0..`` as the layout's ``wit0..`` (none when the
    layout keeps no witness or ``frame`` has none)."""
    names = [f"w{j}" for j in range(len(run.program.keys))]
    if not run.layout.witness or not all(n in frame.columns for n in names):
        return []
    return [F.col(n).alias(f"wit{j}") for j, n in enumerate(names)]
