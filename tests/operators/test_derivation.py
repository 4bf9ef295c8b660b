"""``operators.derivation``: one derivation of a result row, over stored rows.

Over the goldens (facts and independently computed expected rows as the stored relations):
every explained row's steps start at the row, every premise is a stored row of its
relation (an input fact, or an expected row of a derived relation), every derived premise
is explained once below, and a step instantiates a rule of the row's relation with as many
premises as the body has atoms. Programs whose relations are all set or min/max relations
take part (a sum's contributions are not one derivation)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from fixflow.checker import ast, load
from fixflow.checker.model import Report
from fixflow.checker.parser import parse
from fixflow.operators.derivation import Derivations, ExplainError, Fact, render
from fixflow.operators.engines.batches import Batch, table_rows
from reference.golden import GoldenCase, load_golden

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"


def explainable(case: GoldenCase, report: Report) -> bool:
    """What explain covers: no iteration index, no expression as an atom's argument, and
    every recursive derived relation stored (an ``.output``: a recursive relation is not
    evaluated on the side, the non-recursive ones are)."""
    program = report.analysis.program
    derived = {rule.head.relation for rule in case.program.rules} - set(program.inputs)
    recursive = {r for s in report.strata if s.recursive for r in s.relations}
    atoms = [
        lit
        for rule in case.program.rules
        for body in rule.bodies
        for lit in body.literals
        if isinstance(lit, ast.Atom)
    ]
    return (
        bool(case.expected)
        and all(report.catalog[r].index_pos is None for r in derived)
        and (derived & recursive) <= set(program.outputs)
        and all(
            isinstance(a, ast.Var | ast.Wildcard | ast.NumberLit | ast.FloatLit | ast.StringLit)
            for atom in atoms
            for a in atom.args
        )
    )


def cases() -> list[str]:
    found = []
    for directory in sorted(p.parent for p in PROGRAMS.glob("*/program.dl")):
        case = load_golden(directory)
        if explainable(case, load(case.source, str(directory / "program.dl"))):
            found.append(directory.name)
    return found


def stored(case: GoldenCase, report: Report) -> dict[str, Batch]:
    rows = {**case.facts, **case.expected}
    batches = {}
    for relation, values in rows.items():
        types = report.catalog[relation].types
        columns = list(zip(*values, strict=True)) if values else [[] for _ in types]
        table = pa.table({f"c{i}": list(c) for i, c in enumerate(columns)})
        batches[relation] = table_rows(table, types)
    return batches


@pytest.mark.parametrize("name", cases())
def test_each_step_holds_over_the_stored_rows(name: str) -> None:
    case = load_golden(PROGRAMS / name)
    report = load(case.source, str(case.directory / "program.dl"))
    batches = stored(case, report)
    derivations = Derivations(case.program.rules, report.catalog, batches.get)
    facts = {r: set(rows) for r, rows in {**case.facts, **case.expected}.items()}
    for relation, rows in case.expected.items():
        for row in sorted(set(rows[:1] + rows[len(rows) // 2 :][:1] + rows[-1:])):
            stored_row = _stored(batches[relation], rows.index(row))
            steps = derivations.explain(Fact(relation, stored_row))
            assert steps[0].fact == Fact(relation, stored_row), render(steps)
            explained = [s.fact for s in steps]
            assert len(explained) == len(set(explained))
            for step in steps:
                if step.contributions is not None:  # a sum: its instances add up to it
                    stored_value = step.fact.values[step.value_at]
                    assert step.total == pytest.approx(stored_value, rel=1e-6, abs=1e-9), render(
                        steps
                    )
                    for _, premises in step.contributions:
                        for premise in premises:
                            if premise.relation in facts:
                                assert _held(premise.values, facts[premise.relation]), premise
                    continue
                if step.rule is None:
                    continue
                assert step.rule.head.relation == step.fact.relation
                for premise in step.premises:
                    if premise.relation in facts:
                        assert _held(premise.values, facts[premise.relation]), (
                            premise,
                            render(steps),
                        )
                    if premise.relation in derivations.derived and premise.relation in batches:
                        assert premise in explained, render(steps)


def _stored(batch: Batch, row: int) -> tuple[object, ...]:
    values = (batch.cols[f"c{i}"][row] for i in range(len(batch.cols)))
    return tuple(v.item() if hasattr(v, "item") else v for v in values)


def _held(values: tuple[object, ...], rows: set[tuple[object, ...]]) -> bool:
    return values in rows or any(
        all(
            a == pytest.approx(b) if isinstance(b, float) else a == b
            for a, b in zip(values, r, strict=True)
        )
        for r in rows
    )


LOOP = """
.decl arc(x: number, y: number)
.input arc
.decl tc(x: number, y: number)
.output tc
tc(X, Z) :- tc(X, Y), arc(Y, Z).
tc(X, Y) :- arc(X, Y).
"""


def test_a_proof_never_loops_through_the_fact_it_proves() -> None:
    report = load(LOOP, "loop.dl")
    arcs = [(1, 2), (2, 1)]
    closure = [(1, 1), (1, 2), (2, 1), (2, 2)]
    batches = {
        "arc": table_rows(
            pa.table({"c0": [a for a, _ in arcs], "c1": [b for _, b in arcs]}), ["number", "number"]
        ),
        "tc": table_rows(
            pa.table({"c0": [a for a, _ in closure], "c1": [b for _, b in closure]}),
            ["number", "number"],
        ),
    }
    derivations = Derivations(parse(LOOP, "loop.dl").rules, report.catalog, batches.get)
    lines = render(derivations.explain(Fact("tc", (1, 2))))
    assert lines == ["tc(1, 2)  <-  arc(1, 2)"]
    lines = render(derivations.explain(Fact("tc", (1, 1))))
    assert lines == ["tc(1, 1)  <-  tc(1, 2), arc(2, 1)", "tc(1, 2)  <-  arc(1, 2)"]
    with pytest.raises(ExplainError, match="no rule of `tc` gives tc"):
        derivations.explain(Fact("tc", (3, 3)))
