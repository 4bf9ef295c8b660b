"""Fault injection for `fixflow run` (issue #12): SSSP over a stream of edge inserts and
deletes with malformed messages mixed in, through the durable embedded broker, while the
run is killed with SIGKILL at random points (its whole process group: the JVM and Python
workers too) and restarted, and the broker is stopped and started again several times.

At the end one `fixflow run --available-now` drains what is left, then:
- the result table equals the oracle (Dijkstra from node 1 on the net edge set, computed
  here, independently of Fixflow);
- the EDB table equals the net edge set (nothing lost, no delete or insert applied twice);
- the dead_letter table holds every malformed message exactly once, by the (partition,
  offset) the broker acknowledged for it, with a reason.

    .venv/bin/python bench/fault_injection.py [--batches 100] [--malformed 10000]
        [--kills 8] [--restarts 3] [--seed 1] [--out bench/FAULT_RESULTS.md | --markdown]
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import free_port, log, machine, write_report

from fixflow.pipeline.config import load_config
from fixflow.pipeline.kafka.messages import fact_key
from fixflow.pipeline.lake.lakehouse import ProgramLake, read_table

FIXFLOW = str(Path(sys.executable).parent / "fixflow")
PROGRAM = """// SSSP from node 1, the fault-injection run's program.
.decl edge(src: number, dst: number, w: float)
.input edge
.decl sssp(node: number, dist: float)
.output sssp

sssp(X, d) :- X = 1, d = 0.
sssp(Y, min[dy]) :- sssp(X, dx), edge(X, Y, w), dy = dx + w.
"""
TOPIC_PREFIX = "fi."
NODES = 200
MALFORMED = [
    "{not json",
    '{"src": 1, "dst": 2}',
    '{"src": "one", "dst": 2, "w": 1.0}',
    '{"src": 1, "dst": 2, "w": 1.0, "op": "upsert"}',
    '{"src": 1, "dst": 2, "w": NaN}',
    '{"src": 1, "dst": 2, "w": 1.0, "colour": "red"}',
    "[1, 2, 1.0]",
]
"""One of each kind the stream must dead-letter: not JSON, a missing attribute, a wrong
type, an unknown op, a NaN, an unknown attribute, not an object."""

Edge = tuple[int, int, float]


@dataclass
class Workload:
    """What the publisher sent and the broker acknowledged."""

    present: set[Edge] = field(default_factory=set)
    valid: int = 0
    malformed: set[tuple[int, int]] = field(default_factory=set)
    """(partition, offset) of every acknowledged malformed message."""
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None

    def sent(self) -> int:
        """Messages the broker acknowledged so far."""
        return self.valid + len(self.malformed)


def write_conf(base: Path, port: int, per_trigger: int) -> Path:
    conf = base / "fault.toml"
    conf.write_text(
        f"""
[kafka]
bootstrap_servers = "127.0.0.1:{port}"
embedded = true
storage = "durable"
topic_prefix = "{TOPIC_PREFIX}"
backoff_max_s = 1.0

[lake]
path = "{base / "lake"}"

[spark.conf]
"spark.ui.enabled" = false

[stream]
trigger_ms = 200
max_records_per_trigger = {per_trigger}
adaptive = false

[metrics]
enabled = false
"""
    )
    return conf


def fixflow(*args: str) -> None:
    done = subprocess.run([FIXFLOW, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"fixflow {' '.join(args)} failed: {done.stderr.strip()}")
    log(f"  fixflow {args[0]} {args[1]}: {done.stdout.strip()}")


# ---------------------------------------------------------------- the publisher


def publish_waves(conf: Path, workload: Workload, waves: int, malformed: int, seed: int) -> None:
    """Waves of edge inserts/deletes and malformed messages, a moment apart, each message
    sent until the broker acknowledges it (the broker restarts meanwhile)."""
    try:
        _publish_waves(conf, workload, waves, malformed, seed)
    except Exception as error:  # the fault loop stops and reports it
        workload.error = f"{type(error).__name__}: {error}"
    finally:
        workload.done.set()


def _publish_waves(conf: Path, workload: Workload, waves: int, malformed: int, seed: int) -> None:
    from kafka import KafkaProducer

    config = load_config(conf)
    rng = random.Random(seed)
    # Idempotent and one request in flight: a retry after a broker restart neither doubles
    # a message nor reorders an insert and a delete of one edge.
    producer = KafkaProducer(
        bootstrap_servers=config.kafka.bootstrap_servers,
        acks="all",
        enable_idempotence=True,
        max_in_flight_requests_per_connection=1,
        delivery_timeout_ms=600_000,
    )
    topic = config.kafka.topic("edge")
    bad_per_wave = -(-malformed // waves)
    sent_bad = 0
    for wave in range(waves):
        messages = [_valid(workload, rng) for _ in range(rng.randint(10, 40))]
        count = min(bad_per_wave, malformed - sent_bad)
        for _ in range(count):  # anywhere, but the valid ones keep their order
            messages.insert(rng.randint(0, len(messages)), (None, rng.choice(MALFORMED), True))
        sent_bad += count
        _send(producer, topic, messages, workload)
        log(f"  wave {wave + 1}/{waves} acknowledged")
        time.sleep(rng.uniform(0.2, 1.5))
    producer.close(timeout=60)


def _valid(workload: Workload, rng: random.Random) -> tuple[str | None, str, bool]:
    """A delete of a present edge (a third of the time) or an insert of a new one."""
    if workload.present and rng.random() < 0.33:
        edge = rng.choice(sorted(workload.present))
        workload.present.discard(edge)
        op = "delete"
    else:
        a, b = rng.sample(range(1, NODES + 1), 2)
        edge = (a, b, float(rng.randint(1, 9)))
        workload.present.add(edge)
        op = "insert"
    value = {"src": edge[0], "dst": edge[1], "w": edge[2], "op": op}
    workload.valid += 1
    return fact_key(edge), json.dumps(value), False


def _send(producer: Any, topic: str, messages: list, workload: Workload) -> None:
    futures = [
        (producer.send(topic, key=k.encode() if k else None, value=v.encode()), bad)
        for k, v, bad in messages
    ]
    for future, bad in futures:
        ack = future.get(timeout=600)
        if bad:
            workload.malformed.add((ack.partition, ack.offset))


# ---------------------------------------------------------------- the faults


class Runs:
    """`fixflow run` incarnations, each killed with its whole process group."""

    def __init__(self, base: Path, program: Path, conf: Path) -> None:
        self.base, self.program, self.conf = base, program, conf
        self.outputs: list[Path] = []
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        output = self.base / f"run{len(self.outputs)}.out"
        self.outputs.append(output)
        with output.open("wb") as sink:
            args = [FIXFLOW, "run", str(self.program), "--conf", str(self.conf), *extra]
            self.process = subprocess.Popen(
                args, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self.process

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def batches(self) -> int:
        """Batches committed so far: the highest batch id printed, plus one."""
        return max(self._records_per_batch(), default=-1) + 1

    def records(self) -> int:
        """Records the committed batches read (a batch replayed after a kill counts once)."""
        return sum(self._records_per_batch().values())

    def _records_per_batch(self) -> dict[int, int]:
        found: dict[int, int] = {}
        for path in self.outputs:
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("batch "):  # "batch 7: 100 records, ..."
                    words = line.split()
                    found[int(words[1].rstrip(":"))] = int(words[2])
        return found


def inject_faults(runs: Runs, workload: Workload, args: argparse.Namespace) -> dict[str, int]:
    """After each new batch, at a random moment: kill the run (and start it again) or
    restart the broker, until the run has read everything the broker acknowledged and at
    least ``--batches`` batches ran."""
    rng = random.Random(args.seed + 1)
    kills = restarts = 0
    runs.start()
    while not workload.error and not _finished(runs, workload, args.batches):
        batches = runs.batches()
        if not _next_batch(runs, workload, batches, timeout_s=args.stall_s):
            raise SystemExit(f"no batch after batch {batches - 1} for {args.stall_s:.0f} s")
        time.sleep(rng.uniform(0, 6))  # somewhere in the next batch, or between two
        if restarts < args.restarts and rng.random() < 0.25:
            fixflow("broker", "stop", "--conf", str(runs.conf))
            time.sleep(rng.uniform(0, 3))
            fixflow("broker", "start", "--conf", str(runs.conf))
            restarts += 1
        elif kills < args.kills and rng.random() < 0.5:
            runs.kill()
            kills += 1
            log(f"  SIGKILL {kills} after batch {runs.batches() - 1}; restarting the run")
            runs.start()
        log(f"  {runs.batches()} batches, {runs.records()} of {workload.sent()} records read")
    runs.kill()
    return {"kills": kills, "restarts": restarts}


def _finished(runs: Runs, workload: Workload, batches: int) -> bool:
    done = workload.done.is_set() and runs.records() >= workload.sent()
    return done and runs.batches() >= batches


def _next_batch(runs: Runs, workload: Workload, batches: int, timeout_s: float) -> bool:
    """Wait until the run has committed a batch beyond ``batches`` (or read everything)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if runs.batches() > batches or _finished(runs, workload, 0):
            return True
        time.sleep(0.5)
    return False


# ---------------------------------------------------------------- the checks


def dijkstra(edges: set[Edge], source: int = 1) -> set[tuple[int, float]]:
    adjacent: dict[int, list[tuple[int, float]]] = {}
    for a, b, w in edges:
        adjacent.setdefault(a, []).append((b, w))
    best = {source: 0.0}
    queue = [(0.0, source)]
    while queue:
        dist, node = heapq.heappop(queue)
        if dist > best.get(node, float("inf")):
            continue
        for nxt, w in adjacent.get(node, []):
            if dist + w < best.get(nxt, float("inf")):
                best[nxt] = dist + w
                heapq.heappush(queue, (dist + w, nxt))
    return set(best.items())


def check(lake: ProgramLake, workload: Workload) -> dict[str, str]:
    results = read_table(lake.results("sssp"))
    edb = read_table(lake.edb("edge"))
    dead = read_table(lake.dead_letter)
    found = {(r["node"], r["dist"]) for r in results.to_pylist()} if results else set()
    facts = {(r["src"], r["dst"], r["w"]) for r in edb.to_pylist()} if edb else set()
    letters = [(r["partition"], r["offset"]) for r in dead.to_pylist()] if dead else []
    reasons = all(r["reason"] for r in dead.to_pylist()) if dead else True
    return {
        "results equal the oracle": _verdict(found == dijkstra(workload.present)),
        "EDB equals the net edge set": _verdict(facts == workload.present),
        "every malformed message dead-lettered": _verdict(set(letters) == workload.malformed),
        "no dead letter twice": _verdict(len(letters) == len(set(letters))),
        "every dead letter has a reason": _verdict(reasons),
    }


def _verdict(ok: bool) -> str:
    return "yes" if ok else "NO"


# ---------------------------------------------------------------- main


def run(args: argparse.Namespace) -> str:
    base = Path(tempfile.mkdtemp(prefix="fixflow-faults-"))
    program = base / "sssp.dl"
    program.write_text(PROGRAM)
    conf = write_conf(base, free_port(), args.per_trigger)
    log(f"fault injection in {base}")
    fixflow("broker", "start", "--conf", str(conf))
    workload = Workload()
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    publisher = threading.Thread(
        target=publish_waves, args=(conf, workload, args.waves, args.malformed, args.seed)
    )
    publisher.start()
    runs = Runs(base, program, conf)
    faults = inject_faults(runs, workload, args)
    publisher.join()
    if workload.error:
        raise SystemExit(f"the publisher failed: {workload.error}")
    drain = runs.start("--available-now")
    if drain.wait() != 0:
        raise SystemExit(f"the final run failed: {runs.outputs[-1].read_text()[-3000:]}")
    seconds = time.monotonic() - started
    verdicts = check(ProgramLake.for_program(str(base / "lake"), program), workload)
    fixflow("broker", "stop", "--conf", str(conf))
    figures = {
        "batches": runs.batches(),
        "records read (each batch once)": runs.records(),
        "valid messages": workload.valid,
        "malformed messages": len(workload.malformed),
        "net edges": len(workload.present),
        "SIGKILLs of fixflow run": faults["kills"],
        "broker restarts (durable storage)": faults["restarts"],
        "wall time": f"{seconds:.0f} s",
        "load (1-min) before / after": f"{load_before:.1f} / {os.getloadavg()[0]:.1f}",
    }
    return report(args, figures, verdicts)


def report(args: argparse.Namespace, figures: dict, verdicts: dict[str, str]) -> str:
    lines = [
        "# Fault injection: `fixflow run` under SIGKILLs and broker restarts",
        "",
        "Written by `bench/fault_injection.py` (issue #12); not a test.",
        "",
        f"Command: `{' '.join(sys.argv)}`  ",
        f"Machine: {machine()}",
        "",
        "| figure | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in figures.items()),
        "",
        "| check | holds |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in verdicts.items()),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=100, help="at least this many batches")
    parser.add_argument("--malformed", type=int, default=10_000)
    parser.add_argument("--waves", type=int, default=60, help="publish waves")
    parser.add_argument("--per-trigger", type=int, default=100, help="max records per batch")
    parser.add_argument("--kills", type=int, default=8, help="SIGKILLs of fixflow run")
    parser.add_argument("--restarts", type=int, default=3, help="broker stop/start cycles")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--stall-s", type=float, default=900, help="give up when no batch comes for this long"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/FAULT_RESULTS.md"))
    parser.add_argument("--markdown", action="store_true", help="print the report instead")
    args = parser.parse_args()
    text = run(args)
    write_report(text, args)
    if " NO |" in text:
        raise SystemExit("a check failed: see the report")


if __name__ == "__main__":
    main()
