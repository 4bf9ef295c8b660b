"""Spark tasks write a frame's Parquet files into a Delta table and the driver commits them
in one transaction (``lake/task_write.py``): the same rows as the driver's path, the same
exactly-once commits, and a failed task attempt's file never committed. Real Spark, real
Delta tables, read back with deltalake."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet
import pytest
from deltalake import DeltaTable

from fixflow.checker.ast import Attribute
from fixflow.pipeline.lake.delta import read_table, to_arrow, write_table
from fixflow.pipeline.lake.lakehouse import (
    BatchCommit,
    already_committed,
    append_rows,
    batch_commits,
    merge_changes,
    table_rows,
)
from fixflow.pipeline.lake.results import sorted_rows
from fixflow.pipeline.lake.task_read import read_frame, readable_by_tasks, version_rows
from fixflow.pipeline.lake.task_write import by_tasks, write_frame

SCHEMA = pa.schema([("node", pa.int64()), ("dist", pa.float64()), ("name", pa.string())])
TASK_FILE = re.compile(r"part-[0-9a-f]{32}-c000\.snappy\.parquet")
"""The name of a file a task wrote (delta-rs names its own ``part-00000-<uuid>-...``)."""


def frame(spark: Any, rows: int, partitions: int = 4, start: int = 0) -> Any:
    """Rows (i, i / 2, "n<i>") with Spark's own column names: the table's are by position."""
    return spark.range(start, start + rows, numPartitions=partitions).selectExpr(
        "id AS c0", "id / 2.0 AS c1", "concat('n', id) AS c2"
    )


def rows_of(path: Path | str) -> list[dict[str, Any]]:
    return sorted(read_table(str(path)).to_pylist(), key=lambda r: r["node"])


def files_on_disk(path: Path) -> set[str]:
    return {p.name for p in path.glob("*.parquet")}


def committed_files(path: Path) -> set[str]:
    return {Path(uri).name for uri in DeltaTable(str(path)).file_uris()}


ATTRIBUTES = (Attribute("node", "number"), Attribute("dist", "float"), Attribute("name", "symbol"))


def by_driver(path: Path, rows: Any, mode: str) -> None:
    """The driver's path: the frame collected through Arrow, written by delta-rs."""
    write_table(path, to_arrow(rows, ATTRIBUTES), ATTRIBUTES, mode=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["overwrite", "append"])
def test_tasks_write_the_rows_the_driver_path_writes(spark: Any, tmp_path: Path, mode: str) -> None:
    """Over a table holding other rows: overwrite replaces them, append keeps them."""
    rows, before = frame(spark, 25_000), frame(spark, 10, 1, 100_000)
    driver, tasks = tmp_path / "driver", tmp_path / "tasks"
    by_driver(driver, before, "append")
    by_driver(driver, rows, mode)
    assert write_frame(str(tasks), before, SCHEMA, "append") is not None
    written = write_frame(str(tasks), rows, SCHEMA, mode)  # type: ignore[arg-type]
    assert written is not None and written.rows == 25_000
    assert len(written.files) == 4  # one file a partition, each named by its task
    assert all(TASK_FILE.fullmatch(f.path) for f in written.files)
    assert rows_of(tasks) == rows_of(driver)
    assert len(rows_of(tasks)) == 25_000 + (10 if mode == "append" else 0)
    table = DeltaTable(str(tasks))
    assert pa.schema(table.schema().to_arrow()) == pa.schema(
        DeltaTable(str(driver)).schema().to_arrow()
    )
    assert table_rows(str(tasks)) == table_rows(str(driver))  # the row counts in the log
    stats = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    bounds = {(s["min.node"], s["max.node"]) for s in stats if s["num_records"] != 10}
    assert bounds == {(0, 6249), (6250, 12_499), (12_500, 18_749), (18_750, 24_999)}


def test_a_batch_is_committed_once(spark: Any, tmp_path: Path) -> None:
    """The tasks' commit carries the batch's application transaction: committing the same
    batch again, by tasks or by the driver's path, adds nothing."""
    path = str(tmp_path / "results")
    commit = BatchCommit("q1", 7, {"edge": {"0": [0, 99]}})
    first = write_frame(path, frame(spark, 5_000), SCHEMA, "append", commit)
    assert first is not None and already_committed(path, "q1", 7)
    version = DeltaTable(path).version()
    assert write_frame(path, frame(spark, 5_000), SCHEMA, "append", commit) is None
    assert not append_rows(path, frame(spark, 5).toArrow(), commit)
    assert DeltaTable(path).version() == version
    assert len(rows_of(path)) == 5_000
    (info,) = batch_commits(path)
    assert info["fixflow.batch_id"] == "7" and info["fixflow.offsets"] == '{"edge": {"0": [0, 99]}}'
    later = write_frame(path, frame(spark, 5, 1, 10_000), SCHEMA, "append", BatchCommit("q1", 8))
    assert later is not None and len(rows_of(path)) == 5_005


def test_a_failed_task_attempt_leaves_no_committed_duplicate(spark: Any, tmp_path: Path) -> None:
    """The first attempt of one task writes a file and fails; Spark retries the task
    (local[N,F]), whose new attempt writes a file of its own. Only the files of the
    successful attempts are committed: every row once; the failed attempt's file stays
    behind, named by no commit (vacuum removes it)."""
    path = tmp_path / "results"

    def fails_once(batches: Any) -> Any:
        """Passes a partition's batches on, but partition 0's first attempt fails after its
        third batch, once the writer downstream has had the time to write them to a file."""
        import time

        from pyspark import TaskContext

        context = TaskContext.get()
        first = context is not None and context.partitionId() == 0 and context.attemptNumber() == 0
        for number, batch in enumerate(batches, start=1):
            yield batch
            if first and number == 3:
                time.sleep(3)
                raise RuntimeError("injected failure of a task's first attempt")

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        source = frame(spark, 20_000, partitions=2)
        flaky = source.mapInArrow(fails_once, source.schema)
        # a row group a batch, so the failing attempt has written some before it fails
        written = write_frame(str(path), flaky, SCHEMA, "overwrite", row_group_rows=1000)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert written is not None and written.rows == 20_000
    assert [r["node"] for r in rows_of(path)] == list(range(20_000))
    orphans = files_on_disk(path) - committed_files(path)
    assert len(orphans) == 1 and len(committed_files(path)) == 2
    (orphan,) = orphans
    assert 0 < pa.parquet.read_table(path / orphan).num_rows < 10_000


def test_the_threshold_chooses_the_path(spark: Any) -> None:
    """More than ``limit`` rows on Spark: tasks; at most, or rows the driver holds: the
    driver's path."""
    assert by_tasks(frame(spark, 101), 100)
    assert not by_tasks(frame(spark, 100), 100)
    assert by_tasks(frame(spark, 1), 0)
    assert not by_tasks(frame(spark, 0), 0)
    local = spark.createDataFrame(pa.table({"c0": [1, 2], "c1": [0.5, 1.0], "c2": ["a", "b"]}))
    assert local.isLocal() and not by_tasks(local, 0)


PATH_PROGRAM = """\
.decl edge(src: number, dst: number, w: float)
.input edge
.decl path(src: number, dst: number)
.output path
.decl dist(node: number, d: float)
.output dist
path(X, Y) :- edge(X, Y, _).
path(X, Z) :- path(X, Y), edge(Y, Z, _).
dist(X, 0.0) :- X = 0.
dist(Y, min[dy]) :- dist(X, dx), edge(X, Y, w), dy = dx + w.
"""


EVAL = (sys.executable, "-m", "fixflow.pipeline.cli", "eval")
ON_SPARK = ("--local-rows", "0")


@pytest.mark.spark  # the `fixflow eval` subprocesses start Spark of their own
def test_eval_writes_spark_results_by_tasks_above_the_threshold(tmp_path: Path) -> None:
    """`fixflow eval` with every stratum on Spark: with ``[lake] task_io_rows = 0`` the
    result tables are written by tasks, with the default (more rows than these) by the
    driver; the tables are equal."""
    (tmp_path / "prog.dl").write_text(PATH_PROGRAM)
    (tmp_path / "facts").mkdir()
    tree = [(i, 2 * i + k) for i in range(31) for k in (1, 2)]  # depth 5: few rounds
    edges = "".join(f"{a}\t{b}\t{0.5 * (b % 3) + 1}\n" for a, b in tree)
    (tmp_path / "facts" / "edge.facts").write_text(edges)
    (tmp_path / "low.toml").write_text("[lake]\ntask_io_rows = 0\n")
    outputs = {}
    for name, conf in (("tasks", ["--conf", tmp_path / "low.toml"]), ("driver", [])):
        out = tmp_path / name
        done = subprocess.run(
            [*EVAL, tmp_path / "prog.dl", "-F", tmp_path / "facts", "-D", out, *ON_SPARK, *conf],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert "path: 258 rows" in done.stdout and "dist: 63 rows" in done.stdout
        outputs[name] = out
    for relation in ("path", "dist"):
        by_tasks_table, by_driver_table = (outputs[n] / relation for n in ("tasks", "driver"))
        assert (
            sorted_rows(read_table(str(by_tasks_table))).to_pylist()
            == sorted_rows(read_table(str(by_driver_table))).to_pylist()
        )
        assert all(TASK_FILE.fullmatch(f) for f in committed_files(by_tasks_table))
        assert not any(TASK_FILE.fullmatch(f) for f in committed_files(by_driver_table))


def test_tasks_read_a_table_at_a_version_as_the_driver_does(spark: Any, tmp_path: Path) -> None:
    """Files from the tasks, delta-rs's appends and a merge's rewrites: read by tasks
    (``lake/task_read.py``), the latest version and an older one equal the driver's read."""
    path = str(tmp_path / "t")
    write_frame(path, frame(spark, 3_000), SCHEMA, "overwrite")
    by_driver(Path(path), frame(spark, 10, 1, 50_000), "append")
    merge_changes(
        path,
        ["node"],
        upserts=pa.table({"node": [1, 60_000], "dist": [-1.0, 2.0], "name": ["x", "y"]}),
        deletes=pa.table({"node": list(range(100, 200))}),
    )
    for version in (1, None):
        table = DeltaTable(path, version=version)
        assert readable_by_tasks(table)
        read = read_frame(spark, table).toArrow()
        assert read.schema == SCHEMA
        assert sorted_rows(read).to_pylist() == rows_of_version(path, version)
        assert version_rows(table) == read.num_rows
    partitioned = str(tmp_path / "p")
    append_rows(partitioned, pa.table({"a": [1, 2], "b": ["x", "y"]}), partition_by=["b"])
    assert not readable_by_tasks(DeltaTable(partitioned))  # its values live in the log


def rows_of_version(path: str, version: int | None) -> list[dict[str, Any]]:
    from fixflow.pipeline.lake.lakehouse import read_table as read_version

    table = read_version(path, version)
    assert table is not None
    return sorted_rows(table).to_pylist()
