"""What the async engine can run, and with which parameters: shared by the Spark tasks
(``engines.async_engine``) and the driver's loops over the same kernels
(``operators.driver``, ``operators.driver``).

A program runs sharded when every recursive body joins an auxiliary atom on a key column
of the recursive atom (``unsupported``): its rows are cut into shards by those columns
(``shard_keys``) and each shard's local loop is parameterized by ``stage_params``. A sum
whose deltas could be summed in another order to another value is caught by
``order_dependence``.
"""

from __future__ import annotations

from collections.abc import Sequence

from fixflow.checker import ast
from fixflow.checker.ast import TypeName
from fixflow.operators.engines import kernels
from fixflow.operators.engines.base import EngineOptions
from fixflow.operators.engines.program import MraProgram, RecursiveBody, plain_column
from fixflow.operators.engines.shard_table import StageParams
from fixflow.operators.plan import Project, Scan, children
from fixflow.operators.rounds import constant_value

UNBOUNDED = float("inf")


def stage_params(
    program: MraProgram,
    options: EngineOptions,
    *,
    witness: bool,
    shards: int,
    hybrid: bool,
    beta: dict[tuple[int, int], float] | None = None,
) -> StageParams:
    """What a shard's local loop needs (``shard_loop.StageParams``): a Spark task's, or
    the driver's for a small stratum (``operators.driver``). Hybrid flushes only at local
    quiescence: no τ, no β."""
    buffer = options.buffer
    return StageParams(
        relation=program.relation,
        arity=len(program.types),
        key_positions=program.spec.key_positions,
        value_pos=program.spec.value_pos,
        index_pos=program.spec.index_pos,
        key_types=program.key_types,
        value_type=program.value_type,
        g=program.g,
        witness=witness,
        plans=tuple((body.plan, body.aux_name or "") for body in program.bodies),
        aux_types=aux_types(program),
        dest_columns=tuple(
            tuple(_head_key_columns(program, body, _scan_of(body), program.keys) or ())
            for body in program.bodies
        ),
        beta={} if hybrid else dict(beta or {}),
        beta0=UNBOUNDED if hybrid else float(buffer.initial),
        tau=UNBOUNDED if hybrid else buffer.interval_ms / 1000.0,
        priority=options.priority,
        portion=options.schedule_portion,
        local_bound=_local_bound(program, shards),
        local_func=program.spec.termination.func if program.spec.termination else "sum",
    )


def aux_types(program: MraProgram) -> tuple[tuple[TypeName, ...], ...]:
    """Per recursive body, the types of its auxiliary columns ``c0..``."""
    out = []
    for body in program.bodies:
        assert body.aux_plan is not None
        out.append(tuple(t for _, t in body.aux_plan.schema))
    return tuple(out)


def aux_scan(body: RecursiveBody) -> Scan | None:
    stack = [body.plan]
    while stack:
        node = stack.pop()
        if isinstance(node, Scan) and node.version == "aux":
            return node
        stack.extend(children(node))
    return None


def _scan_of(body: RecursiveBody) -> Scan:
    scan = aux_scan(body)
    assert scan is not None, "checked by unsupported()"
    return scan


def unsupported(program: MraProgram) -> str | None:
    """Why ``program`` cannot run on the async engine, or None."""
    for i, body in enumerate(program.bodies):
        reason = _body_unsupported(program, i, body)
        if reason is not None:
            return f"recursive body {i + 1}: {reason}"
    return None


def _body_unsupported(program: MraProgram, i: int, body: RecursiveBody) -> str | None:
    scan = aux_scan(body)
    if scan is None:
        return "no auxiliary atom to shard by"
    reason = kernels.unsupported(body.plan)
    if reason is not None:
        return reason
    if _join_key_columns(program, i, scan) is None:
        return "the auxiliary side joins on no key column of the recursive atom"
    if _head_key_columns(program, body, scan) is None:
        return "a head key is computed, not copied from the auxiliary side"
    return None


def shard_keys(program: MraProgram) -> tuple[str, ...]:
    """The key columns shards are cut by: those whose variable in the recursive atom every
    body's auxiliary side joins on (all of them for SSSP's ``sssp(X, _)``; only ``Z`` for
    APSP's ``path(X, Z, _), edge(Z, Y, _)``), so each auxiliary row belongs to one shard."""
    chosen = []
    for j, pos in enumerate(program.spec.key_positions):
        joined = True
        for i, body in enumerate(program.bodies):
            atom = program.spec.recursive_bodies[i].literals[program.spec.recursive_atom_index[i]]
            assert isinstance(atom, ast.Atom)
            arg, scan = atom.args[pos], aux_scan(body)
            joined &= isinstance(arg, ast.Var) and scan is not None and arg.name in scan.columns
        if joined:
            chosen.append(program.keys[j])
    return tuple(chosen)


def _join_key_columns(program: MraProgram, i: int, scan: Scan) -> list[int] | None:
    """Positions in the aux scan of the recursive atom's shard-key variables."""
    atom = program.spec.recursive_bodies[i].literals[program.spec.recursive_atom_index[i]]
    assert isinstance(atom, ast.Atom)
    keys = shard_keys(program)
    if not keys:
        return None
    positions = []
    for j, pos in enumerate(program.spec.key_positions):
        arg = atom.args[pos]
        if program.keys[j] in keys and isinstance(arg, ast.Var):
            positions.append(scan.columns.index(arg.name))
    return positions


def _head_key_columns(
    program: MraProgram, body: RecursiveBody, scan: Scan, keys: Sequence[str] | None = None
) -> list[int] | None:
    """Positions in the aux scan of the columns the head copies into ``keys`` (default:
    the shard keys, i.e. where its candidates go); None when one is computed."""
    assert isinstance(body.plan, Project)
    outputs = dict(body.plan.outputs)
    positions = []
    for key in shard_keys(program) if keys is None else keys:
        name = plain_column(outputs[key])
        if name is None or name not in scan.columns:
            return None
        positions.append(scan.columns.index(name))
    return positions


def _local_bound(program: MraProgram, shards: int) -> float | None:
    """Sum programs with a clause ``measure < bound``: a shard stops iterating once its own
    pending measure is below bound / (2 · shards) (sum, count) or bound / 2 (max, avg)."""
    termination = program.spec.termination
    if program.g != "sum" or termination is None or termination.op not in ("<", "<="):
        return None
    bound = constant_value(termination.bound)
    share = 2.0 * shards if termination.func in ("sum", "count") else 2.0
    return bound / share


GAIN_MARGIN = 1e-6
"""Gains this close to 1 count as 1 (a stochastic F′ measures 1 up to rounding)."""


def order_dependence(g: str, gain: float, negative: int) -> str | None:
    """Why this sum's result could depend on the order of propagation, or None.

    The accumulated deltas form a series; the async engine sums it in a different order
    than rounds do. Terms of one sign (PageRank, Katz from nonnegative seeds) sum to the
    same value in any order. Terms of both signs (an iteration-indexed start
    ``F(X⁰) − X⁰``, corrections after deletions) do so when the series converges
    absolutely, which holds when F′ shrinks every delta (gain < 1). A gain of 1 with mixed
    signs is a conditionally convergent series: another order, another sum (belief
    propagation with a stochastic F′ ends anywhere between 0 and the synchronous value)."""
    if g != "sum" or negative == 0 or gain < 1.0 - GAIN_MARGIN:
        return None
    return (
        f"deltas of both signs and an F′ that does not shrink them (gain {gain:.3f} ≥ 1): "
        "the sum could depend on the order of propagation"
    )
