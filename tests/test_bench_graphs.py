"""bench/graphs.py: the peers' generator, permuted ids, Soufflé facts (no Spark)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import graphs  # noqa: E402

PEER_GENERATOR = ROOT.parent / "shared" / "bench" / "gen_graph.py"


@pytest.mark.parametrize("name", graphs.SMALL_GRAPHS)
def test_small_graph_is_a_permutation_of_the_generators(name: str) -> None:
    kind, edges = graphs.parse_name(name)
    plain = graphs.generate(kind, edges)
    g = graphs.build(name)
    assert g.edges == edges == plain.meta["edges"]
    perm = graphs.permutation(g.nodes, kind, edges)
    assert sorted(perm.tolist()) == list(range(g.nodes))
    assert not np.array_equal(perm, np.arange(g.nodes))
    assert np.array_equal(g.src, perm[plain.src]) and np.array_equal(g.dst, perm[plain.dst])
    assert g.source == perm[0]
    assert g.weight.dtype == np.float64 and g.weight.min() >= 1 and g.weight.max() <= 100
    again = graphs.build(name)  # deterministic
    assert np.array_equal(again.src, g.src) and np.array_equal(again.weight, g.weight)


def test_facts_files(tmp_path: Path) -> None:
    directory = graphs.write_facts("grid_small", root=tmp_path)
    g = graphs.load("grid_small", root=tmp_path)
    sssp = np.loadtxt(directory / "sssp" / "edge.facts", delimiter="\t", dtype=np.int64)
    assert sssp.shape == (g.edges, 3)
    assert np.array_equal(sssp[:, 0], g.src) and np.array_equal(sssp[:, 2], g.weight)
    cc_dir = graphs.facts_dir("grid_small", "cc", root=tmp_path)
    cc = np.loadtxt(cc_dir / "edge.facts", delimiter="\t", dtype=np.int64)
    assert {(a, b) for a, b in cc} == {(a, b) for a, b in cc} | {(b, a) for a, b in cc}
    nodes = np.loadtxt(directory / "pagerank" / "node.facts", dtype=np.int64)
    assert nodes.tolist() == list(range(g.nodes))
    updates = (directory / "updates.csv").read_text().splitlines()
    assert updates[0] == "op,src,dst,weight" and len(updates) == 1 + 2 * graphs.UPDATES


@pytest.mark.skipif(not PEER_GENERATOR.is_file(), reason="../shared/bench is not checked out")
@pytest.mark.parametrize("kind", ["rmat", "grid"])
def test_same_draws_as_the_peer_generator(kind: str, tmp_path: Path) -> None:
    out = tmp_path / f"{kind}.csv"
    subprocess.run(
        [sys.executable, str(PEER_GENERATOR), "--kind", kind, "--edges", "5k", "--out", str(out)],
        check=True,
        capture_output=True,
    )
    ref = np.loadtxt(out, delimiter=",", skiprows=1, dtype=np.int64)
    g = graphs.generate(kind, 5_000)
    assert np.array_equal(ref, np.column_stack([g.src, g.dst, g.weight]))


@pytest.mark.parametrize("name", ["grid_small", "rmat_small"])
def test_the_partitioners_compared_with_rcm_stay_balanced(name: str) -> None:
    """bench/partition_cut.py: every method but hash keeps each shard's work within 1.05×
    the mean; restreamed Fennel from the RCM ranges cuts no more links than RCM."""
    import partition_cut

    g = graphs.build(name)
    graph = partition_cut.G(g.src, g.dst, g.nodes)
    cuts = {}
    for method in ("rcm", "lp_rcm", "refennel", "hybrid", "refennel_rcm"):
        cut, imbalance = partition_cut.evaluate(graph, partition_cut.run(graph, 2, method), 2)
        assert imbalance <= 1.05 + 1e-9, (method, imbalance)
        cuts[method] = cut
    assert cuts["refennel_rcm"] <= cuts["rcm"], cuts
