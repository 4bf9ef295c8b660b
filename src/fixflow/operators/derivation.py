"""Why a result row holds: one derivation of it, down to input facts and seeds.

Given the rows of the relations a program stored (results of its ``.output`` relations,
its input facts), ``Derivations.explain(relation, row)`` finds, for the row, a rule of the
user's program and a binding of that rule's body whose head gives exactly the row (for a
``min``/``max`` head: the aggregated value equals the stored one), then does the same for
every derived fact in that body. For a min/max MRA relation this walks the witness chain
the engine keeps in memory, recovered from the stored rows (the rule instance that gives a
key its value); for a ``set`` relation it is one proof, not all of them.

A body is evaluated with the one rule-body compiler (``operators.compiler``) and the numpy
kernels, over its relations *reduced to the rows that can join the bound head*: before a
kernel runs, each atom's rows are looked up by the values bound so far (a sorted index per
relation column, built once), and the values they bind narrow the next atoms (a semi-join
pass in body order, twice). A step of a chain then touches a handful of rows, not the
relations: on a million rows the walk costs the index sorts once and microseconds a step.

A derived relation that is not stored (an intermediate relation without a results table)
is evaluated from the stored ones when its rules are not recursive through it; otherwise its
facts are shown as such, without a derivation below them. A ``sum``/``count`` fact is
explained by its largest contributions (every rule instance of its key, with its value),
and their total beside the stored value. A body premise on the path being
explained is avoided, so a chain never loops; when every binding would loop, the step
says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fixflow.checker import ast
from fixflow.checker.catalog import Catalog
from fixflow.operators.compiler import (
    BodyPlan,
    CompileError,
    RuleCompiler,
    combine_plan,
    rule_rows,
)
from fixflow.operators.engines.batches import Batch
from fixflow.operators.engines.kernels import Kernel, KernelUnsupported, relation_rows
from fixflow.operators.plan import Col, Compare, Const, Filter, Plan, relations_read

Value = int | float | str
Rows = Callable[[str], Batch | None]
"""A relation's stored rows in positional columns ``c0..``; None when it is not stored."""

FLOAT_TOLERANCE = 1e-9
"""Relative difference under which a recomputed aggregate equals the stored value (the
engines may add a chain's terms in another order than the kernels do here)."""
SHOWN = 5
"""Contributions of a ``sum``/``count`` fact that an explanation lists."""
SEARCH_BUDGET = 200_000
"""Rule instances a search tries before it gives up (a proof is usually found at once)."""
LOOKUP_LIMIT = 4096
"""Bound values looked up one by one in a sorted index; more are filtered by ``np.isin``."""


class ExplainError(Exception):
    """The row cannot be explained (not stored, no rule gives it, a rule the kernels
    cannot run); the message says which."""


@dataclass(frozen=True)
class Fact:
    relation: str
    values: tuple[Value, ...]

    def __str__(self) -> str:
        return f"{self.relation}({', '.join(map(_literal, self.values))})"


@dataclass
class Step:
    """How ``fact`` holds: a rule (None for an input fact, or a fact not stored) and the
    facts its body matched, in body order."""

    fact: Fact
    rule: ast.Rule | None
    premises: list[Fact] = field(default_factory=list)
    stored: bool = True
    """False: the fact's relation has no stored rows, so nothing is shown below it."""
    contributions: list[tuple[float, list[Fact]]] | None = None
    """A ``sum``/``count`` fact: its largest contributions (value, premises), by size."""
    total: float = 0.0
    """The sum of all its contributions (what the stored value should be)."""
    count: int = 0
    """How many contributions there are."""
    value_at: int = -1
    """The position of the aggregated value in ``fact``."""


@dataclass
class _Frame:
    """A fact being proven: its path from the root, its rule instances still to try, the
    instance being tried and the next of its premises to prove."""

    fact: Fact
    path: frozenset[Fact]
    candidates: Iterator[tuple[ast.Rule, list[Fact]]]
    done: Step | None = None
    rule: ast.Rule | None = None
    premises: list[Fact] | None = None
    next: int = 0
    failed: bool = False


def _literal(value: Value) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(float(value)) if isinstance(value, float) else str(value)


class Derivations:
    """Explains rows of one program over stored rows (``rows``)."""

    def __init__(self, rules: Sequence[ast.Rule], catalog: Catalog, rows: Rows) -> None:
        self.catalog = catalog
        self.rules = rules
        self.rows = rows
        self.compiler = RuleCompiler(catalog.types)
        self.derived = {r.head.relation for r in rules}
        self._batches: dict[str, Batch | None] = {}
        self._indexes: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        self._evaluating: set[str] = set()
        self._ready: dict[tuple[int, int], _Prepared] = {}
        """By ``id`` of a rule and a body of it (the rules are held: ids stay theirs)."""

    # ------------------------------------------------------------ the walk

    def explain(self, fact: Fact) -> list[Step]:
        """The steps of one derivation of ``fact``, ``fact``'s first, each derived fact
        explained once (depth first). A ``sum``/``count`` fact is one step: its largest
        contributions (a sum's derivation is every instance, not a chain)."""
        if self._summed(fact.relation):
            return [self._contributions(fact)]
        proven = self._prove(fact)
        steps: list[Step] = []
        seen: set[Fact] = set()
        pending = [fact]
        while pending:
            current = pending.pop()
            if current in seen:
                continue
            seen.add(current)
            step = proven[current]
            steps.append(step)
            pending += [p for p in reversed(step.premises) if p in proven]
        return [s for s in steps if s.rule is not None or s.fact == fact or not s.stored]

    def _prove(self, fact: Fact) -> dict[Fact, Step]:
        """A well-founded proof of ``fact``: a depth-first search over rule instances that
        backtracks when a premise has no proof avoiding the facts above it. A fact proven
        once is reused (its proof is well-founded whatever is above it)."""
        proven: dict[Fact, Step] = {}
        stack = [self._frame(fact, frozenset())]
        tries = 0
        while stack:
            top = stack[-1]
            if top.done is not None:  # a leaf: an input fact, or a relation not stored
                proven[top.fact] = top.done
                stack.pop()
                continue
            if top.premises is None or top.failed:
                tries += 1
                if tries > SEARCH_BUDGET:
                    raise ExplainError(f"gave up on {fact} after {SEARCH_BUDGET} rule instances")
                if not self._next_instance(top):
                    stack.pop()
                    if not stack:
                        raise ExplainError(
                            f"no rule of `{fact.relation}` gives {fact} from the stored rows"
                        )
                    stack[-1].failed = True
                continue
            below = next((p for p in top.premises[top.next :] if p not in proven), None)
            if below is None:
                proven[top.fact] = Step(top.fact, top.rule, top.premises)
                stack.pop()
                continue
            top.next = top.premises.index(below) + 1
            stack.append(self._frame(below, top.path))
        return proven

    @staticmethod
    def _next_instance(frame: _Frame) -> bool:
        found = next(frame.candidates, None)
        if found is None:
            return False
        frame.rule, frame.premises = found
        frame.next, frame.failed = 0, False
        return True

    def _frame(self, fact: Fact, above: frozenset[Fact]) -> _Frame:
        path = above | {fact}
        if fact.relation not in self.derived:
            return _Frame(fact, path, iter(()), done=Step(fact, None))
        if self.batch(fact.relation) is None:
            return _Frame(fact, path, iter(()), done=Step(fact, None, stored=False))
        candidates = (
            (rule, premises)
            for rule, body in self._bodies(fact.relation)
            for premises in self._instances(rule, body, fact, path)
        )
        return _Frame(fact, path, candidates)

    def _summed(self, relation: str) -> bool:
        aggregates = [r.head.aggregate for r in self.rules if r.head.relation == relation]
        return any(a is not None and a.func in ("sum", "count") for a in aggregates)

    def _contributions(self, fact: Fact) -> Step:
        """Every instance of the relation's rules whose head has ``fact``'s key, with the
        value it adds (as the engine counts: over distinct bindings of a body's variables;
        ``count`` adds one each, except a recursive rule's ``count[c]``, which adds ``c``);
        the ``SHOWN`` largest kept."""
        found: list[tuple[float, list[Fact]]] = []
        for rule, body in self._bodies(fact.relation):
            prepared = self._prepared(rule, body)
            assignments = self._bound_assignments(prepared, fact)
            if prepared.aggregated is None or assignments is None:
                continue
            ones = _counts_one(rule, prepared)
            seen: set[tuple[object, ...]] = set()
            for row in range(assignments.n):
                binding = tuple(assignments.cols[v][row] for v in prepared.variables)
                if binding in seen:
                    continue
                seen.add(binding)
                premises = [_instance(atom, assignments, row) for atom in prepared.atoms.values()]
                amount = 1.0 if ones else float(assignments.cols[prepared.aggregated][row])
                found.append((amount, premises))
        found.sort(key=lambda c: -abs(c[0]))
        total = float(sum(c[0] for c in found))
        step = Step(fact, None, contributions=found[:SHOWN], total=total, count=len(found))
        value_pos = self.catalog[fact.relation].value_pos
        step.value_at = -1 if value_pos is None else value_pos
        return step

    def _bodies(self, relation: str) -> list[tuple[ast.Rule, ast.Body]]:
        """The relation's rule bodies, those with fewer derived atoms first (seeds before
        recursion: shorter proofs, and fewer dead ends to back out of)."""
        bodies = [(r, b) for r in self.rules if r.head.relation == relation for b in r.bodies]
        return sorted(bodies, key=lambda rb: self._derived_atoms(rb[1]))

    def _derived_atoms(self, body: ast.Body) -> int:
        return sum(isinstance(a, ast.Atom) and a.relation in self.derived for a in body.literals)

    def _instances(
        self, rule: ast.Rule, body: ast.Body, fact: Fact, path: frozenset[Fact]
    ) -> Iterator[list[Fact]]:
        """The premises of each binding of ``body`` that gives ``fact``, none on ``path``."""
        prepared = self._prepared(rule, body)
        assignments = self._bound_assignments(prepared, fact)
        if assignments is None:
            return
        for position, name in prepared.checked:
            if not assignments.n:
                break
            same = _equal(assignments.cols[name], fact.values[position])
            assignments = assignments.take(np.flatnonzero(same))
        for row in range(assignments.n):
            premises = [_instance(atom, assignments, row) for atom in prepared.atoms.values()]
            if not any(p in path for p in premises):
                yield premises

    def _bound_assignments(self, prepared: _Prepared, fact: Fact) -> Batch | None:
        """The body's bindings with the head's key as ``fact`` has it; None when the
        head's constants or repeated variables cannot give ``fact``."""
        bound: dict[str, Value] = {}
        for position, name in prepared.bound:
            if bound.setdefault(name, fact.values[position]) != fact.values[position]:
                return None  # a variable twice in the head, with two values
        if any(fact.values[position] != value for position, value in prepared.constants):
            return None
        return self._assignments(prepared, bound)

    def _prepared(self, rule: ast.Rule, body: ast.Body) -> _Prepared:
        """``body`` made explainable (every ``_`` a fresh variable, every head expression
        or aggregated expression a fresh variable assigned in the body) and compiled."""
        key = (id(rule), id(body))
        found = self._ready.get(key)
        if found is None:
            entry = self.catalog[rule.head.relation]
            summed = entry.aggregate in ("sum", "count")
            found = _prepare(rule.head, body, self.compiler, entry.value_pos, summed)
            self._ready[key] = found
        return found

    # ------------------------------------------------------------ one body

    def _assignments(self, prepared: _Prepared, bound: Mapping[str, Value]) -> Batch:
        """Every binding of the body's variables with ``bound`` as given."""
        plan: Plan = prepared.compiled.plan
        types = prepared.compiled.types
        for name, stored in bound.items():
            if name in types:
                plan = Filter(
                    plan, Compare("=", Col(name, types[name]), Const(stored, types[name]))
                )
        sources = self._reduced(prepared.atoms, bound)
        try:
            return Kernel(plan).run(sources)
        except KernelUnsupported as error:
            raise ExplainError(f"line {prepared.line}: {error}") from None

    def _reduced(
        self, atoms: Mapping[int, ast.Atom], bound: Mapping[str, Value]
    ) -> dict[tuple[str, str], Batch]:
        """Each atom's rows that agree with the values bound so far (semi-join reduction,
        two passes in body order)."""
        known: dict[str, np.ndarray] = {k: np.array([v]) for k, v in bound.items()}
        reduced: dict[int, Batch] = {}
        for _ in range(2):
            for i, atom in atoms.items():
                rows = self.batch(atom.relation)
                if rows is None:
                    raise ExplainError(
                        f"`{atom.relation}` is not stored (not an .output relation): a "
                        "derivation through it cannot be read from the stored rows"
                    )
                narrowed = self._narrowed(atom, reduced.get(i, rows), known, i in reduced)
                if narrowed is None:
                    continue
                reduced[i] = narrowed
                for j, arg in enumerate(atom.args):
                    if isinstance(arg, ast.Var):
                        values = np.unique(narrowed.cols[f"c{j}"])
                        seen = known.get(arg.name)
                        known[arg.name] = values if seen is None else np.intersect1d(seen, values)
        return {
            (_source(atom, i), "full"): reduced[i] if i in reduced else self._full(atom.relation)
            for i, atom in atoms.items()
        }

    def _narrowed(
        self, atom: ast.Atom, rows: Batch, known: Mapping[str, np.ndarray], small: bool
    ) -> Batch | None:
        """``rows`` of ``atom`` whose columns agree with ``known`` values and constants;
        None when nothing constrains them yet."""
        constraints: list[tuple[int, np.ndarray]] = []
        for j, arg in enumerate(atom.args):
            match arg:
                case ast.Var(name=name) if name in known:
                    constraints.append((j, known[name]))
                case ast.NumberLit(value=v) | ast.FloatLit(value=v) | ast.StringLit(value=v):
                    constraints.append((j, np.array([v])))
        if not constraints:
            return rows if small else None
        constraints.sort(key=lambda c: len(c[1]))
        first, values = constraints[0]
        if small or len(values) > LOOKUP_LIMIT:
            keep = np.isin(rows.cols[f"c{first}"], values)
            rows = rows.take(np.flatnonzero(keep))
        else:
            rows = rows.take(self._lookup(atom.relation, first, values))
        for j, values in constraints[1:]:
            rows = rows.take(np.flatnonzero(np.isin(rows.cols[f"c{j}"], values)))
        return rows

    def _lookup(self, relation: str, column: int, values: np.ndarray) -> np.ndarray:
        """Row positions of ``relation`` whose ``column`` holds one of ``values``."""
        index = self._indexes.get((relation, column))
        if index is None:
            data = self._full(relation).cols[f"c{column}"]
            order = np.argsort(data, kind="stable")
            index = (data[order], order)
            self._indexes[(relation, column)] = index
        ordered, order = index
        lo = np.searchsorted(ordered, values, side="left")
        hi = np.searchsorted(ordered, values, side="right")
        if len(values) == 1:
            return order[lo[0] : hi[0]]
        if not len(values):
            return order[:0]
        return order[np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)])]

    def batch(self, relation: str) -> Batch | None:
        """A relation's rows: stored, or evaluated from stored ones (``_evaluated``)."""
        if relation not in self._batches:
            rows = self.rows(relation)
            if rows is None and relation in self.derived:
                rows = self._evaluated(relation)
            self._batches[relation] = rows
        return self._batches[relation]

    def _evaluated(self, relation: str) -> Batch | None:
        """A derived relation that is not stored (no results table: not an ``.output``),
        evaluated by the kernels from the relations its rules read, when they are not
        recursive through it; None when they are."""
        entry = self.catalog[relation]
        if relation in self._evaluating or entry.index_pos is not None:
            return None
        self._evaluating.add(relation)
        try:
            plans = [
                rule_rows(self.catalog, rule, body, recursive=False)
                for rule in self.rules
                if rule.head.relation == relation
                for body in rule.bodies
            ]
            plan = combine_plan(entry, plans)
            sources: dict[tuple[str, str], Batch] = {}
            for read, version in relations_read(plan):
                rows = self.batch(read)
                if rows is None:
                    return None
                sources[(read, version)] = rows
            return relation_rows(entry, plan, Kernel(plan).run(sources))
        except (CompileError, KernelUnsupported):
            return None
        finally:
            self._evaluating.discard(relation)

    def _full(self, relation: str) -> Batch:
        found = self.batch(relation)
        assert found is not None, f"`{relation}` was checked to be stored"
        return found


@dataclass(frozen=True)
class _Prepared:
    """A rule body ready to explain a head: its atoms by literal index, compiled."""

    atoms: Mapping[int, ast.Atom]
    compiled: BodyPlan
    bound: tuple[tuple[int, str], ...]
    """Head positions whose variable is bound to the fact's value before the body runs."""
    checked: tuple[tuple[int, str], ...]
    """Head positions compared with the fact's value after it ran (aggregated values,
    expressions: floats within ``FLOAT_TOLERANCE``)."""
    constants: tuple[tuple[int, Value], ...]
    line: int
    aggregated: str | None = None
    """In a ``sum``/``count`` relation: the variable holding the value an instance adds
    ("" for ``count[*]``)."""
    variables: tuple[str, ...] = ()
    """The body's own variables (not the fresh ones): aggregates range over their distinct
    bindings."""


def _prepare(
    head: ast.Head, body: ast.Body, compiler: RuleCompiler, value_pos: int | None, summed: bool
) -> _Prepared:
    """``body`` with every ``_`` a fresh variable and every head expression a variable
    assigned in the body, compiled. Head positions: a variable is bound before the body
    runs; the value position (``value_pos``) is compared after it (within
    ``FLOAT_TOLERANCE``), or, in a ``sum``/``count`` relation (``summed``), is the
    contribution (``_Prepared.aggregated``)."""
    literals = [
        _named_wildcards(lit, i) if isinstance(lit, ast.Atom) else lit
        for i, lit in enumerate(body.literals)
    ]
    bound: list[tuple[int, str]] = []
    checked: list[tuple[int, str]] = []
    constants: list[tuple[int, Value]] = []
    aggregated: str | None = None
    for position, arg in enumerate(head.args):
        expr = arg.arg if isinstance(arg, ast.Aggregate) else arg
        valued = position == value_pos
        if expr is None:  # count[*]: each instance counts one
            aggregated = ""
            continue
        if isinstance(expr, ast.Wildcard):
            continue
        if isinstance(expr, ast.NumberLit | ast.FloatLit | ast.StringLit) and not valued:
            constants.append((position, expr.value))
            continue
        if isinstance(expr, ast.Var) and not valued:
            bound.append((position, expr.name))
            continue
        name = expr.name if isinstance(expr, ast.Var) else f"_head{position}"
        if not isinstance(expr, ast.Var):
            literals.append(ast.Comparison("=", ast.Var(name), expr))
        if summed:
            aggregated = name
        else:
            checked.append((position, name))
    rewritten = ast.Body(tuple(literals), body.span)
    atoms = {i: lit for i, lit in enumerate(literals) if isinstance(lit, ast.Atom)}
    names = {i: _source(atom, i) for i, atom in atoms.items()}
    try:
        compiled = compiler.body(rewritten, relation_of=names)
    except CompileError as error:
        raise ExplainError(f"line {body.span.line}: {error}") from None
    own = {v for v in compiled.types if not v.startswith(("_any", "_head"))}
    return _Prepared(
        atoms,
        compiled,
        tuple(bound),
        tuple(checked),
        tuple(constants),
        body.span.line,
        aggregated,
        tuple(sorted(own)),
    )


def _counts_one(rule: ast.Rule, prepared: _Prepared) -> bool:
    """Whether each instance of ``rule`` adds one: ``count[*]``, and ``count`` outside a
    rule that reads its own relation (there ``count[c]`` adds the partial count ``c``)."""
    aggregate = rule.head.aggregate
    if prepared.aggregated == "" or aggregate is None or aggregate.func != "count":
        return prepared.aggregated == ""
    return all(atom.relation != rule.head.relation for atom in prepared.atoms.values())


def _named_wildcards(atom: ast.Atom, index: int) -> ast.Atom:
    """``atom`` with each ``_`` a variable of its own, so a binding gives its value."""
    args = tuple(
        ast.Var(f"_any{index}_{j}") if isinstance(arg, ast.Wildcard) else arg
        for j, arg in enumerate(atom.args)
    )
    return ast.Atom(atom.relation, args, atom.span)


def _source(atom: ast.Atom, index: int) -> str:
    """The name a body's ``index``-th literal reads its (reduced) rows under."""
    return f"{atom.relation}#{index}"


def _equal(values: np.ndarray, stored: Value) -> np.ndarray:
    if isinstance(stored, float) or values.dtype.kind == "f":
        scale = max(1.0, abs(float(stored)))
        return np.abs(values.astype(np.float64) - float(stored)) <= FLOAT_TOLERANCE * scale
    return values == stored


def _instance(atom: ast.Atom, assignments: Batch, row: int) -> Fact:
    """``atom`` with the values of one binding (a constant argument as written)."""
    values: list[Value] = []
    for arg in atom.args:
        match arg:
            case ast.Var(name=name):
                values.append(python_value(assignments.cols[name][row]))
            case ast.NumberLit(value=v) | ast.FloatLit(value=v) | ast.StringLit(value=v):
                values.append(v)
            case _:
                raise ExplainError(f"`{atom.relation}`: an expression argument is not explained")
    return Fact(atom.relation, tuple(values))


def python_value(value: object) -> Value:
    """A stored value (numpy scalar or Python) as the Python value a fact holds."""
    if isinstance(value, np.generic):
        item = value.item()
        assert isinstance(item, int | float | str)
        return item
    assert isinstance(value, int | float | str)
    return value


def render(steps: Sequence[Step]) -> list[str]:
    """One line per step: ``fact  <-  premise, premise`` (an input fact alone)."""
    lines = []
    for step in steps:
        if step.contributions is not None:
            lines += _contribution_lines(step)
        elif step.rule is None:
            note = "" if step.stored else "  (not stored: no derivation below)"
            lines.append(f"{step.fact}{note}")
        else:
            premises = ", ".join(map(str, step.premises)) or "true"
            lines.append(f"{step.fact}  <-  {premises}")
    return lines


def _contribution_lines(step: Step) -> list[str]:
    """``fact  =  sum of N contributions``, the largest with their share, the total."""
    lines = [f"{step.fact}  =  the sum of {step.count} contributions; the largest:"]
    for amount, premises in step.contributions or []:
        share = f" ({100 * amount / step.total:.1f}%)" if step.total else ""
        body = ", ".join(map(str, premises)) or "true"
        lines.append(f"  {amount:.6g}{share}  <-  {body}")
    if step.count > len(step.contributions or []):
        lines.append(f"  ... and {step.count - len(step.contributions or [])} more")
    lines.append(f"  total {step.total:.10g} (the stored value: {step.fact.values[step.value_at]})")
    return lines
