"""What ``[engine]`` and ``[buffer]`` of a config mean to the MRA engines and the memory
model: the one mapping ``fixflow run`` and ``fixflow eval --conf`` share."""

from __future__ import annotations

from collections.abc import Mapping

from fixflow.checker.model import Report
from fixflow.operators.core import EvalOptions
from fixflow.operators.engines.base import BufferOptions, EngineOptions
from fixflow.operators.memory_check import memory_refusal
from fixflow.operators.memory_model import resolved_local_rows, resolved_memory
from fixflow.pipeline.config import Config
from fixflow.pipeline.errors import UserFacingError


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


def local_rows(config: Config) -> int:
    """``[engine] local_rows`` as rows: ``auto`` by the memory model over ``[engine]
    memory`` (``auto``: the machine's physical memory)."""
    engine = config.engine
    return resolved_local_rows(engine.local_rows, resolved_memory(engine.memory))


def eval_options(config: Config, **more: object) -> EvalOptions:
    """``EvalOptions`` from ``[engine]`` and ``[buffer]`` (the round cap, the engine, the
    driver's and a task's row limits), with ``more`` fields as given."""
    return EvalOptions(
        max_iterations=config.engine.max_iterations or None,  # 0: the default rule
        engine_options=engine_options(config),
        local_rows=local_rows(config),
        task_rows=config.engine.task_rows,
        **more,  # type: ignore[arg-type]
    )


def refuse_beyond_memory(config: Config, report: Report, input_rows: Mapping[str, int]) -> None:
    """Raise ``MemoryExceeded`` (one line: what and what to do) when a stratum the driver
    would run over these input rows needs more than ``[engine] memory`` by the model
    (``operators.memory_check``)."""
    options = eval_options(config)
    memory = resolved_memory(config.engine.memory)
    refusal = memory_refusal(report, options, input_rows, memory)
    if refusal is not None:
        raise MemoryExceeded(refusal.message(config.engine.memory))


class MemoryExceeded(UserFacingError):
    """The configured memory cannot hold a run's driver strata by the memory model."""
