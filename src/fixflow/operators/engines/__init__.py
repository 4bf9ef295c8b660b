"""MRA engines behind one seam (``engines.base``): ``sync`` (one Spark job per round over
the whole MonoTable, ``engines.sync``); ``async`` and ``hybrid`` (sharded local loops with
vectorized kernels, ``engines.async_engine``; relations whose plans do not compile to
kernels run on ``sync``).

``engine_for(options)`` is the one place a mode string becomes an engine: a bootstrap run
and a Maintainer each look theirs up once and keep it (an engine may keep per-relation
state between a bootstrap and later resumes).
"""

from __future__ import annotations

from collections.abc import Callable

from fixflow.operators.engines.base import EngineOptions, MraEngine


class UnknownEngine(ValueError):
    """An ``[engine] mode`` no engine is registered for."""


def _sync(options: EngineOptions) -> MraEngine:
    from fixflow.operators.engines.sync import SyncEngine

    return SyncEngine()


def _async(options: EngineOptions) -> MraEngine:
    from fixflow.operators.engines.async_engine import ShardedEngine

    return ShardedEngine(hybrid=False)


def _hybrid(options: EngineOptions) -> MraEngine:
    from fixflow.operators.engines.async_engine import ShardedEngine

    return ShardedEngine(hybrid=True)


ENGINES: dict[str, Callable[[EngineOptions], MraEngine]] = {
    "sync": _sync,
    "async": _async,
    "hybrid": _hybrid,
}
"""Engine factories by mode. A factory imports its engine when called: engines import the
strategy core, which imports this package."""


def engine_for(options: EngineOptions) -> MraEngine:
    """The engine of ``options.mode``."""
    factory = ENGINES.get(options.mode)
    if factory is None:
        available = ", ".join(f"`{mode}`" for mode in ENGINES)
        raise UnknownEngine(
            f"MRA engine `{options.mode}` is not available (available: {available})"
        )
    return factory(options)


__all__ = ["ENGINES", "UnknownEngine", "engine_for"]
