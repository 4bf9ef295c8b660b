"""The per-trigger record limit, steered by the driver while the query runs.

The reader of the source runs in its own Python process, so the driver writes the limit to
a small file (``write_limit_file``) that the reader reads on every trigger; the driver
computes it with PowerLog's adaptive rule (``next_batch_limit``) from the lag the query
reports (``lag_from_progress``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_limit_file(path: str | Path, max_records: int) -> None:
    """Set the per-trigger record limit of running ``fixflow-kafka`` readers that were
    started with ``max_records_file=path`` (atomic replace: readers never see half a
    number)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_suffix(".tmp")
    temporary.write_text(f"{int(max_records)}\n", encoding="utf-8")
    temporary.replace(target)


def next_batch_limit(
    beta: int, arrived: int, elapsed_s: float, tau_s: float, alpha: float, r: float, cap: int
) -> int:
    """PowerLog's adaptive buffer rule applied to the per-trigger record limit β.

    ``arrived`` records came in over ``elapsed_s``; a batch should take about ``tau_s``.
    When the arrival rate |B|/ΔT leaves the band [β/(r·τ), r·β/τ], β becomes α·τ·|B|/ΔT;
    inside the band β stays (no oscillation on noise). The result is kept in [1, cap].
    """
    if elapsed_s <= 0 or tau_s <= 0:
        return max(1, min(beta, cap))
    rate = arrived / elapsed_s
    if rate > r * beta / tau_s or rate < beta / (r * tau_s):
        beta = int(alpha * tau_s * rate)
    return max(1, min(beta, cap))


def lag_from_progress(progress: Mapping[str, Any] | None) -> dict[str, int]:
    """Records not yet processed per topic, from a StreamingQuery's ``lastProgress``
    (``latestOffset - endOffset`` of every Kafka source; both sources report
    ``{topic: {partition: offset}}``)."""
    lags: dict[str, int] = {}
    for source in (progress or {}).get("sources", []):
        latest, end = _offsets_of(source.get("latestOffset")), _offsets_of(source.get("endOffset"))
        for topic, partitions in latest.items():
            done = end.get(topic, {})
            lags[topic] = lags.get(topic, 0) + sum(
                max(0, int(offset) - int(done.get(p, 0))) for p, offset in partitions.items()
            )
    return lags


def _offsets_of(value: Any) -> dict[str, dict[str, int]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {t: p for t, p in value.items() if isinstance(p, dict)}
