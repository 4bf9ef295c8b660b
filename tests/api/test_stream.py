"""``Program.stream`` over the user's own streaming DataFrames (Spark's file source with
an ``op`` column): after an insert file and again after a delete file, each run with
``trigger="available_now"``, the results in ``<lake>/<name>/results/sssp`` equal scipy's
Dijkstra over the edges present; a bad record goes to the dead-letter table with its
reason; a second run on the same lake continues from the checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

import fixflow

from .roads import distances, road_grid

ROOT = Path(__file__).resolve().parents[2]
SSSP = ROOT / "examples" / "api" / "sssp.dl"


def write_csv(path: Path, rows: list[tuple[object, ...]], header: str) -> None:
    lines = [",".join(str(v) for v in row) for row in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + "\n" + "\n".join(lines) + "\n", encoding="utf-8")


def streams(spark: SparkSession, root: Path) -> dict[str, DataFrame]:
    read = spark.readStream.option("header", True)
    return {
        "edge": read.schema("src long, dst long, w double, op string").csv(str(root / "edge")),
        "source": read.schema("node long").csv(str(root / "source")),
    }


def results(lake: Path) -> dict[int, float]:
    table = DeltaTable(str(lake / "roads" / "results" / "sssp")).to_pyarrow_table()
    return dict(zip(table["node"].to_pylist(), table["dist"].to_pylist(), strict=True))


def run(program: fixflow.Program, spark: SparkSession, inputs: Path, lake: Path) -> None:
    query = program.stream(
        spark, lake=lake, name="roads", trigger="available_now", **streams(spark, inputs)
    )
    query.awaitTermination(300)
    assert query.exception() is None
    assert not query.isActive


def test_inserts_then_deletes_from_files(spark: SparkSession, tmp_path: Path) -> None:
    src, dst, w = road_grid(10, seed=5)
    edges = list(zip(src.tolist(), dst.tolist(), w.tolist(), strict=True))
    source = int(src[0])
    inputs, lake = tmp_path / "in", tmp_path / "lake"
    write_csv(inputs / "edge" / "1.csv", [(*e, "insert") for e in edges], "src,dst,w,op")
    write_csv(inputs / "source" / "1.csv", [(source,)], "node")
    program = fixflow.Program.from_file(SSSP)

    run(program, spark, inputs, lake)
    assert results(lake) == pytest.approx(distances(src, dst, w, source))

    gone = np.random.default_rng(3).choice(len(edges), 20, replace=False)
    deleted = [(*edges[i], "delete") for i in gone] + [(*edges[0], "upsert")]
    write_csv(inputs / "edge" / "2.csv", deleted, "src,dst,w,op")
    run(program, spark, inputs, lake)
    keep = np.ones(len(edges), bool)
    keep[gone] = False
    after = distances(src[keep], dst[keep], w[keep], source)
    assert after != distances(src, dst, w, source), "the deletions must change a distance"
    assert results(lake) == pytest.approx(after)

    letters = DeltaTable(str(lake / "roads" / "dead_letter")).to_pyarrow_table().to_pylist()
    assert len(letters) == 1
    assert "upsert" in str(letters[0])


def test_stream_inputs_must_be_streams_of_the_programs_inputs(
    spark: SparkSession, tmp_path: Path
) -> None:
    program = fixflow.Program.from_file(SSSP)
    static = spark.createDataFrame([(1, 2, 1.0)], "src long, dst long, w double")
    with pytest.raises(fixflow.InputError, match="input `edge` is not a streaming DataFrame"):
        program.stream(spark, lake=tmp_path, edge=static)
    with pytest.raises(fixflow.InputError, match=r"`edges` is not an \.input relation"):
        program.stream(spark, lake=tmp_path, edges=static)
    for relation in ("edge", "source"):
        (tmp_path / relation).mkdir()
    with pytest.raises(fixflow.FixflowError, match="runs in `fixflow run` only"):
        settings = {"stream": {"consistency": "async"}}
        program.stream(spark, settings, lake=tmp_path, **streams(spark, tmp_path))
