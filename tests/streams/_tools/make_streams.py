"""Write the streaming golden cases tests/streams/<name>/ from hand-written change steps.

Each case holds program.dl (a copy of examples/<example>.dl), meta.toml (tolerance, how the
expected values were computed) and steps/<NN>/ with insert/<rel>.facts and delete/<rel>.facts
(tab-separated, only the non-empty ones), expected/<rel>.csv for every .output relation
(header = declared attribute names without an iteration index; rows sorted), WHY (what the
step changes) and, optionally, step.toml: ``expect_strategy = "update"`` asserts that every
epoch of the step maintained the recursive strata by an incremental update
(``update:...``), not a bootstrap.

The steps below are written by hand as changes; the facts after each step are their running
sum. Expected values come from networkx (Dijkstra, components, transitive closure), numpy
(the PageRank limit, a linear solve) or a plain fixpoint loop written here (Attend); never
from fixflow or the reference evaluator.

Run: .venv/bin/python tests/streams/_tools/make_streams.py
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "programs" / "_tools"))

from graphs import power_iteration, tolerance_for  # noqa: E402

EXAMPLES = ROOT / "examples"
STREAMS = ROOT / "tests" / "streams"

Row = tuple
Facts = dict[str, set[Row]]
Expected = dict[str, tuple[tuple[str, ...], list[Row]]]


@dataclass
class Step:
    insert: dict[str, list[Row]]
    delete: dict[str, list[Row]]
    why: str
    expect_strategy: str | None = None
    """``update``: the recursive strata are updated, not bootstrapped (step.toml)."""


@dataclass
class Case:
    example: str
    relations: tuple[str, ...]
    """The .input relations."""
    steps: list[Step]
    expected: Callable[[Facts], Expected]
    how: str
    tolerance: Callable[[list[Facts]], float] = lambda _states: 0.0


def ins(**rels: list[Row]) -> dict[str, list[Row]]:
    return rels


# ---------------------------------------------------------------- SSSP (min, from vertex 1)


def sssp_expected(facts: Facts) -> Expected:
    g = nx.DiGraph()
    g.add_node(1)  # sssp(1, 0) holds whatever the edges
    for s, d, w in facts["edge"]:
        # parallel edges with different weights: only the cheapest matters
        if not g.has_edge(s, d) or g[s][d]["weight"] > w:
            g.add_edge(s, d, weight=w)
    dist = nx.single_source_dijkstra_path_length(g, 1)
    return {"sssp": (("node", "dist"), sorted((v, float(d)) for v, d in dist.items()))}


SSSP = Case(
    "powerlog_p1_sssp",
    ("edge",),
    [
        Step(
            ins(
                edge=[
                    (1, 2, 2.0),
                    (1, 3, 5.0),
                    (2, 3, 1.5),
                    (2, 4, 4.0),
                    (3, 4, 1.0),
                    (4, 5, 2.5),
                    (5, 6, 1.0),
                    (6, 5, 0.5),
                    (3, 6, 7.0),
                    (7, 8, 1.0),
                ]
            ),
            {},
            "initial graph; 7 and 8 unreachable",
        ),
        Step(
            ins(edge=[(1, 4, 1.0), (6, 7, 2.0)]),
            {},
            "a shortcut 1->4 improves 4, 5, 6; 6->7 makes 7 and 8 reachable",
        ),
        Step(
            {},
            ins(edge=[(1, 4, 1.0)]),
            "deleting the shortcut on the shortest paths worsens 4, 5, 6, 7, 8",
        ),
        Step(
            ins(edge=[(2, 4, 0.5)]),
            ins(edge=[(2, 4, 4.0), (2, 3, 1.5)]),
            "a parallel cheaper edge replaces 2->4; deleting 2->3 worsens 3",
        ),
        Step(
            {},
            ins(edge=[(1, 2, 2.0), (6, 7, 2.0)]),
            "cutting 1->2 reroutes through 1->3; cutting 6->7 makes 7, 8 unreachable again",
        ),
    ],
    sssp_expected,
    "networkx single_source_dijkstra_path_length from vertex 1 on the current edges "
    "(cheapest of parallel edges); unreachable vertices have no row.",
)


# ---------------------------------------------------------------- CC (min label)


def both(*pairs: tuple[int, int]) -> list[Row]:
    """Undirected edges as both directions (labels flow along edge direction)."""
    return [e for a, b in pairs for e in ((a, b), (b, a))]


def cc_expected(facts: Facts) -> Expected:
    g = nx.Graph()
    g.add_edges_from(facts["edge"])
    rows = [(v, min(component)) for component in nx.connected_components(g) for v in component]
    return {"cc": (("node", "label"), sorted(rows))}


CC = Case(
    "powerlog_p3_cc",
    ("edge",),
    [
        Step(
            ins(edge=both((1, 2), (2, 3), (4, 5), (5, 6), (6, 4), (7, 8))),
            {},
            "three components {1,2,3} {4,5,6} {7,8}",
        ),
        Step(ins(edge=both((3, 5), (8, 9))), {}, "a bridge 3-5 merges {1..6}; 9 joins {7,8}"),
        Step({}, ins(edge=both((3, 5))), "deleting the bridge splits {1..6} again"),
        Step(
            ins(edge=both((6, 7))),
            ins(edge=both((1, 2))),
            "6-7 merges {4..9}; deleting 1-2 splits 1 off (1 disappears: no edges)",
        ),
        Step(
            {},
            ins(edge=both((4, 5), (5, 6))),
            "5 loses every edge and disappears; {4,6,7,8,9} stays joined by 6-4",
        ),
    ],
    cc_expected,
    "networkx connected_components of the symmetric edge set; label = min vertex id; a "
    "vertex without edges has no row.",
)


# ---------------------------------------------------------------- TC (set)


def tc_expected(facts: Facts) -> Expected:
    g = nx.DiGraph()
    g.add_edges_from(facts["arc"])
    closure = nx.transitive_closure(g, reflexive=False)
    return {"tc": (("src", "dst"), sorted(closure.edges()))}


TC = Case(
    "dcd_tc",
    ("arc",),
    [
        Step(
            ins(arc=[(1, 2), (2, 3), (3, 4), (4, 2), (5, 6)]),
            {},
            "a chain 1->2 into the cycle 2->3->4->2, and 5->6",
        ),
        Step(ins(arc=[(4, 5), (6, 7)]), {}, "4->5 connects the cycle to 5->6->7"),
        Step({}, ins(arc=[(4, 2)]), "deleting 4->2 breaks the cycle: no (x, x) pairs remain"),
        Step(
            ins(arc=[(7, 1)]),
            ins(arc=[(4, 5)]),
            "7->1 adds reachability from 5, 6, 7; deleting 4->5 cuts 1..4 from 5..7",
        ),
        Step(
            {},
            ins(arc=[(1, 2), (2, 3), (3, 4), (5, 6), (6, 7), (7, 1)]),
            "every arc deleted: tc empty",
        ),
        Step(ins(arc=[(3, 3), (3, 8)]), {}, "a self-loop and one more arc"),
    ],
    tc_expected,
    "networkx transitive_closure(reflexive=False) of the current arcs.",
)


# ---------------------------------------------------------------- Attend (mutual count)


def attend_expected(facts: Facts) -> Expected:
    """By the definition: organizers come; anyone with >= 3 friends coming comes too."""
    coming = {x for (x,) in facts["organizer"]}
    while True:
        counts: dict[int, int] = {}
        for y, x in facts["friend"]:
            if x in coming:
                counts[y] = counts.get(y, 0) + 1
        more = {y for y, n in counts.items() if n >= 3} - coming
        if not more:
            return {"attend": (("x",), sorted((x,) for x in coming))}
        coming |= more


FRIENDS = [(4, 1), (4, 2), (4, 3), (6, 1), (6, 2), (6, 4), (5, 1), (5, 2), (5, 6), (7, 5), (8, 3)]

ATTEND = Case(
    "dcd_attend",
    ("organizer", "friend"),
    [
        Step(
            ins(organizer=[(1,), (2,), (3,)], friend=FRIENDS),
            {},
            "4 comes (1,2,3), then 6 (1,2,4), then 5 (1,2,6)",
        ),
        Step(
            {},
            ins(organizer=[(3,)]),
            "3 stays home: 4 drops to 2 coming friends, and 6 and 5 fall with it",
        ),
        Step(
            ins(organizer=[(10,)], friend=[(4, 7), (7, 1), (7, 2), (7, 10)]),
            {},
            "7 comes (1, 2, 10); then 4 (1, 2, 7), 6 (1, 2, 4) and 5 (1, 2, 6)",
        ),
        Step(
            ins(organizer=[(9,)], friend=[(8, 9), (8, 4)]),
            ins(friend=[(7, 2)]),
            "without friend 2, 7 is supported only through the cycle 7<-5<-6<-4<-7, which "
            "is not a reason to come: everyone but the organizers stays home; 8 has only 9",
        ),
    ],
    attend_expected,
    "by hand, a plain fixpoint loop: organizers come; anyone with >= 3 friends coming comes.",
)


# ---------------------------------------------------------------- PageRank (sum, limit)

PAGERANK_EPS = 1e-6


def pagerank_system(facts: Facts) -> tuple[list[int], np.ndarray]:
    """Vertices and M with r = 0.15 + M r: M[b, a] = 0.85 / outdeg(a) for each edge a->b."""
    nodes = sorted(v for (v,) in facts["node"])
    index = {v: k for k, v in enumerate(nodes)}
    out = {v: sum(1 for a, _ in facts["edge"] if a == v) for v in nodes}
    m = np.zeros((len(nodes), len(nodes)))
    for a, b in facts["edge"]:
        m[index[b], index[a]] += 0.85 / out[a]
    return nodes, m


def pagerank_expected(facts: Facts) -> Expected:
    nodes, m = pagerank_system(facts)
    exact = np.linalg.solve(np.eye(len(nodes)) - m, np.full(len(nodes), 0.15))
    return {"rank": (("node", "r"), [(v, float(x)) for v, x in zip(nodes, exact, strict=True)])}


def pagerank_tolerance(states: list[Facts]) -> float:
    """The golden rule (tests/programs/README.md) for the worst step: room for an engine
    that stops by the termination clause, nothing more."""
    tolerances = []
    for facts in states:
        nodes, m = pagerank_system(facts)
        exact = np.linalg.solve(np.eye(len(nodes)) - m, np.full(len(nodes), 0.15))
        stopped, _ = power_iteration(
            lambda r, m=m: 0.15 + m @ r, np.zeros(len(nodes)), PAGERANK_EPS
        )
        tolerances.append(tolerance_for(exact, stopped, PAGERANK_EPS, m))
    return max(tolerances)


PAGERANK = Case(
    "powerlog_p2b_pagerank",
    ("edge", "node"),
    [
        Step(
            ins(
                node=[(v,) for v in range(1, 6)],
                edge=[(1, 2), (2, 3), (3, 1), (3, 4), (4, 5), (5, 1)],
            ),
            {},
            "five vertices on two cycles",
        ),
        Step(ins(edge=[(2, 5), (4, 1)]), {}, "more out-edges: degrees of 2 and 4 change"),
        Step({}, ins(edge=[(3, 1), (5, 1)]), "1 loses in-edges; 5 becomes dangling"),
        Step(
            ins(node=[(6,)], edge=[(6, 1), (5, 6)]),
            ins(edge=[(2, 3)]),
            "a new vertex 6 in a cycle 1->2->5->6->1; 3 and 4 only from 2 and 3",
        ),
    ],
    pagerank_expected,
    "numpy solve of r = 0.15 + 0.85 A^T D^-1 r on the current node and edge facts (the "
    "PageRank limit).",
    pagerank_tolerance,
)


# ---------------------------------------------------------------- deletions as updates
# Cases whose deletion steps must be maintained incrementally (expect_strategy = "update").

CHAIN = [(i, i + 1, 1.0) for i in range(1, 20)]

SSSP_CHAIN = Case(
    "powerlog_p1_sssp",
    ("edge",),
    [
        Step(
            ins(edge=[*CHAIN, (1, 21, 2.0), (21, 3, 2.5)]),
            {},
            "a chain 1->2->...->20 of weight 1 and a detour 1->21->3 (4.5 to 3, the chain 2)",
        ),
        Step(
            {},
            ins(edge=[(2, 3, 1.0)]),
            "deleting the chain edge 2->3, the witness of 3..20: each gets 2.5 worse (detour)",
            expect_strategy="update",
        ),
        Step(
            {},
            ins(edge=[(21, 3, 2.5)]),
            "deleting the detour's last edge: 3..20 become unreachable",
            expect_strategy="update",
        ),
        Step(
            ins(edge=[(2, 3, 1.0)]),
            ins(edge=[(10, 11, 1.0)]),
            "2->3 back, 10->11 deleted: 3..10 as at first, 11..20 unreachable",
            expect_strategy="update",
        ),
    ],
    sssp_expected,
    SSSP.how,
)

TWO_CYCLES = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 1), (6, 7), (7, 8), (8, 9), (9, 10), (10, 6)]

CC_BRIDGE = Case(
    "powerlog_p3_cc",
    ("edge",),
    [
        Step(
            ins(edge=both(*TWO_CYCLES, (5, 6))),
            {},
            "two cycles 1..5 and 6..10 joined by the bridge 5-6: every label 1",
        ),
        Step(
            {},
            ins(edge=both((5, 6))),
            "deleting the bridge splits off 6..10, labelled 6 again",
            expect_strategy="update",
        ),
        Step(
            ins(edge=both((3, 8))),
            ins(edge=both((1, 2), (5, 1))),
            "a bridge 3-8 joins 2..10; 1 loses its edges and disappears: every label 2",
            expect_strategy="update",
        ),
        Step(
            {},
            ins(edge=both((7, 8), (9, 10))),
            "deleting 7-8 and 9-10 splits off {6,7,10} (label 6); 8, 9 stay with 2 via 3-8",
            expect_strategy="update",
        ),
    ],
    cc_expected,
    CC.how,
)

TC_CYCLE = Case(
    "dcd_tc",
    ("arc",),
    [
        Step(
            ins(arc=[(1, 2), (2, 3), (3, 4), (4, 5), (5, 1), (5, 6), (6, 7), (8, 1)]),
            {},
            "a cycle 1->2->3->4->5->1 with a tail 5->6->7 and an entry 8->1",
        ),
        Step(
            {},
            ins(arc=[(3, 4)]),
            "deleting 3->4 breaks the cycle: 1, 2, 3 no longer reach 4..7; no (x, x) pairs",
            expect_strategy="update",
        ),
        Step(
            ins(arc=[(3, 4)]),
            ins(arc=[(5, 1)]),
            "3->4 back and 5->1 deleted: a chain 8->1->...->7, the cycle broken elsewhere",
            expect_strategy="update",
        ),
        Step(
            {},
            ins(arc=[(8, 1), (6, 7)]),
            "deleting the entry and the tail's end: 8 and 7 drop out of every pair",
            expect_strategy="update",
        ),
    ],
    tc_expected,
    TC.how,
)

HUB_EDGES = [(1, v) for v in range(2, 9)] + [(v, v + 1) for v in range(2, 8)] + [(8, 2)]

PAGERANK_HUB = Case(
    "powerlog_p2b_pagerank",
    ("edge", "node"),
    [
        Step(
            ins(node=[(v,) for v in range(1, 9)], edge=[*HUB_EDGES, (4, 1), (7, 1)]),
            {},
            "a hub 1 with out-edges to 2..8, a cycle 2->3->...->8->2, and 4->1, 7->1",
        ),
        Step(
            {},
            ins(node=[(1,)], edge=[e for e in [*HUB_EDGES, (4, 1), (7, 1)] if 1 in e]),
            "the hub removed: node 1 and its 9 edges deleted; the cycle alone, 4 and 7 back "
            "to one out-edge",
            expect_strategy="update",
        ),
        Step(
            ins(node=[(1,)], edge=[(1, 2), (3, 1)]),
            {},
            "1 back with 1->2 and 3->1",
        ),
        Step(
            {},
            ins(node=[(5,)], edge=[(4, 5), (5, 6)]),
            "vertex 5 removed with its edges: the cycle broken, 4 dangling",
            expect_strategy="update",
        ),
    ],
    pagerank_expected,
    PAGERANK.how,
    pagerank_tolerance,
)

CASES: dict[str, Case] = {
    "sssp": SSSP,
    "cc": CC,
    "tc": TC,
    "attend": ATTEND,
    "pagerank": PAGERANK,
    "sssp_chain_deletion": SSSP_CHAIN,
    "cc_bridge_deletion": CC_BRIDGE,
    "tc_cycle_deletion": TC_CYCLE,
    "pagerank_hub_deletion": PAGERANK_HUB,
}


# ---------------------------------------------------------------- writing


def states_of(case: Case) -> list[Facts]:
    """The facts after each step; every delete must hit a present fact and every insert
    an absent one (the steps are net changes, as the pipeline's normalization makes them)."""
    facts: Facts = {rel: set() for rel in case.relations}
    states = []
    for number, step in enumerate(case.steps):
        for rel, rows in step.delete.items():
            assert set(rows) <= facts[rel], f"{case.example} step {number}: deletes absent"
            facts[rel] -= set(rows)
        for rel, rows in step.insert.items():
            assert not set(rows) & facts[rel], f"{case.example} step {number}: inserts present"
            facts[rel] |= set(rows)
        states.append({rel: set(rows) for rel, rows in facts.items()})
    return states


def fmt(value: object, type_name: str) -> str:
    if type_name == "float":
        return repr(float(value))  # type: ignore[arg-type]
    return str(value)


def declared_types(example: str) -> dict[str, list[str]]:
    import re

    types: dict[str, list[str]] = {}
    for line in (EXAMPLES / f"{example}.dl").read_text().splitlines():
        match = re.match(r"\s*\.decl\s+(\w+)\((.*)\)", line)
        if match:
            types[match[1]] = [a.split(":")[1].strip() for a in match[2].split(",") if a]
    return types


def write_rows(
    path: Path, rows: list[Row], types: list[str], sep: str, header: tuple[str, ...] | None = None
) -> None:
    lines = [sep.join(fmt(v, t) for v, t in zip(row, types, strict=True)) for row in rows]
    if header is not None:
        lines.insert(0, sep.join(header))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


def write(name: str, case: Case) -> None:
    target = STREAMS / name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copyfile(EXAMPLES / f"{case.example}.dl", target / "program.dl")
    types = declared_types(case.example)
    states = states_of(case)
    for number, (step, facts) in enumerate(zip(case.steps, states, strict=True)):
        step_dir = target / "steps" / f"{number:02d}"
        for kind, changes in (("insert", step.insert), ("delete", step.delete)):
            for rel, rows in changes.items():
                write_rows(step_dir / kind / f"{rel}.facts", sorted(rows), types[rel], "\t")
        for rel, (header, rows) in case.expected(facts).items():
            columns = types[rel][len(types[rel]) - len(header) :]
            write_rows(step_dir / "expected" / f"{rel}.csv", sorted(rows), columns, ",", header)
        (step_dir / "WHY").write_text(step.why + "\n")
        if step.expect_strategy is not None:
            (step_dir / "step.toml").write_text(f'expect_strategy = "{step.expect_strategy}"\n')
    how = case.how.replace("\\", "\\\\").replace('"', '\\"')
    (target / "meta.toml").write_text(
        f'example = "{case.example}"\ntolerance = {case.tolerance(states)!r}\n'
        f'how_expected = "{how}"\n'
    )


def main() -> None:
    for name, case in CASES.items():
        write(name, case)
    print(f"wrote {len(CASES)} streaming cases to {STREAMS}")


if __name__ == "__main__":
    main()
