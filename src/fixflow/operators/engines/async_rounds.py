"""What the driver reads back from a sharded run's job: the stages its tasks ran
(``engines.shard_run`` records them in one statistics row), observed on the job's way out
(``run_metrics``) and decoded (``recorded``), for ``mra_bootstrap`` to replay and log.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from fixflow.operators.engines.blocks import BLOB
from fixflow.operators.engines.mra_bootstrap import Stage
from fixflow.operators.engines.shard_loop import STATS
from fixflow.operators.engines.shard_run import stages_of
from fixflow.operators.materialize import Stored

STAGES = "stages"
"""The observed metric holding the statistics rows' blocks."""


def run_metrics() -> list[Column]:
    """The statistics rows' blocks (the run's first task writes one)."""
    return [F.collect_list(F.when(F.col("kind") == STATS, F.col(BLOB))).alias(STAGES)]


def recorded(stored: Stored) -> list[Stage]:
    """The stages a stored run's tasks ran, in order."""
    records = stored.metrics.get(STAGES) or []
    if len(records) != 1:
        raise RuntimeError(f"a sharded run left {len(records)} statistics rows, not 1")
    return stages_of(records[0])
