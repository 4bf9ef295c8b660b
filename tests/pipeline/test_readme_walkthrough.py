"""The README's walkthrough of the continuous pipeline, run as written: each command block
under "The continuous pipeline" as one bash script (``set -e``), from a directory that holds
what the repository root does (``examples/``, ``.venv``), on the embedded defaults (the
broker's port, a lake in the working directory). After the first block the lake holds SSSP
over the edges minus the deleted ones; after the second (the broker restarted: its in-memory
topics gone, ``--on-data-loss resume``) the deleted edges are back."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from deltalake import DeltaTable

from streams.cli import FIXFLOW

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## The continuous pipeline"


def walkthrough_blocks() -> list[str]:
    """The fenced blocks of the README's section (up to its first subsection), in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.split(r"^#", text.split(SECTION, 1)[1], maxsplit=1, flags=re.MULTILINE)[0]
    return re.findall(r"^```\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)


def distances(workdir: Path) -> dict[int, float]:
    table = DeltaTable(str(workdir / "lake" / "sssp" / "results" / "sssp")).to_pyarrow_table()
    return dict(zip(table["node"].to_pylist(), table["dist"].to_pylist(), strict=True))


def test_the_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    blocks = walkthrough_blocks()
    assert len(blocks) == 2 and blocks[0].startswith(". .venv/bin/activate\n")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / ".venv").symlink_to(FIXFLOW.parent.parent)
    outputs: list[str] = []
    # The user's shell: `fixflow` on PATH only once the first block has activated `.venv`,
    # which later blocks then run in.
    shell = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    activated = {**shell, "PATH": f"{tmp_path / '.venv' / 'bin'}:{shell['PATH']}"}
    try:
        for block in blocks:
            done = subprocess.run(
                ["bash", "-c", "set -euo pipefail\n" + block],
                cwd=tmp_path,
                env=activated if outputs else shell,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert done.returncode == 0, f"{block}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            outputs.append(done.stdout)
            if len(outputs) == 1:
                after_deletes = {1: 0.0, 2: 1.0, 3: 5.0, 4: 6.0, 5: 8.0, 6: 9.5}
                assert distances(tmp_path) == pytest.approx(after_deletes)
                printed = outputs[0].rsplit("node  dist\n", 1)[1].splitlines()[1:]
                assert printed == ["   4   6.0", "   5   8.0", "   6   9.5", "(3 rows)"]
    finally:
        subprocess.run(
            ["bash", "-c", "fixflow broker stop"],
            cwd=tmp_path,
            env=activated,
            capture_output=True,
            timeout=120,
        )
    assert distances(tmp_path) == pytest.approx({1: 0.0, 2: 1.0, 3: 3.5, 4: 4.5, 5: 6.5, 6: 8.0})
