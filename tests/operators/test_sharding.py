"""engines.sharding: locality-aware shard assignment and its hash fallback."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fixflow.operators.engines import sharding

SIDE = 40
SHARDS = 4


def permuted_grid(side: int = SIDE, seed: int = 3) -> tuple[np.ndarray, np.ndarray, int]:
    """Both directions of every link of a side × side grid, node ids randomly permuted."""
    r, c = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    node = (r * side + c).ravel()
    right, down = node[(c < side - 1).ravel()], node[(r < side - 1).ravel()]
    u = np.concatenate([right, down])
    v = np.concatenate([right + 1, down + side])
    perm = np.random.default_rng(seed).permutation(side * side)
    return perm[np.concatenate([u, v])], perm[np.concatenate([v, u])], side * side


def power_law(nodes: int = 800, links: int = 6000, seed: int = 5) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, nodes + 1) ** 0.8
    p = weights / weights.sum()
    src, dst = rng.choice(nodes, links, p=p), rng.choice(nodes, links, p=p)
    perm = rng.permutation(nodes)
    return perm[src], perm[dst]


@pytest.fixture(scope="module")
def grid_links(spark: SparkSession) -> DataFrame:
    src, dst, _ = permuted_grid()
    frame = spark.createDataFrame(
        [(int(a), int(b)) for a, b in zip(src, dst, strict=True)], "src long, dst long"
    )
    return frame.cache()


@pytest.fixture(scope="module")
def grid_assignment(grid_links: DataFrame) -> Iterator[sharding.Assignment]:
    assignment = sharding.assign(grid_links, SHARDS)
    yield assignment
    assignment.release()


def test_rcm_cuts_far_fewer_links_than_hash(grid_assignment: sharding.Assignment) -> None:
    a = grid_assignment
    links = 4 * SIDE * (SIDE - 1)
    assert a.method == "rcm" and a.shards == SHARDS and a.links == links
    assert a.hash_cut is not None and a.hash_cut > 0.6 * links  # ~3/4 of the links
    assert a.cut < a.hash_cut / 10, a.describe()
    # the reported cut is the cut of the table
    src, dst, _ = permuted_grid()
    assert a.table is not None
    shard = dict(zip(a.table.keys.tolist(), a.table.shard.tolist(), strict=True))
    assert a.cut == sum(shard[int(s)] != shard[int(d)] for s, d in zip(src, dst, strict=True))


def test_every_key_gets_exactly_one_shard_in_range(
    grid_assignment: sharding.Assignment,
) -> None:
    table = grid_assignment.table
    assert table is not None and grid_assignment.shared is not None
    assert table.keys.dtype == np.int64 and table.shard.dtype == np.int32
    assert sorted(table.keys.tolist()) == list(range(SIDE * SIDE))  # every node once
    assert set(table.shard.tolist()) == set(range(SHARDS))


def test_tasks_label_rows_by_the_broadcast_assignment_and_hash_the_rest(
    grid_assignment: sharding.Assignment, spark: SparkSession
) -> None:
    """The lookup in the tasks (no join): assigned keys get their shard, unknown keys the
    hash fallback Spark computes, a null key Spark's hash of null; one pass labels two key
    columns."""
    table = grid_assignment.table
    assert table is not None
    probe = spark.createDataFrame([(0, 5), (17, 2**40 + 3), (None, 1), (-7, 0)], "a long, b long")
    got = sharding.labelled(
        probe,
        grid_assignment.shared,
        [("a", "sa"), ("b", "sb")],  # type: ignore[arg-type]
    ).withColumns(
        {
            "ha": sharding.hash_shard("a", SHARDS),
            "hb": sharding.hash_shard("b", SHARDS),
        }
    )
    known = dict(zip(table.keys.tolist(), table.shard.tolist(), strict=True))
    for row in got.collect():
        for key, label, hashed in ((row.a, row.sa, row.ha), (row.b, row.sb, row.hb)):
            assert label == known.get(key, hashed), (key, label, hashed)


def test_shards_are_balanced_by_out_links(grid_assignment: sharding.Assignment) -> None:
    per_shard = grid_assignment.shard_links
    assert len(per_shard) == SHARDS and sum(per_shard) == grid_assignment.links
    assert max(per_shard) <= 1.25 * np.mean(per_shard)


@pytest.mark.parametrize("method", ["rcm", "bfs"])
def test_balance_on_a_power_law_graph(method: str) -> None:
    src, dst = power_law()
    shard = sharding.assign_codes(src, dst, 800, 8, method)
    per_shard = np.bincount(shard[src], minlength=8)
    assert per_shard.min() > 0
    assert per_shard.max() <= 2.0 * per_shard.mean()


def test_orders_are_permutations_and_beat_hash_on_a_grid() -> None:
    src, dst, nodes = permuted_grid(30)
    rows = sharding.compare(src, dst, nodes, (2, 8))
    cut = {(row["method"], row["shards"]): row["cut"] for row in rows}
    for method in ("rcm", "bfs"):
        order = sharding.node_order(src, dst, nodes, method)
        assert sorted(order.tolist()) == list(range(nodes))
        for shards in (2, 8):
            assert cut[method, shards] < cut["hash", shards] / 3  # type: ignore[operator]


@pytest.mark.parametrize("key_type", [pa.int32(), pa.int64()])
def test_integer_keys_get_codes_in_key_order(key_type: pa.DataType) -> None:
    """The codes the assignment orders nodes by are the keys' ranks (what ``np.unique``
    gives), whatever the chunking, for negative keys and keys seen on one side only."""
    rng = np.random.default_rng(3)
    src = rng.integers(-50, 50, 400)
    dst = rng.integers(-80, 20, 400)
    chunked = pa.chunked_array([src[:150], src[150:]], type=key_type)
    src_codes, dst_codes, keys = sharding.factorize(chunked, pa.array(dst, type=key_type))
    uniques, codes = np.unique(np.concatenate([src, dst]), return_inverse=True)
    assert keys.type == key_type
    assert keys.to_pylist() == uniques.tolist()
    assert src_codes.tolist() == codes[:400].tolist()
    assert dst_codes.tolist() == codes[400:].tolist()


def test_bfs_order_covers_every_component() -> None:
    src = np.array([0, 1, 3, 5, 6])
    dst = np.array([1, 2, 4, 6, 5])
    order = sharding.node_order(src, dst, 8, "bfs")  # node 7 has no links
    assert sorted(order.tolist()) == list(range(8))
    position = {int(node): i for i, node in enumerate(order)}
    for component in ([0, 1, 2], [3, 4], [5, 6]):  # each component contiguous
        spots = sorted(position[n] for n in component)
        assert spots == list(range(spots[0], spots[0] + len(component)))


def test_string_keys(spark: SparkSession) -> None:
    src, dst, nodes = permuted_grid(20)
    rows: list[tuple[str, str | None]] = [(f"n{a}", f"n{b}") for a, b in zip(src, dst, strict=True)]
    rows.append(("lonely", None))  # ignored: a null key
    links = spark.createDataFrame(rows, "a string, b string")
    a = sharding.assign(links, 3)
    try:
        assert a.method == "rcm" and a.links == len(src) and a.nodes == nodes
        assert a.hash_cut is not None and a.cut < a.hash_cut / 5
        assert a.table is not None and a.table.keys.dtype == object
        shard = dict(zip(a.table.keys.tolist(), a.table.shard.tolist(), strict=True))
        assert set(shard) == {f"n{i}" for i in range(nodes)}
        assert set(shard.values()) == {0, 1, 2}
        assert a.cut == sum(shard[s] != shard[d] for s, d in rows[:-1])
        # keys the assignment does not hold get the hash fallback
        probe = spark.createDataFrame([("n0",), ("new",)], "k string")
        got = {row["k"]: row["shard"] for row in a.shard_of(probe, "k").collect()}
        assert got["n0"] == shard["n0"]
        assert got["new"] == int(sharding.hash_shard_numpy(np.array(["new"]), 3)[0])
    finally:
        a.release()


INTS = [0, 1, -1, 2, 7, 42, 1000003, -(2**31), 2**31 - 1, 2**40 + 5, -(2**63), 2**63 - 1]


@pytest.mark.parametrize("shards", [1, 3, 8])
def test_hash_fallback_agrees_between_spark_and_numpy(spark: SparkSession, shards: int) -> None:
    more = np.random.default_rng(shards).integers(-(2**62), 2**62, 200).tolist()
    longs = INTS + more + list(range(100))
    frame = spark.createDataFrame([(k,) for k in longs], "k long")
    spark_shards = [
        row["s"] for row in frame.select(sharding.hash_shard("k", shards).alias("s")).collect()
    ]
    assert (
        spark_shards == sharding.hash_shard_numpy(np.array(longs, dtype=np.int64), shards).tolist()
    )
    assert set(spark_shards) <= set(range(shards))
    # 32-bit integer columns hash differently in Spark; numpy follows by dtype
    ints = [k for k in longs if -(2**31) <= k < 2**31]
    frame = spark.createDataFrame([(k,) for k in ints], "k int")
    spark_shards = [
        row["s"]
        for row in frame.select(sharding.hash_shard(F.col("k"), shards).alias("s")).collect()
    ]
    assert (
        spark_shards == sharding.hash_shard_numpy(np.array(ints, dtype=np.int32), shards).tolist()
    )


def test_string_hash_agrees_with_spark(spark: SparkSession) -> None:
    words = ["", "a", "abcd", "abcdefg", "abcdefgh", "x" * 31, "y" * 32, "z" * 77, "ünïcødé", "n42"]
    frame = spark.createDataFrame([(w,) for w in words], "k string")
    expected = [row["h"] for row in frame.select(F.xxhash64("k").alias("h")).collect()]
    assert sharding.xxhash64_numpy(np.array(words, dtype=object)).tolist() == expected


def test_guard_falls_back_to_hash_and_logs_once(
    grid_links: DataFrame, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sharding, "_guard_logged", False)
    with caplog.at_level(logging.WARNING, logger=sharding.__name__):
        first = sharding.assign(grid_links, SHARDS, max_links=100)
        second = sharding.assign(grid_links, SHARDS, max_links=100)
    for a in (first, second):
        assert a.method == "hash" and a.table is None and "exceed" in a.reason
        assert a.cut == a.hash_cut and a.links == 4 * SIDE * (SIDE - 1)
    warnings = [r for r in caplog.records if "hash sharding" in r.getMessage()]
    assert len(warnings) == 1
    # the hash assignment's shard_of is the fallback itself
    labelled = first.shard_of(grid_links, "src", "s").where(
        F.col("s") != sharding.hash_shard("src", SHARDS)
    )
    assert labelled.count() == 0
