"""Fixflow: a continuous Datalog engine on Apache Spark.

The Python API (``fixflow.pipeline.api``, documented in docs/api.md)::

    import fixflow
    program = fixflow.Program.from_file("sssp.dl")
    results = program.evaluate(spark, edge=edges)   # {".output" relation: DataFrame}

Its names load on first use, so that ``fixflow`` on the command line (which imports this
package first) starts no more than the command needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fixflow.pipeline.api import (
        BatchReport,
        CheckReport,
        Explanation,
        FixflowError,
        InputError,
        Message,
        Metrics,
        OperationalError,
        Program,
        ProgramError,
        Results,
        RuleVerdict,
        RunningStream,
        StratumInfo,
    )

__all__ = [
    "BatchReport",
    "CheckReport",
    "Explanation",
    "FixflowError",
    "InputError",
    "Message",
    "Metrics",
    "OperationalError",
    "Program",
    "ProgramError",
    "Results",
    "RuleVerdict",
    "RunningStream",
    "StratumInfo",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("fixflow.pipeline.api"), name)
    raise AttributeError(f"module 'fixflow' has no attribute {name!r}")
