"""The one compiler: rule bodies and heads → the plan IR (``fixflow.operators.plan``).

``RuleCompiler`` turns a rule body into a plan over variable-named columns:
positive atoms become scans (constants and repeated variables become filters, ``_`` is
dropped) joined on shared variables; ``X = expr`` with ``X`` unbound becomes a computed
column, other comparisons become filters; ``!p(...)`` becomes an anti-join. Heads become
projections ``h0..`` cast to the declared types.

Every strategy (``fixflow.operators.strategies``) and every MRA engine
(``fixflow.operators.engines``) builds its plans with this module. Plans are run by one
of two backends: Spark DataFrames (``fixflow.operators.spark_backend``) or the driver's
numpy kernels (``fixflow.operators.engines.kernels``); this module imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fixflow.checker import ast
from fixflow.checker.catalog import Catalog, RelationEntry, index_var
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
        assignments (aggregates range over them; ``rule_rows`` says no for min and max).
        ``skip_positions`` are left out (the iteration index of an MRA relation)."""
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
    """The names of a head's outputs in the plans ``RuleCompiler.head`` builds."""
    return tuple(f"h{i}" for i in range(arity))


# ---------------------------------------------------------------- relations


def combine_plan(entry: RelationEntry, rows: Sequence[Plan]) -> Plan:
    """G over the head rows (``h0..``) of every rule body of a relation, grouped by the
    other head positions; the distinct union for a set relation."""
    if entry.aggregate is None or entry.value_pos is None:
        if len(rows) == 1:
            copied = tuple((n, Col(n, t)) for n, t in rows[0].schema)
            return Project(rows[0], copied, distinct=True)
        return Union(tuple(rows), distinct=True)
    union = rows[0] if len(rows) == 1 else Union(tuple(rows), distinct=False)
    columns = head_columns(len(entry.attributes))
    value = columns[entry.value_pos]
    keys = tuple(c for c in columns if c != value)
    declared = entry.types[entry.value_pos]
    func = "sum" if entry.aggregate == "count" else entry.aggregate
    grouped = Aggregate(union, keys, func, value, value, "float" if func == "mean" else declared)
    schema = dict(grouped.schema)
    outputs = tuple(
        (c, Cast(Col(c, schema[c]), declared) if c == value else Col(c, schema[c])) for c in columns
    )
    return Project(grouped, outputs)


def rule_rows(
    catalog: Catalog,
    rule: ast.Rule,
    body: ast.Body,
    *,
    recursive: bool,
    versions: Mapping[int, Version] | None = None,
    relation_of: Mapping[int, str] | None = None,
    start: tuple[Plan, Mapping[str, ast.TypeName]] | None = None,
    iteration: int | None = None,
) -> Plan:
    """Head rows ``h0..hn`` of one body (aggregate position: the contributed value).

    ``versions`` and ``relation_of`` make atoms (by literal index) read another version or
    another stored name of their relation; ``start`` is a plan the body is joined onto;
    ``iteration`` binds the index variable of an iteration-indexed head."""
    compiler = RuleCompiler(catalog.types)
    variable = index_var(rule)
    if iteration is not None and variable is not None:
        seed = Project(Unit(), ((variable, Const(iteration, "number")),))
        start = (seed, {variable: "number"})
    compiled = compiler.body(body, versions, start=start, relation_of=relation_of)
    entry = catalog[rule.head.relation]
    # A min or max over the distinct assignments is the min or max over all of them: no
    # distinct projection of the body's rows (pandas' `duplicated` over a non-linear
    # APSP's ~10^8 joined rows took half its time).
    aggregated = entry.aggregate not in (None, "min", "max")
    return compiler.head(rule, compiled, entry.types, aggregated=aggregated, recursive=recursive)
