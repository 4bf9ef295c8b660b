"""Kafka message values ⇄ typed facts.

A message value is a JSON object with exactly the declared attribute names of its relation
and an optional ``"op"``: ``"insert"`` (the default) or ``"delete"``. ``parse_message``
returns a ``Fact`` (values in declared order) or a ``DeadLetter`` whose ``reason`` says
precisely what was wrong; it never raises on bad input. The Kafka key of a fact is the
canonical JSON of its values, so every operation on one fact lands in one partition, in
order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from fixflow.checker.ast import Attribute

Op: TypeAlias = Literal["insert", "delete"]
Value: TypeAlias = int | float | str
OPS: tuple[str, ...] = ("insert", "delete")
OP_FIELD = "op"

REASON_KINDS: tuple[str, ...] = (
    "malformed_json",
    "not_an_object",
    "unknown_attribute",
    "missing_attribute",
    "wrong_type",
    "unknown_op",
    "unknown_relation",
)
"""The ``kind`` of every dead letter: a small fixed set, usable as a metric label."""

_JSON_TYPE_NAMES = {
    bool: "boolean",
    int: "integer",
    float: "float",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


@dataclass(frozen=True, slots=True)
class Fact:
    values: tuple[Value, ...]
    op: Op = "insert"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    kind: str
    """One of REASON_KINDS."""
    reason: str
    """The precise message, e.g. ``attribute "w" must be a float, got string "x"``."""


def parse_message(value: str | bytes | None, attributes: Sequence[Attribute]) -> Fact | DeadLetter:
    """Validate one message value against a relation's declared attributes."""
    if value is None:
        return DeadLetter("malformed_json", "malformed JSON: empty message value")
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as error:
            return DeadLetter("malformed_json", f"malformed JSON: not UTF-8 ({error.reason})")
    try:
        document = json.loads(value, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as error:
        return DeadLetter("malformed_json", f"malformed JSON: {error}")
    if not isinstance(document, dict):
        return DeadLetter("not_an_object", f"not a JSON object: got {_json_type(document)}")
    return _parse_object(document, attributes)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def _parse_object(
    document: dict[str, object], attributes: Sequence[Attribute]
) -> Fact | DeadLetter:
    names = [a.name for a in attributes]
    unknown = [k for k in document if k not in names and k != OP_FIELD]
    if unknown:
        return DeadLetter(
            "unknown_attribute", f"unknown attribute {unknown[0]!r} (declared: {', '.join(names)})"
        )
    missing = [n for n in names if n not in document]
    if missing:
        return DeadLetter("missing_attribute", f"missing attribute {missing[0]!r}")
    # A relation may declare an attribute named "op"; its facts can then only be inserted.
    op = "insert" if OP_FIELD in names else document.get(OP_FIELD, "insert")
    if op not in OPS:
        return DeadLetter(
            "unknown_op", f'unknown op {json.dumps(op)} (expected "insert" or "delete")'
        )
    values: list[Value] = []
    for attribute in attributes:
        typed = coerce_json_value(document[attribute.name], attribute.type)
        if typed is None:
            raw = document[attribute.name]
            return DeadLetter(
                "wrong_type",
                f"attribute {attribute.name!r} must be {_article(attribute.type)}, "
                f"got {_json_type(raw)} {json.dumps(raw)}",
            )
        values.append(typed)
    return Fact(tuple(values), "delete" if op == "delete" else "insert")


def coerce_json_value(raw: object, type_name: str) -> Value | None:
    """The value of a JSON scalar as declared type ``type_name``, or None if it is not one.

    number: an int (a float with an integral value such as 3.0 is not accepted: the
    producer wrote the wrong type); float: an int or a finite float; symbol: a string.
    Booleans are never numbers, although Python says they are ints.
    """
    if isinstance(raw, bool):
        return None
    if type_name == "number":
        return raw if isinstance(raw, int) and -(2**63) <= raw < 2**63 else None
    if type_name == "float":
        if isinstance(raw, int | float) and math.isfinite(raw):
            return float(raw)
        return None
    if type_name == "symbol":
        return raw if isinstance(raw, str) else None
    raise ValueError(f"unknown type {type_name!r}")


def _json_type(value: object) -> str:
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def _article(type_name: str) -> str:
    return {"number": "a number (integer)", "float": "a float", "symbol": "a symbol (string)"}[
        type_name
    ]


def fact_key(values: Sequence[Value]) -> str:
    """Canonical JSON of a fact's values: the Kafka key (same fact ⇒ same partition)."""
    return json.dumps(list(values), separators=(",", ":"), ensure_ascii=False)


def encode_fact(attributes: Sequence[Attribute], values: Sequence[Value], op: Op = "insert") -> str:
    """The message value for a fact: its attributes by name, plus ``"op"`` for deletes."""
    document: dict[str, object] = {a.name: v for a, v in zip(attributes, values, strict=True)}
    if op != "insert" and OP_FIELD in document:
        raise ValueError(f'a relation with an attribute named "{OP_FIELD}" cannot carry deletes')
    if op != "insert":
        document[OP_FIELD] = op
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def is_one_symbol(attributes: Sequence[Attribute]) -> bool:
    """A relation of one ``symbol`` column: a blank line of its tab-separated facts is the
    symbol "", as Soufflé reads it (elsewhere blank lines are skipped)."""
    return [a.type for a in attributes] == ["symbol"]
