"""The Spark backend of the plan IR: plans (``fixflow.operators.plan``) → DataFrames.

``SparkBackend`` runs a plan on DataFrames whose relations are stored with positional
columns ``c0, c1, ...`` (``positional``); plan columns become Spark-safe names
(``column_name``) and plan expressions Spark Column expressions (``column``), never
evaluated Python. ``join_on``, ``minus``, ``set_minus`` and ``cross_join`` are the joins
and differences the strategies use on stored relations, right also on frames without
columns (nullary relations: Spark rejects an empty join list, and its EXCEPT ignores the
right side then). The numpy kernels (``fixflow.operators.engines.kernels``) are the other
backend of the same plans.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from fixflow.checker.ast import TypeName
from fixflow.checker.regex import RegexError, java_regex
from fixflow.operators.compiler import CompileError
from fixflow.operators.plan import (
    Aggregate,
    AntiJoin,
    Arith,
    Cast,
    Col,
    Compare,
    Const,
    Filter,
    Fixpoint,
    Func,
    Join,
    Negate,
    PExpr,
    Plan,
    Project,
    Scan,
    Union,
    Unit,
    Version,
)

# ---------------------------------------------------------------- types

SPARK_TYPES: dict[str, DataType] = {
    "number": LongType(),
    "float": DoubleType(),
    "symbol": StringType(),
}


def spark_type(type_name: TypeName) -> DataType:
    return SPARK_TYPES[type_name]


def positional(i: int) -> str:
    """The internal name of a relation's i-th column."""
    return f"c{i}"


def relation_struct(types: Sequence[TypeName]) -> StructType:
    """The internal (positional) Spark schema of a relation with these attribute types."""
    return StructType(
        [StructField(positional(i), spark_type(t), True) for i, t in enumerate(types)]
    )


def column_name(name: str) -> str:
    """A Spark-safe, case-distinct column name for a variable or compiler name.

    Spark resolves column names case-insensitively, while Datalog variables ``x`` and ``X``
    differ, so upper-case letters and other characters are escaped injectively."""
    out = ["v"]
    for ch in name:
        if ch.islower() or ch.isdigit():
            out.append(ch)
        elif ch == "_":
            out.append("__")
        elif "A" <= ch <= "Z":
            out.append("_" + ch.lower())
        else:
            out.append(f"_{ord(ch)}_")
    return "".join(out)


# ---------------------------------------------------------------- plan → Spark

Source = Callable[[str, Version], DataFrame]
"""Where scans read from: (relation, version) → DataFrame with positional columns."""


class SparkBackend:
    """Runs plans as DataFrame operations."""

    def __init__(self, spark: SparkSession, source: Source) -> None:
        self.spark = spark
        self.source = source

    def run(self, plan: Plan) -> DataFrame:
        match plan:
            case Scan() | Filter() | Project(distinct=False):
                # Scan/Filter/Project chains are fused into one where + one select:
                # fewer DataFrame calls, each of which Spark analyzes on the driver.
                frame, env, conditions = self._pipeline(plan)
                for condition in conditions:
                    frame = frame.where(condition)
                return frame.select(*(col.alias(column_name(n)) for n, col in env.items()))
            case Unit():
                return self.spark.range(1).select()
            case Project(input=inner, outputs=outputs, distinct=True):
                df = self.run(Project(inner, outputs))
                return df.distinct()
            case Join(left=left, right=right, on=on):
                lhs, rhs = self.run(left), self.run(right)
                if not on:
                    return cross_join(lhs, rhs)
                return lhs.join(rhs, [column_name(n) for n in on], "inner")
            case AntiJoin(left=left, right=right, on=on):
                lhs, rhs = self.run(left), self.run(right)
                if not on:
                    return lhs.join(rhs.limit(1), F.lit(True), "left_anti")
                return lhs.join(rhs, [column_name(n) for n in on], "left_anti")
            case Union(inputs=inputs, distinct=distinct):
                frames = [self.run(i) for i in inputs]
                df = frames[0]
                for other in frames[1:]:
                    df = df.unionByName(other)
                return df.distinct() if distinct else df
            case Aggregate(input=inner, group_by=group_by, func=func, arg=arg, output=output):
                df = self.run(inner)
                agg = aggregate_column(func, arg).alias(column_name(output))
                keys = [column_name(g) for g in group_by]
                return df.groupBy(*keys).agg(agg) if keys else df.agg(agg)
            case Fixpoint():
                raise CompileError("a Fixpoint is run by a strategy, not by the backend")
        raise CompileError(f"not a plan: {plan!r}")

    def _pipeline(self, plan: Plan) -> tuple[DataFrame, dict[str, Column], list[Column]]:
        """(base frame, column name → Column over it, pending filter conditions)."""
        match plan:
            case Scan(relation=rel, version=version, columns=columns):
                frame = self.source(rel, version)
                return frame, {c: F.col(positional(i)) for i, c in enumerate(columns)}, []
            case Filter(input=inner, condition=condition):
                frame, env, conditions = self._pipeline(inner)
                return frame, env, [*conditions, column(condition, env)]
            case Project(input=inner, outputs=outputs, distinct=False):
                frame, env, conditions = self._pipeline(inner)
                return frame, {n: column(e, env) for n, e in outputs}, conditions
        frame = self.run(plan)
        return frame, {n: F.col(column_name(n)) for n, _ in plan.schema}, []


def join_on(left: DataFrame, right: DataFrame, columns: Sequence[str], how: str) -> DataFrame:
    """``left.join(right, columns, how)``, also on no columns: the rows of a nullary
    relation (and its keys) are empty tuples, and PySpark's ``join`` rejects an empty list.
    On no columns every row matches every row: a semi/anti join asks whether ``right`` has
    a row at all."""
    return left.join(right, list(columns) if columns else None, how)


def minus(left: DataFrame, right: DataFrame) -> DataFrame:
    """``left.subtract(right)`` (EXCEPT DISTINCT, null-safe), also on frames without
    columns (a nullary relation's rows, or keys of no columns), where Spark's EXCEPT keeps
    ``left``'s rows whatever ``right`` holds (Spark 4.2): one empty tuple unless ``right``
    has one too."""
    if left.columns:
        return left.subtract(right)
    return left.limit(1).join(right, None, "left_anti")


def set_minus(left: DataFrame, right: DataFrame) -> DataFrame:
    """``minus`` of two frames that hold no duplicate rows (a relation's rows): a null-safe
    anti join on every column. EXCEPT DISTINCT is that anti join followed by a distinct, a
    shuffle of the result that a set does not need. ``right``'s columns are renamed first,
    so the condition is unambiguous even when both sides come from the same rows."""
    if not left.columns:
        return minus(left, right)
    renamed = [f"#minus{i}" for i in range(len(left.columns))]
    other = right.select(*(F.col(c).alias(r) for c, r in zip(left.columns, renamed, strict=True)))
    pairs = zip(left.columns, renamed, strict=True)
    condition = reduce(lambda a, b: a & b, (F.col(c).eqNullSafe(F.col(r)) for c, r in pairs))
    return left.join(other, condition, "left_anti")


def cross_join(left: DataFrame, right: DataFrame) -> DataFrame:
    """A join on no shared columns. With a nullary side (``go()`` in ``r(x) :- go(), e(x).``)
    it is a semi join: the other side's rows, kept if the nullary relation holds — one
    existence test against a broadcast row, no product and no duplicated rows."""
    if not right.columns:
        return left.join(F.broadcast(right.limit(1)), None, "left_semi")
    if not left.columns:
        return right.join(F.broadcast(left.limit(1)), None, "left_semi")
    return left.crossJoin(right)


def aggregate_column(func: str, arg: str | None) -> Column:
    if arg is None or func == "count":
        return F.count(F.lit(1)) if arg is None else F.count(F.col(column_name(arg)))
    col = F.col(column_name(arg))
    return {"min": F.min, "max": F.max, "sum": F.sum, "mean": F.avg}[func](col)


def column(expr: PExpr, env: Mapping[str, Column] | None = None) -> Column:
    """A plan expression as a Spark Column; ``env`` maps column names to Columns."""
    match expr:
        case Col(name=name):
            return env[name] if env is not None else F.col(column_name(name))
        case Const(value=value, type=type_):
            return F.lit(value).cast(spark_type(type_))
        case Arith(op="+" | "-" | "*" as op, left=left, right=right, type="number"):
            return _wrapping(op, column(left, env), column(right, env))
        case Arith(op=op, left=left, right=right, type=type_):
            return _arith(op, column(left, env), column(right, env), type_)
        case Negate(operand=operand, type="number"):
            number = column(operand, env)  # -(-2^63) wraps to itself, as in C++
            return F.when(number == F.lit(INT64_MIN), number).otherwise(-number)
        case Negate(operand=operand):
            return -column(operand, env)
        case Func(name=name, args=(arg,), type=type_) if name in CONVERSIONS:
            return _conversion(column(arg, env), arg.type, type_)
        case Func(name="match", args=(Const(value=str(pattern)), text)):
            return _match_literal(pattern, column(text, env))
        case Func(name="match", args=(pattern, text)):
            return _match_computed(column(pattern, env), column(text, env))
        case Func(name=name, args=args, type=type_):
            return _builtin(name, [column(a, env) for a in args], type_)
        case Compare(op=op, left=left, right=right):
            return _compare(op, column(left, env), column(right, env))
        case Cast(operand=operand, type=type_):
            inner = column(operand, env)
            return inner if operand.type == type_ else inner.cast(spark_type(type_))
    raise CompileError(f"not a plan expression: {expr!r}")


def _arith(op: str, left: Column, right: Column, type_: TypeName) -> Column:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op == "/" and type_ == "number":
        # Soufflé's (C++'s) integer division truncates toward zero, as Java's does; x / 0
        # and the overflowing INT64_MIN / -1 have no value (`when` evaluates neither).
        defined = (right != 0) & ~((right == -1) & (left == F.lit(INT64_MIN)))
        return F.when(defined, F.call_function("div", left, right))
    if op == "/":
        return F.try_divide(left.cast(DoubleType()), right)  # x / 0.0: no value
    if op == "%":
        # Java's remainder truncates toward zero, like C's (Soufflé's); x % 0: no value.
        return F.try_mod(left, right)
    if op == "^":
        power = F.pow(left, right)  # a double; number ^ number truncates toward zero
        return power.try_cast(LongType()) if type_ == "number" else _finite(power)
    return _integer_op(op, left, right)


INT64_MIN = -(2**63)
_WIDE = DecimalType(38, 0)  # holds any sum, difference or product of two int64
_EXACT = {"+": F.try_add, "-": F.try_subtract, "*": F.try_multiply}


def _wrapping(op: str, left: Column, right: Column) -> Column:
    """``number`` ``+ - *`` wrapping around on overflow, as Soufflé's C++ does (two's
    complement) and the driver's numpy kernels do; Spark's ANSI mode would fail the job.
    The exact result is computed again in decimal only for the rows that overflow."""
    exact = _EXACT[op](left, right)
    wide = _arith(op, left.cast(_WIDE), right.cast(_WIDE), "number")
    half, full = (F.lit(Decimal(2**n)).cast(_WIDE) for n in (63, 64))
    wrapped = (F.pmod(wide + half, full) - half).cast(LongType())
    overflowed = exact.isNull() & left.isNotNull() & right.isNotNull()
    return F.when(overflowed, wrapped).otherwise(exact)


def _integer_op(op: str, left: Column, right: Column) -> Column:
    """The bitwise and logical operators on ``number`` (logical ones yield 0 or 1)."""
    if op in ("bshl", "bshr"):
        shift = F.pmod(right, F.lit(64)).cast("int")  # Java's shift count: the low 6 bits
        return F.call_function("shiftleft" if op == "bshl" else "shiftright", left, shift)
    if op == "band":
        return left.bitwiseAND(right)
    if op == "bor":
        return left.bitwiseOR(right)
    if op == "bxor":
        return left.bitwiseXOR(right)
    truth = {"land": (left != 0) & (right != 0), "lor": (left != 0) | (right != 0)}
    truth["lxor"] = (left != 0) != (right != 0)
    if op not in truth:
        raise CompileError(f"unknown operator `{op}`")
    return truth[op].cast(LongType())


def _finite(value: Column) -> Column:
    """``value`` where it is a finite double, else no value (Fixflow floats are finite)."""
    infinite = F.abs(value) == F.lit(float("inf"))
    return F.when(~F.isnan(value) & ~infinite, value)


CONVERSIONS = frozenset(("itof", "ftoi", "to_float", "to_number", "to_string"))
FLOAT_PREFIX = r"^\s*([+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?)"
"""The part of a symbol ``to_float`` reads: C's ``strtod`` skips spaces (Java's ``\\s`` is
C's ``isspace``) and stops after the longest decimal float; without one, no value."""
HEX_FLOAT = r"^\s*[+-]?0[xX]"
"""strtod's hexadecimal floats (``0x1p3``), which Fixflow does not read: no value."""


def _conversion(value: Column, source: TypeName, target: TypeName) -> Column:
    """A conversion between the three types; a symbol that does not spell a value, or a
    float out of ``number``'s range, yields no value."""
    if source == target:
        return value
    if target == "symbol" and source == "float":
        # Soufflé's std::to_string: C's %f, six decimals (10.5 -> "10.500000").
        return F.format_string("%.6f", value)
    if target == "symbol":
        return value.cast(StringType())
    if source == "symbol" and target == "number":
        return _to_number(value)
    if source == "symbol":
        text = F.regexp_extract(value, FLOAT_PREFIX, 1)
        readable = value.rlike(FLOAT_PREFIX) & ~value.rlike(HEX_FLOAT)
        return _finite(F.when(readable, text.try_cast(DoubleType())))
    return value.try_cast(spark_type(target))  # float → number truncates toward zero


def _to_number(text: Column) -> Column:
    """Soufflé's ``to_number`` (RamSignedFromString with base 0, then C's ``strtoll``):
    ``0x``/``-0x`` starts hexadecimal digits, ``0b``/``-0b`` binary ones (after ``0b``,
    strtoll's spaces and sign), anything else decimal after spaces and a sign; reading
    stops at the first other character. No digit or a value outside int64: no value
    (Soufflé stops the program there)."""
    hexadecimal = _based(text, r"^(-?)0x0*([0-9a-fA-F]*)", 16, 16)
    binary = F.coalesce(
        _based(text, r"^0b\s*([+-]?)0*([01]+)", 2, 64),
        _based(text, r"^(-)0b0*([01]+)", 2, 64),
    )
    decimal = F.concat(*(F.regexp_extract(text, r"^\s*([+-]?)([0-9]+)", g) for g in (1, 2)))
    return (
        F.when(text.rlike(r"^-?0x"), hexadecimal)
        .when(text.rlike(r"^-?0b"), binary)
        .otherwise(F.when(decimal != "", decimal.try_cast(LongType())))
    )


def _based(text: Column, pattern: str, base: int, max_digits: int) -> Column:
    """The int64 that ``pattern``'s (sign, digits without leading zeros) spell in ``base``;
    no value where it does not match or the value is out of range. ``conv`` reads at most
    ``max_digits`` digits (64 bits) exactly; more are out of range anyway."""
    sign, digits = (F.regexp_extract(text, pattern, g) for g in (1, 2))
    magnitude = F.conv(F.when(digits == "", F.lit("0")).otherwise(digits), base, 10)
    value = F.concat(sign, magnitude).try_cast(LongType())
    return F.when(text.rlike(pattern) & (F.length(digits) <= max_digits), value)


def _builtin(name: str, args: list[Column], type_: TypeName) -> Column:
    if name == "min":
        return F.least(*(a.cast(spark_type(type_)) for a in args))
    if name == "max":
        return F.greatest(*(a.cast(spark_type(type_)) for a in args))
    if name == "abs":
        # abs of int64's minimum wraps to itself (as numpy's does), not an ANSI failure.
        least = args[0] == F.lit(INT64_MIN) if type_ == "number" else F.lit(False)
        return F.when(least, args[0]).otherwise(F.abs(args[0]))
    if name == "exp":
        return F.exp(args[0])
    if name == "log":
        # Spark's ln yields null for x <= 0: the binding simply has no value.
        return F.ln(args[0])
    if name == "relu":
        return F.greatest(args[0], F.lit(0).cast(spark_type(type_)))
    if name == "bnot":
        return F.bitwise_not(args[0])
    if name == "lnot":
        return (args[0] == 0).cast(LongType())
    return _string_functor(name, args)


def _string_functor(name: str, args: list[Column]) -> Column:
    """String functors and the tests of ``contains``/``match`` (1 when they hold)."""
    if name == "cat":
        return F.concat(*args)
    if name == "strlen":
        return F.char_length(args[0]).cast(LongType())
    if name == "substr":
        return _substr(*args)
    if name == "contains":
        return F.contains(args[1], args[0]).cast(LongType())
    raise CompileError(f"unknown built-in `{name}`")


def _match_literal(pattern: str, text: Column) -> Column:
    """``match("...", s)``: Soufflé's C++ ECMAScript pattern in Java's syntax, anchored at
    both ends as std::regex_match is (``\\z``: the very end). A pattern C++ rejects has no
    value, so that ``match`` and ``!match`` are both false, as in Soufflé (the checker
    warned)."""
    try:
        java = java_regex(pattern)
    except RegexError:
        return F.lit(None).cast(LongType())
    return F.regexp_like(text, F.lit(f"^(?:{java})\\z")).cast(LongType())


def _match_computed(pattern: Column, text: Column) -> Column:
    """``match(p, s)`` with a pattern known only at run time: read with Java's syntax
    (docs/language.md), the whole string. ``try_reflect`` yields null where
    ``Pattern.matches`` throws, so an invalid pattern makes ``match`` and ``!match``
    false instead of failing the job (``regexp_like`` would)."""
    matched = F.try_reflect(F.lit("java.util.regex.Pattern"), F.lit("matches"), pattern, text)
    return F.when(matched.isNotNull(), (matched == F.lit("true")).cast(LongType()))


def _substr(text: Column, start: Column, length: Column) -> Column:
    """``substr(s, i, n)``: ``n`` characters from 0-based ``i`` (fewer at the end); as in
    Soufflé, an ``i`` outside ``0..strlen(s)`` yields "" and a negative ``n`` the rest."""
    size = F.char_length(text).cast(LongType())
    count = F.when(length < 0, size).otherwise(F.least(length, size))
    inside = (start >= 0) & (start <= size)
    position = F.when(inside, start + 1).otherwise(1)
    piece = F.substr(text, position.cast("int"), count.cast("int"))
    return F.when(inside, piece).otherwise(F.lit(""))


def _compare(op: str, left: Column, right: Column) -> Column:
    match op:
        case "=":
            return left == right
        case "!=":
            return left != right
        case "<":
            return left < right
        case "<=":
            return left <= right
        case ">":
            return left > right
        case ">=":
            return left >= right
    raise CompileError(f"unknown comparison `{op}`")
