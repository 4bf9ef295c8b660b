"""One MRA relation compiled once, shared by every engine (PowerLog §5.2).

``MraProgram`` holds the plans an engine runs, all in the plan IR with output columns
``k0..`` (the key), ``v`` (the value) and, for min/max, ``w0..`` (the recursive atom's key:
the witness):

- ``init_plans`` (X⁰) and ``constant_plans`` (C): candidate rows that seed the table;
- per recursive body a round plan: the frontier ``Scan(relation, "delta")`` (positional
  columns of the relation, index column 0) joined with the body's auxiliary side
  ``Scan(aux_name, "aux")`` (the rest of the body, pre-joined and deduplicated once:
  ``edge(X, Y, w)`` or ``edge(X, Y), degree(X, d)``), then F′ and the head.

``aux_frames`` builds the auxiliary tables on Spark, hash-partitioned by the columns they
share with the frontier and cached, so a round moves only the frontier.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fixflow.checker import ast
from fixflow.checker.model import MraSpec
from fixflow.operators.compiler import BodyPlan, RuleCompiler
from fixflow.operators.plan import (
    Cast,
    Col,
    Join,
    PExpr,
    Plan,
    Project,
    Scan,
    Unit,
    children,
    explain,
)
from fixflow.operators.spark_backend import SparkBackend, column_name, positional

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecursiveBody:
    plan: Plan
    """The round plan: frontier ⋈ aux → F′ → columns k0.., v, w0.."""
    aux_name: str | None
    aux_plan: Project | None
    """The auxiliary side (columns named by variables); None when the body has none."""
    shared: tuple[str, ...]
    """Variables the frontier and the auxiliary side join on."""


class MraProgram:
    """The compiled plans of one MRA relation."""

    def __init__(self, spec: MraSpec, schemas: dict[str, tuple[ast.TypeName, ...]]) -> None:
        self.spec = spec
        self.relation = spec.relation
        self.types = schemas[spec.relation]
        self.compiler = RuleCompiler(schemas)
        self.g = "sum" if spec.aggregate in ("count", "sum") else spec.aggregate
        self.keys = tuple(f"k{j}" for j in range(len(spec.key_positions)))
        self.key_types = tuple(self.types[p] for p in spec.key_positions)
        self.value_type = self.types[spec.value_pos]
        self.bodies = tuple(self._recursive(i) for i in range(len(spec.recursive_bodies)))
        self.init_plans = tuple(self._rows_of(r.head, b) for r in spec.init_rules for b in r.bodies)
        self.constant_plans = tuple(self._rows_of(spec.head.head, b) for b in spec.constant_bodies)

    @property
    def indexed(self) -> bool:
        return self.spec.index_pos is not None

    # ------------------------------------------------------------ compilation

    def _head_outputs(
        self, args: tuple[ast.HeadArg, ...], types: dict[str, ast.TypeName]
    ) -> list[tuple[str, PExpr]]:
        outputs = [
            (self.keys[j], self.compiler.head_value(args[pos], types, self.types[pos], True))
            for j, pos in enumerate(self.spec.key_positions)
        ]
        value = self.compiler.head_value(
            args[self.spec.value_pos], types, self.value_type, recursive=True
        )
        return [*outputs, ("v", value)]

    def recursive_body(self, i: int, relation_of: Mapping[int, str]) -> RecursiveBody:
        """Recursive body ``i`` compiled with some atoms reading other stored names (an
        update's ``R@add`` / ``R@del``): what the epoch's changes derive, with witnesses."""
        return self._recursive(i, relation_of)

    def _recursive(self, i: int, relation_of: Mapping[int, str] | None = None) -> RecursiveBody:
        body = self.spec.recursive_bodies[i]
        atom_index = self.spec.recursive_atom_index[i]
        atom = body.literals[atom_index]
        assert isinstance(atom, ast.Atom)
        atom_vars = frozenset(a.name for a in atom.args if isinstance(a, ast.Var))
        aux = self.compiler.body(
            body, skip=frozenset({atom_index}), external=atom_vars, relation_of=relation_of
        )
        frontier, frontier_types, tests = self.compiler.atom(atom, "delta")
        plan: Plan = frontier
        types = dict(frontier_types)
        aux_name = aux_plan = None
        shared: tuple[str, ...] = ()
        if not isinstance(aux.plan, Unit):
            aux_name = f"#aux:{self.relation}:{i}"
            aux_plan = Project(aux.plan, tuple((n, Col(n, t)) for n, t in aux.plan.schema), True)
            names = tuple(n for n, _ in aux.plan.schema)
            scan = Scan(aux_name, "aux", names, tuple(t for _, t in aux.plan.schema))
            shared = tuple(n for n in frontier_types if n in names)
            plan = Join(plan, scan, shared)
            types.update(aux.types)
        finished = self.compiler.finish_body(
            plan, types, [*aux.deferred, *tests], set(types) | atom_vars
        )
        outputs = self._head_outputs(self.spec.head.head.args, finished.types)
        witness = [
            (f"w{j}", self.compiler.expr(atom.args[pos], finished.types))
            for j, pos in enumerate(self.spec.key_positions)
            if not isinstance(atom.args[pos], ast.Wildcard)
        ]
        plan = Project(finished.plan, (*outputs, *witness))
        log.debug("MRA round plan for %s:\n%s", self.relation, explain(plan))
        return RecursiveBody(plan, aux_name, aux_plan, shared)

    def _rows_of(self, rule_head: ast.Head, body: ast.Body) -> Plan:
        compiled: BodyPlan = self.compiler.body(body)
        plan = Project(compiled.plan, tuple((n, Col(n, t)) for n, t in compiled.plan.schema), True)
        return Project(plan, tuple(self._head_outputs(rule_head.args, compiled.types)))

    # ------------------------------------------------------------ Spark

    def candidates(self, rows: DataFrame) -> DataFrame:
        """Seed candidates ``k0.., v`` (``MraEngine.resume``) from positional relation rows
        whose value column holds the candidate value (min/max) or the correction (sum)."""
        keys = zip(self.keys, self.spec.key_positions, strict=True)
        return rows.select(
            *(F.col(positional(p)).alias(k) for k, p in keys),
            F.col(positional(self.spec.value_pos)).alias("v"),
        )

    def aux_frames(self, backend: SparkBackend, partitions: int) -> dict[str, DataFrame]:
        """Each body's auxiliary side, positional columns ``c0..``, deduplicated,
        hash-partitioned by the columns it shares with the frontier, and cached."""
        frames = {}
        for body in self.bodies:
            if body.aux_plan is None or body.aux_name is None:
                continue
            # Deduplicate after partitioning by the join key: hash partitioning by a subset
            # of the columns already clusters duplicates, so the whole build is ONE shuffle.
            frame = aux_frame(body, backend)
            names = [n for n, _ in body.aux_plan.schema]
            shared = [positional(i) for i, n in enumerate(names) if n in body.shared]
            frame = frame.repartition(partitions, *shared) if shared else frame
            frames[body.aux_name] = frame.distinct().cache()
        return frames


def aux_frame(body: RecursiveBody, backend: SparkBackend) -> DataFrame:
    """A body's auxiliary side in positional columns ``c0..`` (not deduplicated)."""
    assert body.aux_plan is not None
    frame = backend.run(replace(body.aux_plan, distinct=False))
    return frame.toDF(*(positional(i) for i in range(len(body.aux_plan.schema))))


def plain_column(expr: PExpr) -> str | None:
    """The column an output copies (``Y`` or a cast of it), or None for a computation."""
    if isinstance(expr, Cast):
        expr = expr.operand
    return expr.name if isinstance(expr, Col) else None


def head_aux_columns(body: RecursiveBody, keys: tuple[str, ...]) -> list[str] | None:
    """The auxiliary frame's positional columns the head copies into ``keys``; None when
    one is computed or comes from the frontier."""
    if body.aux_plan is None or not isinstance(body.plan, Project):
        return None
    names = [n for n, _ in body.aux_plan.schema]
    outputs = dict(body.plan.outputs)
    found = [plain_column(outputs[k]) for k in keys]
    if any(n is None or n not in names for n in found):
        return None
    return [positional(names.index(n)) for n in found if n is not None]


def output_column(name: str) -> str:
    """The Spark column a plan output named ``name`` (``k0``, ``v``, ``w0``) becomes."""
    return column_name(name)


def find_join(plan: Plan) -> Join | None:
    """The join of the frontier with the auxiliary table in a round plan."""
    if isinstance(plan, Join):
        return plan
    for child in children(plan):
        found = find_join(child)
        if found is not None:
            return found
    return None
