"""A SparkSession that starts when something first uses it.

``fixflow eval`` of a program whose strata all run in the driver needs no JVM: the facts are
read with Arrow, the strata run as numpy loops and the Delta tables are written by delta-rs.
Starting Spark anyway cost 4-5 s of a 5 s run on an 11-edge example. ``SessionOnDemand``
stands where a session is expected and starts the real one (with the caller's ``start``) at
the first attribute read: holding it, or handing it on, starts nothing.

It forwards attributes, so PySpark's own code accepts it where it reads a session's members;
code that needs the ``SparkSession`` object itself calls ``session()``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class SessionOnDemand:
    """Starts ``start()`` on first use and forwards every attribute to the session."""

    def __init__(self, start: Callable[[], SparkSession]) -> None:
        self._start = start
        self._session: SparkSession | None = None

    @property
    def started(self) -> bool:
        return self._session is not None

    def session(self) -> SparkSession:
        if self._session is None:
            log.info("starting Spark: the first stratum or relation placed on it needs it")
            self._session = self._start()
        return self._session

    def __getattr__(self, name: str) -> Any:  # only for names this class does not define
        return getattr(self.session(), name)


def real_session(spark: SparkSession | SessionOnDemand) -> SparkSession:
    """The session itself (started if it was on demand)."""
    return spark.session() if isinstance(spark, SessionOnDemand) else spark
