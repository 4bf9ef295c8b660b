"""Keeping a checked program's relations current under EDB changes (one epoch per batch).

A ``Maintainer`` owns the current EDB and every IDB relation as cached DataFrames. Each
epoch takes the batch's net insertions and deletions per EDB relation and brings every
stratum up to date, stratum by stratum in evaluation order:

- a stratum none of whose inputs changed (and with no pending MRA deltas) is left alone;
- otherwise the first method of ``UPDATES`` (ordered cheapest first; each one's ``applies``
  and ``run`` live in its class module in ``fixflow.operators.strategies``) that applies
  runs; the bootstrap — re-evaluating the stratum from its current inputs with
  ``evaluate.Bootstrap`` — is always available and is the fallback;
- the elastic switch (PPDP'21): an update still running after ``switch_fraction`` × the
  last bootstrap of its stratum is abandoned between rounds and the stratum bootstrapped.

Each epoch reports, per output relation, the rows to upsert and the keys to delete so the
pipeline can commit only changed result rows, and, per stratum, which strategy ran.
Knows Spark, not Kafka or Delta.

The package's modules, in import order: ``setting`` (what every part reads), ``garbage``,
``carried`` (pending MRA deltas, witnesses), ``elastic`` (the switch), ``inputs`` (the EDB
side), ``publish`` (the consumer's changes), ``epoch_report``, ``updates`` (the methods),
``stratum`` (one stratum's epoch), ``maintainer`` (the ``Maintainer`` and its epoch loop).
The names below are the package's surface: import them from ``fixflow.operators.maintain``.
"""

from fixflow.operators.maintain.elastic import LESSON_EPOCHS, Lesson
from fixflow.operators.maintain.epoch_report import Epoch, StratumEpoch
from fixflow.operators.maintain.maintainer import Maintainer
from fixflow.operators.maintain.publish import RelationChange
from fixflow.operators.maintain.updates import UPDATES, UpdateMethod

__all__ = [
    "LESSON_EPOCHS",
    "UPDATES",
    "Epoch",
    "Lesson",
    "Maintainer",
    "RelationChange",
    "StratumEpoch",
    "UpdateMethod",
]
