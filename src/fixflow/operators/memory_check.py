"""Refusing, before it starts, a run whose inputs the configured memory cannot hold by the
memory model (docs/scale.md, "Memory").

The model is fitted to strata in the driver only: peak = ``DRIVER_FIXED_BYTES`` +
``DRIVER_BYTES_PER_ROW`` x the stratum's input rows (``memory_model.driver_peak``). So the
rule is: a stratum that ``placement.place`` puts in the driver, and whose inputs are all
input relations (their rows known before anything runs), is refused when its predicted peak
exceeds ``[engine] memory`` (``auto``: the machine's physical memory). With ``local_rows =
"auto"`` that cannot happen (``auto`` keeps the driver's strata within half the memory);
it can when ``local_rows`` names more rows than the memory holds, or ``[engine] memory``
is set below the machine's. A stratum on Spark is never refused: the model is not fitted
there (Spark's JVM spills; a shard task's Python memory was not measured apart).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fixflow.checker.model import Report
from fixflow.operators.core import EvalOptions, StratumView
from fixflow.operators.memory_model import driver_peak
from fixflow.operators.placement import inputs_of, place
from fixflow.operators.thresholds import DRIVER_BYTES_PER_ROW, DRIVER_FIXED_BYTES


@dataclass(frozen=True)
class MemoryRefusal:
    """A stratum the driver would run over ``rows`` input rows, which by the model need
    ``needed`` bytes, more than ``memory``."""

    stratum: int
    relations: tuple[str, ...]
    rows: int
    needed: int
    memory: int
    local_rows: int

    def message(self, memory_setting: int | str) -> str:
        """One line: what happened and what to do."""
        auto = memory_setting == "auto"
        what = "this machine's physical memory" if auto else "[engine] memory"
        more = "run it where there is more memory" if auto else "raise [engine] memory"
        needed, memory = _sizes(self.needed, self.memory)
        return (
            f"not started: stratum {self.stratum} ({', '.join(self.relations)}) would run in "
            f"the driver over {self.rows:,} input rows (within local_rows {self.local_rows:,}), "
            f"which by the memory model ({DRIVER_FIXED_BYTES / 1e9:.1f} GB + "
            f"{DRIVER_BYTES_PER_ROW} bytes a row, docs/scale.md) need {needed}, more than the "
            f"{memory} of {what}: set [engine] local_rows (--local-rows) below {self.rows:,} "
            f"so that it runs on Spark, or {more}"
        )


def _sizes(needed: int, memory: int) -> tuple[str, str]:
    """Both sizes in GB, with as many decimals as it takes to tell them apart."""
    for decimals in range(2, 10):
        shown = (f"{needed / 1e9:.{decimals}f} GB", f"{memory / 1e9:.{decimals}f} GB")
        if shown[0] != shown[1]:
            return shown
    return f"{needed:,} bytes", f"{memory:,} bytes"


def memory_refusal(
    report: Report, options: EvalOptions, input_rows: Mapping[str, int], memory: int
) -> MemoryRefusal | None:
    """The first stratum the model says the driver cannot hold (see the module), or None.
    ``input_rows``: the rows of each ``.input`` relation (a missing one: none)."""
    analysis = report.analysis
    rows = {analysis.edb_relation(r): n for r, n in input_rows.items()}
    rows |= {edb: rows.get(edb, 0) for edb in analysis.loaded.values()}
    for stratum in report.strata:
        view = StratumView(report, stratum, options)
        inputs = inputs_of(view)
        if not all(r in rows for r in inputs):
            continue  # reads a derived relation: its size is known only once it runs
        if not place(view, rows.get).in_driver:
            continue
        held = sum(rows[r] for r in inputs)
        needed = driver_peak(held)
        if needed > memory:
            return MemoryRefusal(
                stratum.index, stratum.relations, held, needed, memory, options.local_rows
            )
    return None
