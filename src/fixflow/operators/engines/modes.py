"""``engine_for(options)``: the one place a mode string becomes an engine. A bootstrap
run and a Maintainer each look theirs up once and keep it (an engine may keep
per-relation state between a bootstrap and later resumes)."""

from __future__ import annotations

from collections.abc import Callable

from fixflow.operators.engines.async_engine import ShardedEngine
from fixflow.operators.engines.base import EngineOptions, MraEngine
from fixflow.operators.engines.sync import SyncEngine


class UnknownEngine(ValueError):
    """An ``[engine] mode`` no engine is registered for."""


ENGINES: dict[str, Callable[[EngineOptions], MraEngine]] = {
    "sync": lambda _options: SyncEngine(),
    "async": lambda _options: ShardedEngine(hybrid=False),
    "hybrid": lambda _options: ShardedEngine(hybrid=True),
}
"""Engine factories by mode."""


def engine_for(options: EngineOptions) -> MraEngine:
    """The engine of ``options.mode``."""
    factory = ENGINES.get(options.mode)
    if factory is None:
        available = ", ".join(f"`{mode}`" for mode in ENGINES)
        raise UnknownEngine(
            f"MRA engine `{options.mode}` is not available (available: {available})"
        )
    return factory(options)
