"""Hints: a stratum that would run faster written another way, said in one line by
``fixflow check`` (never a silent rewrite).

The one rewrite hinted today is the closure written non-linearly. A relation that starts
as a copy of another (``path(x, y, d) :- edge(x, y, d).``) and grows by joining itself
with itself (``path(x, z, min[d]) :- path(x, y, d1), path(y, z, d2), d = d1 + d2.``) is
the closure of that relation; joining the relation with the copied one instead
(``path(x, y, d1), edge(y, z, d2)``) computes the same closure as a linear recursion: an
MRA stratum for min/max, fewer derivations per round for a set. The hint is given only
where that holds: no aggregate (a set closure), or min/max whose value is the sum (or the
product, for max) of the two atoms' values.
"""

from __future__ import annotations

from fixflow.checker.ast import Aggregate, Atom, BinOp, Body, Comparison, Rule, Var, body_atoms
from fixflow.checker.model import Stratum


def stratum_hints(stratum: Stratum) -> list[str]:
    """One line per relation of ``stratum`` that has a linear spelling with the same
    result and a faster evaluation."""
    if not stratum.recursive or len(stratum.relations) != 1:
        return []
    (relation,) = stratum.relations
    copied = _copied_from(stratum.rules, relation)
    if copied is None:
        return []
    for rule in stratum.rules:
        for body in rule.bodies:
            if _self_join(rule, body, relation):
                line = body.span.line or rule.span.line
                return [
                    f"hint: `{relation}` starts as a copy of `{copied}` and the rule at line "
                    f"{line} joins `{relation}` with itself; reading `{copied}` for the "
                    f"second `{relation}` atom computes the same closure as a linear "
                    f"recursion ({_gain(rule)})"
                ]
    return []


def _copied_from(rules: tuple[Rule, ...], relation: str) -> str | None:
    """``E`` when a rule of ``relation`` is ``relation(v..) :- E(v..).`` (the same distinct
    variables in the same order, an aggregate's target included)."""
    for rule in rules:
        head = [a.arg if isinstance(a, Aggregate) else a for a in rule.head.args]
        if len(rule.bodies) != 1 or not all(isinstance(v, Var) for v in head):
            continue
        literals = rule.bodies[0].literals
        if len(literals) != 1 or not isinstance(literals[0], Atom):
            continue
        atom = literals[0]
        if atom.relation != relation and atom.args == tuple(head) and len(set(head)) == len(head):
            return atom.relation
    return None


def _self_join(rule: Rule, body: Body, relation: str) -> bool:
    """Two atoms of ``relation`` chained (the first's last key is the second's first), and
    the head's value combining their values by an associative step the closure keeps."""
    atoms = [a for a in body_atoms(body) if a.relation == relation]
    if len(atoms) != 2 or len(body_atoms(body)) != 2:
        return False
    first, second = atoms
    aggregate = rule.head.aggregate
    if aggregate is None:
        return len(first.args) == 2 and first.args[1] == second.args[0]
    if aggregate.func not in ("min", "max") or len(first.args) != 3:
        return False
    chained = first.args[1] == second.args[0]
    return chained and _combines(body, aggregate, first.args[2], second.args[2])


def _combines(body: Body, aggregate: Aggregate, left: object, right: object) -> bool:
    """The aggregate's value is ``left + right`` (or ``left * right`` under max)."""
    ops = ("+",) if aggregate.func == "min" else ("+", "*")
    value = aggregate.arg
    for literal in body.literals:
        if (
            isinstance(literal, Comparison)
            and literal.op == "="
            and literal.left == value
            and isinstance(literal.right, BinOp)
        ):
            value = literal.right
    return (
        isinstance(value, BinOp) and value.op in ops and {value.left, value.right} == {left, right}
    )


def _gain(rule: Rule) -> str:
    if rule.head.aggregate is None:
        return "semi-naive rounds derive each new pair once per edge, not per path pair"
    return "MRA evaluation instead of semi-naive rounds over pairs of paths"
