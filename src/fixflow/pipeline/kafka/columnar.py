"""Columnar validation of a whole batch of message values: the fast path of ingestion.

``messages.parse_message`` validates one value at a time in Python (a few microseconds
each, which caps ingestion at a few hundred thousand facts per second per core before any
other work). Here Arrow's JSON reader parses all values of one relation at once against the
declared schema. It either accepts *every* value, with exactly the facts the per-record
path would produce, or returns None and the caller validates record by record, so dead
letters keep their precise reasons. A value is accepted only when the per-record path
would surely accept it too:

* each value is one JSON object on one line (a value with a line break, an empty or null
  value, or two objects in one value change the row count or are refused);
* Arrow refuses unknown fields, repeated fields, a wrong JSON type, a float for a
  ``number`` and an integer outside int64; a missing attribute or an explicit ``null``
  reads as null, and nulls are refused here;
* NaN and infinities (which Arrow reads but JSON does not allow) are refused;
* ``op`` must be "insert" or "delete"; a null ``op`` is the default insert only when the
  value does not mention "op" at all, nor an escaped ``o`` or ``p`` (``"op": null`` is a dead
  letter);
* a relation with an attribute named ``op`` always takes the per-record path.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from fixflow.pipeline.kafka.messages import OP_FIELD, OPS

OP_COLUMN = OP_FIELD
"""The column of a facts table holding each fact's operation ("insert" or "delete")."""


def parse_values(values: pa.ChunkedArray | pa.Array, schema: pa.Schema) -> pa.Table | None:
    """The facts of ``values`` (declared columns, then ``op``) in record order, or None
    when any value needs the per-record validation (see the module docstring)."""
    text = None if OP_FIELD in schema.names else _lines(values)
    if text is None:
        return None
    parsed = _read(text, schema.append(pa.field(OP_FIELD, pa.string())))
    if parsed is None or parsed.num_rows != len(values):
        return None
    if not _complete(parsed, schema) or not _valid_ops(parsed.column(OP_FIELD), values, text):
        return None
    ops = pc.fill_null(parsed.column(OP_FIELD), "insert")
    return parsed.set_column(len(schema), OP_COLUMN, ops)


def _lines(values: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """The values as UTF-8 lines, one a value, each ended by a line break, built from the
    Arrow buffers without a Python string per value; None when a value is null or holds a
    line break itself (one value must be one JSON line)."""
    if len(values) == 0 or values.null_count:
        return None
    array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if array.type != pa.string():
        array = array.cast(pa.string())
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32, len(array) + 1, array.offset * 4)
    data = np.frombuffer(data_buffer, np.uint8, offsets[-1] - offsets[0], offsets[0])
    if (data == ord("\n")).any() or (data == ord("\r")).any():
        return None
    return np.insert(data, offsets[1:] - offsets[0], ord("\n"))


def _read(text: np.ndarray, schema: pa.Schema) -> pa.Table | None:
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
    try:
        return pajson.read_json(pa.BufferReader(pa.py_buffer(text)), parse_options=options)
    except pa.ArrowInvalid:
        return None


def _complete(parsed: pa.Table, schema: pa.Schema) -> bool:
    """Every declared attribute present and non-null; floats finite."""
    for field in schema:
        column = parsed.column(field.name)
        if column.null_count:
            return False
        if (
            pa.types.is_floating(field.type)
            and not pc.all(pc.is_finite(column), min_count=0).as_py()
        ):
            return False
    return True


def _valid_ops(ops: pa.ChunkedArray, values: pa.ChunkedArray | pa.Array, text: np.ndarray) -> bool:
    if not pc.all(pc.is_in(ops.drop_null(), pa.array(OPS)), min_count=0).as_py():
        return False
    if not ops.null_count:
        return True
    if ops.null_count == len(ops) and not (text == ord("\\")).any():
        # Every value defaulted and none escapes a character: one search of them all.
        return not _quoted_op(text)
    # An escaped key (\u006fp, o\u0070) could spell "op" too: such values take the slow path.
    defaulted = pc.filter(values, pc.is_null(ops))
    mentioned = pc.match_substring_regex(defaulted, f'"{OP_FIELD}"|\\\\u00(6[fF]|70)')
    return not pc.any(mentioned, min_count=0).as_py()


def _quoted_op(text: np.ndarray) -> bool:
    """Whether ``"op"`` occurs in ``text`` (at each "o", a look at its neighbours)."""
    at = np.flatnonzero(text[1:-2] == ord("o")) + 1
    quoted = (text[at - 1] == ord('"')) & (text[at + 1] == ord("p")) & (text[at + 2] == ord('"'))
    return bool(quoted.any())
