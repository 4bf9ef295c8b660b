"""The cluster tests' fixture: a standalone cluster on loopback (``standalone``), one master
and two workers (1 core, 1 GiB each), started once per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from standalone import Cluster, ClusterError, Shape, standalone

__all__ = ["Cluster"]

WORKERS = 2


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and two workers on 127.0.0.1, all registered; torn down after the module."""
    try:
        with standalone(tmp_path_factory.mktemp("standalone"), Shape(WORKERS, 1, "1g")) as cluster:
            yield cluster
    except ClusterError as exc:
        pytest.fail(str(exc))
