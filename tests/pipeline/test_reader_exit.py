"""A process that reads result tables exits cleanly, every time (issue #11).

``DeltaTable.to_pyarrow_table()`` and ``to_pandas()`` (deltalake 1.6.6, pyarrow 26, CPython
3.11) read through a pyarrow dataset over a Python filesystem object; when an Arrow I/O
thread drops the last reference to it after the interpreter began finalizing, the thread
is ended inside a C++ destructor and the process aborts: "terminate called without an
active exception", exit 134. On a 2-core machine a reader that exits right after reading
did so in 9 of 50 runs. The project reads through DataFusion instead
(``fixflow.pipeline.lake.datafusion_sql``); this test runs such a reader 20 times.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from fixflow.pipeline.lake.lakehouse import ProgramLake, append_rows

RUNS = 20
ROWS = 10_000

# Exits as soon as the rows are read: the moment the abort used to strike.
READER = """
import sys
from fixflow.pipeline.lake.results import find_results, read_result
for table in find_results(sys.argv[1]).tables:
    print(table.qualified_name, read_result(table).num_rows)
"""


def test_a_result_reader_exits_cleanly_every_time(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    rows = pa.table(
        {
            "node": pa.array(range(ROWS), pa.int64()),
            "dist": pa.array([i / 2 for i in range(ROWS)], pa.float64()),
        }
    )
    append_rows(ProgramLake(str(lake), "sssp").results("sssp"), rows)
    outcomes = [_read(lake) for _ in range(RUNS)]
    failed = [(code, err) for code, out, err in outcomes if code != 0]
    assert failed == [], f"{len(failed)} of {RUNS} readers failed; first: {failed[0]}"
    assert all(out == f"sssp.sssp {ROWS}\n" for _, out, _ in outcomes)


def _read(lake: Path) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-c", READER, str(lake)], capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stdout, done.stderr
