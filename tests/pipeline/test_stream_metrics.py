"""The Prometheus endpoint of a running `fixflow run` (DESIGN §3.3), scraped over HTTP while
the pipeline processes valid facts and bad messages (the live run of tests/streams/live.py):
every metric of the design is exposed with values that agree with what was published."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from fixflow.operators.thresholds import DRIVER_BYTES_PER_ROW
from fixflow.pipeline.config import Config
from fixflow.pipeline.kafka.messages import REASON_KINDS
from streams.cli import total
from streams.harness import oracle
from streams.live import LiveRun, live_run


@pytest.fixture(scope="module")
def run(broker: Config, tmp_path_factory: pytest.TempPathFactory) -> LiveRun:
    return live_run(broker, tmp_path_factory.mktemp("live-run"))


@pytest.fixture(scope="module")
def last(run: LiveRun) -> dict[Any, float]:
    assert run.scrapes, "the endpoint was never scraped"
    return run.scrapes[-1]


def names(samples: dict[Any, float]) -> set[str]:
    return {name for name, _ in samples}


def test_every_metric_is_prefixed_and_counters_end_in_total(last: dict[Any, float]) -> None:
    ours = {n for n in names(last) if not n.startswith(("python_", "process_"))}
    assert ours and all(n.startswith("fixflow_") for n in ours), sorted(ours)


def test_input_facts_count_valid_messages_by_operation(
    run: LiveRun, last: dict[Any, float]
) -> None:
    ops = Counter(m.op for m in run.messages if m.fact is not None)
    for op in ("insert", "delete"):
        assert total(last, "fixflow_input_facts_total", relation="edge", op=op) == ops[op]


def test_dead_letters_are_counted_by_reason(run: LiveRun, last: dict[Any, float]) -> None:
    kinds = Counter(m.bad_kind for m in run.messages if m.bad_kind is not None)
    for kind, count in kinds.items():
        assert total(last, "fixflow_dead_letters_total", relation="edge", reason=kind) == count


def test_batch_duration_histogram_agrees_with_committed_batches(last: dict[Any, float]) -> None:
    batches = total(last, "fixflow_batches_committed_total")
    assert batches >= 2
    assert total(last, "fixflow_batch_duration_seconds_count") == batches
    seconds = total(last, "fixflow_batch_duration_seconds_sum")
    assert 0.01 * batches < seconds < 300 * batches, "a batch takes between 10 ms and 5 min"
    assert total(last, "fixflow_batch_duration_seconds_bucket", le="+Inf") == batches
    assert total(last, "fixflow_last_batch_id") == batches - 1, "one run from a new checkpoint"


def test_strategy_chosen_names_update_or_bootstrap(last: dict[Any, float]) -> None:
    chosen = {
        dict(labels)["strategy"]: value
        for (name, labels), value in last.items()
        if name == "fixflow_strategy_chosen_total"
    }
    assert chosen and set(chosen) <= {"update", "bootstrap"}
    assert sum(chosen.values()) >= 1
    assert total(last, "fixflow_rounds_total") >= 1


def test_result_rows_gauge_equals_the_result_size(run: LiveRun, last: dict[Any, float]) -> None:
    rows = len(oracle(run.program, {"edge": run.scraped_facts})["sssp"])
    assert total(last, "fixflow_result_rows", relation="sssp") == rows


def test_state_bytes_are_the_memory_model_of_the_rows_held(
    run: LiveRun, last: dict[Any, float]
) -> None:
    """``fixflow_state_bytes{relation}``: the model's bytes a row (docs/scale.md) times the
    rows the stream holds of the relation: the input's facts, the output's result rows."""
    facts = len(run.scraped_facts)
    rows = len(oracle(run.program, {"edge": run.scraped_facts})["sssp"])
    assert facts and rows
    assert total(last, "fixflow_state_bytes", relation="edge") == DRIVER_BYTES_PER_ROW * facts
    assert total(last, "fixflow_state_bytes", relation="sssp") == DRIVER_BYTES_PER_ROW * rows


def test_a_converging_stream_has_no_partial_strata(last: dict[Any, float]) -> None:
    """SSSP reaches its fixpoint (no iteration cap by default): nothing partial, and the
    gauge is exposed at 0."""
    assert ("fixflow_partial_strata", ()) in last
    assert total(last, "fixflow_partial_strata") == 0


def test_kafka_lag_and_beta_gauges_are_exposed(run: LiveRun, last: dict[Any, float]) -> None:
    topic = run.config.kafka.topic("edge")
    lag = [
        v
        for (n, labels), v in last.items()
        if n == "fixflow_kafka_lag_records" and dict(labels).get("topic") == topic
    ]
    assert lag and lag[0] >= 0, "no lag gauge for the input topic"
    assert total(last, "fixflow_buffer_beta", buffer="micro_batch") >= 1


def test_counters_never_decrease_between_scrapes(run: LiveRun) -> None:
    for earlier, later in zip(run.scrapes, run.scrapes[1:], strict=False):
        for key, value in earlier.items():
            if key[0].endswith(("_total", "_count", "_sum")):
                assert later.get(key, 0.0) >= value, key


def test_deltas_propagated_are_counted(last: dict[Any, float]) -> None:
    """DESIGN §3.3 lists "deltas propagated": maintaining SSSP over several batches of
    edge changes propagates deltas, so the counter cannot stay at zero."""
    assert total(last, "fixflow_deltas_propagated_total") > 0


def test_labelled_counters_start_at_zero_before_the_first_message(run: LiveRun) -> None:
    """Declared at start-up for every input relation, operation and dead-letter reason, so
    `increase()` sees the first burst (a series that appears at 14 shows an increase of 0)."""
    first = run.first_scrape
    for op in ("insert", "delete"):
        assert first[("fixflow_input_facts_total", (("op", op), ("relation", "edge")))] == 0
        assert first[("fixflow_noop_facts_total", (("op", op), ("relation", "edge")))] == 0
    for kind in REASON_KINDS:
        labels = (("reason", kind), ("relation", "edge"))
        assert first[("fixflow_dead_letters_total", labels)] == 0
    assert any(name == "fixflow_strategy_chosen_total" for name, _ in first)


def test_probes_and_up_gauge_say_the_query_runs(run: LiveRun) -> None:
    assert run.probes["/ready"] == (200, {"state": "running", "detail": ""})
    assert run.probes["/healthz"][0] == 200
    assert run.first_scrape[("fixflow_up", ())] == 1


def test_every_dashboard_panel_returns_data_from_a_real_prometheus(run: LiveRun) -> None:
    """Debian's prometheus scraped the live run every second; each Grafana panel's query
    (variables bound: every instance, 5-minute windows) returns at least one series."""
    assert run.panels, "no panel was queried"
    empty = {title for (title, _), series in run.panels.items() if series == 0}
    assert empty == set(NOT_FOR_SSSP), f"panels without data: {sorted(empty)}"


NOT_FOR_SSSP = {
    "Residual by relation": "the termination-clause aggregate; SSSP has no termination clause",
}
"""Panels that have no data for the live run's program, and why (checked to be exactly
the empty ones, so the list cannot hide a panel that lost its data)."""
