"""Locality-aware shard assignment for the async MRA engine (DESIGN §3.2).

Node ids carry no locality (real data and the benchmarks number nodes at random), so hash
sharding cuts nearly every link: with n shards a fraction (n-1)/n of all links crosses a
shard boundary, and every crossing is a message and, for a path, a stage. The assignment is
therefore computed from the graph, once per bootstrap, and kept for updates:

1. the links (a DataFrame of two key columns, source and destination) are counted in one
   Spark job, which also measures the hash assignment's cut as a baseline;
2. they are collected to the driver through Arrow and their keys factorized (integers by
   value; any other type, e.g. strings, by Arrow dictionary encoding);
3. the nodes are ordered on the symmetric adjacency by reverse Cuthill–McKee
   (``scipy.sparse.csgraph.reverse_cuthill_mckee``: a breadth-first order from a
   pseudo-peripheral node, neighbours by degree, so neighbours get nearby positions) or by
   plain breadth-first order;
4. the order is cut into ``shards`` contiguous ranges of about equal work, the work of a
   node being its out-links (a shard's task joins each of its keys with that key's
   out-links);
5. the (key, shard) table goes to the tasks as a broadcast variable (``KeyShards``), so a
   task anywhere in a cluster labels its rows by a numpy lookup (``labelled``) where two
   joins with a (key, shard) DataFrame did before (2.7 of the 4.9 s that preparing the
   grid_1m SSSP for 2 shards took).

Measured with ``compare`` on the ``bench/graphs.py`` graphs (seed-42 node permutation): cut
links in percent of all links; every range assignment is balanced within 1% of the mean
out-links per shard, hash sharding only within 4-33% (R-MAT hubs)::

    graph      shards    rcm     bfs    hash
    grid_100k     2     0.59    0.64    50.3
    grid_100k     4     1.77    1.63    75.1
    grid_100k     8     3.81    3.47    87.6
    grid_1m       2     0.19    0.20    50.1
    grid_1m       4     0.57    0.52    75.1
    grid_1m       8     1.22    1.12    87.5
    rmat_100k     2     53.9    53.0    49.9
    rmat_100k     4     77.1    77.1    74.9
    rmat_100k     8     88.8    88.7    87.3
    rmat_1m       2     53.3    53.2    49.9
    rmat_1m       4     77.3    77.1    75.0
    rmat_1m       8     88.7    88.6    87.5

On road-like grids an order cuts 40-400 times fewer links than hashing. On R-MAT no order
helps (every node is a few hops from the hubs): the cut stays at hash level, but the shards'
work is balanced. Partitioners from the literature (``bench/partition_cut.py``) cut R-MAT at
best 18% less at two shards, which made no two-shard run faster (``bench/ENGINES.md``). RCM
is the default: plain BFS (from the lowest id of each component) cut a little less on
this one permutation at 4-8 shards, but over 8 other random permutations of grid_100k its
cut depends on where the start node falls (8 shards: 3,099-5,591 links, median 3,737),
where RCM's start is a pseudo-peripheral node (3,117-3,758, median 3,565; 2 shards: RCM
579-610, BFS 585-1,002).

Keys the assignment does not know (new keys of incremental updates) go to a deterministic
hash shard, ``pmod(xxhash64(key), shards)``: ``hash_shard`` is that Spark Column
expression and ``hash_shard_numpy`` the same function in numpy (for kernels inside a task).
Both give the same shard for 64-bit integer (``long``/``number``), 32-bit integer and
string keys (tested on all three): ``hash_shard_numpy`` is Spark's XXH64, seed 42.

Above ``max_links`` links (default ``DEFAULT_MAX_LINKS`` = 50 million) the links are not
collected to the driver: the assignment is the hash assignment (``method = "hash"``,
``frame = None``), and a warning says so once per process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark import Broadcast
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

log = logging.getLogger(__name__)

DEFAULT_MAX_LINKS = 50_000_000
"""Links above which the graph is not collected to the driver (hash sharding instead)."""
METHODS = ("rcm", "bfs", "hash")
DEFAULT_METHOD = "rcm"
"""The best-measured method (the table in the module docstring)."""
SPARK_HASH_SEED = 42
"""The seed of Spark's ``xxhash64`` and ``hash`` functions."""

_guard_logged = False


# ---------------------------------------------------------------- the hash fallback


def hash_shard(column: Column | str, shards: int) -> Column:
    """The hash shard of ``column`` as a Spark Column (int): ``pmod(xxhash64(key), shards)``.
    Equal to ``hash_shard_numpy`` on the same keys."""
    key = F.col(column) if isinstance(column, str) else column
    return F.pmod(F.xxhash64(key), F.lit(shards)).cast("int")


_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * _P2
    h = h ^ (h >> np.uint64(29))
    h = h * _P3
    return h ^ (h >> np.uint64(32))


def xxhash64_numpy(keys: np.ndarray, seed: int = SPARK_HASH_SEED) -> np.ndarray:
    """Spark's ``xxhash64`` (int64) of every key: ``XXH64.hashLong`` for 64-bit integers,
    ``XXH64.hashInt`` for 32-bit (and narrower) integers, ``hashUnsafeBytes`` of the UTF-8
    bytes for strings (per key in Python: slow, meant for few keys)."""
    keys = np.asarray(keys)
    if keys.dtype.kind in "US" or keys.dtype == object:
        return np.array([_xxhash64_bytes(_utf8(k), seed) for k in keys.ravel()], dtype=np.int64)
    if keys.dtype.kind not in "iu":
        raise TypeError(f"hash shards of {keys.dtype} keys are not implemented")
    s = np.uint64(seed % (1 << 64))
    with np.errstate(over="ignore"):
        if keys.dtype.itemsize == 8:
            k = keys.astype(np.int64).view(np.uint64)
            h = np.full(k.shape, s + _P5 + np.uint64(8), dtype=np.uint64)
            h = h ^ (_rotl(k * _P2, 31) * _P1)
            h = _rotl(h, 27) * _P1 + _P4
        else:
            k = keys.astype(np.int32).view(np.uint32).astype(np.uint64)
            h = np.full(k.shape, s + _P5 + np.uint64(4), dtype=np.uint64)
            h = h ^ (k * _P1)
            h = _rotl(h, 23) * _P2 + _P3
        return _fmix(h).view(np.int64)


def hash_shard_numpy(keys: np.ndarray, shards: int) -> np.ndarray:
    """The hash shard (int32) of every key, in numpy: the same as ``hash_shard`` in Spark
    for keys of the same type (int64 keys ↔ a LongType column, int32 ↔ IntegerType,
    str ↔ StringType)."""
    return np.mod(xxhash64_numpy(keys), shards).astype(np.int32)


def _utf8(key: object) -> bytes:
    return key if isinstance(key, bytes) else str(key).encode("utf-8")


_M64 = (1 << 64) - 1
_I1, _I2, _I3, _I4, _I5 = (int(p) for p in (_P1, _P2, _P3, _P4, _P5))


def _rotl_int(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round_int(acc: int, lane: int) -> int:
    return _rotl_int((acc + lane * _I2) & _M64, 31) * _I1 & _M64


def _merge_int(h: int, acc: int) -> int:
    return ((h ^ _round_int(0, acc)) * _I1 + _I4) & _M64


def _xxhash64_bytes(data: bytes, seed: int) -> int:
    """XXH64 of ``data`` as Spark's ``XXH64.hashUnsafeBytes`` computes it (signed)."""
    n = len(data)
    i = 0
    seed &= _M64
    if n >= 32:
        v1 = (seed + _I1 + _I2) & _M64
        v2 = (seed + _I2) & _M64
        v3 = seed
        v4 = (seed - _I1) & _M64
        while i <= n - 32:
            lanes = [int.from_bytes(data[i + 8 * j : i + 8 * j + 8], "little") for j in range(4)]
            v1, v2, v3, v4 = (
                _round_int(v, lane) for v, lane in zip((v1, v2, v3, v4), lanes, strict=True)
            )
            i += 32
        h = (_rotl_int(v1, 1) + _rotl_int(v2, 7) + _rotl_int(v3, 12) + _rotl_int(v4, 18)) & _M64
        for v in (v1, v2, v3, v4):
            h = _merge_int(h, v)
    else:
        h = (seed + _I5) & _M64
    h = (h + n) & _M64
    while i <= n - 8:
        k1 = _round_int(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl_int(h ^ k1, 27) * _I1 + _I4) & _M64
        i += 8
    if i <= n - 4:
        h = (
            _rotl_int(h ^ (int.from_bytes(data[i : i + 4], "little") * _I1 & _M64), 23) * _I2 + _I3
        ) & _M64
        i += 4
    while i < n:
        h = _rotl_int(h ^ (data[i] * _I5 & _M64), 11) * _I1 & _M64
        i += 1
    h ^= h >> 33
    h = h * _I2 & _M64
    h ^= h >> 29
    h = h * _I3 & _M64
    h ^= h >> 32
    return h - (1 << 64) if h >= 1 << 63 else h


# ---------------------------------------------------------------- orders and ranges (numpy)


def adjacency(src: np.ndarray, dst: np.ndarray, nodes: int) -> object:
    """The symmetric CSR adjacency (structure only) of the links ``src → dst`` over node
    codes ``0..nodes-1``; duplicates merged, self loops dropped."""
    from scipy.sparse import csr_array  # only shards order a graph: see SCIPY_SORT_ROWS

    keep = src != dst
    rows = np.concatenate([src[keep], dst[keep]])
    cols = np.concatenate([dst[keep], src[keep]])
    data = np.ones(len(rows), dtype=np.int8)
    matrix = csr_array((data, (rows, cols)), shape=(nodes, nodes))
    matrix.sum_duplicates()
    return matrix


def node_order(
    src: np.ndarray, dst: np.ndarray, nodes: int, method: str = DEFAULT_METHOD
) -> np.ndarray:
    """A permutation of the node codes ``0..nodes-1`` that keeps neighbours close:
    ``rcm`` (reverse Cuthill–McKee) or ``bfs`` (breadth-first from the lowest code of every
    connected component, components one after the other)."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee  # see adjacency

    if nodes == 0:
        return np.empty(0, dtype=np.int64)
    matrix = adjacency(src, dst, nodes)
    if method == "rcm":
        return np.asarray(reverse_cuthill_mckee(matrix, symmetric_mode=True), dtype=np.int64)
    if method == "bfs":
        return _bfs_order(matrix, nodes)
    raise ValueError(f"unknown node order {method!r} (rcm or bfs)")


def _bfs_order(matrix: object, nodes: int) -> np.ndarray:
    """BFS from a virtual root linked to the first node of every component, then the nodes
    grouped by component (stable, so each component keeps its own BFS order)."""
    from scipy.sparse import csr_array  # see adjacency
    from scipy.sparse.csgraph import breadth_first_order, connected_components

    count, labels = connected_components(matrix, directed=False)
    roots = np.unique(labels, return_index=True)[1]  # the lowest code of every component
    root = nodes
    rows = np.full(len(roots), root)
    link = csr_array(
        (np.ones(len(roots), dtype=np.int8), (rows, roots)), shape=(nodes + 1, nodes + 1)
    )
    coo = matrix.tocoo()  # type: ignore[attr-defined]
    grown = csr_array((coo.data, (coo.row, coo.col)), shape=(nodes + 1, nodes + 1)) + link
    order = breadth_first_order(grown, root, directed=True, return_predecessors=False)
    order = np.asarray(order[1:], dtype=np.int64)  # the virtual root first
    rank = np.empty(count, dtype=np.int64)
    rank[labels[roots]] = np.arange(count)
    return order[np.argsort(rank[labels[order]], kind="stable")]


def contiguous_ranges(order: np.ndarray, work: np.ndarray, shards: int) -> np.ndarray:
    """shard[code]: ``order`` cut into ``shards`` contiguous ranges of about equal total
    ``work`` (a node goes to the range holding the middle of its work; without any work,
    ranges of equal node counts)."""
    nodes = len(order)
    shard = np.zeros(nodes, dtype=np.int32)
    if nodes == 0 or shards <= 1:
        return shard
    w = work[order].astype(np.float64)
    total = float(w.sum())
    if total <= 0:
        w = np.ones(nodes)
        total = float(nodes)
    middle = np.cumsum(w) - w / 2
    position = np.minimum((middle * shards / total).astype(np.int64), shards - 1)
    shard[order] = position.astype(np.int32)
    return shard


def cut_size(src_shard: np.ndarray, dst_shard: np.ndarray) -> int:
    """Links whose endpoints are in different shards."""
    return int(np.count_nonzero(src_shard != dst_shard))


def assign_codes(
    src: np.ndarray, dst: np.ndarray, nodes: int, shards: int, method: str = DEFAULT_METHOD
) -> np.ndarray:
    """shard[code] for links over node codes ``0..nodes-1`` (numpy only)."""
    if method == "hash":
        return hash_shard_numpy(np.arange(nodes, dtype=np.int64), shards)
    work = np.bincount(src, minlength=nodes)
    return contiguous_ranges(node_order(src, dst, nodes, method), work, shards)


def factorize(
    src: pa.ChunkedArray | pa.Array, dst: pa.ChunkedArray | pa.Array
) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """(src codes, dst codes, distinct keys) of two key columns; integers by value (codes in
    key order: hashed, then the distinct keys sorted, as ``np.unique`` gives them sorting
    every row — 0.73 against 7.65 s on R-MAT 10M), strings by dictionary encoding."""
    both = pa.chunked_array([*_chunks(src), *_chunks(dst)], type=src.type).combine_chunks()
    n = len(src)
    if pa.types.is_integer(both.type):
        values = both.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        codes, uniques = pd.factorize(values, sort=True)
        keys = pa.array(uniques).cast(both.type)
    else:
        encoded = both.dictionary_encode()
        codes, keys = encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary
    codes = np.asarray(codes, dtype=np.int64)
    return codes[:n], codes[n:], keys


def _chunks(array: pa.ChunkedArray | pa.Array) -> list[pa.Array]:
    return list(array.chunks) if isinstance(array, pa.ChunkedArray) else [array]


# ---------------------------------------------------------------- the Spark assignment


@dataclass
class KeyShards:
    """Key → shard index in numpy, for tasks: the assignment's keys and shards, with the
    hash fallback for keys it does not hold (shipped to tasks as a broadcast variable)."""

    keys: np.ndarray
    """The assigned keys (int64, or object for strings), distinct."""
    shard: np.ndarray
    """shard[i]: the shard of ``keys[i]`` (int32)."""
    shards: int

    def lookup(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The shard (int32) of every key: assigned, else ``hash_shard_numpy`` (a null
        key: Spark's ``pmod(xxhash64(null), shards)``, the seed's)."""
        index = self.__dict__.get("_index")
        if index is None:
            index = self.__dict__["_index"] = pd.Index(self.keys)
        valid = np.asarray(keys.is_valid())
        values = keys.fill_null("" if pa.types.is_string(keys.type) else 0)
        values = values.to_numpy(zero_copy_only=False)
        pos = index.get_indexer(values)
        found = (pos >= 0) & valid
        out = np.full(len(values), SPARK_HASH_SEED % self.shards, dtype=np.int32)
        out[found] = self.shard[pos[found]]
        missing = ~found & valid
        if missing.any():
            out[missing] = hash_shard_numpy(values[missing], self.shards)
        return out


@dataclass
class Assignment:
    """Key → shard for one graph: ``KeyShards`` in the driver and, for tasks, a broadcast
    of it, with the hash fallback for keys it does not hold."""

    table: KeyShards | None
    """(key, shard) for every node of the links; None when the assignment is the hash
    function itself (``method == "hash"``)."""
    shared: Broadcast[KeyShards] | None
    """``table`` broadcast to the tasks (None with it)."""
    shards: int
    method: str
    """``rcm``, ``bfs`` or ``hash``."""
    links: int
    """Links the assignment was computed from (self loops and duplicates included)."""
    cut: int
    """Links whose endpoints are in different shards."""
    nodes: int | None = None
    """Distinct keys (None when not collected)."""
    hash_cut: int | None = None
    """The cut of hash sharding on the same links (the baseline; None when not known)."""
    shard_links: list[int] = field(default_factory=list)
    """Out-links per shard (the work of each shard); empty when not collected."""
    seconds: float = 0.0
    """Wall time of ``assign``."""
    reason: str = ""
    """Why the method is ``hash`` when another was asked for."""

    def shard_of(self, frame: DataFrame, key: str, out: str = "shard") -> DataFrame:
        """``frame`` with column ``out`` (int) = the shard of column ``key``: the assigned
        shard, or the hash fallback for keys the assignment does not hold."""
        if self.shared is None:
            return frame.withColumn(out, hash_shard(F.col(key), self.shards))
        return labelled(frame, self.shared, [(key, out)])

    @property
    def cut_fraction(self) -> float:
        return self.cut / self.links if self.links else 0.0

    def describe(self) -> str:
        base = f"; hash would cut {self.hash_cut}" if self.hash_cut is not None else ""
        return (
            f"{self.method} sharding into {self.shards}: {self.cut} of {self.links} links cut "
            f"({100 * self.cut_fraction:.1f}%){base}"
        )

    def release(self) -> None:
        """Free the broadcast assignment."""
        if self.shared is not None:
            self.shared.unpersist(blocking=False)


def labelled(
    frame: DataFrame,
    shared: Broadcast[KeyShards],
    columns: list[tuple[str, str]],
    labels: list[int] | None = None,
) -> DataFrame:
    """``frame`` with, per (key column, out), column ``out`` (int) = the key's shard (or
    ``labels[shard]``), looked up in numpy in the tasks (one pass over the rows, no join)."""
    fields = [StructField(out, IntegerType()) for _, out in columns]
    schema = StructType([*frame.schema.fields, *fields])
    task = partial(_label_batches, shared, columns, labels)
    return frame.mapInArrow(task, schema)


def _label_batches(
    shared: Broadcast[KeyShards],
    columns: list[tuple[str, str]],
    labels: list[int] | None,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield label_batch(shared, columns, labels, batch)


def label_batch(
    shared: Broadcast[KeyShards],
    columns: list[tuple[str, str]],
    labels: list[int] | None,
    batch: pa.RecordBatch,
) -> pa.RecordBatch:
    """``batch`` with, per (key column, out), column ``out`` (int32): the key's shard, or
    ``labels[shard]``."""
    table = shared.value
    for key, out in columns:
        shard = table.lookup(batch.column(key))
        if labels is not None:
            shard = np.asarray(labels, dtype=np.int32)[shard]
        batch = batch.append_column(out, pa.array(shard, type=pa.int32()))
    return batch


def assign(
    links: DataFrame,
    shards: int,
    method: str = DEFAULT_METHOD,
    max_links: int = DEFAULT_MAX_LINKS,
    count: int | None = None,
) -> Assignment:
    """The shard of every key of ``links`` (its first two columns: source and destination
    key, of one type; rows with a null key are ignored).

    Spark jobs: one to count the links (and the hash cut; none when the caller knows
    ``count``, an upper bound of the links, and then the hash cut is computed in numpy for
    integer keys), one to collect them as Arrow. Beyond ``max_links`` links only the first
    runs and the result is hash sharding."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    if method not in METHODS:
        raise ValueError(f"unknown sharding method {method!r} (one of {', '.join(METHODS)})")
    started = time.monotonic()
    src_name, dst_name = links.columns[:2]
    key_type = links.schema[src_name].dataType
    pairs = links.select(
        F.col(src_name).alias("src"), F.col(dst_name).cast(key_type).alias("dst")
    ).where(F.col("src").isNotNull() & F.col("dst").isNotNull())
    hash_cut: int | None = None
    if count is None or count > max_links or method == "hash":
        counted = pairs.agg(
            F.count(F.lit(1)).alias("links"),
            F.count(F.when(hash_shard("src", shards) != hash_shard("dst", shards), 1)).alias("cut"),
        ).first()
        assert counted is not None
        count, hash_cut = int(counted["links"]), int(counted["cut"])
        if method == "hash":
            return _hashed(shards, count, hash_cut, started)
        if count > max_links:
            return _hashed(shards, count, hash_cut, started, _guard(count, max_links))
    return _from_graph(links, pairs, shards, method, hash_cut, started)


def _hashed(shards: int, total: int, hash_cut: int, started: float, reason: str = "") -> Assignment:
    seconds = time.monotonic() - started
    return Assignment(
        None,
        None,
        shards,
        "hash",
        total,
        hash_cut,
        hash_cut=hash_cut,
        seconds=seconds,
        reason=reason,
    )


def _guard(total: int, max_links: int) -> str:
    """Why a graph is too large to collect; logged once per process as a warning."""
    global _guard_logged
    reason = f"{total} links exceed the limit of {max_links} for collecting the graph to the driver"
    if not _guard_logged:
        log.warning("shard assignment: %s; using hash sharding", reason)
        _guard_logged = True
    else:
        log.debug("shard assignment: %s; using hash sharding", reason)
    return reason


def _from_graph(
    links: DataFrame,
    pairs: DataFrame,
    shards: int,
    method: str,
    hash_cut: int | None,
    started: float,
) -> Assignment:
    """The locality-aware assignment: the links collected, ordered and cut on the driver,
    then broadcast to the tasks."""
    table = _collect(pairs)
    src, dst, keys = factorize(table.column("src"), table.column("dst"))
    nodes = len(keys)
    shard = assign_codes(src, dst, nodes, shards, method)
    cut = cut_size(shard[src], shard[dst])
    values = keys.to_numpy(zero_copy_only=False)
    if hash_cut is None and pa.types.is_integer(keys.type):
        hashed = hash_shard_numpy(values, shards)
        hash_cut = cut_size(hashed[src], hashed[dst])
    per_shard = np.bincount(shard[src], minlength=shards).tolist() if nodes else [0] * shards
    key_shards = KeyShards(values, shard.astype(np.int32), shards)
    result = Assignment(
        key_shards,
        links.sparkSession.sparkContext.broadcast(key_shards),
        shards,
        method,
        len(src),
        cut,
        nodes=nodes,
        hash_cut=hash_cut,
        shard_links=per_shard,
        seconds=time.monotonic() - started,
    )
    log.info("%s in %.2f s", result.describe(), result.seconds)
    return result


def _collect(frame: DataFrame) -> pa.Table:
    """``frame`` on the driver as an Arrow table."""
    return frame.toArrow()


# ---------------------------------------------------------------- measuring


def compare(
    src: np.ndarray,
    dst: np.ndarray,
    nodes: int,
    shard_counts: tuple[int, ...] = (2, 4, 8, 16),
    methods: tuple[str, ...] = METHODS,
) -> list[dict[str, object]]:
    """Cut sizes and balance of every method and shard count on links over node codes
    (numpy only): one dict per (method, shards) with ``cut``, ``cut_pct``,
    ``imbalance`` (largest shard's out-links over the mean) and ``seconds``."""
    rows: list[dict[str, object]] = []
    work = np.bincount(src, minlength=nodes)
    for method in methods:
        order = None
        for shards in shard_counts:
            started = time.monotonic()
            if method == "hash":
                shard = hash_shard_numpy(np.arange(nodes, dtype=np.int64), shards)
            else:
                if order is None:
                    order = node_order(src, dst, nodes, method)
                shard = contiguous_ranges(order, work, shards)
            seconds = time.monotonic() - started
            cut = cut_size(shard[src], shard[dst])
            per_shard = np.bincount(shard[src], minlength=shards)
            rows.append(
                {
                    "method": method,
                    "shards": shards,
                    "cut": cut,
                    "cut_pct": 100.0 * cut / len(src),
                    "imbalance": float(per_shard.max() / per_shard.mean()),
                    "seconds": seconds,
                }
            )
    return rows
