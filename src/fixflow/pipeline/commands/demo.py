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
    from fixflow.pipeline.stream import ProgramStream

HELP = "the main job on the embedded default, end to end"
PROGRAMS = ("sssp", "cc", "pagerank")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_conf_argument(parser)
    parser.add_argument(
        "--keep", action="store_true", help="keep the demo lake from a previous run"
    )


def run(args: argparse.Namespace) -> int:
    from fixflow.pipeline.broker import BrokerError
    from fixflow.pipeline.metrics import MetricsPortBusy

    try:
        config = config_from_args(args)
    except ConfigError as error:
        print(f"fixflow demo: {error}", file=sys.stderr)
        return 1
    try:
        return Demo(config, keep=args.keep).run()
    except (BrokerError, ConfigError, MetricsPortBusy) as error:
        print(f"fixflow demo: {error}", file=sys.stderr)
        return 1


class Demo:
    def __init__(self, config: Config, keep: bool) -> None:
        stamp = time.strftime("%Y%m%d%H%M%S")
        # A fresh topic prefix per run: the embedded broker may still hold an earlier run.
        kafka = dataclasses.replace(config.kafka, topic_prefix=f"demo{stamp}.")
        lake_root = Path(config.lake.path) / "demo"
        if lake_root.exists() and not keep:
            shutil.rmtree(lake_root)
        lake = dataclasses.replace(config.lake, path=str(lake_root))
        self.config = dataclasses.replace(config, kafka=kafka, lake=lake)
        self.workdir = lake_root / "programs"

    def run(self) -> int:
        from fixflow.pipeline.broker import start_broker
        from fixflow.pipeline.metrics import Metrics, serve_configured
        from fixflow.pipeline.spark import make_session
        from fixflow.pipeline.stream import ProgramStream

        config = self.config
        files = self._materialize_bundle()
        say("Fixflow demo: SSSP, CC and PageRank kept up to date from one Kafka topic")
        if config.kafka.embedded:
            say(f"broker: {start_broker(config).message}")
        say("starting Spark (local) ...")
        spark = make_session(config.spark.master, "fixflow-demo", dict(config.spark.conf))
        metrics = Metrics()
        server = serve_configured(metrics, config.metrics)
        streams = {
            name: ProgramStream(spark, config, files[f"{name}.dl"], metrics) for name in PROGRAMS
        }
        for name, stream in streams.items():
            verdicts = ", ".join(f"{v.relation}: {v.eval_class}" for v in stream.report.verdicts)
            say(f"checked {name}.dl — {verdicts}")

        self._publish(files["edge.facts"], delete=False, what="the bundled graph")
        self._process(streams, "initial load")
        self._print_results(streams)

        self._publish(files["insert.facts"], delete=False, what="insertions")
        self._publish(files["delete.facts"], delete=True, what="deletions")
        self._process(streams, "update")
        self._print_changes(streams)

        lake = next(iter(streams.values())).lake
        say("")
        say(f"result tables  {Path(lake.root).resolve()}/<program>/results/<relation>")
        say(f"checkpoints    {Path(lake.root).resolve()}/<program>/_checkpoints")
        say(f"dead letters   {Path(lake.root).resolve()}/<program>/dead_letter")
        if server is not None:
            server.stop()  # `fixflow run` keeps its endpoint up; the demo ends here
            say("metrics        served during the demo only; `fixflow run` serves them at")
            port = config.metrics.port or "PORT"  # port 0: a free one, printed by `run`
            say(f"               http://{config.metrics.host}:{port}/metrics")
        say(
            'query them:    fixflow query "SELECT * FROM sssp ORDER BY dist" '
            f"--results {Path(lake.root).resolve()}/demo_sssp/results"
        )
        spark.stop()
        return 0

    # ------------------------------------------------------------ steps

    def _materialize_bundle(self) -> dict[str, Path]:
        """Copy the bundled programs and facts next to the demo lake (the lake directory of
        a program is named after its file)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        bundle = resources.files("fixflow.pipeline.demo")
        files = {}
        for entry in bundle.iterdir():
            if entry.name.endswith((".dl", ".facts")):
                target_name = f"demo_{entry.name}" if entry.name.endswith(".dl") else entry.name
                target = self.workdir / target_name
                target.write_text(entry.read_text(encoding="utf-8"), encoding="utf-8")
                files[entry.name] = target
        return files

    def _publish(self, path: Path, delete: bool, what: str) -> None:
        from fixflow.pipeline.publish import publish_facts

        program = _edge_program(self.workdir)
        result = publish_facts(self.config, "edge", path, delete=delete, program=program)
        say(f"published {what}: {result}")

    def _process(self, streams: dict[str, ProgramStream], label: str) -> None:
        for name, stream in streams.items():
            before = len(stream.reports)
            started = time.monotonic()
            query = stream.start(available_now=True)
            query.awaitTermination()
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
                upserts = [tuple(r) for r in change.upserts.collect()]
                deletes = [tuple(r) for r in change.deletes.collect()]
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
