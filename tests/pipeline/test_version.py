"""`fixflow --version`: one line with the project's version and its components' versions,
from the installed metadata (so it matches constraints.txt after `make install`)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

FIXFLOW = Path(sys.executable).parent / "fixflow"


def test_version_names_fixflow_and_the_pinned_components() -> None:
    done = subprocess.run([str(FIXFLOW), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith(f"fixflow {version('fixflow')} (")
    pinned = ("pyspark", "deltalake", "kafka-python", "confluent-kafka", "z3-solver", "pyarrow")
    for component in pinned:
        assert f"{component} {version(component)}" in line
