"""One module per evaluation class, each with its bootstrap and its update methods side by
side, all built on ``fixflow.operators.core`` (and ``fixflow.operators.epoch`` for updates):

- ``nonrecursive``: direct evaluation; updates by delta rules or by affected groups;
- ``seminaive`` (``set``): the one semi-naive loop; bootstrap = the loop seeded by the exit
  rules, update = the loop seeded by the delta rules of the inserted input rows;
- ``aggregate_seminaive``: the same loop keeping only improved groups (min/max) or
  recomputing changed ones (count/sum/mean);
- ``dred``: deletions in ``set`` and ``aggregate-seminaive`` strata on the same loop:
  over-delete, re-derive, continue;
- ``mra``: the MRA engine (``fixflow.operators.engines``): bootstrap, and resumes seeded by
  improving candidates (min/max) or exact signed corrections (sum);
- ``naive``: X ← G∘F(X) to a fixpoint, the termination clause or the cap; no update.

Every module exposes ``bootstrap(run)`` (which one runs is ``placement.bootstrap_method``'s
choice, the same on both backends) and, where it has them, ``<method>_applies(ctx)`` /
``<method>(ctx)`` pairs the Maintainer lists in order.
"""
