"""A stratum's semi-naive or naive loop inside one Spark task: one job instead of one a round.

On Spark a ``set``, ``aggregate-seminaive`` or ``naive`` stratum pays a job a round
(``strategies.seminaive``: ~0.1-1 s each); a counter of 1,011 rounds took 250-330 s. When
the stratum's plans compile to numpy kernels, ``placement.place`` puts it in a task
instead (``Placement.where == "task"``), and the driver's loop (``driver.stratum.LocalStratum``: the
same plans, the same loop) runs there:

1. every input relation is packed, by the tasks that hold its rows, into Arrow IPC blocks
   (``blocks.encode``) tagged with the input's number, and the blocks are shuffled to one
   partition (no Python rows cross the JVM one by one);
2. that partition's task unpacks them into batches, runs the loop, and yields the
   stratum's relations' rows as blocks plus one row saying how it ended (rounds, capped);
3. the driver stores the task's output (``Materializer.store``: the job, with the end
   row's values observed) and unpacks each relation into a frame it keeps (one job each).

The loop's state lives in the task only while the job runs; a failed task is run again by
Spark from the stored inputs, and nothing is committed before the driver has stored the
output. Past ``EvalOptions.task_rows`` rows the task stops: a semi-naive loop yields its
rows and last delta and Spark continues from there (``seminaive.resumed``, as after the
driver), a naive one restarts on Spark.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from functools import partial, reduce

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import BooleanType, StructField, StructType

from fixflow.checker.ast import TypeName
from fixflow.checker.model import Report, Stratum
from fixflow.operators.core import EvalOptions, RoundInfo, StratumRun, StratumView
from fixflow.operators.driver.rows import empty_rows, to_table
from fixflow.operators.driver.stratum import LocalStratum
from fixflow.operators.engines.batches import Batch, concat, table_rows
from fixflow.operators.engines.blocks import BLOCK_ROWS, decode, encode
from fixflow.operators.placement import Outgrown, inputs_of
from fixflow.operators.spark_backend import relation_struct
from fixflow.operators.task_progress import Address, RoundListener, RoundSender

INPUT, ROWS, DELTA, END = 0, 1, 2, 3
"""Kinds of a block: an input's rows, a relation's rows, its last delta (outgrown), the end."""

NULLARY = "#"
"""The column a nullary relation's rows carry through Arrow (which drops a table's row
count with its last column)."""

ARROW_BLOCKS = pa.schema(
    [
        pa.field("kind", pa.int8(), False),
        pa.field("rel", pa.int32(), False),
        pa.field("blob", pa.binary()),
        pa.field("rounds", pa.int64()),
        pa.field("capped", pa.bool_()),
        pa.field("resumable", pa.bool_()),
        pa.field("outgrown", pa.string()),
    ]
)
BLOCKS = from_arrow_schema(ARROW_BLOCKS)

END_COLUMNS = ("rounds", "capped", "resumable", "outgrown")
"""The end row's columns (null in every other block)."""


@dataclass(frozen=True)
class TaskRun:
    """How the stratum's loop in a task ended. Finished (``outgrown`` None): its relations'
    frames are in ``run.frames.full``. Outgrown and ``resumable`` (a semi-naive loop): its
    rows and last delta are in ``run.frames`` after ``rounds`` rounds, for Spark to continue
    from; outgrown and not resumable (a naive loop): Spark starts over."""

    rounds: int
    capped: bool
    outgrown: str | None
    resumable: bool


class TaskView(StratumView):
    """The stratum as the task sees it: no Spark; its rounds go to the driver's
    ``RoundListener`` at ``driver`` (``task_progress``), throttled."""

    def __init__(
        self, report: Report, stratum: Stratum, options: EvalOptions, driver: Address
    ) -> None:
        super().__init__(report, stratum, options)
        self.driver = driver
        self.sender: RoundSender | None = None
        """Made in the task, at its first round (a socket does not pickle)."""

    def round(self, info: RoundInfo) -> None:
        if self.sender is None:
            self.sender = RoundSender(self.driver)
        self.sender(info)

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()


def run_in_task(run: StratumRun, limit: int) -> TaskRun:
    """Run ``run``'s stratum in one task (the module's docstring), ``limit`` rows at most;
    how it ended (``TaskRun``)."""
    host = run.spark.conf.get("spark.driver.host") or "localhost"
    with closing(RoundListener(host, run.round)) as listener:
        return _ran(run, limit, listener.address)


def _ran(run: StratumRun, limit: int, driver: Address) -> TaskRun:
    inputs = inputs_of(run)
    view = TaskView(run.report, run.stratum, replace(run.options, progress=None), driver)
    packed = [_packed(run.frames.source(r, "full"), i) for i, r in enumerate(inputs)]
    start = run.spark.range(1).select(*_start_columns())  # the task runs with no inputs too
    union = reduce(DataFrame.unionAll, packed, start)
    loop = partial(_loop, view, tuple(inputs), limit)
    observed = [
        F.max("rounds").alias("rounds"),
        F.max(F.col("capped").cast("int")).alias("capped"),
        F.max(F.col("resumable").cast("int")).alias("resumable"),
        F.max("outgrown").alias("outgrown"),
    ]
    stored = run.materializer.store(union.repartition(1).mapInArrow(loop, BLOCKS), observed)
    outgrown = stored.metrics.get("outgrown")
    rounds, capped = int(stored.metric("rounds")), bool(stored.metric("capped"))
    done = TaskRun(rounds, capped, outgrown, bool(stored.metric("resumable")))
    for kind in _kept_kinds(done):
        frames = run.frames.full if kind == ROWS else run.frames.delta
        for j, relation in enumerate(run.relations):
            frames[relation] = _kept(run, stored.frame, kind, j, relation)
    run.materializer.release(stored)
    return done


def _kept_kinds(done: TaskRun) -> list[int]:
    """A finished loop's rows; an outgrown semi-naive loop's rows and last delta (Spark
    continues from them); nothing of an outgrown naive loop (Spark restarts it)."""
    if done.outgrown is None:
        return [ROWS]
    return [ROWS, DELTA] if done.resumable else []


def _start_columns() -> list[Column]:
    return [
        F.lit(-1).cast("tinyint").alias("kind"),
        F.lit(-1).cast("int").alias("rel"),
        *(F.lit(None).cast(f.dataType).alias(f.name) for f in BLOCKS.fields[2:]),
    ]


# ---------------------------------------------------------------- inputs, packed


def _packed(frame: DataFrame, number: int) -> DataFrame:
    """``frame``'s rows as INPUT blocks of input ``number``, packed by its own tasks."""
    if not frame.columns:
        frame = frame.select(F.lit(True).alias(NULLARY))
    return frame.mapInArrow(partial(_pack, number), BLOCKS)


def _pack(number: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    collected = list(batches)
    if not collected:
        return
    rows = pa.Table.from_batches(collected)
    blobs = [encode(rows.slice(s, BLOCK_ROWS)) for s in range(0, len(rows), BLOCK_ROWS)]
    yield from _blocks(INPUT, number, blobs).to_batches()


def _blocks(kind: int, rel: int, blobs: Sequence[bytes | None], **end: object) -> pa.Table:
    n = len(blobs)
    columns = {
        "kind": pa.array([kind] * n, pa.int8()),
        "rel": pa.array([rel] * n, pa.int32()),
        "blob": pa.array(blobs, pa.binary()),
    }
    for name in END_COLUMNS:
        columns[name] = pa.array([end.get(name)] * n, ARROW_BLOCKS.field(name).type)
    return pa.table(columns, schema=ARROW_BLOCKS)


# ---------------------------------------------------------------- the task


def _loop(
    view: TaskView, inputs: tuple[str, ...], limit: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of the one task: unpack the inputs, run the loop, yield
    the relations' rows (and, outgrown, their last delta) and the end row."""
    held = _unpacked(view, inputs, batches)
    stratum = LocalStratum(view, held.get, limit)  # type: ignore[arg-type]
    try:
        rows, rounds = stratum.bootstrap()
    except Outgrown as error:
        yield from _outgrown(view, error)
        return
    finally:
        view.close()
    yield from _relation_blocks(view, ROWS, rows)
    yield from _blocks(END, 0, [None], rounds=rounds, capped=stratum.capped).to_batches()


def _outgrown(view: TaskView, error: Outgrown) -> Iterator[pa.RecordBatch]:
    """A semi-naive loop's rows and last delta (Spark continues from them); nothing of a
    naive loop (Spark starts over)."""
    reached = error.reached
    if reached is not None:
        yield from _relation_blocks(view, ROWS, dict(reached.full))
        yield from _relation_blocks(view, DELTA, dict(reached.delta))
    rounds = 0 if reached is None else reached.rounds
    end = {"rounds": rounds, "resumable": reached is not None, "outgrown": str(error)}
    yield from _blocks(END, 0, [None], **end).to_batches()


def _unpacked(
    view: TaskView, inputs: tuple[str, ...], batches: Iterator[pa.RecordBatch]
) -> dict[str, Batch]:
    tables: dict[int, list[pa.Table]] = defaultdict(list)
    for batch in batches:
        for kind, rel, blob in zip(
            *(batch.column(c).to_pylist() for c in ("kind", "rel", "blob")), strict=True
        ):
            if kind == INPUT:
                tables[rel].append(decode(blob))
    return {name: _batch(tables[i], view.entry(name).types) for i, name in enumerate(inputs)}


def _batch(tables: list[pa.Table], types: Sequence[TypeName]) -> Batch:
    if not tables:
        return empty_rows(types)
    if not types:
        return Batch(sum(t.num_rows for t in tables))
    return concat([table_rows(t, types) for t in tables])


def _relation_blocks(view: TaskView, kind: int, rows: dict[str, Batch]) -> Iterator[pa.RecordBatch]:
    for j, relation in enumerate(view.relations):
        batch = rows.get(relation)
        if batch is None:
            continue
        types = view.entry(relation).types
        table = (
            to_table(batch, types) if types else pa.table({NULLARY: pa.nulls(batch.n, pa.bool_())})
        )
        blobs = [
            encode(table.slice(s, BLOCK_ROWS)) for s in range(0, max(len(table), 1), BLOCK_ROWS)
        ]
        yield from _blocks(kind, j, blobs).to_batches()


# ---------------------------------------------------------------- outputs, unpacked


def _kept(run: StratumRun, blocks: DataFrame, kind: int, number: int, relation: str) -> DataFrame:
    """Relation ``number``'s blocks of ``kind`` unpacked into its frame, stored over the
    run's partitions (one job)."""
    types = run.entry(relation).types
    mine = blocks.where((F.col("kind") == kind) & (F.col("rel") == number)).select("blob")
    if not types:
        struct = StructType([StructField(NULLARY, BooleanType(), True)])
        return run.keep(mine.mapInArrow(_unpack, struct).select())
    frame = mine.mapInArrow(_unpack, relation_struct(types))
    return run.keep(frame.repartition(run.partitions))


def _unpack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for blob in batch.column("blob").to_pylist():
            yield from decode(blob).to_batches()
