"""Imports go one way, pipeline → operators → checker, and Z3 stays in checker/smt.py.

Read from the source with ``ast`` rather than by importing, so that imports inside functions
(the lazy ones that keep the CLI quick) and under ``TYPE_CHECKING`` count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "fixflow"
MODULES = sorted(PACKAGE.rglob("*.py"))
FORBIDDEN = {
    "checker": ("pyspark", "fixflow.operators", "fixflow.pipeline"),
    "operators": ("fixflow.pipeline", "kafka", "deltalake", "prometheus_client"),
}
"""By layer (the first directory under src/fixflow): modules it must not import."""
Z3_HOME = PACKAGE / "checker" / "smt.py"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    return imports_in(
        path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py"
    )


def imports_in(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module ``source`` (the text of ``module``) imports anywhere in its body,
    relative imports resolved, plus literal ``importlib.import_module("...")`` calls."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, *([node.module] if node.module else [])])
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
        elif (target := _import_module_target(node)) is not None:
            found.add(target)
    return found


def _import_module_target(node: ast.AST) -> str | None:
    if not (isinstance(node, ast.Call) and node.args):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    first = node.args[0]
    if name == "import_module" and isinstance(first, ast.Constant):
        return first.value if isinstance(first.value, str) else None
    return None


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_every_layer_has_modules() -> None:
    layers = {p.relative_to(PACKAGE).parts[0] for p in MODULES}
    assert {"checker", "operators", "pipeline"} <= layers


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_go_one_way(path: Path) -> None:
    layer = path.relative_to(PACKAGE).parts[0]
    forbidden = FORBIDDEN.get(layer, ())
    wrong = sorted(n for n in imports_of(path) if any(within(n, f) for f in forbidden))
    assert not wrong, f"{layer}/ must not import {wrong}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_z3_only_in_smt(path: Path) -> None:
    if path == Z3_HOME:
        assert "z3" in imports_of(path)
    else:
        assert not any(within(n, "z3") for n in imports_of(path))


def test_the_reader_sees_lazy_and_relative_imports() -> None:
    source = (
        "from . import smt\n"
        "from ..operators import plan\n"
        "def f():\n"
        "    import pyspark.sql\n"
        "    importlib.import_module('deltalake')\n"
    )
    found = imports_in(source, "fixflow.checker.example")
    assert {"fixflow.checker.smt", "fixflow.operators.plan", "pyspark.sql", "deltalake"} <= found


PACKAGE_ORDER = {
    "fixflow.operators.engines": (
        "program",
        "base",
        "blocks",
        "kernels",
        "shard_loop",
        "sharding",
        "sync",
        "async_support",
        "shard_map",
        "stage_frame",
        "async_prepare",
        "async_rounds",
        "async_engine",
        "modes",
    ),
    "fixflow.operators.maintain": (
        "setting",
        "garbage",
        "carried",
        "elastic",
        "inputs",
        "publish",
        "epoch_report",
        "updates",
        "stratum",
        "maintainer",
    ),
}
"""Inside these packages a module imports only the modules listed before it (so no cycle,
imports inside functions included); the package ``__init__`` comes last."""


@pytest.mark.parametrize("package", sorted(PACKAGE_ORDER))
def test_modules_import_in_package_order(package: str) -> None:
    order = PACKAGE_ORDER[package]
    directory = SRC.joinpath(*package.split("."))
    on_disk = {p.stem for p in directory.glob("*.py")} - {"__init__"}
    assert on_disk == set(order), "list every module of the package, once"
    wrong = []
    for position, stem in enumerate((*order, "__init__")):
        allowed = {f"{package}.{m}" for m in order[:position]} | {package}
        if stem == "__init__":
            allowed = {f"{package}.{m}" for m in order}
        for name in imports_of(directory / f"{stem}.py"):
            module = _module_in(name, package)
            if module is not None and module not in allowed:
                wrong.append(f"{stem} imports {module}")
    assert not wrong, wrong


def _module_in(name: str, package: str) -> str | None:
    """The module of ``package`` that import name ``name`` refers to, if any."""
    if not within(name, package) or name == package:
        return None
    return ".".join(name.split(".")[: len(package.split(".")) + 1])
