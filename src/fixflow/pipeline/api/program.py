"""``fixflow.Program``: a Datalog program evaluated over a user's own DataFrames.

The same checker and engine as ``fixflow eval``, on the caller's SparkSession: Fixflow
creates no session, changes none of its settings for longer than a run (the round settings
``operators.rounds.session_conf`` sets are restored), and needs none that only
``pipeline.spark.make_session`` applies. Strata whose inputs are small run in the driver
(``placement.place``, ``[engine] local_rows``); their results become DataFrames of the
caller's session.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from fixflow.checker import CheckError, load
from fixflow.checker.ast import Attribute
from fixflow.checker.model import Report
from fixflow.operators.core import EvalOptions, EvaluationError
from fixflow.operators.evaluate import (
    Evaluation,
    Progress,
    evaluate_with_stats,
    partial_relations,
)
from fixflow.pipeline import jvm_lookups
from fixflow.pipeline.api import stream
from fixflow.pipeline.api.errors import FixflowError, ProgramError
from fixflow.pipeline.api.inputs import conform, null_error, unknown_inputs
from fixflow.pipeline.api.report import CheckReport, check_report
from fixflow.pipeline.config import (
    Config,
    ConfigError,
    MetricsConfig,
    config_from_mapping,
    default_config,
    load_config,
)
from fixflow.pipeline.engine_settings import eval_options
from fixflow.pipeline.lake.explain import ExplainFailed, Explanation, explain_row
from fixflow.pipeline.lake.lakehouse import ProgramLake
from fixflow.pipeline.object_store import use_lake
from fixflow.pipeline.stream.metrics import Metrics
from fixflow.pipeline.stream.program import BatchReport
from fixflow.pipeline.stream.running import RunningStream

log = logging.getLogger(__name__)

Settings = Config | Mapping[str, Mapping[str, Any]] | str | os.PathLike[str] | None
"""How a call is configured: a ``fixflow.toml``-style file's path, its sections as a mapping
(``{"engine": {"mode": "sync"}}``), a ``Config``, or None for the defaults. ``evaluate``
reads ``[engine]`` and ``[buffer]``, as ``fixflow eval --conf`` does."""


class Results(dict[str, DataFrame]):
    """The ``.output`` relations of an evaluation, by name, with their declared columns."""

    def __init__(self, frames: Mapping[str, DataFrame], partial: Mapping[str, str]) -> None:
        super().__init__(frames)
        self.partial = dict(partial)
        """Relation → why its rows are partial (a round cap stopped a stratum it reads
        before it converged); empty when every result is the program's."""


@dataclass(frozen=True)
class Program:
    """A checked Datalog program. Build it with ``from_file`` or ``from_text``."""

    name: str
    """The file the program came from (``from_file``) or the name given to ``from_text``:
    what error messages start with."""
    text: str
    report: Report
    """The checker's full report (strata, catalog, verdicts): for tools built on Fixflow."""

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Program:
        """Read and check the program in ``path``; ``ProgramError`` if it cannot be read or
        does not check."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise ProgramError(f"{os.fspath(path)}: {error.strerror or error}") from None
        return cls.from_text(text, name=os.fspath(path))

    @classmethod
    def from_text(cls, text: str, name: str = "<program>") -> Program:
        """Check the program ``text``; ``name`` is the file name its errors cite."""
        try:
            report = load(text, name)
        except CheckError as error:
            raise ProgramError.from_diagnostics(error.diagnostics, text) from None
        return cls(name, text, report)

    @property
    def inputs(self) -> dict[str, tuple[Attribute, ...]]:
        """Each ``.input`` relation and its declared attributes."""
        schemas = self.report.analysis.schemas
        return {r: schemas[r] for r in self.report.analysis.program.inputs}

    @property
    def outputs(self) -> dict[str, tuple[Attribute, ...]]:
        """Each ``.output`` relation and its result columns (an iteration index dropped)."""
        catalog = self.report.catalog
        return {r: catalog[r].result for r in self.report.analysis.program.outputs}

    def check(self) -> CheckReport:
        """Strata, evaluation classes and the MRA conditions of every recursive rule, with
        counterexamples: what ``fixflow check --json`` prints."""
        return check_report(self.report)

    def evaluate(
        self, spark: SparkSession, settings: Settings = None, /, **inputs: DataFrame
    ) -> Results:
        """Evaluate the program over ``inputs`` (one DataFrame per ``.input`` relation, by
        relation name) on ``spark``: the ``.output`` relations as DataFrames of ``spark``.

        An input's columns are taken by name, else by position; their types must hold the
        declared ones (``InputError`` otherwise, also for a null value)."""
        unknown_inputs(inputs, list(self.inputs), self.name)
        edb = {r: conform(r, self.inputs[r], frame) for r, frame in inputs.items()}
        options = self._options(settings)
        jvm_lookups.install()  # py4j's lookups remembered: speed only (pipeline.jvm_lookups)
        try:
            evaluation = evaluate_with_stats(self.report, edb, spark, options)
        except EvaluationError as error:
            raise FixflowError(f"{self.name}: {error}") from None
        except (PySparkException, Py4JJavaError) as error:
            found = null_error(error)
            if found is None:
                raise
            raise found from None
        return self._results(evaluation, edb)

    def stream(
        self,
        spark: SparkSession,
        settings: Settings = None,
        /,
        *,
        lake: str | os.PathLike[str] | None = None,
        name: str | None = None,
        trigger: str | None = None,
        metrics: Metrics | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
        on_round: Callable[[Progress], None] | None = None,
        **inputs: DataFrame,
    ) -> RunningStream:
        """Keep the program's results up to date over streaming DataFrames (one per
        ``.input`` relation it streams, by relation name; an optional ``op`` column says
        ``insert`` (the default) or ``delete``) or, given none, over its Kafka topics as
        ``[kafka]`` configures them (what `fixflow run` reads): the running query, a
        ``StreamingQuery``.

        Results, EDB, dead letters and the stream's checkpoint live under
        ``<lake>/<name>`` (``lake`` defaults to ``[lake] path``, ``name`` to the program
        file's stem), as `fixflow run` lays them out; a query started again on the same lake
        and name continues where the last one stopped. ``trigger``: ``"available_now"``
        (process what is there, then stop), a processing-time interval such as
        ``"5 seconds"``, or None for ``[stream] trigger_ms``. ``[stream] consistency =
        "async"`` commits provisional results and carries pending deltas on between batches
        (to the end, before an ``available_now`` query's ``awaitTermination`` returns).

        ``metrics``: the Prometheus collectors to update (``fixflow.Metrics``, in a registry
        you serve); by default new ones, served when ``[metrics] enabled``. ``on_batch`` is
        called with each batch's ``BatchReport``, ``on_round`` with every evaluation round's
        progress (in the query's thread: keep them short)."""
        unknown_inputs(inputs, list(self.inputs), self.name, every=False)
        stream.refuse_nullary_inputs(self.report)
        config = _config(settings)
        if lake is not None:
            config = replace(config, lake=replace(config.lake, path=os.fspath(lake)))
        use_lake(config.lake)
        stem = name or Path(self.name).stem
        if not stem or "/" in stem or stem.startswith("."):
            raise FixflowError(f"name {stem!r}: give a directory name for the program's lake")
        jvm_lookups.install()
        return stream.start(
            spark,
            config,
            (self.name, self.text),
            stem,
            trigger,
            inputs,
            self.inputs,
            metrics=metrics,
            on_batch=on_batch,
            on_round=on_round,
        )

    def explain(
        self,
        relation: str,
        *key: str | int | float,
        lake: str | os.PathLike[str],
        name: str | None = None,
    ) -> Explanation:
        """Why the row of ``relation`` with ``key`` (its columns but an aggregated value)
        holds in the lake a ``stream`` of this program keeps: one derivation, ``str()`` of
        it a line per derived fact, ``fact  <-  premises``, down to input facts."""
        stem = name or Path(self.name).stem
        try:
            return explain_row(
                self.report, self.text, ProgramLake(os.fspath(lake), stem), relation, key
            )
        except ExplainFailed as error:
            raise FixflowError(str(error)) from None

    def _options(self, settings: Settings) -> EvalOptions:
        config = _config(settings)
        return eval_options(config)

    def _results(self, evaluation: Evaluation, edb: Mapping[str, DataFrame]) -> Results:
        capped = [s.stratum for s in evaluation.capped]
        partial = partial_relations(self.report, capped)
        frames = {}
        for relation in self.report.analysis.program.outputs:
            if relation in evaluation.relations:
                frames[relation] = evaluation.relations[relation]
            else:  # an .output that only holds its input's facts
                frames[relation] = edb[relation].distinct()
        why = {
            relation: f"stratum {', '.join(map(str, sorted(strata)))} stopped at its "
            "iteration cap before converging"
            for relation, strata in partial.items()
            if relation in frames
        }
        for relation, reason in why.items():
            log.warning("%s: `%s` is partial: %s", self.name, relation, reason)
        return Results(frames, why)


API_DEFAULTS = replace(default_config(), metrics=replace(MetricsConfig(), enabled=False))
"""The settings of a call that gives none: `fixflow run`'s, except that a library call
serves no metrics endpoint unless ``[metrics] enabled`` is set."""


def _config(settings: Settings) -> Config:
    try:
        if settings is None or isinstance(settings, Config):
            return settings or API_DEFAULTS
        if isinstance(settings, Mapping):
            document = {k: dict(v) for k, v in settings.items()}
            return config_from_mapping(document, "settings", API_DEFAULTS)
        return load_config(Path(settings), API_DEFAULTS)
    except ConfigError as error:
        raise FixflowError(str(error)) from None
