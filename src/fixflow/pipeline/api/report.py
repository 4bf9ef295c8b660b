"""``Program.check()``'s answer: what ``fixflow check --json`` prints, as Python objects.

The objects are built from ``checker.report.to_json`` (one source for both), so the API and
the CLI cannot drift apart: ``CheckReport.to_json()`` is the CLI's JSON object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from fixflow.checker.model import Report
from fixflow.checker.report import human, to_json


@dataclass(frozen=True)
class Message:
    """A warning (or error) with where it was found."""

    severity: str
    message: str
    file: str
    line: int
    col: int
    notes: tuple[str, ...]

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}" if self.line > 0 else self.file
        return f"{where}: {self.severity}: {self.message}"


@dataclass(frozen=True)
class StratumInfo:
    """One stratum: its relations, whether it is recursive, its evaluation class (``mra``,
    ``set``, ``aggregate-seminaive``, ``naive``, ``nonrecursive``) and why."""

    index: int
    relations: tuple[str, ...]
    body_aggregates: tuple[str, ...]
    tagged: Mapping[str, tuple[str, ...]]
    """A relation the checker made of mutually recursive ones → the user's relations."""
    recursive: bool
    eval_class: str
    reason: str
    hints: tuple[str, ...]
    rewritten: str | None


@dataclass(frozen=True)
class RuleVerdict:
    """The MRA conditions of one recursive rule, with a counterexample where one fails."""

    relation: str
    line: int
    aggregate: str | None
    eval_class: str
    properties: Mapping[str, str]
    """Condition → ``holds``, ``fails`` or ``unknown``."""
    counterexample: str | None
    g: str
    f_prime: str
    constant: str
    initial_delta: str
    reason: str


@dataclass(frozen=True)
class CheckReport:
    """Strata, classes and verdicts of a program that checks; ``str()`` is the human report
    of ``fixflow check``."""

    strata: tuple[StratumInfo, ...]
    rules: tuple[RuleVerdict, ...]
    warnings: tuple[Message, ...]
    text: str

    def stratum_of(self, relation: str) -> StratumInfo:
        """The stratum that derives ``relation`` (a user's relation held in a tagged one
        included)."""
        for stratum in self.strata:
            held = [r for members in stratum.tagged.values() for r in members]
            if relation in stratum.relations or relation in held:
                return stratum
        raise KeyError(relation)

    def to_json(self) -> dict[str, object]:
        """The object ``fixflow check --json`` prints."""
        return {
            "errors": [],
            "warnings": [_message_json(w) for w in self.warnings],
            "strata": [_stratum_json(s) for s in self.strata],
            "rules": [_rule_json(r) for r in self.rules],
        }

    def __str__(self) -> str:
        return self.text


def check_report(report: Report) -> CheckReport:
    document = to_json(report, list(report.diagnostics))
    return CheckReport(
        strata=tuple(_stratum(s) for s in _items(document["strata"])),
        rules=tuple(_rule(r) for r in _items(document["rules"])),
        warnings=tuple(_message(w) for w in _items(document["warnings"])),
        text=human(report),
    )


def _items(value: object) -> list[dict[str, Any]]:
    return cast("list[dict[str, Any]]", value)


def _message(item: dict[str, Any]) -> Message:
    return Message(
        item["severity"], item["message"], item["file"], item["line"], item["col"],
        tuple(item["notes"]),
    )  # fmt: skip


def _message_json(message: Message) -> dict[str, object]:
    return {
        "severity": message.severity,
        "message": message.message,
        "file": message.file,
        "line": message.line,
        "col": message.col,
        "notes": list(message.notes),
    }


def _stratum(item: dict[str, Any]) -> StratumInfo:
    return StratumInfo(
        index=item["index"],
        relations=tuple(item["relations"]),
        body_aggregates=tuple(item["body_aggregates"]),
        tagged={k: tuple(v) for k, v in item["tagged"].items()},
        recursive=item["recursive"],
        eval_class=item["class"],
        reason=item["reason"],
        hints=tuple(item["hints"]),
        rewritten=item["rewritten"],
    )


def _stratum_json(stratum: StratumInfo) -> dict[str, object]:
    return {
        "index": stratum.index,
        "relations": list(stratum.relations),
        "body_aggregates": list(stratum.body_aggregates),
        "tagged": {k: list(v) for k, v in stratum.tagged.items()},
        "recursive": stratum.recursive,
        "class": stratum.eval_class,
        "reason": stratum.reason,
        "hints": list(stratum.hints),
        "rewritten": stratum.rewritten,
    }


RULE_FIELDS = (
    "relation", "line", "aggregate", "properties", "counterexample", "g", "f_prime",
    "constant", "initial_delta", "reason",
)  # fmt: skip
"""``RuleVerdict``'s fields named as in the JSON (``eval_class`` is its ``class``)."""


def _rule(item: dict[str, Any]) -> RuleVerdict:
    named = {name: item[name] for name in RULE_FIELDS}
    named["properties"] = dict(item["properties"])
    return RuleVerdict(eval_class=item["class"], **named)


def _rule_json(rule: RuleVerdict) -> dict[str, object]:
    document: dict[str, object] = {name: getattr(rule, name) for name in RULE_FIELDS}
    document["properties"] = dict(rule.properties)
    document["class"] = rule.eval_class
    return document
