"""``RunningStream.stop`` right after a batch's last Delta commit: Spark writes the batch's
commit log only after the ``foreachBatch`` function returns, so a stop that ends the query in
between made the next start run that batch again (committing nothing twice, but a batch a
stopped stream had finished is not one to run again). The stop waits for Spark's commit."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import fixflow
from fixflow.pipeline.stream.program import BatchReport

from .roads import distances, road_grid
from .test_stream import SSSP, results, streams, write_csv


@dataclass
class SlowBookkeeping(fixflow.Metrics):
    """Real collectors whose count of a committed batch, the pipeline's last step after the
    batch's Delta commits, takes ``pause_s``: a window between the lake's commit and Spark's
    commit log wide enough to stop the query in."""

    pause_s: float = 2.0
    counting: threading.Event = field(default_factory=threading.Event)

    def batch_committed(self, batch_id: int) -> None:
        self.counting.set()
        time.sleep(self.pause_s)
        super().batch_committed(batch_id)


def test_a_stop_after_the_lake_commit_waits_for_sparks_commit(
    spark: SparkSession, tmp_path: Path
) -> None:
    src, dst, w = road_grid(6, seed=2)
    source = int(src[0])
    inputs, lake = tmp_path / "in", tmp_path / "lake"
    edges = zip(src.tolist(), dst.tolist(), w.tolist(), strict=True)
    write_csv(inputs / "edge" / "1.csv", [(*e, "insert") for e in edges], "src,dst,w,op")
    write_csv(inputs / "source" / "1.csv", [(source,)], "node")
    program = fixflow.Program.from_file(SSSP)
    metrics = SlowBookkeeping()
    query = program.stream(
        spark,
        lake=lake,
        name="roads",
        trigger="1 second",
        metrics=metrics,
        **streams(spark, inputs),
    )
    try:
        assert metrics.counting.wait(300), "the first batch never reached its bookkeeping"
        query.stop()
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None
    assert results(lake) == pytest.approx(distances(src, dst, w, source))

    again: list[BatchReport] = []
    rerun = program.stream(
        spark,
        lake=lake,
        name="roads",
        trigger="available_now",
        on_batch=again.append,
        **streams(spark, inputs),
    )
    rerun.awaitTermination(300)
    assert rerun.exception() is None
    assert [r.batch_id for r in again] == [], "the stopped stream's batch ran again"
