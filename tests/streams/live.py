"""One live `fixflow run` of SSSP shared by tests/pipeline/test_run_cli.py and
test_stream_metrics.py (starting Spark in a subprocess costs tens of seconds, so the run is
made once per test session and its observations are checked by several tests).

The run: `fixflow run` (processing-time trigger, Prometheus endpoint on a free port) while
valid facts (inserts, deletes, no-ops) and 1,000 bad messages, interleaved at random, are
published in waves; the endpoint is scraped over HTTP until everything published shows up
in the counters, the EDB and the result-rows gauge; then SIGTERM.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fixflow.checker.parser import parse
from fixflow.pipeline.config import Config
from fixflow.pipeline.kafka.messages import encode_fact, fact_key
from fixflow.pipeline.lake.lakehouse import ProgramLake
from ports import free_port
from streams.cli import FixflowRun, probe, scrape, total, write_conf
from streams.harness import (
    STREAMS,
    Row,
    isolated_config,
    oracle,
    publish_raw,
    table_rows,
)
from streams.prometheus import Prometheus, panel_queries, start_prometheus

PROGRAM_FILE = STREAMS / "sssp" / "program.dl"
BAD_KINDS = (
    "malformed_json",
    "not_an_object",
    "unknown_attribute",
    "missing_attribute",
    "wrong_type",
    "unknown_op",
)
N_BAD = 1000
WAVES = 3


@dataclass
class Message:
    key: str | None
    value: str
    fact: Row | None
    """The fact of a valid message; None for a bad one."""
    op: str = "insert"
    bad_kind: str | None = None


@dataclass
class LiveRun:
    config: Config
    lake: ProgramLake
    program: Any
    messages: list[Message]
    positions: list[tuple[str, int, int]]
    """(topic, partition, offset) of each message, as the broker acknowledged it."""
    net_facts: set[Row]
    """After every message, the SIGTERM wave included."""
    scraped_facts: set[Row] = field(default_factory=set)
    """The net facts when the last scrape saw everything processed (before the SIGTERM
    wave)."""
    results_at_scrape: set[Row] = field(default_factory=set)
    edb_at_scrape: set[Row] = field(default_factory=set)
    """The sssp result table and the EDB when the last scrape saw everything processed."""
    batches_at_scrape: list[tuple[int, int]] = field(default_factory=list)
    """(batch id, records) of the batches printed by then."""
    tail: list[Message] = field(default_factory=list)
    """The SIGTERM wave: valid inserts, published last; SIGTERM comes once the pipeline
    has read them, while their batch runs."""
    scrapes: list[dict[Any, float]] = field(default_factory=list)
    """Scrapes while the pipeline ran; the last one saw everything processed."""
    first_scrape: dict[Any, float] = field(default_factory=dict)
    """The first scrape once /ready answered 200, before anything was published."""
    probes: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)
    """/ready and /healthz while the query ran: (status, JSON body)."""
    panels: dict[tuple[str, str], int] = field(default_factory=dict)
    """(panel title, query) of the Grafana dashboard -> series it returned from a real
    Prometheus that scraped the run every second, once everything was processed."""
    exit_code: int | None = None
    output: str = ""
    seconds_to_process: float = 0.0


def bad_message(i: int, rng: random.Random) -> tuple[str, str]:
    """(kind, value) of the i-th bad message; every kind in turn."""
    kind = BAD_KINDS[i % len(BAD_KINDS)]
    edge = {"src": rng.randrange(1, 9), "dst": rng.randrange(1, 9), "w": 1.0}
    values = {
        "malformed_json": '{"src": 1, "dst":',
        "not_an_object": json.dumps([1, 2, 3.0]),
        "unknown_attribute": json.dumps({**edge, "colour": "red"}),
        "missing_attribute": json.dumps({"src": 1, "w": 2.0}),
        "wrong_type": json.dumps(
            [{**edge, "src": "1"}, {**edge, "w": "heavy"}, {**edge, "dst": 2.5}][i % 3]
        ),
        "unknown_op": json.dumps({**edge, "op": "upsert"}),
    }
    return kind, values[kind]


def make_waves(program: Any, seed: int = 11) -> list[list[Message]]:
    """Valid operations on a 12-vertex graph and bad messages, shuffled, in waves."""
    rng = random.Random(seed)
    attributes = program.declaration("edge").attributes
    waves: list[list[Message]] = []
    present: set[Row] = set()
    for wave in range(WAVES):
        messages = []
        for _ in range(40):
            fact: Row = (rng.randrange(1, 13), rng.randrange(1, 13), float(rng.choice([1, 2, 4])))
            op = "delete" if present and wave and rng.random() < 0.35 else "insert"
            if op == "delete" and rng.random() < 0.8:
                fact = rng.choice(sorted(present))
            (present.add if op == "insert" else present.discard)(fact)
            messages.append(Message(fact_key(fact), encode_fact(attributes, fact, op), fact, op))
        for i in range(wave * N_BAD // WAVES, (wave + 1) * N_BAD // WAVES):
            kind, value = bad_message(i, rng)
            messages.append(Message(None if i % 3 == 0 else f"bad-{i}", value, None, bad_kind=kind))
        rng.shuffle(messages)
        waves.append(messages)
    return waves


def net_facts(messages: list[Message]) -> set[Row]:
    """Per fact the last operation wins (all operations on one fact share a key, hence a
    partition, hence their order)."""
    facts: set[Row] = set()
    for message in messages:
        if message.fact is not None:
            (facts.add if message.op == "insert" else facts.discard)(message.fact)
    return facts


_RUNS: dict[str, LiveRun] = {}


def live_run(broker: Config, base: Path) -> LiveRun:
    """The session's live run (made on the first call)."""
    if broker.kafka.bootstrap_servers not in _RUNS:
        _RUNS[broker.kafka.bootstrap_servers] = _make_live_run(broker, base)
    return _RUNS[broker.kafka.bootstrap_servers]


def _make_live_run(broker: Config, base: Path) -> LiveRun:
    import time

    config = isolated_config(broker, base / "lake")
    program_file = Path(shutil.copy(PROGRAM_FILE, base / "sssp.dl"))
    program = parse(program_file.read_text(), str(program_file))
    lake = ProgramLake.for_program(config.lake.path, program_file)
    port = free_port()
    # The async engine, so that its dashboard panels get data too.
    engine = '[engine]\nmode = "async"'
    conf = write_conf(base / "run.toml", config, trigger_ms=300, metrics_port=port, sections=engine)
    run = FixflowRun.start(program_file, conf, base / "run.out")
    topic = config.kafka.topic("edge")
    messages: list[Message] = []
    positions: list[tuple[str, int, int]] = []
    live = LiveRun(config, lake, program, messages, positions, set())
    prometheus = None
    try:
        run.wait_until(lambda: _ready(port), "/ready to answer 200", timeout_s=180)
        live.first_scrape = scrape(port)
        live.probes = {path: probe(port, path) for path in ("/ready", "/healthz")}
        prometheus = start_prometheus(port, base / "prometheus")
        started = time.monotonic()
        for wave in make_waves(program):
            positions += publish_raw(config, [(topic, m.key, m.value) for m in wave])
            messages += wave
            live.net_facts = net_facts(messages)
            expected_rows = len(oracle(program, {"edge": live.net_facts})["sssp"])
            # wait for each wave, so that the waves are different micro-batches and the
            # endpoint is scraped several times while the pipeline runs
            run.wait_until(
                lambda rows=expected_rows: _caught_up(live, port, rows),
                "everything published to be processed",
                timeout_s=300,
            )
        live.seconds_to_process = time.monotonic() - started
        live.scraped_facts = set(live.net_facts)
        live.results_at_scrape = table_rows(lake.results("sssp"))
        live.edb_at_scrape = table_rows(lake.edb("edge"))
        live.batches_at_scrape = run.batches()
        live.panels = _panels_after_fresh_scrapes(prometheus, run)
        live.exit_code = _sigterm_during_a_batch(live, run, port)
    finally:
        run.kill_if_running()
        live.output = run.output
        if prometheus is not None:
            prometheus.stop()
    return live


def _panels_after_fresh_scrapes(prometheus: Prometheus, run: FixflowRun) -> dict[Any, int]:
    """Every dashboard query's series count, once Prometheus has scraped the final state
    a few times (its scrapes so far + 3)."""
    scraped = 'count_over_time(up{job="fixflow"}[5m])'
    target = prometheus.samples_of(scraped) + 3
    run.wait_until(lambda: prometheus.samples_of(scraped) >= target, "3 scrapes", timeout_s=60)
    return {(title, expr): len(prometheus.query(expr)) for title, expr in panel_queries()}


def _sigterm_during_a_batch(live: LiveRun, run: FixflowRun, port: int) -> int:
    attributes = live.program.declaration("edge").attributes
    facts: list[Row] = [(1, 90 + i, 0.5) for i in range(5)]
    live.tail = [Message(fact_key(f), encode_fact(attributes, f), f) for f in facts]
    publish_raw(live.config, [(live.config.kafka.topic("edge"), m.key, m.value) for m in live.tail])
    live.net_facts = net_facts(live.messages + live.tail)
    valid = sum(1 for m in live.messages + live.tail if m.fact is not None)
    run.wait_until(
        lambda: total(scrape(port), "fixflow_input_facts_total") == valid,
        "the SIGTERM wave to be read",
        timeout_s=120,
    )
    return run.stop(signal.SIGTERM)


def _caught_up(live: LiveRun, port: int, expected_rows: int) -> bool:
    """Every published message counted, the EDB and the result-rows gauge up to date."""
    samples = scrape(port)
    live.scrapes.append(samples)
    valid = sum(1 for m in live.messages if m.fact is not None)
    bad = len(live.messages) - valid
    return (
        total(samples, "fixflow_input_facts_total") == valid
        and total(samples, "fixflow_dead_letters_total") == bad
        and total(samples, "fixflow_result_rows", relation="sssp") == expected_rows
        and _edb_is(live.lake, live.net_facts)
    )


def _ready(port: int) -> bool:
    try:
        return probe(port, "/ready")[0] == 200
    except OSError:  # not listening yet
        return False


def _edb_is(lake: ProgramLake, facts: set[Row]) -> bool:
    from fixflow.pipeline.lake.lakehouse import read_table

    table = read_table(lake.edb("edge"))
    return table is not None and {tuple(r.values()) for r in table.to_pylist()} == facts
