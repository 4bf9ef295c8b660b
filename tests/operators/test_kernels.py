"""The numpy backend against the Spark backend on plans the compiler builds: the same rows,
with Spark's null semantics, and joins against prepared (indexed) tables, empty ones too."""

from __future__ import annotations

import subprocess
import sys
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixflow.checker import load
from fixflow.operators.engines import kernels
from fixflow.operators.engines.batches import Batch, concat
from fixflow.operators.engines.joins import HeldKeys, anti_join
from fixflow.operators.engines.kernels import Kernel, evaluate_expr, unsupported
from fixflow.operators.engines.key_groups import KeyPacking, grouped_order
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.engines.shard_table import _slots
from fixflow.operators.plan import Aggregate, Arith, Col, Const, Func, Join, Scan
from fixflow.operators.thresholds import SCIPY_SORT_ROWS

SSSP = """
.decl edge(src: number, dst: number, w: float)
.input edge
.decl sssp(node: number, dist: float)
.output sssp
sssp(X, d) :- X = 1, d = 0.
sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
"""


def _round_kernel() -> tuple[Kernel, str, str]:
    report = load(SSSP, "sssp.dl")
    schemas = {r: tuple(a.type for a in attrs) for r, attrs in report.analysis.schemas.items()}
    program = MraProgram(report.mra["sssp"], schemas)
    body = program.bodies[0]
    assert unsupported(body.plan) is None and body.aux_name is not None
    return Kernel(body.plan), body.aux_name, program.relation


def _batch(**cols: list) -> Batch:
    arrays = {k: np.array(v) for k, v in cols.items()}
    return Batch(len(next(iter(arrays.values()))), arrays)


def test_round_plan_joins_the_frontier_with_prepared_aux_rows() -> None:
    kernel, aux, relation = _round_kernel()
    edges = _batch(c0=[1, 1, 2, 3], c1=[2, 3, 3, 1], c2=[1.5, 4.0, 2.0, 1.0])
    kernel.prepare({(aux, "aux"): edges})
    frontier = _batch(c0=[1, 2, 9], c1=[0.0, 1.5, 7.0])
    out = kernel.run({(aux, "aux"): edges, (relation, "delta"): frontier})
    rows = sorted(zip(out.cols["k0"].tolist(), out.cols["v"].tolist(), strict=True))
    assert rows == [(2, 1.5), (3, 3.5), (3, 4.0)]


def test_an_empty_auxiliary_table_matches_nothing() -> None:
    kernel, aux, relation = _round_kernel()
    empty = Batch(0, {"c0": np.zeros(0, np.int64), "c1": np.zeros(0, np.int64), "c2": np.zeros(0)})
    kernel.prepare({(aux, "aux"): empty})
    out = kernel.run({(aux, "aux"): empty, (relation, "delta"): _batch(c0=[1], c1=[0.0])})
    assert out.n == 0


def test_null_semantics_follow_spark() -> None:
    batch = _batch(a=[1.0, 2.0, -1.0], b=[0.0, 2.0, 1.0])
    quotient, valid = evaluate_expr(
        Arith("/", Col("a", "float"), Col("b", "float"), "float"), batch
    )
    assert valid is not None and valid.tolist() == [False, True, True]
    assert quotient[1] == 1.0
    _logs, valid = evaluate_expr(Func("log", (Col("a", "float"),), "float"), batch)
    assert valid is not None and valid.tolist() == [True, True, False]
    # least() skips a null argument: min(null, 5) = 5, as Spark's least
    div = Arith("/", Col("a", "float"), Col("b", "float"), "float")
    least, valid = evaluate_expr(Func("min", (div, Const(5.0, "float")), "float"), batch)
    assert least.tolist()[0] == 5.0 and (valid is None or valid.all())


def test_number_division_truncates_toward_zero() -> None:
    """Soufflé's (C++'s) ``number / number``; numpy's ``//`` would floor -7 / 2 to -4. As on
    Spark, x / 0 and INT64_MIN / -1 have no value."""
    low = np.iinfo(np.int64).min
    batch = _batch(a=[7, -7, 7, -7, 6, 5, low, low], b=[2, 2, -2, -2, 3, 0, -1, 2])
    quotient, valid = evaluate_expr(
        Arith("/", Col("a", "number"), Col("b", "number"), "number"), batch
    )
    assert valid is not None and valid.tolist() == [True] * 5 + [False, False, True]
    assert quotient.tolist()[:5] == [3, -3, -3, 3, 2] and quotient[7] == low // 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 63), min_size=1, max_size=40), st.integers(64, 2_000))
def test_slots_number_the_rows_hit_in_order_sparse_or_dense(hits: list[int], rows: int) -> None:
    """Both regimes of ``_slots`` (sorting few candidates, counting over the table for
    many) give the distinct rows in order and each candidate's index among them."""
    pos = np.array(hits, dtype=np.int64)
    hit, slot = _slots(pos, rows)
    assert hit.tolist() == sorted(set(hits))
    assert hit[slot].tolist() == hits


def _rows(batch: Batch, names: tuple[str, ...]) -> list[tuple]:
    columns = [
        [v if ok else None for v, ok in zip(batch.cols[n], batch.mask(n), strict=True)]
        for n in names
    ]
    return sorted(zip(*columns, strict=True), key=repr)


def _keyed(rows: list[tuple[int | None, int]]) -> Batch:
    a = np.array([0 if x is None else x for x, _ in rows], dtype=np.int64)
    valid = np.array([x is not None for x, _ in rows], dtype=bool)
    b = np.array([y for _, y in rows], dtype=np.int64)
    return Batch(len(rows), {"c0": a, "c1": b}, {"c0": valid})


PAIRS = st.lists(st.tuples(st.none() | st.integers(0, 6), st.integers(0, 6)), max_size=12)


@settings(max_examples=60, deadline=None)
@given(rounds=st.lists(PAIRS, min_size=1, max_size=8), probe=PAIRS)
def test_held_keys_lack_exactly_what_an_anti_join_with_every_added_row_keeps(
    rounds: list[list[tuple[int | None, int]]], probe: list[tuple[int | None, int]]
) -> None:
    """Runs merged or not, nulls never held: the same rows as anti-joining all of them."""
    on = ("c0", "c1")
    held, added = HeldKeys(on, small=0), []  # runs merged by their sizes alone
    for rows in rounds:
        held.add(_keyed(rows))
        added.append(_keyed(rows))
        expected = anti_join(_keyed(probe), concat(added), on)
        assert _rows(held.lacking(_keyed(probe)), on) == _rows(expected, on)
    sizes = [run.n for run in held.runs]
    assert all(older > 2 * newer for older, newer in pairwise(sizes))
    assert sum(sizes) == sum(1 for rows in rounds for x, _ in rows if x is not None)


REACH = Scan("reach", "delta", ("X",), ("number",))
EDGE = Scan("edge", "full", ("X", "Y"), ("number", "number"))


def _edges(pairs: list[tuple[int, int]]) -> Batch:
    return Batch(
        len(pairs),
        {"c0": np.array([x for x, _ in pairs]), "c1": np.array([y for _, y in pairs])},
    )


def test_a_join_index_is_kept_while_its_source_stays_and_dropped_when_it_changes() -> None:
    """Facts first or the delta first: each run joins the batches it is given, whether
    the facts' index was kept from the runs before or the facts changed since."""
    first = _edges([(1, 2), (2, 3), (2, 4)])
    second = _edges([(1, 5), (2, 6)])
    for plan in (Join(REACH, EDGE, ("X",)), Join(EDGE, REACH, ("X",))):
        kernel = Kernel(plan)
        for edges, frontier, expected in [
            (first, [1, 2], [(1, 2), (2, 3), (2, 4)]),
            (first, [2], [(2, 3), (2, 4)]),  # the second run with these facts: kept
            (first, [1, 9], [(1, 2)]),  # probes the kept index
            (second, [1, 2], [(1, 5), (2, 6)]),  # other facts: not that index
            (second, [2], [(2, 6)]),
        ]:
            delta = Batch(len(frontier), {"c0": np.array(frontier)})
            out = kernel.run({("reach", "delta"): delta, ("edge", "full"): edges})
            assert _rows(out, ("X", "Y")) == expected, (plan, frontier)
        assert any(index is not None for _, index in kernel.kept.values())


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.one_of(st.integers(-3, 3), st.integers(-(2**62), 2**62)),
            st.integers(-3, 3),
            st.one_of(st.integers(-50, 50), st.integers(-(2**40), 2**40)),
        ),
        min_size=1,
        max_size=40,
    ),
    func=st.sampled_from(["min", "max", "count", "sum"]),
    width=st.sampled_from([1, 2]),
    floats=st.booleans(),
)
def test_an_aggregate_over_integer_keys_is_what_pandas_group_by_gives(
    rows: list[tuple[int, int, int]], func: str, width: int, floats: bool
) -> None:
    """The hashed group-by (``kernels._by_integer_keys``: one key column, or two packed
    into one while they fit) against the pandas group-by it stands in for, row for row."""
    columns = [np.array(c, dtype=np.int64) for c in zip(*rows, strict=True)]
    if floats:
        columns[2] = columns[2].astype(np.float64)
    batch = Batch(len(rows), {"k0": columns[0], "k1": columns[1], "v": columns[2]})
    scan = Scan(
        "r", "full", ("k0", "k1", "v"), ("number", "number", "float" if floats else "number")
    )
    type_ = "number" if func == "count" or not floats else "float"
    plan = Aggregate(scan, ("k0", "k1")[:width], func, "v", "out", type_)  # type: ignore[arg-type]
    fast = kernels._by_integer_keys(plan, batch)
    if func == "sum" and floats:
        assert fast is None  # a float sum's rounding is pandas'
        return
    packed = KeyPacking.fitting(columns[:width])
    assert (fast is None) == (width == 2 and packed is None)  # wider than 62 bits: pandas
    if fast is None:
        return
    slow = kernels._by_pandas(plan, batch)
    names = [*plan.group_by, "out"]
    assert sorted(zip(*(fast.cols[n].tolist() for n in names), strict=True)) == sorted(
        zip(*(slow.cols[n].tolist() for n in names), strict=True)
    )


THRESHOLD = SCIPY_SORT_ROWS


@pytest.mark.parametrize("rows", [0, 1, 57, THRESHOLD - 1, THRESHOLD, THRESHOLD + 33])
def test_grouped_order_is_a_stable_sort_by_code_on_both_sides_of_the_scipy_threshold(
    rows: int,
) -> None:
    groups = max(1, rows // 7)
    codes = np.random.default_rng(rows).integers(0, groups, rows)
    order, starts = grouped_order(codes, groups)
    assert starts.dtype == np.int32 and order.dtype == np.int32
    assert len(starts) == groups + 1 and starts[0] == 0 and starts[-1] == rows
    for code in range(groups):
        expected = np.flatnonzero(codes == code)  # every row of the code, in row order
        assert order[starts[code] : starts[code + 1]].tolist() == expected.tolist()


def test_a_small_program_imports_no_scipy() -> None:
    """SciPy (0.2 s to import) is loaded by a sort of many rows or a graph ordered for
    shards, not by the engine's modules (``thresholds.SCIPY_SORT_ROWS``)."""
    probe = (
        "import sys\n"
        "import fixflow.operators.engines.async_engine, fixflow.operators.driver.stratum\n"
        "from fixflow.operators.engines.key_groups import grouped_order\n"
        "import numpy as np\n"
        "grouped_order(np.array([2, 0, 2, 1]), 3)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
