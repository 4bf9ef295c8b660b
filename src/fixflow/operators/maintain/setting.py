"""What every part of the Maintainer reads and none replaces (``Setting``), and the
questions about the program they all ask."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from pyspark.sql import DataFrame, SparkSession

from fixflow.checker import ast
from fixflow.checker.catalog import Catalog
from fixflow.checker.model import Report, Stratum
from fixflow.operators.core import EvalOptions
from fixflow.operators.driver.copies import DriverCopies
from fixflow.operators.engines.base import MraEngine
from fixflow.operators.materialize import Materializer
from fixflow.operators.relation import renamed

_T = TypeVar("_T")


@dataclass(frozen=True)
class Setting:
    """The checked program, the session and options, the MRA engine (looked up once: it
    may keep per-relation state across epochs), the materializer (which counts every
    job), and the driver's copies of small relations (``driver.copies``; None when
    ``EvalOptions.local_rows`` is 0): min/max retractions of at most that many rows run
    there without a Spark job."""

    report: Report
    spark: SparkSession
    options: EvalOptions
    engine: MraEngine
    materializer: Materializer
    copies: DriverCopies | None

    @property
    def catalog(self) -> Catalog:
        return self.report.catalog

    def loaded(self) -> dict[str, str]:
        """``.input`` name → the EDB relation holding its facts (``Analysis.loaded``)."""
        return self.report.analysis.loaded

    def inputs(self) -> tuple[str, ...]:
        """The EDB relations (for an input relation also defined by rules, its hidden
        loaded part)."""
        return tuple(self.loaded().values())

    def stored(self, by_input: Mapping[str, _T]) -> dict[str, _T]:
        """``by_input`` keyed by EDB relations instead of ``.input`` names."""
        return {self.report.analysis.edb_relation(rel): v for rel, v in by_input.items()}

    def key_columns(self, relation: str) -> tuple[str, ...]:
        """Result rows are identified by their group-by columns for an aggregate relation
        (the aggregated value is updated in place), by all columns for a set relation."""
        return self.catalog[relation].key_names

    def result_frame(self, relation: str, rows: DataFrame) -> DataFrame:
        """``rows`` of ``relation`` (positional columns) with its result columns."""
        return renamed(rows, [a.name for a in self.catalog[relation].result])


def inputs_of(stratum: Stratum) -> list[str]:
    """Relations the stratum's rules read (negated ones too), outside the stratum."""
    names: list[str] = []
    for rule in stratum.rules:
        for body in rule.bodies:
            for lit in body.literals:
                atom = lit.atom if isinstance(lit, ast.Negation) else lit
                if not isinstance(atom, ast.Atom) or atom.relation in stratum.relations:
                    continue
                if atom.relation not in names:
                    names.append(atom.relation)
    return names


def reads_indexed_relation(report: Report) -> bool:
    """A stratum reading another stratum's iteration-indexed relation needs its index
    column, which results drop: such programs are only re-evaluated as a whole."""
    indexed = report.catalog.indexed
    return any(rel in indexed for s in report.strata for rel in inputs_of(s))
