"""The one-worker groups of tests/conftest.py hold under the installed pytest-xdist.

`make test` relies on them: the standalone-cluster modules must not start a cluster on each
of several workers at once, and the live `fixflow run` is meant to be paid once. pytest 9.2
broke this silently (pytest-xdist 3.8 writes ``item._nodeid``, which pytest 9.2 no longer
reads), so each test of a group went to whichever worker was free. This runs the conftest's
own hook over a small tree of grouped modules in a real `pytest -n 2 --dist loadgroup`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ONE_WORKER_GROUPS

MODULE = """
import time

import pytest


@pytest.mark.parametrize("i", range(4))
def test_case(i):
    time.sleep(0.1)  # long enough that an idle worker would take the next case
"""


def test_grouped_modules_run_on_one_worker(tmp_path: Path) -> None:
    grouped = ["tests/grouped/test_one.py", "tests/grouped/test_two.py"]
    for path in [*grouped, "tests/free/test_three.py"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(MODULE, encoding="utf-8")
    # The hook as tests/conftest.py has it, with this tree's modules in the group table.
    (tmp_path / "conftest.py").write_text(
        "import tests_conftest\n"
        f"tests_conftest.ONE_WORKER_GROUPS.clear()\n"
        f"tests_conftest.ONE_WORKER_GROUPS.update({dict.fromkeys(grouped, 'g')!r})\n"
        "pytest_collection_modifyitems = tests_conftest.pytest_collection_modifyitems\n",
        encoding="utf-8",
    )
    for module, copy in (("conftest.py", "tests_conftest.py"), ("ports.py", "ports.py")):
        text = (Path(__file__).parent / module).read_text(encoding="utf-8")
        (tmp_path / copy).write_text(text, encoding="utf-8")  # ports: the conftest's import
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
         "no:cacheprovider", "tests"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    workers = {
        test: worker
        for worker, test in re.findall(r"\[(gw\d+)\] \[ *\d+%\] PASSED (\S+)", done.stdout)
    }
    in_group = {w for test, w in workers.items() if test.startswith("tests/grouped/")}
    assert len(workers) == 12, done.stdout[-3000:]
    assert len(in_group) == 1, f"a group spread over workers {sorted(in_group)}"


@pytest.mark.parametrize("module", sorted(ONE_WORKER_GROUPS))
def test_every_grouped_module_exists(module: str) -> None:
    assert (Path(__file__).parent.parent / module).is_file(), module
