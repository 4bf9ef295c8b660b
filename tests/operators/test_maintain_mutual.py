"""Mutual recursion tagged as one relation (checker/mutual.py) under insertions and
deletions: after every epoch `even` and `odd` equal the oracle's evaluation of the program
as the user wrote it (not of the rewritten one), and the tagged stratum was updated by MRA
(with witnesses, as streams keep them: deletions retract), in the driver and on Spark."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from fixflow.checker.parser import parse
from fixflow.operators.change import by_relation
from fixflow.operators.core import EvalOptions
from fixflow.operators.maintain import Maintainer
from reference.evaluator import evaluate as oracle

from .helpers import Row, edb_frames, report_of
from .test_maintain import assert_same, declared, program, strategies

EDGES: list[Row] = [(1, 2, 2.0), (2, 3, 1.5), (3, 1, 1.0), (3, 4, 1.0), (4, 5, 2.5), (2, 5, 6.0)]
STEPS: list[tuple[list[Row], list[Row]]] = [
    ([(5, 1, 0.5)], []),  # a new cycle through 5: odd and even walks improve
    ([], [(3, 4, 1.0)]),  # 4 is reached only by longer walks now: values worsen
    ([(1, 4, 0.5)], [(2, 3, 1.5), (5, 1, 0.5)]),  # both at once, a cycle broken
]


@pytest.mark.parametrize(
    "options",
    [EvalOptions(witness=True, local_rows=0), EvalOptions(witness=True)],
    ids=["spark", "driver"],
)
def test_even_and_odd_walks_follow_insertions_and_deletions(
    spark: SparkSession, options: EvalOptions
) -> None:
    text = program("sssp_even_odd")
    report = report_of(text)
    assert report.analysis.tagged == {"_mutual_even_odd": ("even", "odd")}
    written = parse(text, "sssp_even_odd.dl")
    facts = {"edge": list(EDGES)}
    maintainer = Maintainer(report, spark, options, switch_fraction=1e6)
    maintainer.load(declared(report, edb_frames(spark, report, facts)))
    for inserts, deletes in STEPS:
        facts["edge"] = [e for e in facts["edge"] if e not in deletes] + inserts
        epoch = maintainer.apply(
            by_relation(
                declared(report, edb_frames(spark, report, {"edge": inserts})),
                declared(report, edb_frames(spark, report, {"edge": deletes})),
            )
        )
        assert strategies(epoch)["_mutual_even_odd"] == "update:mra-retract"
        expected = oracle(written, facts)
        for relation in ("even", "odd"):
            actual = {tuple(r) for r in maintainer.relation(relation).collect()}
            assert_same(report, relation, actual, expected[relation], 1e-9)
