"""The one change type (``operators.change``): counted or not, and the shape
``Maintainer.apply`` takes. Ingest's changes are ``Change``s of Arrow tables, the Maintainer's
deltas and the commit's changes ``Change``s of frames (tests/pipeline/test_ingest.py,
tests/operators/test_maintain.py)."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

from fixflow.operators.change import Change, by_relation, deleted, inserted


def test_a_counted_change_knows_its_sizes() -> None:
    added, removed = pa.table({"x": [1, 2, 3]}), pa.table({"x": [4]})
    change = Change(added, removed, (3, 1))
    assert (change.n_added, change.n_removed, change.empty) == (3, 1, False)
    assert change.frames == (added, removed)
    assert Change(added.slice(0, 0), removed.slice(0, 0), (0, 0)).empty


def test_an_uncounted_change_says_so_instead_of_counting() -> None:
    change = inserted(pa.table({"x": [1]}))
    assert not change.counted and change.removed is None
    with pytest.raises(ValueError, match="not counted"):
        _ = change.n_added
    assert deleted("rows").added is None


def test_by_relation_pairs_two_mappings_and_counts_only_when_told() -> None:
    changes = by_relation({"edge": "new", "node": "n"}, {"edge": "gone"})
    assert changes == {"edge": Change("new", "gone"), "node": Change("n", None)}
    counted = by_relation({"edge": "new"}, {"node": "gone"}, {"edge": (1, 0)})
    assert counted["edge"].counts == (1, 0)
    assert counted["node"].counts == (0, 0), "a relation the counts leave out changed nothing"


def test_the_change_type_imports_no_spark() -> None:
    """Ingest's Arrow half is used without a JVM: the change type it builds must not pull
    pyspark in."""
    probe = "import sys, fixflow.operators.change; print('pyspark' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
