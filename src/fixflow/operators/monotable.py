"""Moved: the MonoTable's rounds are ``fixflow.operators.engines.sync`` (``SyncEngine``), its
compiled plans ``fixflow.operators.engines.program`` (``MraProgram``), and the termination
helpers ``fixflow.operators.rounds``. Only these names are re-exported, for modules not yet
importing them from ``rounds``."""

from fixflow.operators.rounds import clause_holds, constant_value, measure_column

__all__ = ["clause_holds", "constant_value", "measure_column"]
