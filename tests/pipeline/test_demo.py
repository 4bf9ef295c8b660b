"""`fixflow demo` as a new user runs it: on a lake and a broker port of its own, it ends with
results equal to the oracle, prints only paths that exist, leaves tables that `fixflow show`
and `fixflow query` find, and stops the broker it started."""

from __future__ import annotations

import re
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from fixflow.checker.parser import parse
from fixflow.pipeline.broker.embedded import pid_file
from fixflow.pipeline.config import load_config
from fixflow.pipeline.lake.lakehouse import ProgramLake
from ports import free_port
from streams.cli import FIXFLOW
from streams.harness import mismatches_with_oracle

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

PROGRAMS = {"sssp": "sssp", "cc": "cc", "pagerank": "rank"}
Edge = tuple[int, int, float]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(conf file, lake, output) of one `fixflow demo` run."""
    base = tmp_path_factory.mktemp("demo")
    conf = base / "demo.toml"
    conf.write_text(
        f'[kafka]\nbootstrap_servers = "127.0.0.1:{free_port()}"\n'
        f'[lake]\npath = "{base / "lake"}"\n'
        '[spark.conf]\n"spark.ui.enabled" = false\n'
        "[metrics]\nport = 0\n"
    )
    done = subprocess.run(
        [str(FIXFLOW), "demo", "--conf", str(conf)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=base,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    return conf, base / "lake", output


def _bundled_edges(name: str) -> set[Edge]:
    text = resources.files("fixflow.pipeline.cli.demo").joinpath(name).read_text(encoding="utf-8")
    rows = (line.split("\t") for line in text.splitlines() if line.strip())
    return {(int(s), int(d), float(w)) for s, d, w in rows}


def test_the_demo_ends_with_the_oracle_results_of_the_updated_graph(
    demo: tuple[Path, Path, str],
) -> None:
    _, lake_root, _ = demo
    edges = (_bundled_edges("edge.facts") | _bundled_edges("insert.facts")) - _bundled_edges(
        "delete.facts"
    )
    for name in PROGRAMS:
        program_file = lake_root / "_demo" / f"demo_{name}.dl"
        program = parse(program_file.read_text(), str(program_file))
        lake = ProgramLake.for_program(str(lake_root), program_file)
        assert mismatches_with_oracle(program, lake, {"edge": edges}, tolerance=1e-3) == {}, name
        # The run kept its program's source in the lake: publish finds the declarations.
        assert Path(lake.source).read_text() == program_file.read_text()


def test_the_demo_prints_paths_that_exist_and_stops_the_broker_it_started(
    demo: tuple[Path, Path, str],
) -> None:
    conf, _, output = demo
    assert re.search(r"^broker: broker started at", output, re.MULTILINE), output
    assert re.search(r"^broker: broker at \S+ stopped .*\(the demo started it\)$", output, re.M)
    assert not pid_file(load_config(conf)).exists()
    status = subprocess.run(
        [str(FIXFLOW), "broker", "status", "--conf", str(conf)], capture_output=True, text=True
    )
    assert status.returncode == 3, status.stdout  # 3: no broker runs
    printed = re.findall(r"(?:results|checkpoints) (/\S+?)/?\s", output)
    assert len(printed) == 2 * len(PROGRAMS), output
    for path in printed:
        assert Path(path).is_dir(), path
    assert output.count("dead letters: none (a bad message would go to") == len(PROGRAMS)
    assert "Traceback" not in output


def test_show_and_query_find_the_demo_tables_with_the_commands_it_prints(
    demo: tuple[Path, Path, str],
) -> None:
    _, _, output = demo
    show = re.search(r"fixflow show (.+)$", output, re.MULTILINE)
    query = re.search(r'fixflow query "(.+)" (--conf \S+)$', output, re.MULTILINE)
    assert show and query, output
    shown = subprocess.run(
        [str(FIXFLOW), "show", *show.group(1).split()], capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert "demo_sssp.sssp" in shown.stdout and re.search(r"^\d+ rows", shown.stdout, re.M)
    queried = subprocess.run(
        [str(FIXFLOW), "query", query.group(1), *query.group(2).split(), "--format", "csv"],
        capture_output=True,
        text=True,
    )
    assert queried.returncode == 0, queried.stderr
    assert queried.stdout.splitlines()[:2] == ["node,dist", "1,0.0"], queried.stdout
