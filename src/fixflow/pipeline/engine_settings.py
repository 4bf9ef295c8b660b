"""What ``[engine]`` and ``[buffer]`` of a config mean to the MRA engines: the one mapping
``fixflow run`` and ``fixflow eval --conf`` share."""

from __future__ import annotations

from fixflow.operators.engines.base import BufferOptions, EngineOptions
from fixflow.pipeline.config import Config


def engine_options(config: Config) -> EngineOptions:
    """The MRA engine's options from ``[engine]`` and ``[buffer]``."""
    engine, buffer = config.engine, config.buffer
    return EngineOptions(
        mode=engine.mode,
        shards=engine.shards,
        priority=engine.priority,
        schedule_portion=engine.schedule_portion,
        check_interval_ms=engine.check_interval_ms,
        buffer=BufferOptions(buffer.initial, buffer.interval_ms, buffer.alpha, buffer.r),
    )
