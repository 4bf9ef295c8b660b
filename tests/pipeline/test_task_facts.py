"""Facts files read by Spark tasks (``lake/task_facts.py``): every line read by exactly one
range, the rows the driver's reader reads, the driver's `file:line` error for a malformed
file, and `fixflow eval` of a file bound for Spark read by tasks, whole process."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixflow.checker.ast import Attribute
from fixflow.operators.thresholds import TASK_READ_ROWS
from fixflow.pipeline.lake.facts import FactsError, read_table
from fixflow.pipeline.lake.task_facts import (
    lines_starting_in,
    ranges,
    read_by_tasks,
    read_by_tasks_above,
    read_input,
    splittable,
)

EDGE = (
    Attribute("src", "number", "number"),
    Attribute("dst", "number", "number"),
    Attribute("w", "float", "float"),
)


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.text("ab\t1 ", max_size=6), max_size=12),
    step=st.integers(1, 9),
    slots=st.integers(1, 4),
)
def test_every_line_is_read_by_exactly_one_range(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str], step: int, slots: int
) -> None:
    """A range owns the lines that start in it: the ranges' bytes, in order, are the
    file's, whatever the cut (mid-line, on a newline, past the end)."""
    path = tmp_path_factory.mktemp("lines") / "f.facts"
    data = "".join(f"{line}\n" for line in lines).encode()
    path.write_bytes(data)
    cuts = ranges(len(data), slots, range_bytes=step)
    assert cuts[0][0] == 0 and cuts[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(cuts))
    assert b"".join(lines_starting_in(str(path), s, e) for s, e in cuts) == data


def test_a_byte_order_mark_and_a_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "f.facts"
    path.write_bytes(b"\xef\xbb\xbf1\t2\n3\t4")
    assert lines_starting_in(str(path), 0, 4) == b"1\t2\n"
    assert lines_starting_in(str(path), 4, 9) == b"3\t4"


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("edge.facts", "".join(f"{i}\t{i * 7 % 13}\t{i / 4}\n" for i in range(500))),
        ("edge.csv", "w,src,dst\n" + "".join(f"{i / 2},{i},{i + 1}\n" for i in range(500))),
        ("edge.facts", "\ufeff1\t2\t0.5\n\n\n3\t4\t1e3\r\n5\t6\t7"),
    ],
    ids=["facts", "csv-header-order", "bom-blank-crlf-no-newline"],
)
def test_tasks_read_the_rows_the_driver_reads(
    spark: Any, tmp_path: Path, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_bytes(text.encode())
    facts = splittable(path, EDGE, None)
    assert facts is not None
    read = read_by_tasks(spark, facts, range_bytes=97)  # many ranges, cut mid-line
    assert read is not None
    frame, rows = read
    expected = read_table(path, EDGE)
    assert rows == expected.num_rows
    assert sorted(tuple(r) for r in frame.collect()) == _rows(expected)


def test_a_malformed_file_is_read_by_the_driver_which_names_the_line(
    spark: Any, tmp_path: Path
) -> None:
    """Arrow refuses a range; the driver's reader then reads the file: here it names the
    bad line, as it does without tasks."""
    path = tmp_path / "edge.facts"
    good = "".join(f"{i}\t{i + 1}\t1.5\n" for i in range(300))
    path.write_text(good + "7\tseven\t1.0\n" + good)
    facts = splittable(path, EDGE, None)
    assert facts is not None
    assert read_by_tasks(spark, facts, range_bytes=128) is None
    with pytest.raises(FactsError, match=r"edge\.facts:301: column `dst` expects a number"):
        read_input(spark, facts)


def test_a_lenient_spelling_is_read_as_python_reads_it(spark: Any, tmp_path: Path) -> None:
    """`+5` and ` 6` are numbers to the row reader, not to Arrow: the driver reads them."""
    path = tmp_path / "edge.facts"
    path.write_text("+5\t 6\t1.0\n1\t2\t3.0\n")
    facts = splittable(path, EDGE, None)
    assert facts is not None
    got = read_input(spark, facts)
    assert isinstance(got, pa.Table)
    assert _rows(got) == [(1, 2, 3.0), (5, 6, 1.0)]


def test_which_files_tasks_read(tmp_path: Path) -> None:
    """One plain file of more rows than the driver holds and at least TASK_READ_ROWS; not
    a gzip file, not several files of one relation, not a file the driver holds."""
    path = tmp_path / "edge.facts"
    path.write_text("1\t2\t0.5\n" * 1000)
    gz = tmp_path / "g.facts"
    gz.write_bytes(b"\x1f\x8b" + b"\0" * 100)
    relations = {"e": EDGE, "g": EDGE, "two": EDGE}
    files = {"e": [(path, None)], "g": [(gz, None)], "two": [(path, None), (path, None)]}
    assert set(read_by_tasks_above(files, relations, local_rows=0)) == (
        {"e"} if TASK_READ_ROWS <= 1000 else set()
    )
    assert read_by_tasks_above(files, relations, local_rows=10_000) == {}


EVAL = (sys.executable, "-m", "fixflow.pipeline.cli", "-v", "eval")
FLAGS = ("--csv", "--local-rows", "0")
PROGRAM = """.decl edge(src: number, dst: number, w: float)
.input edge
.decl out(src: number, dst: number)
.output out
out(s, d) :- edge(s, d, w), w > 0.999.
"""


@pytest.mark.spark  # a `fixflow eval` subprocess starts Spark of its own
def test_eval_reads_a_file_bound_for_spark_by_tasks(tmp_path: Path) -> None:
    """`fixflow eval --local-rows 0` of a file past TASK_READ_ROWS: tasks read it (the log
    says so) and the result is the one numpy computes from the file."""
    n = TASK_READ_ROWS * 11 // 10  # the choice is by rows estimated from the file's head
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, 10**6, n), rng.integers(0, 10**6, n)
    w = rng.random(n).round(6)
    (tmp_path / "facts").mkdir()
    table = pa.table({"src": src, "dst": dst, "w": w})
    with (tmp_path / "facts" / "edge.csv").open("wb") as file:
        file.write(b"src,dst,w\n")  # Arrow's writer quotes the names: the row reader's case
        pa_csv.write_csv(table, file, pa_csv.WriteOptions(include_header=False))
    (tmp_path / "p.dl").write_text(PROGRAM)
    done = subprocess.run(
        [*EVAL, tmp_path / "p.dl", "-F", tmp_path / "facts", "-D", tmp_path / "out", *FLAGS],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"tasks read {n} facts" in done.stderr
    got = pa_csv.read_csv(tmp_path / "out" / "out.csv")
    keep = w > 0.999
    assert _rows(got) == sorted(set(zip(src[keep].tolist(), dst[keep].tolist(), strict=True)))
