"""The columnar fast path of validation agrees with the per-record path, or declines."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixflow.checker.ast import Attribute
from fixflow.pipeline.kafka.columnar import parse_values
from fixflow.pipeline.kafka.messages import Fact, encode_fact, parse_message
from fixflow.pipeline.lake.delta import arrow_schema

EDGE = (
    Attribute("src", "number"),
    Attribute("dst", "number"),
    Attribute("w", "float"),
    Attribute("label", "symbol"),
)
SCHEMA = arrow_schema(EDGE)


def _per_record(values: list[str | None]) -> list[Fact] | None:
    """The per-record path's facts, or None when some value is a dead letter."""
    facts = [parse_message(v, EDGE) for v in values]
    return (
        [f for f in facts if isinstance(f, Fact)]
        if all(isinstance(f, Fact) for f in facts)
        else None
    )


def _as_facts(table: pa.Table) -> list[Fact]:
    names = [a.name for a in EDGE]
    return [Fact(tuple(row[n] for n in names), row["op"]) for row in table.to_pylist()]


facts = st.tuples(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-5, 5),
    st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False)),
    st.text(max_size=6),
    st.sampled_from(["insert", "delete"]),
)


def _valid(fact: tuple[Any, ...]) -> str:
    *values, op = fact
    return encode_fact(EDGE, values, op)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**65), 2**65), st.floats(), st.text(max_size=3)
)
documents = st.dictionaries(
    st.sampled_from(["src", "dst", "w", "label", "op", "x"]), scalars, max_size=6
)
noise = st.one_of(
    documents.map(json.dumps),
    st.sampled_from(
        [
            "",
            "[1, 2]",
            "5",
            '{"src": 1, "dst": 2, "w": 1.0, "label": "a"} {"src": 2}',
            '{"src": 1,\n "dst": 2, "w": 1.0, "label": "a"}',
            '{"src": 1, "dst": 2, "w": 1.0, "label": "a", "\\u006fp": null}',
            '{"src": 1, "dst": 2, "w": NaN, "label": "a"}',
            '{"src": 1, "dst": 2, "w": 1.0, "label": "a", "op": null}',
        ]
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(facts.map(_valid), noise), min_size=1, max_size=8))
def test_fast_path_equals_the_per_record_path_or_declines(values: list[str]) -> None:
    parsed = parse_values(pa.array(values, pa.string()), SCHEMA)
    expected = _per_record(values)
    if parsed is not None:
        assert expected is not None, "the fast path accepted a dead letter"
        assert _as_facts(parsed) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(facts.map(_valid), min_size=1, max_size=30))
def test_valid_batches_take_the_fast_path(values: list[str]) -> None:
    parsed = parse_values(pa.array(values, pa.string()), SCHEMA)
    assert parsed is not None
    assert _as_facts(parsed) == _per_record(values)


@pytest.mark.parametrize(
    "bad",
    [
        '{"src": 1.0, "dst": 2, "w": 1, "label": "a"}',
        '{"src": 1, "dst": 2, "w": 1, "label": null}',
        '{"src": 1, "dst": 2, "w": 1}',
        '{"src": 1, "dst": 2, "w": 1, "label": "a", "op": "upsert"}',
        '{"src": 1, "dst": 2, "w": 1, "label": "a", "op": null}',
        '{"src": 1, "dst": 2, "w": Infinity, "label": "a"}',
        None,
    ],
)
def test_one_bad_value_sends_the_batch_to_the_per_record_path(bad: str | None) -> None:
    good = encode_fact(EDGE, (1, 2, 1.0, "a"))
    assert parse_values(pa.array([good, bad, good], pa.string()), SCHEMA) is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(facts.map(_valid), noise), min_size=3, max_size=12), st.integers(0, 2))
def test_chunked_sliced_and_large_values_parse_as_plain_ones(values: list[str], cut: int) -> None:
    """The values' lines are built from Arrow's buffers: a slice of a chunked column, or
    large strings, must give what the same values as one plain array give."""
    plain = parse_values(pa.array(values[cut:], pa.string()), SCHEMA)
    chunked = pa.chunked_array(
        [pa.array(values[:2], pa.string()), pa.array(values[2:], pa.string())]
    )
    for variant in (chunked.slice(cut), pa.array(values[cut:], pa.large_string())):
        parsed = parse_values(variant, SCHEMA)
        assert (parsed is None) == (plain is None)
        if parsed is not None and plain is not None:
            assert _as_facts(parsed) == _as_facts(plain)


def test_a_relation_with_an_op_attribute_always_takes_the_per_record_path() -> None:
    schema = arrow_schema((Attribute("op", "symbol"),))
    assert parse_values(pa.array(['{"op": "x"}'], pa.string()), schema) is None
