"""Fixflow's Python API (``import fixflow``): programs over a user's own DataFrames.

``Program.from_file`` / ``Program.from_text`` check a program; ``Program.check`` reports its
strata and MRA conditions; ``Program.evaluate`` runs it on the caller's SparkSession. Errors
about what a user gave are ``FixflowError``s with one-line messages. docs/api.md documents
it with examples a test runs.
"""

from fixflow.pipeline.api.errors import FixflowError, InputError, ProgramError
from fixflow.pipeline.api.program import Program, Results
from fixflow.pipeline.api.report import CheckReport, Message, RuleVerdict, StratumInfo
from fixflow.pipeline.lake.explain import Explanation

__all__ = [
    "CheckReport",
    "Explanation",
    "FixflowError",
    "InputError",
    "Message",
    "Program",
    "ProgramError",
    "Results",
    "RuleVerdict",
    "StratumInfo",
]
