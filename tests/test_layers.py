"""Imports go one way, pipeline → operators → checker; inside pipeline/ they go from later
sub-packages to earlier ones (``PIPELINE_TIERS``); no module imports itself back through
others; and Z3 stays in checker/smt.py.

Read from the source with ``ast`` rather than by importing, so that imports inside functions
(the lazy ones that keep the CLI quick) count too, and so do those under ``TYPE_CHECKING``
for the direction rules (an annotation naming a later layer is a wrong direction all the
same) but not for cycles (they never run)."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
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
PIPELINE_TIERS: tuple[tuple[str, ...], ...] = (
    ("",),  # config, errors, the Spark session, engine settings: modules of pipeline/ itself
    ("broker",),  # the embedded broker, its durable store and their processes
    ("kafka",),  # message values, the Kafka source (offsets, records, reads), librdkafka
    ("lake",),  # Delta tables, the program lake, result reading, fact files for eval
    ("publish", "stream"),  # files → Kafka; Kafka → ingest → maintenance → Delta
    ("api",),  # the Python API: programs over a user's own DataFrames (fixflow.Program)
    ("cli",),  # the command line and its commands
)
"""The sub-packages of pipeline/ in data-flow order: a module imports from its own
sub-package and earlier tiers only (the two of one tier do not import each other)."""
LAYERS = ("checker", "operators", "pipeline")


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


def runtime_imports_in(
    source: str, module: str, modules: set[str], is_package: bool = False
) -> set[str]:
    """The modules among ``modules`` that ``module`` imports when it runs: imports inside
    functions count, those under ``if TYPE_CHECKING:`` do not. ``from package import name``
    is an import of ``package.name`` when that is a module, else of ``package``: importing a
    module runs its package's ``__init__`` however it is spelled, so that edge is not one."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, *([node.module] if node.module else [])])
            found.update(
                f"{name}.{alias.name}" if f"{name}.{alias.name}" in modules else name
                for alias in node.names
            )
        elif (target := _import_module_target(node)) is not None:
            found.add(target)
    return (found & modules) - {module}


def _runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` except the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        yield child
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _runtime_nodes(other)
        else:
            yield from _runtime_nodes(child)


def _is_type_checking(test: ast.expr) -> bool:
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", "")
    return name == "TYPE_CHECKING"


def module_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Each module of ``paths`` → the modules of ``paths`` it imports when it runs."""
    names = {module_name(p): p for p in paths}
    return {
        name: runtime_imports_in(
            path.read_text(encoding="utf-8"), name, set(names), path.name == "__init__.py"
        )
        for name, path in names.items()
    }


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per group of modules that import each other, directly
    or through others (a strongly connected component of more than one module, or a module
    that imports itself)."""
    found = []
    for component in _components(graph):
        start = min(component)
        found.append(_path_back(graph, start, component))
    return sorted(found)


def _components(graph: Mapping[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components that hold a cycle, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(component)
    return found


def _path_back(graph: Mapping[str, set[str]], start: str, within: set[str]) -> list[str]:
    """A shortest path from ``start`` back to itself inside ``within`` (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & within):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if target not in previous:
                    previous[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{start} is on no cycle inside {sorted(within)}")


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


@pytest.mark.parametrize(
    "path",
    [p for p in MODULES if p.relative_to(PACKAGE).parts[0] == "pipeline"],
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_pipeline_imports_go_from_later_sub_packages_to_earlier_ones(path: Path) -> None:
    mine = pipeline_sub_package(module_name(path))
    wrong = sorted(
        name
        for name in imports_of(path)
        if within(name, "fixflow.pipeline") and not may_import(mine, pipeline_sub_package(name))
    )
    assert not wrong, f"pipeline/{mine or '.'} must not import {wrong} ({PIPELINE_TIERS})"


def pipeline_sub_package(name: str) -> str:
    """``kafka`` for ``fixflow.pipeline.kafka.source``; "" for a module of pipeline/ itself."""
    parts = name.split(".")[2:]
    if not parts:
        return ""
    return parts[0] if (PACKAGE / "pipeline" / parts[0]).is_dir() else ""


def tier_of(sub_package: str) -> int:
    return next(i for i, tier in enumerate(PIPELINE_TIERS) if sub_package in tier)


def may_import(importer: str, imported: str) -> bool:
    if importer == imported:
        return True
    return tier_of(imported) < tier_of(importer)


def test_every_pipeline_sub_package_has_a_tier() -> None:
    packages = {p.parent.name for p in (PACKAGE / "pipeline").glob("*/__init__.py")}
    assert packages == {s for tier in PIPELINE_TIERS for s in tier} - {""}


def test_the_tiers_order_the_pipeline() -> None:
    assert may_import("stream", "kafka") and may_import("cli", "stream")
    assert not may_import("kafka", "stream") and not may_import("lake", "cli")
    assert not may_import("stream", "publish") and not may_import("", "broker")


@pytest.mark.parametrize("layer", LAYERS)
def test_no_import_cycle(layer: str) -> None:
    graph = module_graph(MODULES)
    inside = {m: {t for t in ts if within(t, f"fixflow.{layer}")} for m, ts in graph.items()}
    layer_graph = {m: ts for m, ts in inside.items() if within(m, f"fixflow.{layer}")}
    found = cycles(layer_graph)
    assert not found, "import cycles:\n" + "\n".join(" → ".join(c) for c in found)


def test_no_import_cycle_across_layers() -> None:
    found = cycles(module_graph(MODULES))
    assert not found, "import cycles:\n" + "\n".join(" → ".join(c) for c in found)


def test_the_cycle_reader_skips_type_checking_and_resolves_modules() -> None:
    modules = {"p", "p.a", "p.b", "p.c", "q"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "from p import b, helper\n"
        "if TYPE_CHECKING:\n"
        "    from p.c import C\n"
        "else:\n"
        "    import q\n"
        "def f():\n"
        "    from . import c\n"
    )
    assert runtime_imports_in(source, "p.a", modules) == {"p.b", "p", "q", "p.c"}
    assert runtime_imports_in("if TYPE_CHECKING:\n    import q\n", "p.a", modules) == set()


def test_cycles_are_found_and_reported_as_paths() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"], ["e", "e"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


PACKAGE_ORDER = {
    "fixflow.operators.engines": (
        "program",
        "base",
        "blocks",
        "key_groups",
        "batches",
        "joins",
        "kernels",
        "shard_table",
        "shard_loop",
        "shard_exchange",
        "sharding",
        "sync",
        "async_support",
        "mra_bootstrap",
        "shard_run",
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
