"""`fixflow demo [--conf FILE]`: the main job on the embedded default, end to end.

Starts the embedded broker, publishes a bundled graph to the `edge` topic, runs SSSP, CC
and PageRank (iteration-indexed, rewritten to MRA by the checker) as three streaming
programs over that one topic, prints their results, then publishes insertions and
deletions and prints what changed and how long each update took.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from fixflow.pipeline.config import Config, ConfigError, add_conf_argument, config_from_args

if TYPE_CHECKING:  # imported where used: Spark and the checker load only when the demo runs
    from fixflow.checker.ast import Program
    from fixflow.pipeline.stream.program import ProgramStream

HELP = "the main job on the embedded default, end to end"
PROGRAMS = ("sssp", "cc", "pagerank")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_conf_argument(parser)
    parser.add_argument(
        "--keep", action="store_true", help="keep the demo lake from a previous run"
    )


def run(args: argparse.Namespace) -> int:
    from fixflow.pipeline.broker.processes import BrokerError
    from fixflow.pipeline.stream.metrics import MetricsPortBusy

    try:
        config = config_from_args(args)
    except ConfigError as error:
        print(f"fixflow demo: {error}", file=sys.stderr)
        return 1
    if config.lake.remote:  # the demo copies its programs into the lake's directory
        print(
            f"fixflow demo: runs on a local lake, and [lake] path is {config.lake.path}: "
            "run it without --conf, or with a config whose lake is a directory",
            file=sys.stderr,
        )
        return 1
    try:
        return Demo(config, keep=args.keep, conf=args.conf).run()
    except (BrokerError, ConfigError, MetricsPortBusy) as error:
        print(f"fixflow demo: {error}", file=sys.stderr)
        return 1


class Demo:
    """The demo's programs run as `demo_sssp`, `demo_cc` and `demo_pagerank` in the
    configured lake, so `fixflow show`/`query` find their tables afterwards; the program
    files are copied to `<lake>/_demo/`. The broker is stopped at the end if the demo
    started it."""

    def __init__(self, config: Config, keep: bool, conf: str | None = None) -> None:
        self.conf_flag = f" --conf {conf}" if conf else ""
        """Repeated in the commands the demo suggests, so they read the same lake."""
        stamp = time.strftime("%Y%m%d%H%M%S")
        # A fresh topic prefix per run: the embedded broker may still hold an earlier run.
        kafka = dataclasses.replace(config.kafka, topic_prefix=f"demo{stamp}.")
        self.lake_root = Path(config.lake.path).resolve()
        lake = dataclasses.replace(config.lake, path=str(self.lake_root))  # paths it prints
        self.config = dataclasses.replace(config, kafka=kafka, lake=lake)
        self.workdir = self.lake_root / "_demo"
        if not keep:
            for name in PROGRAMS:
                shutil.rmtree(self.lake_root / f"demo_{name}", ignore_errors=True)

    def run(self) -> int:
        from fixflow.pipeline.broker.embedded import broker_status, start_broker

        config = self.config
        say("Fixflow demo: SSSP, CC and PageRank kept up to date from one Kafka topic")
        started_broker = False
        if config.kafka.embedded:
            started_broker = not broker_status(config).running
            say(f"broker: {start_broker(config).message}")
        try:
            self._run_programs()
        finally:
            if config.kafka.embedded:
                self._leave_broker(started_broker)
        return 0

    def _run_programs(self) -> None:
        from fixflow.pipeline.cli.commands.progress import RoundPrinter
        from fixflow.pipeline.spark import make_session
        from fixflow.pipeline.stream.metrics import Metrics, serve_configured
        from fixflow.pipeline.stream.program import ProgramStream

        config = self.config
        files = self._materialize_bundle()
        metrics = Metrics()
        server = serve_configured(metrics, config.metrics)
        if server is not None:
            url = f"http://{config.metrics.host}:{server.port}/metrics"
            say(f"metrics: {url} (while the demo runs)")
        say("starting Spark (local) ...")
        spark = make_session(config.spark.master, "fixflow-demo", dict(config.spark.conf))
        try:
            streams = {
                name: ProgramStream(
                    spark,
                    config,
                    files[f"{name}.dl"],
                    metrics,
                    on_round=RoundPrinter(label=f"{name}: "),
                )
                for name in PROGRAMS
            }
            for name, stream in streams.items():
                verdicts = ", ".join(
                    f"{v.relation}: {v.eval_class}" for v in stream.report.verdicts
                )
                say(f"checked {name}.dl — {verdicts}")
            self._load_and_update(files, streams)
            self._print_where(streams)
        finally:
            if server is not None:
                server.stop()
            spark.stop()

    def _load_and_update(self, files: dict[str, Path], streams: dict[str, ProgramStream]) -> None:
        self._publish(files["edge.facts"], delete=False, what="the bundled graph")
        self._process(streams, "initial load")
        self._print_results(streams)
        self._publish(files["insert.facts"], delete=False, what="insertions")
        self._publish(files["delete.facts"], delete=True, what="deletions")
        self._process(streams, "update")
        self._print_changes(streams)

    def _print_where(self, streams: dict[str, ProgramStream]) -> None:
        say("")
        for name, stream in streams.items():
            lake = stream.lake
            tables = ", ".join(stream.program.outputs)
            say(f"{name:9s} results {lake.base}/results/ ({tables})")
            say(f"{'':9s} checkpoints {lake.checkpoints}")
            dead = Path(lake.dead_letter)
            say(
                f"{'':9s} dead letters {dead}"
                if dead.exists()
                else f"{'':9s} dead letters: none (a bad message would go to {dead})"
            )
        say(f"look at them:  fixflow show sssp --program demo_sssp{self.conf_flag}")
        say(
            f'               fixflow query "SELECT * FROM demo_sssp.sssp ORDER BY dist"'
            f"{self.conf_flag}"
        )

    def _leave_broker(self, started_here: bool) -> None:
        from fixflow.pipeline.broker.embedded import stop_broker

        if started_here:
            say(f"broker: {stop_broker(self.config).message} (the demo started it)")
            return
        say(
            "broker: left running, as it was before the demo "
            f"(`fixflow broker stop{self.conf_flag}` stops it)"
        )

    def _materialize_bundle(self) -> dict[str, Path]:
        """Copy the bundled programs and facts to `<lake>/_demo/` (the lake directory of a
        program is named after its file: demo_sssp.dl runs as demo_sssp)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        bundle = resources.files("fixflow.pipeline.cli.demo")
        files = {}
        for entry in bundle.iterdir():
            if entry.name.endswith((".dl", ".facts")):
                target_name = f"demo_{entry.name}" if entry.name.endswith(".dl") else entry.name
                target = self.workdir / target_name
                target.write_text(entry.read_text(encoding="utf-8"), encoding="utf-8")
                files[entry.name] = target
        return files

    def _publish(self, path: Path, delete: bool, what: str) -> None:
        from fixflow.pipeline.publish.files import publish_facts

        program = _edge_program(self.workdir)
        result = publish_facts(self.config, "edge", path, delete=delete, program=program)
        say(f"published {what}: {result}")

    def _process(self, streams: dict[str, ProgramStream], label: str) -> None:
        for name, stream in streams.items():
            say(f"{label} {name} ...")
            before = len(stream.reports)
            started = time.monotonic()
            stream.run_available_now()
            stream.settle()
            seconds = time.monotonic() - started
            reports = stream.reports[before:]
            strategies = sorted(
                {
                    s.strategy
                    for r in reports
                    if r.epoch
                    for s in r.epoch.strata
                    if s.strategy != "unchanged"
                }
            )
            rounds = sum(r.epoch.rounds for r in reports if r.epoch)
            say(
                f"{label} {name:9s} {len(reports)} batch(es), {rounds} rounds, "
                f"strategy {'/'.join(strategies) or '-'}: {seconds:.1f} s end to end "
                f"({sum(r.seconds for r in reports):.1f} s maintaining)"
            )

    def _print_results(self, streams: dict[str, ProgramStream]) -> None:
        sssp = _rows(streams["sssp"], "sssp")
        say("")
        say(
            "shortest distances from node 1: "
            + ", ".join(f"{n}:{d:g}" for n, d in sorted(sssp)[:12])
            + (" ..." if len(sssp) > 12 else "")
        )
        cc = _rows(streams["cc"], "cc")
        components: dict[int, int] = {}
        for _, label in cc:
            components[label] = components.get(label, 0) + 1
        say(
            f"connected components: {len(components)} — sizes by label "
            + ", ".join(f"{k}:{v}" for k, v in sorted(components.items()))
        )
        ranks = sorted(_rows(streams["pagerank"], "rank"), key=lambda r: -r[1])
        say("top PageRank: " + ", ".join(f"{n}:{r:.3f}" for n, r in ranks[:5]))

    def _print_changes(self, streams: dict[str, ProgramStream]) -> None:
        say("")
        for name, stream in streams.items():
            last = stream.reports[-1] if stream.reports else None
            if last is None or last.epoch is None:
                say(f"{name}: no change")
                continue
            for relation, change in last.epoch.changes.items():
                upserts = [tuple(r) for r in change.change.added.collect()]
                deletes = [tuple(r) for r in change.change.removed.collect()]
                say(
                    f"{name}.{relation}: {len(upserts)} row(s) new or changed, "
                    f"{len(deletes)} removed"
                )
                for row in sorted(upserts)[:8]:
                    say(f"    {_fmt(row)}")
                if len(upserts) > 8:
                    say(f"    ... {len(upserts) - 8} more")
                for row in sorted(deletes)[:4]:
                    say(f"  - {_fmt(row)}")


def _edge_program(workdir: Path) -> Program:
    from fixflow.checker.parser import parse

    path = workdir / "demo_sssp.dl"
    return parse(path.read_text(encoding="utf-8"), str(path))


def _rows(stream: ProgramStream, relation: str) -> list[tuple]:
    return [tuple(r) for r in stream.maintainer.relation(relation).collect()]


def _fmt(row: tuple) -> str:
    return "(" + ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row) + ")"


def say(text: str) -> None:
    print(text, flush=True)
