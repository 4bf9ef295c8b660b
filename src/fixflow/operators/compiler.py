"""The one compiler: rule bodies → plan IR (``fixflow.operators.plan``) → Spark DataFrames.

``RuleCompiler`` turns a rule body into a plan over variable-named columns:
positive atoms become scans (constants and repeated variables become filters, ``_`` is
dropped) joined on shared variables; ``X = expr`` with ``X`` unbound becomes a computed
column, other comparisons become filters; ``!p(...)`` becomes an anti-join. Heads become
projections cast to the declared types. ``SparkBackend`` runs a plan on DataFrames whose
relations are stored with positional columns ``c0, c1, ...`` (see ``positional``).

Every strategy (``fixflow.operators.strategies``) and every MRA engine
(``fixflow.operators.engines``) builds its plans with this module; user expressions become
Spark Column expressions, never evaluated Python.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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

from fixflow.checker import ast
from fixflow.checker.regex import RegexError, java_regex
from fixflow.checker.types import arith_result, call_result
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

TypeName = ast.TypeName


class CompileError(Exception):
    """A rule the engine cannot compile (the checker should have rejected it)."""


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


# ---------------------------------------------------------------- AST → plan


def _numeric_join(left: TypeName, right: TypeName) -> TypeName:
    if left == "symbol" or right == "symbol":
        return "symbol"
    return "float" if "float" in (left, right) else "number"


@dataclass(frozen=True, slots=True)
class BodyPlan:
    """A compiled body: the plan, every bound variable's type, literals left unbound."""

    plan: Plan
    types: dict[str, TypeName]
    deferred: tuple[ast.BodyLiteral, ...] = ()


class RuleCompiler:
    """Compiles rule bodies and heads against the declared relation schemas."""

    def __init__(self, schemas: Mapping[str, Sequence[TypeName]]) -> None:
        self.schemas = {rel: tuple(types) for rel, types in schemas.items()}
        self._fresh = 0

    # ------------------------------------------------------------ expressions

    def expr(self, expr: ast.Expr, types: Mapping[str, TypeName]) -> PExpr:
        """An AST expression as a typed plan expression over bound variables."""
        match expr:
            case ast.Var(name=name):
                if name not in types:
                    raise CompileError(f"variable `{name}` is not bound")
                return Col(name, types[name])
            case ast.NumberLit(value=value):
                return Const(value, "number")
            case ast.FloatLit(value=value):
                return Const(value, "float")
            case ast.StringLit(value=value):
                return Const(value, "symbol")
            case ast.BinOp(op=op, left=left, right=right):
                lhs, rhs = self.expr(left, types), self.expr(right, types)
                # As in the checker's typing (division always yields a float, ...).
                return Arith(op, lhs, rhs, arith_result(op, lhs.type, rhs.type))
            case ast.Neg(operand=operand):
                inner = self.expr(operand, types)
                return Negate(inner, inner.type)
            case ast.Call(func=func, args=args):
                compiled = tuple(self.expr(a, types) for a in args)
                return Func(func, compiled, call_result(func, [c.type for c in compiled]))
            case ast.Wildcard():
                raise CompileError("`_` is only allowed as an atom argument")
        raise CompileError(f"not an expression: {expr!r}")

    # ------------------------------------------------------------ atoms

    def _fresh_name(self, hint: str) -> str:
        self._fresh += 1
        return f"#{hint}{self._fresh}"

    def atom(
        self, atom: ast.Atom, version: Version = "full", relation: str | None = None
    ) -> tuple[Plan, dict[str, TypeName], list[ast.Comparison]]:
        """A scan of ``atom`` projected to its variables, plus the equality tests that its
        non-variable expression arguments (``p(X+1)``) still need once all is bound."""
        rel = relation or atom.relation
        types = self.schemas.get(atom.relation)
        if types is None:
            raise CompileError(f"relation `{atom.relation}` is not declared")
        if len(types) != len(atom.args):
            raise CompileError(
                f"`{atom.relation}` has {len(types)} attributes, the atom gives {len(atom.args)}"
            )
        columns = tuple(self._fresh_name(f"{atom.relation}.") for _ in atom.args)
        plan: Plan = Scan(rel, version, columns, types)
        outputs: dict[str, PExpr] = {}
        tests: list[ast.Comparison] = []
        for column, type_, arg in zip(columns, types, atom.args, strict=True):
            source = Col(column, type_)
            match arg:
                case ast.Wildcard():
                    continue
                case ast.Var(name=name) if name in outputs:
                    plan = Filter(plan, Compare("=", source, outputs[name]))
                case ast.Var(name=name):
                    outputs[name] = source
                case ast.NumberLit() | ast.FloatLit() | ast.StringLit():
                    plan = Filter(plan, Compare("=", source, self.expr(arg, {})))
                case _:
                    # An expression argument: keep the column, test it once bound.
                    outputs[column] = source
                    tests.append(ast.Comparison("=", ast.Var(column), arg))
        plan = Project(plan, tuple((name, expr) for name, expr in outputs.items()))
        return plan, {name: e.type for name, e in outputs.items()}, tests

    # ------------------------------------------------------------ bodies

    def body(
        self,
        body: ast.Body,
        versions: Mapping[int, Version] | None = None,
        *,
        skip: frozenset[int] = frozenset(),
        start: tuple[Plan, Mapping[str, TypeName]] | None = None,
        external: frozenset[str] = frozenset(),
        relation_of: Mapping[int, str] | None = None,
    ) -> BodyPlan:
        """Compile ``body``.

        ``versions`` maps a literal index to the version its atom reads (default ``full``);
        ``skip`` leaves literals out (the MRA recursive atom); ``start`` is a plan the body
        is joined onto; ``external`` names variables bound outside (by a skipped atom):
        literals needing them are returned in ``deferred`` instead of failing.
        ``relation_of`` reads an atom from another stored relation name.
        """
        versions = versions or {}
        relation_of = relation_of or {}
        literals = [(i, lit) for i, lit in enumerate(body.literals) if i not in skip]
        atom_vars: set[str] = set(external)
        for _, lit in literals:
            if isinstance(lit, ast.Atom):
                atom_vars |= {a.name for a in lit.args if isinstance(a, ast.Var)}
        plan, types = start if start is not None else (None, {})
        types = dict(types)
        tests: list[ast.BodyLiteral] = []
        scans: list[tuple[Plan, dict[str, TypeName]]] = []
        for i, lit in literals:
            if isinstance(lit, ast.Atom):
                scan, scan_types, arg_tests = self.atom(
                    lit, versions.get(i, "full"), relation_of.get(i)
                )
                scans.append((scan, scan_types))
                tests += arg_tests
                atom_vars |= set(scan_types)
        plan, types = self._join_all(plan, types, scans)
        pending = tests + [lit for _, lit in literals if not isinstance(lit, ast.Atom)]
        plan, types, deferred = self._apply_literals(plan, types, pending, atom_vars)
        if deferred and not external:
            names = sorted(set().union(*(_literal_vars(d) for d in deferred)) - set(types))
            raise CompileError(f"unbound variable(s) {', '.join(names)} in a rule body")
        return BodyPlan(plan, types, tuple(deferred))

    def _join_all(
        self,
        plan: Plan | None,
        types: dict[str, TypeName],
        scans: list[tuple[Plan, dict[str, TypeName]]],
    ) -> tuple[Plan, dict[str, TypeName]]:
        """Join scans greedily, always preferring one that shares a variable (no cross
        joins while a connected atom remains)."""
        remaining = list(scans)
        while remaining:
            pick = next(
                (k for k, (_, t) in enumerate(remaining) if set(t) & set(types)),
                0,
            )
            scan, scan_types = remaining.pop(pick)
            if plan is None:
                plan, types = scan, dict(scan_types)
                continue
            on = tuple(name for name in scan_types if name in types)
            plan = Join(plan, scan, on)
            types.update(scan_types)
        return (plan if plan is not None else Unit()), types

    def _apply_literals(
        self,
        plan: Plan,
        types: dict[str, TypeName],
        pending: list[ast.BodyLiteral],
        atom_vars: set[str],
    ) -> tuple[Plan, dict[str, TypeName], list[ast.BodyLiteral]]:
        """Assignments, filters and anti-joins, each as soon as its variables are bound."""
        progress = True
        while pending and progress:
            progress = False
            for lit in list(pending):
                if isinstance(lit, ast.Negation) and _binds_later(lit, types, pending, atom_vars):
                    continue
                applied = self._apply_one(plan, types, lit, atom_vars)
                if applied is not None:
                    plan = applied
                    pending.remove(lit)
                    progress = True
        return plan, types, pending

    def _apply_one(
        self,
        plan: Plan,
        types: dict[str, TypeName],
        lit: ast.BodyLiteral,
        atom_vars: set[str],
    ) -> Plan | None:
        if isinstance(lit, ast.Negation):
            return self._negation(plan, types, lit.atom)
        if isinstance(lit, ast.Constraint):
            if not _literal_vars(lit) <= set(types):
                return None
            return Filter(plan, self.constraint(lit, types))
        assert isinstance(lit, ast.Comparison)
        target = _assignment_target(lit, types, atom_vars)
        if target is not None:
            name, source = target
            if not ast.expr_vars(source) <= set(types):
                return None
            value = self.expr(source, types)
            types[name] = value.type
            if _may_have_no_value(source):
                # `v = to_number(s)` with s not a number: drop the binding rather than
                # store a null in the head.
                return _with_value(plan, name, value)
            keep = tuple((n, Col(n, t)) for n, t in plan.schema)
            return Project(plan, (*keep, (name, value)))
        if not _literal_vars(lit) <= set(types):
            return None
        left, right = self.expr(lit.left, types), self.expr(lit.right, types)
        return Filter(plan, Compare(lit.op, left, right))

    def constraint(self, lit: ast.Constraint, types: Mapping[str, TypeName]) -> Compare:
        """A constraint as a test: its functor yields 1 when it holds (``true`` is 1)."""
        holds = Const(0 if lit.negated else 1, "number")
        if not lit.args:
            return Compare("=", Const(int(lit.func == "true"), "number"), holds)
        args = tuple(self.expr(a, types) for a in lit.args)
        return Compare("=", Func(lit.func, args, "number"), holds)

    def _negation(self, plan: Plan, types: dict[str, TypeName], atom: ast.Atom) -> Plan | None:
        names = {a.name for a in atom.args if isinstance(a, ast.Var)}
        if not names <= set(types):
            # Variables occurring only under negation act as wildcards.
            atom = ast.Atom(
                atom.relation,
                tuple(
                    ast.Wildcard() if isinstance(a, ast.Var) and a.name not in types else a
                    for a in atom.args
                ),
            )
            names &= set(types)
        if any(_is_expression(a) for a in atom.args):
            if not set().union(*(ast.expr_vars(a) for a in atom.args)) <= set(types):
                return None  # `!e(i + 1)` waits until `i` is bound
            plan, atom = self._bind_expressions(plan, types, atom)
            names |= {a.name for a in atom.args if isinstance(a, ast.Var)}
        scan, scan_types, tests = self.atom(atom)
        assert not tests, "expression arguments are bound above"
        return AntiJoin(plan, scan, tuple(n for n in scan_types if n in names))

    def _bind_expressions(
        self, plan: Plan, types: Mapping[str, TypeName], atom: ast.Atom
    ) -> tuple[Plan, ast.Atom]:
        """``!e(i + 1)`` as ``#n = i + 1, !e(#n)``: each expression argument computed into a
        fresh column (of the attribute's type, so the anti-join compares like values);
        one without a value (``!e(x / 0)``) drops the binding, as an assignment does."""
        args: list[ast.Expr] = []
        for arg, type_ in zip(atom.args, self.schemas[atom.relation], strict=True):
            if not _is_expression(arg):
                args.append(arg)
                continue
            name = self._fresh_name("neg")
            value = self.expr(arg, types)
            if value.type != type_:
                value = Cast(value, type_)
            keep = tuple((n, Col(n, t)) for n, t in plan.schema)
            plan = (
                _with_value(plan, name, value)
                if _may_have_no_value(arg)
                else Project(plan, (*keep, (name, value)))
            )
            args.append(ast.Var(name))
        return plan, ast.Atom(atom.relation, tuple(args), atom.span)

    # ------------------------------------------------------------ heads

    def head(
        self,
        rule: ast.Rule,
        body: BodyPlan,
        declared: Sequence[TypeName],
        *,
        aggregated: bool | None = None,
        recursive: bool = False,
        skip_positions: frozenset[int] = frozenset(),
    ) -> Project:
        """Head rows ``h0..hn`` cast to ``declared``.

        An aggregate position holds the aggregate's argument; ``count`` contributes 1 per
        assignment, except ``count[c]`` in a recursive rule, which adds partial counts
        ``c``. When the relation is ``aggregated`` the rows come from distinct variable
        assignments (aggregates range over them). ``skip_positions`` are left out (the
        iteration index of an MRA relation)."""
        plan = body.plan
        aggregate = rule.head.aggregate
        if aggregated if aggregated is not None else aggregate is not None:
            variables = tuple((n, Col(n, t)) for n, t in plan.schema)
            plan = Project(plan, variables, distinct=True)
        outputs: list[tuple[str, PExpr]] = []
        for i, (arg, type_) in enumerate(zip(rule.head.args, declared, strict=True)):
            if i in skip_positions:
                continue
            value = self.head_value(arg, body.types, type_, recursive)
            if _may_have_no_value(arg.arg if isinstance(arg, ast.Aggregate) else arg):
                # `p(x, 7 / x)` with x = 0, `r(min[x % 0])`: no row, rather than a null in
                # the head (computed once, into a column, and kept where it has a value).
                plan = _with_value(plan, f"#h{i}", value)
                value = Col(f"#h{i}", value.type)
            outputs.append((f"h{i}", value))
        return Project(plan, tuple(outputs))

    def head_value(
        self,
        arg: ast.HeadArg,
        types: Mapping[str, TypeName],
        declared: TypeName,
        recursive: bool,
    ) -> PExpr:
        if not isinstance(arg, ast.Aggregate):
            return Cast(self.expr(arg, types), declared)
        if arg.arg is None or (arg.func == "count" and not recursive):
            return Const(1, "number")
        value = self.expr(arg.arg, types)
        return value if arg.func == "mean" else Cast(value, declared)

    def finish_body(
        self,
        plan: Plan,
        types: Mapping[str, TypeName],
        pending: Sequence[ast.BodyLiteral],
        atom_vars: set[str],
    ) -> BodyPlan:
        """Apply literals left over (``BodyPlan.deferred``) once more variables are bound."""
        types = dict(types)
        plan, types, deferred = self._apply_literals(plan, types, list(pending), atom_vars)
        if deferred:
            names = sorted(set().union(*(_literal_vars(d) for d in deferred)) - set(types))
            raise CompileError(f"unbound variable(s) {', '.join(names)} in a rule body")
        return BodyPlan(plan, types)


def _literal_vars(lit: ast.BodyLiteral) -> set[str]:
    match lit:
        case ast.Comparison(left=left, right=right):
            return ast.expr_vars(left) | ast.expr_vars(right)
        case ast.Negation(atom=atom):
            return set().union(*(ast.expr_vars(a) for a in atom.args))
        case ast.Atom(args=args) | ast.Constraint(args=args):
            return set().union(*(ast.expr_vars(a) for a in args))
    return set()


PARTIAL_OPS = frozenset(("%", "^", "/"))
INT64_MIN = -(2**63)
PARTIAL_FUNCS = frozenset(("ftoi", "to_number", "to_float", "log"))


def _may_have_no_value(expr: ast.Expr | None) -> bool:
    """Whether one of Soufflé's partial operators occurs in ``expr`` (``x % 0``,
    ``to_number("a")``, a float out of range)."""
    match expr:
        case ast.BinOp(op=op, left=left, right=right):
            return op in PARTIAL_OPS or _may_have_no_value(left) or _may_have_no_value(right)
        case ast.Neg(operand=operand) | ast.Cast(operand=operand):
            return _may_have_no_value(operand)
        case ast.Call(func=func, args=args):
            return func in PARTIAL_FUNCS or any(_may_have_no_value(a) for a in args)
    return False


def _binds_later(
    negation: ast.Negation,
    types: Mapping[str, TypeName],
    pending: Sequence[ast.BodyLiteral],
    atom_vars: set[str],
) -> bool:
    """Whether a variable of ``negation`` is unbound yet but bound later (by an assignment
    still pending, or an atom outside the body): the anti-join waits for it, rather than
    treat it as ``_`` as it does a variable that only the negation names."""
    unbound = _literal_vars(negation) - set(types)
    others = set().union(*(_literal_vars(lit) for lit in pending if lit is not negation))
    return bool(unbound & (others | atom_vars))


def _is_expression(arg: ast.Expr) -> bool:
    """An atom argument that is neither a variable, ``_`` nor a constant."""
    return not isinstance(
        arg, ast.Var | ast.Wildcard | ast.NumberLit | ast.FloatLit | ast.StringLit
    )


def _with_value(plan: Plan, name: str, value: PExpr) -> Plan:
    """``plan`` with a column ``name`` = ``value``, keeping only the rows where it has a
    value (null = null is not true)."""
    keep = tuple((n, Col(n, t)) for n, t in plan.schema)
    itself = Col(name, value.type)
    return Filter(Project(plan, (*keep, (name, value))), Compare("=", itself, itself))


def _assignment_target(
    lit: ast.Comparison, types: Mapping[str, TypeName], atom_vars: set[str]
) -> tuple[str, ast.Expr] | None:
    """``X = expr`` (or ``expr = X``) where X is bound by no atom and not yet assigned."""
    if lit.op != "=":
        return None
    for var, other in ((lit.left, lit.right), (lit.right, lit.left)):
        if isinstance(var, ast.Var) and var.name not in atom_vars and var.name not in types:
            return var.name, other
    return None


def head_columns(arity: int) -> tuple[str, ...]:
    return tuple(f"h{i}" for i in range(arity))


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
