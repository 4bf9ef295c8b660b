"""docs/architecture.md stays a reference that matches the code: at most 400 lines, and every
module, dotted name and Fixflow identifier it spells in backticks exists in ``src/fixflow``,
so the document cannot name a module or a class that is gone. Links into its sections from
the other Markdown files must land on a heading.

Read from the source with ``ast`` (no import: no Spark, no JVM). What is checked, per
backticked span outside code fences:

- a path ending in ``.py`` or ``/`` with a directory part: relative to ``src/fixflow`` (or
  to the repository for ``tests/``, ``bench/``, ``docs/``, ``conf/``, ``examples/``);
  a bare ``name.py``: some module of that name under ``src/fixflow``;
- ``fixflow.a.b[.Name]``: the module, and the name defined at its top level;
- ``module.Name`` where ``module`` is the file or package name of a Fixflow module:
  ``Name`` defined at that module's top level (``spark.x.y`` Spark settings excepted);
- ``Class.attr`` where ``Class`` is a Fixflow class: ``attr`` defined in its body (or set as
  ``self.attr`` in one of its methods);
- a bare ``CamelCase`` or ``UPPER_CASE`` identifier: defined at the top level of some
  module (names from other libraries are listed in ``FOREIGN``).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "fixflow"
DOC = ROOT / "docs" / "architecture.md"
MAX_LINES = 400
REPOSITORY_DIRS = ("tests/", "bench/", "docs/", "conf/", "examples/")
FOREIGN = frozenset({"DeltaTable", "SparkSession", "DataFrame", "JVM", "MRA", "IDB", "EDB"})
"""Identifiers the document may name that are not Fixflow's own."""

SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")
NAMED = re.compile(r"^(?:[A-Z][a-z0-9]+){2,}\w*$|^[A-Z][A-Z0-9]*_[A-Z0-9_]+$")
"""CamelCase with two humps or more, or UPPER_CASE with an underscore."""
LINK = re.compile(r"\]\(([^)\s]*architecture\.md)#([^)\s]+)\)")


@dataclass
class Source:
    """What ``src/fixflow`` defines: module names, top-level names, class attributes."""

    modules: dict[str, Path] = field(default_factory=dict)
    """Dotted module name → file."""
    by_stem: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """A module's last name part (file or package name) → its dotted names."""
    top_level: dict[str, set[str]] = field(default_factory=dict)
    classes: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def defines(self, module: str, name: str) -> bool:
        return name in self.top_level.get(module, set())

    def defined_anywhere(self, name: str) -> bool:
        return any(name in names for names in self.top_level.values())


def read_source() -> Source:
    source = Source()
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        source.modules[name] = path
        source.by_stem[name.rsplit(".", 1)[-1]].append(name)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        source.top_level[name] = top_level_names(tree, with_imports=is_package)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                source.classes[node.name] |= class_attributes(node)
    return source


def top_level_names(tree: ast.Module, with_imports: bool) -> set[str]:
    """Names a module defines (a package's ``__init__`` also offers what it imports)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif with_imports and isinstance(node, ast.ImportFrom):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def class_attributes(node: ast.ClassDef) -> set[str]:
    names = top_level_names(ast.Module(body=node.body, type_ignores=[]), with_imports=False)
    for child in ast.walk(node):
        if (
            isinstance(child, ast.Attribute)
            and isinstance(child.ctx, ast.Store)
            and isinstance(child.value, ast.Name)
            and child.value.id == "self"
        ):
            names.add(child.attr)
    return names


def spans(text: str) -> list[str]:
    """The backticked spans of ``text`` outside code fences, without call parentheses."""
    prose = FENCE.sub("", text)
    return [re.sub(r"\(.*\)$", "", s.strip()) for s in SPAN.findall(prose)]


def stale_names(text: str, source: Source) -> list[str]:
    """Every backticked name of ``text`` that does not exist (see the module docstring)."""
    return sorted({s for s in spans(text) if not _exists(s, source)})


def _exists(span: str, source: Source) -> bool:
    if span.endswith((".py", "/")) and " " not in span:
        return _path_exists(span, source)
    if span.startswith("fixflow."):
        return _dotted_exists(span, source)
    parts = span.split(".")
    if not all(IDENTIFIER.match(p) for p in parts):
        return True  # not a name: an expression, a setting, a command line
    if len(parts) == 1:
        return not NAMED.match(span) or span in FOREIGN or source.defined_anywhere(span)
    head, name = parts[0], parts[1]
    if head == "spark" and len(parts) > 2:
        return True  # a Spark setting such as spark.sql.adaptive.enabled
    if head in source.by_stem:
        return any(source.defines(module, name) for module in source.by_stem[head])
    if head in source.classes:
        return name in source.classes[head]
    return True  # another library's name (F.col, json.dumps, ...)


def _path_exists(span: str, source: Source) -> bool:
    if "<" in span or "*" in span:
        return True  # a pattern such as pipeline/commands/<name>.py
    if "/" not in span.rstrip("/"):
        return any(path.name == span for path in source.modules.values())
    base = ROOT if span.startswith(REPOSITORY_DIRS) else PACKAGE
    return (base / span).exists()


def _dotted_exists(span: str, source: Source) -> bool:
    parts = span.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in source.modules:
            rest = parts[cut:]
            return not rest or source.defines(module, rest[0])
    return False


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    prose = FENCE.sub("", text)
    return {anchor(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", prose, re.MULTILINE)}


@pytest.fixture(scope="module")
def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def source() -> Source:
    return read_source()


def test_the_architecture_document_is_at_most_400_lines(doc_text: str) -> None:
    lines = len(doc_text.splitlines())
    assert lines <= MAX_LINES, (
        f"docs/architecture.md has {lines} lines (at most {MAX_LINES}): move measurements "
        "and history to bench/*_RESULTS.md or bench/DESIGN_NOTES.md and link them"
    )


def test_every_name_in_the_architecture_document_exists(doc_text: str, source: Source) -> None:
    stale = stale_names(doc_text, source)
    assert not stale, (
        "docs/architecture.md names what src/fixflow does not have (moved or renamed? "
        "update the document): " + ", ".join(stale)
    )


def test_links_into_the_architecture_document_land_on_a_heading(doc_text: str) -> None:
    known = anchors(doc_text)
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    documents += [*sorted((ROOT / "bench").glob("*.md")), ROOT / "examples" / "README.md"]
    broken = [
        f"{path.relative_to(ROOT)}: #{target}"
        for path in documents
        for _, target in LINK.findall(path.read_text(encoding="utf-8"))
        if target not in known
    ]
    assert not broken, f"links to a section docs/architecture.md does not have: {broken}"


def test_the_checker_of_names_catches_what_is_gone(source: Source) -> None:
    text = (
        "`operators/plan.py`, `operators/gone.py`, `plan.py`, `gone.py`, `tests/test_docs.py`, "
        "`fixflow.operators.plan.Scan`, `fixflow.operators.plan.Gone`, `fixflow.nowhere`, "
        "`__init__.py`, `commands/<name>.py`, `plan.Scan`, `plan.Gone`, `Maintainer.apply`, "
        "`Maintainer.gone`, `HANDOVER_ROWS`, "
        "`GONE_ROWS`, `StratumRun`, `GoneClass`, `DeltaTable`, `F.col`, `x < y`, "
        "`spark.sql.adaptive.enabled`, `checker.load`, `setup()`\n"
        "```\n`inside.py` a fence\n```\n"
    )
    assert stale_names(text, source) == sorted(
        [
            "GONE_ROWS",
            "GoneClass",
            "Maintainer.gone",
            "fixflow.nowhere",
            "fixflow.operators.plan.Gone",
            "gone.py",
            "operators/gone.py",
            "plan.Gone",
        ]
    )


def test_anchors_follow_github() -> None:
    assert anchor("The MRA engine seam") == "the-mra-engine-seam"
    assert anchor("Reading results and publishing") == "reading-results-and-publishing"
    assert anchor("5. Departures from the original design") == (
        "5-departures-from-the-original-design"
    )
