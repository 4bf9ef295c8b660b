"""The numpy backend against the Spark backend on plans the compiler builds: the same rows,
with Spark's null semantics, and joins against prepared (indexed) tables, empty ones too."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fixflow.checker import load
from fixflow.operators.engines.kernels import Batch, Kernel, evaluate_expr, unsupported
from fixflow.operators.engines.program import MraProgram
from fixflow.operators.engines.shard_table import _slots
from fixflow.operators.plan import Arith, Col, Const, Func

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
