"""Fixflow's Python API (``import fixflow``): programs over a user's own DataFrames.

``Program.from_file`` / ``Program.from_text`` check a program; ``Program.check`` reports its
strata and MRA conditions; ``Program.evaluate`` runs it on the caller's SparkSession;
``Program.stream`` keeps it up to date over streaming input (a ``RunningStream``; `fixflow
run` is a user of it); ``Program.explain`` says why a result row holds. Errors about what a
user gave are ``FixflowError``s with one-line messages; operational failures (a busy lake,
an object store or a Kafka broker that refuses the settings) are ``OperationalError``s, one
line too. docs/api.md documents it with examples a test runs.
"""

from fixflow.pipeline.api.errors import FixflowError, InputError, ProgramError
from fixflow.pipeline.api.program import Program, Results
from fixflow.pipeline.api.report import CheckReport, Message, RuleVerdict, StratumInfo
from fixflow.pipeline.errors import UserFacingError as OperationalError
from fixflow.pipeline.lake.explain import Explanation
from fixflow.pipeline.stream.metrics import Metrics
from fixflow.pipeline.stream.program import BatchReport
from fixflow.pipeline.stream.running import RunningStream

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
