"""What `fixflow run` starts around a program's stream, and stops together: the metrics
endpoint (first: a busy port fails before anything else starts), the embedded broker (when
configured) and the SparkSession. The stream itself is ``Program.stream``'s."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from fixflow.checker.ast import Program
from fixflow.pipeline.broker.embedded import start_broker
from fixflow.pipeline.config import Config
from fixflow.pipeline.kafka_security import check_access, secured
from fixflow.pipeline.lake.lakehouse import ProgramLake
from fixflow.pipeline.spark import make_session
from fixflow.pipeline.stream.broker_watch import BrokerWatch
from fixflow.pipeline.stream.metrics import Metrics, MetricsServer, serve_configured
from fixflow.pipeline.stream.program import BatchReport

log = logging.getLogger(__name__)


class Session:
    def __init__(
        self,
        config: Config,
        program_file: str | Path,
        program: Program,
        *,
        available_now: bool = False,
        say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    ) -> None:
        self.config = config
        self.program_file = Path(program_file)
        self.program = program
        # The endpoint first: a busy port fails in a moment, not after Spark's start-up.
        self.metrics = Metrics()
        self.server: MetricsServer | None = serve_configured(self.metrics, config.metrics)
        self.broker_message = ""
        if config.kafka.embedded:
            self.broker_message = start_broker(config).message
        # A broker that is down at start is waited for (said once), before Spark starts.
        self.broker_watch = BrokerWatch(
            config.kafka, self.metrics.health, say, available_now=available_now
        )
        self.broker_watch.wait()
        if secured(config.kafka):
            # Refused credentials or an untrusted certificate end the run here, in one
            # line: the stream would otherwise wait for a broker it reaches but cannot use.
            check_access(config.kafka)
        self.spark = make_session(config.spark.master, "fixflow", dict(config.spark.conf))

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.server is not None:
            self.server.stop()

    def describe(self) -> str:
        lake = ProgramLake.of(self.config.lake, self.program_file.stem)
        topics = ", ".join(self.config.kafka.topic(r) for r in self.program.inputs)
        lines = [
            f"program      {self.program_file}",
            f"kafka        {self.config.kafka.bootstrap_servers}"
            + (f" ({self.config.kafka.security_protocol})" if secured(self.config.kafka) else "")
            + (f" ({self.broker_message})" if self.broker_message else ""),
            f"topics       {topics}",
            f"results      {lake.base}/results/<relation>",
            f"checkpoints  {lake.checkpoints}"
            + (f" (copied to {lake.stored_checkpoints})" if lake.local_root else ""),
        ]
        if self.server is not None:
            base = f"http://{self.config.metrics.host}:{self.server.port}"
            lines.append(f"metrics      {base}/metrics (probes: {base}/ready, {base}/healthz)")
        eval_only = eval_only_directives(self.program)
        if eval_only:
            lines.append(
                f"note         {', '.join(eval_only)}: for `fixflow eval` only; the stream "
                "reads the topics and writes the results above"
            )
        return "\n".join(lines)


def print_batch(report: BatchReport) -> None:
    print(format_batch(report), flush=True)


def format_batch(report: BatchReport) -> str:
    changes = (
        ", ".join(
            f"{rel} +{report.inserted.get(rel, 0)}/-{report.deleted.get(rel, 0)}"
            for rel in sorted(set(report.inserted) | set(report.deleted))
            if report.inserted.get(rel) or report.deleted.get(rel)
        )
        or "no changes"
    )
    strategies = ""
    if report.epoch is not None:
        ran = [
            f"{s.strategy}({','.join(s.relations)})"
            for s in report.epoch.strata
            if s.strategy != "unchanged"
        ]
        strategies = "; " + " ".join(ran) if ran else ""
    dead = f", {report.dead_letters} dead letters" if report.dead_letters else ""
    flag = " (provisional: deltas pending)" if report.provisional else ""
    if report.between_batches:
        return (
            f"after batch {report.batch_id}: carrying pending deltas on{strategies}{flag}"
            f" [{report.seconds:.2f} s]"
        )
    return (
        f"batch {report.batch_id}: {report.records} records{dead}: {changes}{strategies}"
        f"{flag} [{report.seconds:.2f} s]"
    )


def eval_only_directives(program: Program) -> list[str]:
    """The program's Soufflé I/O options and ``.printsize`` directives, which only
    `fixflow eval` honours (said at start-up rather than ignored in silence)."""
    found = [f".input {r}(...)" for r in program.inputs if any(program.input_directives(r))]
    found += [f".output {r}(...)" for r in program.outputs if any(program.output_directives(r))]
    return found + [f".printsize {r}" for r in program.printsizes]
