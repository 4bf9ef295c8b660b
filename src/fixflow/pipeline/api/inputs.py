"""A user's DataFrame as the input relation its program declares.

Columns are matched by name when every declared attribute is a column of the frame (other
columns are left out: a frame may carry more than the relation needs), else by position
when the frame has exactly the declared number of columns. Each column's Spark type must
hold the declared type without loss of meaning: ``number`` takes any integral type,
``float`` any integral or fractional one, ``symbol`` strings. Anything else is an
``InputError`` that names the relation, the column and what to do.

A Datalog fact has no missing values; Spark columns may be null. Checking would cost a Spark
job, so the check runs with the first job that reads the input: a null stops that job with
``NULL_MARKER`` in Spark's message, which the API turns into an ``InputError``
(``null_error``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    CharType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    VarcharType,
)

from fixflow.checker.ast import Attribute
from fixflow.operators.spark_backend import spark_type
from fixflow.pipeline.api.errors import InputError

INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
ACCEPTED: dict[str, tuple[type[DataType], ...]] = {
    "number": INTEGRAL,
    "float": (*INTEGRAL, FloatType, DoubleType, DecimalType),
    "symbol": (StringType, VarcharType, CharType),
}
"""By declared type: the Spark types an input column may have (cast to the declared one)."""

SPARK_NAMES = {"number": "bigint", "float": "double", "symbol": "string"}
NULL_MARKER = "fixflow-input-null:"
"""Starts the message a null input value raises inside Spark (``null_error`` finds it)."""


def conform(relation: str, attributes: Sequence[Attribute], frame: DataFrame) -> DataFrame:
    """``frame`` in the declared columns of ``relation``: named, ordered and typed as
    declared, each value checked not null when Spark reads it."""
    nullable = {f.name: f.nullable for f in frame_of(relation, frame).schema.fields}
    return frame.select(
        *(
            _not_null(relation, attribute, typed, nullable[name])
            for attribute, name, typed in typed_columns(relation, attributes, frame)
        )
    )


def frame_of(relation: str, frame: object) -> DataFrame:
    """``frame``, if it is a DataFrame."""
    if not isinstance(frame, DataFrame):
        raise InputError(f"input `{relation}` is a {type(frame).__name__}, not a Spark DataFrame")
    return frame


def typed_columns(
    relation: str, attributes: Sequence[Attribute], frame: DataFrame
) -> list[tuple[Attribute, str, Column]]:
    """Per declared attribute: the frame's column for it (``_columns``) and that column
    cast to the declared type, once its Spark type is checked to hold that type."""
    chosen = _columns(relation, attributes, frame)
    types = dict(frame.dtypes)
    fields = {f.name: f.dataType for f in frame.schema.fields}
    typed = []
    for attribute, column in zip(attributes, chosen, strict=True):
        if not isinstance(fields[column], ACCEPTED[attribute.type]):
            raise InputError(
                f"input `{relation}`: column `{column}` is {types[column]}, declared "
                f"`{attribute.name}: {attribute.type}` (a Spark "
                f"{SPARK_NAMES[attribute.type]}): cast it before evaluating"
            )
        typed.append((attribute, column, frame[column].cast(spark_type(attribute.type))))
    return typed


def _columns(relation: str, attributes: Sequence[Attribute], frame: DataFrame) -> list[str]:
    """The frame's column for each attribute: by name, else by position."""
    names = [a.name for a in attributes]
    if all(name in frame.columns for name in names):
        return names
    if len(frame.columns) == len(names):
        return list(frame.columns)
    declared = ", ".join(f"{a.name}: {a.type}" for a in attributes)
    raise InputError(
        f"input `{relation}` has columns ({', '.join(frame.columns)}); declared "
        f"{relation}({declared}): name the columns {', '.join(names)} or give exactly "
        f"{len(names)} columns in that order"
    )


def _not_null(relation: str, attribute: Attribute, typed: Column, nullable: bool) -> Column:
    if nullable:
        message = f"{NULL_MARKER} input `{relation}` has a null in column `{attribute.name}`"
        failed = F.raise_error(F.lit(message)).cast(SPARK_NAMES[attribute.type])
        typed = F.coalesce(typed, failed)
    return typed.alias(attribute.name)


def null_error(error: BaseException) -> InputError | None:
    """The ``InputError`` a null input raised inside a Spark job, if ``error`` is one."""
    text = str(error)
    start = text.find(NULL_MARKER)
    if start < 0:
        return None
    line = text[start + len(NULL_MARKER) :].splitlines()[0].strip()
    end = line.find("`", line.find("column `") + len("column `"))
    return InputError(line[: end + 1] + ": drop or fill the nulls before evaluating")


def unknown_inputs(
    given: Mapping[str, object], declared: Sequence[str], file: str, every: bool = True
) -> None:
    """Every given input is an ``.input`` relation and, with ``every``, every ``.input``
    relation is given."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise InputError(
            f"`{unknown[0]}` is not an .input relation of {file} "
            f"(its inputs: {', '.join(declared) or 'none'})"
        )
    missing = [r for r in declared if r not in given]
    if missing and every:
        raise InputError(
            f"{file} reads .input relation{'s' if len(missing) > 1 else ''} "
            f"{', '.join(f'`{r}`' for r in missing)}: pass "
            + ", ".join(f"{r}=<DataFrame>" for r in missing)
        )
