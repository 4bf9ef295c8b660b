"""The test oracle: a naive pure-Python evaluator of Fixflow programs and golden-file I/O.

Used only by tests; expected outputs in tests/programs/ are computed independently of it.
"""

from .evaluator import EvaluationError, Stats, evaluate, evaluate_with_stats

__all__ = ["EvaluationError", "Stats", "evaluate", "evaluate_with_stats"]
