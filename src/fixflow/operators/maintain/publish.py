"""What the consumer is told: per output relation, how its rows differ from the rows it
holds (``RelationChange``): nothing, an epoch's exact delta, all rows, or a diff."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from fixflow.operators.change import Change
from fixflow.operators.driver.rows import arrow_frame, to_table
from fixflow.operators.engines.batches import Batch
from fixflow.operators.engines.joins import anti_join
from fixflow.operators.maintain.setting import Setting
from fixflow.operators.relation import arrow_table, deferred
from fixflow.operators.spark_backend import minus


@dataclass(frozen=True)
class RelationChange:
    """How one output relation changed in an epoch, keyed by ``key_columns`` (see
    ``operators.change``): ``change.added`` are whole new rows (new keys or changed
    values), ``change.removed`` the keys that disappeared."""

    relation: str
    key_columns: tuple[str, ...]
    change: Change[DataFrame]
    unchanged: bool = False
    """Known to be empty without running a job (the relation's rows are the published
    ones): the consumer need not collect the change's rows."""

    @property
    def tables(self) -> tuple[pa.Table, pa.Table] | None:
        """The change's added rows and removed keys as Arrow tables (result columns), when
        the driver made the change (``operators.driver``) and its relations keep the
        tables they were made of: the consumer need not collect them either."""
        added, removed = arrow_table(self.change.added), arrow_table(self.change.removed)
        return None if added is None or removed is None else (added, removed)

    @classmethod
    def nothing(cls, relation: str, keys: tuple[str, ...], rows: DataFrame) -> RelationChange:
        """No change of ``relation`` (whose current rows are ``rows``)."""
        key_schema = StructType([rows.schema[k] for k in keys])
        nothing = Change(
            deferred(rows, lambda f: f.limit(0), rows.schema),
            deferred(rows, lambda f: f.select(*keys).limit(0), key_schema),
            counts=(0, 0),
        )
        return cls(relation, keys, nothing, unchanged=True)

    @property
    def new_rows(self) -> bool:
        """No upserted key is among the rows published before, so the consumer may append
        them: true of a set relation's change (its key is the whole row, and the Maintainer
        never reports a published row as upserted); an aggregate's upserts may replace
        values."""
        return len(self.key_columns) == len(self.change.added.columns)


class Publisher:
    """What the consumer holds of each output relation, and the changes that bring it to
    the Maintainer's current rows."""

    def __init__(self, setting: Setting, outputs: tuple[str, ...]) -> None:
        self.setting = setting
        self.spark, self.catalog, self.copies = setting.spark, setting.catalog, setting.copies
        self.outputs = outputs
        self.published: dict[str, DataFrame] = {}
        """Per output relation, the rows the consumer holds: epochs report changes to it."""
        self._published_rows: dict[str, DataFrame] = {}
        """Per output relation, the Maintainer's frame that was published (when it was)."""

    def start(self, published: Mapping[str, DataFrame] | None) -> None:
        """The consumer holds ``published`` (result rows per output relation; without it,
        nothing), whatever was published before."""
        self.published = dict(published or {})
        self._published_rows = {}

    def changes(
        self,
        frames: Mapping[str, DataFrame],
        old: Mapping[str, DataFrame] | None = None,
        deltas: Mapping[str, Change[DataFrame]] | None = None,
    ) -> dict[str, RelationChange]:
        """How every output relation (its rows now in ``frames``) differs from what was
        published, which they then are: nothing when its rows are the published ones, this
        epoch's ``deltas`` when it changed from the published rows (``old``), all its rows
        when nothing was published, else a diff of the whole relation."""
        changes = {}
        for rel in self.outputs:
            rows, before = frames[rel], self._published_rows.get(rel)
            current = self.setting.result_frame(rel, rows)
            if before is rows:
                change = RelationChange.nothing(rel, self.setting.key_columns(rel), current)
            elif before is not None and old is not None and old.get(rel) is before:
                assert deltas is not None
                change = self._delta_change(rel, deltas[rel])
            else:
                published = self.published.get(rel)
                fresh = self._all_rows(rel, rows) if published is None else None
                change = fresh or self._diff(rel, published, current)
            changes[rel] = change
            self.published[rel], self._published_rows[rel] = current, rows
        return changes

    def _delta_change(self, relation: str, delta: Change[DataFrame]) -> RelationChange:
        """The change an epoch's exact ``delta`` makes: its added rows are upserted; its
        removed rows' keys are deleted unless a row was added under them (a new value)."""
        names = [a.name for a in self.catalog[relation].result]
        keys = self.setting.key_columns(relation)
        tables = self._change_tables(relation, delta)
        if tables is not None:
            upserts, gone = (arrow_frame(self.spark, t) for t in tables)
            counts = (tables[0].num_rows, tables[1].num_rows)
            return RelationChange(relation, keys, Change(upserts, gone, counts))
        added, removed = delta.added.toDF(*names), delta.removed.toDF(*names)
        if not delta.n_removed:
            # Insertions only (the counts are exact): the added rows are the upserts as
            # they are (distinct, one per key) and no key goes. Skipping the two EXCEPTs
            # saves their shuffles: four jobs for a one-fact batch.
            return RelationChange(relation, keys, Change(added, removed.select(*keys)))
        gone = minus(removed.select(*keys), added.select(*keys))
        if len(keys) < len(names):
            return RelationChange(relation, keys, Change(added, gone))
        # A set relation: a row both removed and added stays, so it is neither appended
        # nor deleted, and what is appended is surely new.
        return RelationChange(relation, keys, Change(minus(added, removed), gone))

    def _change_tables(
        self, relation: str, delta: Change[DataFrame]
    ) -> tuple[pa.Table, pa.Table] | None:
        """``_delta_change``'s upserts and deleted keys as Arrow tables, made in the driver
        when it holds both sides of ``delta`` (no job, no shuffle); None otherwise."""
        copies = self.copies
        if copies is None or not self._in_result_columns(relation):
            return None
        added, removed = copies.held(delta.added), copies.held(delta.removed)
        if added is None or removed is None:
            return None
        names = [a.name for a in self.catalog[relation].result]
        keys = list(self.setting.key_columns(relation))
        columns = [f"c{i}" for i in range(len(names))]
        key_columns = tuple(columns[names.index(k)] for k in keys)
        gone = anti_join(removed, added, key_columns)
        if len(keys) == len(names):  # a set relation: a row removed and added stays
            added = anti_join(added, removed, tuple(columns))
        return self._result_table(relation, added), self._result_table(relation, gone).select(keys)

    def _in_result_columns(self, relation: str) -> bool:
        """The relation's rows are its result columns (not nullary, no iteration index), so
        driver rows of it convert to result rows as they are."""
        entry = self.catalog[relation]
        return bool(entry.types) and len(entry.result_positions) == len(entry.types)

    def _result_table(self, relation: str, rows: Batch) -> pa.Table:
        entry = self.catalog[relation]
        return to_table(rows, entry.types).rename_columns([a.name for a in entry.result])

    def _all_rows(self, relation: str, rows: DataFrame) -> RelationChange | None:
        """Every row of ``relation`` (``rows``) upserted, nothing deleted: the change from
        nothing published. As Arrow tables when the driver holds the rows (no job: a fresh
        stream's first batch collected its bootstrap's results in one, 0.5 s for SSSP on
        100k edges); None otherwise."""
        held = None if self.copies is None else self.copies.held(rows)
        if held is None or not self._in_result_columns(relation):
            return None
        keys = self.setting.key_columns(relation)
        upserts = self._result_table(relation, held)
        tables = upserts, upserts.select(list(keys)).slice(0, 0)
        upserted, deleted = (arrow_frame(self.spark, t) for t in tables)
        return RelationChange(relation, keys, Change(upserted, deleted, (upserts.num_rows, 0)))

    def _diff(self, relation: str, old: DataFrame | None, new: DataFrame) -> RelationChange:
        keys = self.setting.key_columns(relation)
        if old is None:
            empty = new.select(*keys).limit(0)
            return RelationChange(relation, keys, Change(new, empty))
        changed_or_new = minus(new, old)
        gone = minus(old.select(*keys), new.select(*keys))
        return RelationChange(relation, keys, Change(changed_or_new, gone))
