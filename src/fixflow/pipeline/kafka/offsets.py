"""The source's offsets: ``{topic: {partition: next offset}}`` as Spark checkpoints them.

Spark compares offsets as JSON text, so one position always serializes the same way
(``normalize``). Besides positions an offset may carry reserved ``@`` keys: the broker
cluster it counts in and the partitions realigned after a data loss (``tagged``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Offsets = dict[str, dict[str, int]]
"""``{topic: {partition (as a string, JSON keys are): next offset}}``."""


def normalize(offsets: dict[str, dict[str, int]]) -> Offsets:
    """A canonical order (topics by name, partitions by number): Spark compares offsets as
    JSON text, so the same position must always serialize the same way."""
    return {
        topic: {str(p): int(offsets[topic][p]) for p in sorted(offsets[topic], key=int)}
        for topic in sorted(offsets)
    }


def cap_offsets(start: Offsets, end: Offsets, max_records: int) -> Offsets:
    """``end`` moved back so that at most ``max_records`` lie between ``start`` and it,
    shared fairly between partitions (water-filling: small backlogs are read in full)."""
    available = {
        (t, p): max(0, end[t][p] - start.get(t, {}).get(p, end[t][p])) for t in end for p in end[t]
    }
    granted = _water_fill(available, max_records)
    capped = {
        t: {p: (start.get(t, {}).get(p, end[t][p]) + granted[(t, p)]) for p in end[t]} for t in end
    }
    return normalize(capped)


def _water_fill(available: dict[tuple[str, str], int], budget: int) -> dict[tuple[str, str], int]:
    granted = dict.fromkeys(available, 0)
    hungry = sorted((k for k, n in available.items() if n > 0), key=lambda k: (k[0], int(k[1])))
    while hungry and budget > 0:
        share = max(1, budget // len(hungry))
        for key in list(hungry):
            take = min(share, available[key] - granted[key], budget)
            granted[key] += take
            budget -= take
            if granted[key] == available[key]:
                hungry.remove(key)
            if budget == 0:
                break
    return granted


def record_count(start: Mapping[str, Any], end: Mapping[str, Any]) -> int:
    """Records between two offsets (reserved ``@`` keys are ignored)."""
    first, last = positions_of(start), positions_of(end)
    return sum(max(0, last[t][p] - first.get(t, {}).get(p, 0)) for t in last for p in last[t])


CLUSTER_KEY = "@cluster"
"""Offsets name the broker cluster they count in: a restarted in-memory broker has a new
cluster id and its logs start over at 0, so an offset of the old one means nothing there.
(Kafka topic names cannot start with "@".)"""


REALIGNED_KEY = "@realigned"
"""In an end offset: the ``topic/partition``s moved to the start of the broker's current
log after a data loss (``on_data_loss = resume``); that batch reads nothing of them."""


def positions_of(offsets: Mapping[str, Any]) -> Offsets:
    """The topic-partition positions of an offset, without the reserved ``@`` keys."""
    return normalize({t: p for t, p in offsets.items() if not t.startswith("@")})


def tagged(positions: Offsets, cluster: str | None, realigned: Sequence[str] = ()) -> dict:
    """An offset for Spark's checkpoint: positions plus the cluster and realigned keys."""
    offset: dict[str, Any] = dict(positions)
    if cluster:
        offset[CLUSTER_KEY] = cluster
    if realigned:
        offset[REALIGNED_KEY] = sorted(realigned)
    return offset
