"""Message validation: every kind of bad message gets a precise dead-letter reason."""

from __future__ import annotations

import pytest

from fixflow.checker.ast import Attribute
from fixflow.pipeline.kafka.messages import (
    DeadLetter,
    Fact,
    encode_fact,
    fact_key,
    parse_message,
)

EDGE = (
    Attribute("src", "number"),
    Attribute("dst", "number"),
    Attribute("w", "float"),
    Attribute("label", "symbol"),
)


def test_valid_insert_and_delete_in_declared_order() -> None:
    assert parse_message('{"w": 1, "dst": 2, "src": 1, "label": "a"}', EDGE) == Fact(
        (1, 2, 1.0, "a"), "insert"
    )
    deleted = parse_message(b'{"src": 1, "dst": 2, "w": 2.5, "label": "a", "op": "delete"}', EDGE)
    assert deleted == Fact((1, 2, 2.5, "a"), "delete")
    assert isinstance(parse_message('{"src":1,"dst":2,"w":1,"label":""}', EDGE).values[2], float)


@pytest.mark.parametrize(
    ("value", "kind", "reason"),
    [
        ('{"src": 1,', "malformed_json", "malformed JSON: Expecting"),
        ("", "malformed_json", "malformed JSON"),
        (None, "malformed_json", "malformed JSON: empty message value"),
        (b"\xff\xfe", "malformed_json", "malformed JSON: not UTF-8"),
        (
            '{"src": NaN, "dst": 2, "w": 1, "label": "a"}',
            "malformed_json",
            "malformed JSON: NaN is not valid JSON",
        ),
        ('[1, 2, 1.0, "a"]', "not_an_object", "not a JSON object: got array"),
        ("42", "not_an_object", "not a JSON object: got integer"),
        (
            '{"src": 1, "dst": 2, "w": 1, "label": "a", "color": 3}',
            "unknown_attribute",
            "unknown attribute 'color' (declared: src, dst, w, label)",
        ),
        ('{"src": 1, "w": 1, "label": "a"}', "missing_attribute", "missing attribute 'dst'"),
        (
            '{"src": "1", "dst": 2, "w": 1, "label": "a"}',
            "wrong_type",
            "attribute 'src' must be a number (integer), got string \"1\"",
        ),
        (
            '{"src": 1.5, "dst": 2, "w": 1, "label": "a"}',
            "wrong_type",
            "attribute 'src' must be a number (integer), got float 1.5",
        ),
        (
            '{"src": true, "dst": 2, "w": 1, "label": "a"}',
            "wrong_type",
            "attribute 'src' must be a number (integer), got boolean true",
        ),
        (
            '{"src": 1, "dst": 2, "w": "x", "label": "a"}',
            "wrong_type",
            "attribute 'w' must be a float, got string \"x\"",
        ),
        (
            '{"src": 1, "dst": 2, "w": 1, "label": 7}',
            "wrong_type",
            "attribute 'label' must be a symbol (string), got integer 7",
        ),
        (
            '{"src": 1, "dst": 2, "w": 1, "label": null}',
            "wrong_type",
            "attribute 'label' must be a symbol (string), got null null",
        ),
        (
            '{"src": 99999999999999999999, "dst": 2, "w": 1, "label": "a"}',
            "wrong_type",
            "attribute 'src' must be a number (integer)",
        ),
        (
            '{"src": 1, "dst": 2, "w": 1, "label": "a", "op": "upsert"}',
            "unknown_op",
            'unknown op "upsert" (expected "insert" or "delete")',
        ),
    ],
)
def test_bad_messages_are_dead_letters_with_reasons(
    value: str | bytes | None, kind: str, reason: str
) -> None:
    result = parse_message(value, EDGE)
    assert isinstance(result, DeadLetter)
    assert result.kind == kind
    assert result.reason.startswith(reason), result.reason


def test_key_is_canonical_and_encoding_round_trips() -> None:
    assert fact_key((1, 2, 1.0, "a")) == '[1,2,1.0,"a"]'
    assert fact_key((1, 2, 1.0, "é")) == '[1,2,1.0,"é"]'
    value = encode_fact(EDGE, (1, 2, 0.5, "x"), "delete")
    assert parse_message(value, EDGE) == Fact((1, 2, 0.5, "x"), "delete")
    assert '"op"' not in encode_fact(EDGE, (1, 2, 0.5, "x"))


def test_an_attribute_named_op_is_an_attribute() -> None:
    attributes = (Attribute("op", "symbol"), Attribute("n", "number"))
    assert parse_message('{"op": "delete", "n": 1}', attributes) == Fact(("delete", 1), "insert")
    with pytest.raises(ValueError, match="cannot carry deletes"):
        encode_fact(attributes, ("x", 1), "delete")
