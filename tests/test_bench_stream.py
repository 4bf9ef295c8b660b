"""bench/bench_stream.py's result check: a stream's committed results against scipy (no
Spark: the results table is written with delta-rs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_stream import EdgeSet, Workload, check_results  # noqa: E402


class Lake:
    def __init__(self, root: Path) -> None:
        self.root = root

    def results(self, relation: str) -> str:
        return str(self.root / relation)


def _written(lake: Lake, relation: str, rows: dict[str, list[object]]) -> Lake:
    write_deltalake(lake.results(relation), pa.table(rows), mode="overwrite")
    return lake


def test_sssp_results_are_checked_against_dijkstra(tmp_path: Path) -> None:
    edges = [(0, 1, 2.0), (1, 2, 1.0), (0, 2, 5.0), (3, 0, 1.0)]
    work = Workload("sssp", "tiny", [], 0, edges, undirected=False)
    right = {"node": [0, 1, 2], "dist": [0.0, 2.0, 3.0]}
    lake = _written(Lake(tmp_path), "sssp", right)
    assert check_results(work, lake, EdgeSet(edges)) == "exact"
    _written(lake, "sssp", {"node": [0, 1, 2], "dist": [0.0, 2.0, 5.0]})
    assert check_results(work, lake, EdgeSet(edges)) == "1 wrong or missing, 0 extra"
    _written(lake, "sssp", {"node": [0, 1, 2, 3], "dist": [0.0, 2.0, 3.0, 1.0]})
    assert check_results(work, lake, EdgeSet(edges)) == "0 wrong or missing, 1 extra"


def test_parallel_edges_count_with_their_least_weight(tmp_path: Path) -> None:
    """The random graph has parallel edges of different weights; a sparse matrix would add
    them up (3.0 + 1.0 here) where a shortest path takes the lighter one."""
    edges = [(0, 1, 3.0), (0, 1, 1.0), (1, 2, 1.0)]
    work = Workload("sssp", "tiny", [], 0, edges, undirected=False)
    lake = _written(Lake(tmp_path), "sssp", {"node": [0, 1, 2], "dist": [0.0, 1.0, 2.0]})
    assert check_results(work, lake, EdgeSet(edges)) == "exact"


def test_cc_results_are_checked_against_the_least_node_of_each_component(tmp_path: Path) -> None:
    edges = [(5, 1), (1, 5), (1, 2), (2, 1), (7, 8), (8, 7)]
    work = Workload("cc", "tiny", [], 0, edges, undirected=True)
    lake = _written(Lake(tmp_path), "cc", {"node": [1, 2, 5, 7, 8], "label": [1, 1, 1, 7, 7]})
    assert check_results(work, lake, EdgeSet(edges)) == "exact"
    _written(lake, "cc", {"node": [1, 2, 5, 7], "label": [1, 1, 1, 7]})
    assert check_results(work, lake, EdgeSet(edges)) == "1 wrong or missing, 0 extra"
