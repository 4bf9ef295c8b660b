"""The example corpus: every examples/*.dl parses, has a golden directory whose program.dl
is an exact copy, and examples/expected_classes.toml lists exactly its recursive relations."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fixflow.checker.ast import Atom, Negation, Program
from fixflow.checker.parser import parse

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PROGRAMS = ROOT / "tests" / "programs"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.dl"))
CLASSES = tomllib.loads((EXAMPLES / "expected_classes.toml").read_text())
VALID_CLASSES = {"set", "mra", "aggregate-seminaive", "naive"}


def test_corpus_is_complete() -> None:
    assert len(NAMES) >= 40
    for prefix in ("powerlog_p", "a3_", "dcd_", "nexus_"):
        assert any(n.startswith(prefix) for n in NAMES), prefix


@pytest.mark.parametrize("name", NAMES)
def test_example_parses_with_declared_io(name: str) -> None:
    program = parse((EXAMPLES / f"{name}.dl").read_text(), f"{name}.dl")
    declared = {d.relation for d in program.declarations}
    assert program.outputs, f"{name}: no .output"
    assert set(program.inputs) | set(program.outputs) <= declared
    used = {r.head.relation for r in program.rules} | _body_relations(program)
    assert used <= declared, f"{name}: undeclared {used - declared}"


@pytest.mark.parametrize("name", NAMES)
def test_golden_program_is_the_example(name: str) -> None:
    golden = PROGRAMS / name / "program.dl"
    assert golden.exists(), f"no golden directory for {name}"
    assert golden.read_text() == (EXAMPLES / f"{name}.dl").read_text()


@pytest.mark.parametrize("name", NAMES)
def test_expected_classes_cover_the_recursive_relations(name: str) -> None:
    program = parse((EXAMPLES / f"{name}.dl").read_text(), f"{name}.dl")
    listed = CLASSES.get(f"{name}.dl")
    assert listed is not None, f"{name}.dl missing from expected_classes.toml"
    assert set(listed) == _recursive_relations(program)
    assert set(listed.values()) <= VALID_CLASSES


def test_expected_classes_name_only_existing_examples() -> None:
    assert set(CLASSES) == {f"{n}.dl" for n in NAMES}


def test_the_papers_negative_examples_are_naive() -> None:
    # PowerLog Table 1: GCN-Forward and CommNet fail the MRA check
    assert CLASSES["powerlog_p7_gcn_forward.dl"] == {"GCN": "naive"}
    assert CLASSES["commnet.dl"] == {"comm": "naive"}


def _body_relations(program: Program) -> set[str]:
    names: set[str] = set()
    for rule in program.rules:
        for body in rule.bodies:
            for lit in body.literals:
                if isinstance(lit, Atom):
                    names.add(lit.relation)
                elif isinstance(lit, Negation):
                    names.add(lit.atom.relation)
    return names


def _recursive_relations(program: Program) -> set[str]:
    """IDB relations that reach themselves in the dependency graph (head <- body)."""
    deps: dict[str, set[str]] = {}
    for rule in program.rules:
        single = Program((rule,))
        deps.setdefault(rule.head.relation, set()).update(_body_relations(single))
    recursive = set()
    for start in deps:
        seen, stack = set(), list(deps[start])
        while stack:
            rel = stack.pop()
            if rel not in seen:
                seen.add(rel)
                stack.extend(deps.get(rel, ()))
        if start in seen:
            recursive.add(start)
    return recursive
