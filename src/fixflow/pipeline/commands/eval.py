"""``fixflow eval PROG.dl -F FACTS_DIR -D OUT_DIR``: one-shot batch evaluation.

Inputs: ``<relation>.facts`` (tab-separated) or ``<relation>.csv`` (header) per ``.input``
relation. Outputs: one Delta table per ``.output`` relation in OUT_DIR (exact declared
schema, iteration index dropped), and ``<relation>.csv`` with ``--csv``.

Soufflé's I/O options are honoured here (and only here: a stream uses the Kafka topic
named after the relation): ``.input r(filename="f", delimiter=",")`` reads FACTS_DIR/f,
``.output r(IO=file, filename="f", delimiter=",")`` also writes OUT_DIR/f (Soufflé's
headerless format), ``IO=stdout`` prints the rows; ``.printsize r`` prints ``r<TAB>rows``.

Round caps (``core.round_cap``): a stratum that reaches a fixpoint runs until a round
changes nothing, as in Soufflé; one that may only approach a limit (sum/count recursion,
``naive``) stops after 1000 rounds; ``--max-iterations N`` caps every stratum at N. A
stratum stopped by its cap prints a warning, the tables depending on it are written with
``fixflow.partial`` in their commit, and the exit status is ``EXIT_PARTIAL`` (3).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fixflow.checker.ast import Attribute
from fixflow.pipeline.commands.progress import RoundPrinter, engine_figures

if TYPE_CHECKING:  # imported where used: Spark and Z3 load only when a command needs them
    import pyarrow as pa

    from fixflow.checker.model import Report
    from fixflow.operators.evaluate import EvalOptions, Evaluation

HELP = "evaluate a program once over fact files, writing Delta tables"
ENGINES = ("sync", "async", "hybrid")

EXIT_PARTIAL = 3
"""The exit status when a round cap stopped a stratum before it converged: the tables are
written, those depending on it marked partial (``fixflow.partial``), but the result is
not the program's."""

log = logging.getLogger(__name__)


LOCAL_ROWS = 100_000
"""``--local-rows``' default: strata of up to this many rows run in the driver, where a
round costs microseconds to milliseconds instead of a Spark job (bench/SMALL_RESULTS.md)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", type=Path, metavar="PROG.dl", help="the Datalog program")
    parser.add_argument(
        "-F",
        "--facts",
        type=Path,
        default=Path("."),
        metavar="FACTS_DIR",
        help="directory of <relation>.facts (tab-separated) or <relation>.csv (header) files, "
        "optionally gzip-compressed (default: the current directory, as in Soufflé)",
    )
    parser.add_argument(
        "-D",
        "--output",
        type=Path,
        default=Path("."),
        metavar="OUT_DIR",
        help="directory for one Delta table per .output relation "
        "(default: the current directory, as in Soufflé)",
    )
    parser.add_argument("--csv", action="store_true", help="also write <relation>.csv files")
    _add_evaluation_arguments(parser)
    parser.add_argument("--explain", action="store_true", help="print each stratum's plan and exit")
    parser.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")


def _add_evaluation_arguments(parser: argparse.ArgumentParser) -> None:
    """How strata are evaluated: the MRA engine, the caps, the driver's share."""
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="hybrid",
        help="MRA engine: sync (one Spark job per round), async (sharded local loops, "
        "buffers flushed by the adaptive beta rule) or hybrid (shards exchange only when "
        "locally quiescent) (default: hybrid)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=0,
        metavar="N",
        help="shards of an async/hybrid MonoTable (default 0: one per 2M auxiliary rows, "
        "at most one per Spark core)",
    )
    parser.add_argument(
        "--max-iterations",
        type=int,
        default=None,
        metavar="N",
        help="round cap of every recursive stratum (default: none on strata that reach a "
        "fixpoint, as in Soufflé; 1000 on strata that approach a limit: sum/count "
        "recursion, naive ones). A stratum stopped by a cap makes its tables partial "
        f"and the exit status {EXIT_PARTIAL}",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        metavar="P",
        help="partitions of MonoTables and auxiliary tables (default: Spark's shuffle partitions)",
    )
    parser.add_argument(
        "--local-rows",
        type=int,
        default=LOCAL_ROWS,
        metavar="N",
        help="run a stratum in the driver, without Spark jobs, when its inputs and results "
        f"stay within N rows (non-recursive and set strata; default: {LOCAL_ROWS}; 0: always "
        "on Spark)",
    )


def _error(message: str) -> int:
    print(f"fixflow eval: error: {message}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    from fixflow.checker import CheckError, load
    from fixflow.checker.diagnostics import render_all
    from fixflow.pipeline.facts import FactsError, load_inputs

    if args.shards < 0:
        return _error("--shards must be 0 (automatic) or more")
    if args.max_iterations is not None and args.max_iterations < 1:
        return _error("--max-iterations must be at least 1")
    if args.local_rows < 0:
        return _error("--local-rows must be 0 (never in the driver) or more")
    try:
        source = args.program.read_text(encoding="utf-8")
    except OSError as exc:
        return _error(f"{args.program}: {exc.strerror or exc}")
    try:
        report = load(source, str(args.program))
    except CheckError as exc:
        print(render_all(exc.diagnostics, source), file=sys.stderr)
        return 1
    for diagnostic in report.diagnostics:  # warnings
        print(diagnostic.render(source), file=sys.stderr)
    if args.explain:
        from fixflow.operators.evaluate import program_plans
        from fixflow.operators.plan import explain

        for plan in program_plans(report, args.max_iterations):
            print(explain(plan))
        return 0
    schemas = report.analysis.schemas
    program = report.analysis.program
    try:
        inputs = load_inputs(
            args.facts,
            {rel: schemas[rel] for rel in program.inputs},
            {rel: program.input_options(rel) for rel in program.inputs},
        )
    except FactsError as exc:
        return _error(str(exc))
    return _evaluate_and_write(args, report, inputs)


def _evaluate_and_write(
    args: argparse.Namespace, report: Report, inputs: dict[str, pa.Table]
) -> int:
    from fixflow.operators.engines.base import EngineOptions
    from fixflow.operators.evaluate import EvalOptions, EvaluationError, evaluate_with_stats
    from fixflow.pipeline.spark import make_session

    spark = make_session(master=args.master, app_name="fixflow-eval")
    options = EvalOptions(
        max_iterations=args.max_iterations,
        engine_options=EngineOptions(mode=args.engine, shards=args.shards),
        partitions=args.partitions,
        progress=RoundPrinter(),
        local_rows=args.local_rows,
    )
    started = time.monotonic()
    try:
        # Arrow tables: small inputs stay in the driver (--local-rows), others go to Spark.
        evaluation = evaluate_with_stats(report, inputs, spark, options)
    except EvaluationError as exc:
        return _error(str(exc))
    _write_outputs(args, report, _Results(report, evaluation, inputs))
    _summarize(args, evaluation, options)
    for stats in evaluation.capped:
        print(
            f"warning: stratum {stats.stratum} ({', '.join(stats.relations)}) stopped at its "
            f"iteration cap ({stats.cap} rounds) before converging: its results are partial",
            file=sys.stderr,
        )
    log.info("evaluated in %.1f s", time.monotonic() - started)
    return EXIT_PARTIAL if evaluation.capped else 0


def _summarize(args: argparse.Namespace, evaluation: Evaluation, options: EvalOptions) -> None:
    """A line per stratum the async/hybrid engine ran, with its engine figures."""
    printer = options.progress
    for stats in evaluation.stats:
        last = printer.last.get(stats.stratum) if isinstance(printer, RoundPrinter) else None
        if last is not None and last.detail:
            where = " in the driver" if stats.local else ""
            print(
                f"stratum {stats.stratum} ({', '.join(stats.relations)}): {args.engine} engine"
                f"{where}, {stats.rounds} stages, {stats.jobs} Spark jobs"
                f"{engine_figures(last.detail)}",
                file=sys.stderr,
            )


class _Results:
    """Every relation's result rows as Arrow tables in its table's schema: straight from
    the driver when it evaluated them, else from Spark (one job)."""

    def __init__(self, report: Report, evaluation: Evaluation, inputs: Mapping[str, pa.Table]):
        from fixflow.operators.evaluate import partial_relations

        self.report, self.evaluation, self.inputs = report, evaluation, inputs
        self.partial = partial_relations(report, (s.stratum for s in evaluation.capped))
        """Relation → the capped strata its rows depend on."""

    def metadata(self, relation: str) -> dict[str, str]:
        """The commit entries of the relation's table: ``fixflow.partial`` if it is."""
        from fixflow.pipeline.results import partial_metadata

        capped = self.partial.get(relation, frozenset())
        return partial_metadata(
            (s.stratum, s.relations, s.cap, s.rounds)
            for s in self.evaluation.capped
            if s.stratum in capped
        )

    def table(self, relation: str) -> pa.Table | None:
        from fixflow.pipeline.lake import positional_to_arrow, to_arrow

        attributes = _result_attributes(self.report, relation)
        if relation in self.evaluation.tables:
            return positional_to_arrow(self.evaluation.tables[relation], attributes)
        if relation in self.evaluation.relations:
            return to_arrow(self.evaluation.relations[relation], attributes)
        if relation in self.inputs:
            return positional_to_arrow(self.inputs[relation], attributes)
        return None


def _write_outputs(args: argparse.Namespace, report: Report, results: _Results) -> None:
    """The Delta table (and files) of every ``.output``, then every ``.printsize`` line."""
    from fixflow.pipeline.lake import write_csv, write_table

    args.output.mkdir(parents=True, exist_ok=True)
    program = report.analysis.program
    for relation in dict.fromkeys(program.outputs):
        attributes = _result_attributes(report, relation)
        table = results.table(relation)
        assert table is not None, f"`{relation}` is neither evaluated nor an input"
        metadata = results.metadata(relation)
        write_table(args.output / relation, table, attributes, metadata=metadata)
        if args.csv:
            write_csv(args.output / f"{relation}.csv", table, attributes)
        partial = " (partial)" if metadata else ""
        print(f"{relation}: {table.num_rows} rows{partial} -> {args.output / relation}")
        options = program.output_options(relation)
        if options:
            _write_souffle_output(args.output, relation, table, attributes, options)
    for relation in program.printsizes:
        sized = results.table(relation)
        print(f"{relation}\t{0 if sized is None else sized.num_rows}")  # Soufflé's format


def _write_souffle_output(
    directory: Path,
    relation: str,
    table: pa.Table,
    attributes: Sequence[Attribute],
    options: Mapping[str, str],
) -> None:
    """Soufflé's ``.output r(IO=file, filename=..., delimiter=...)``: one line per (sorted)
    row, no header, into ``filename`` relative to ``directory`` (default ``r.csv``,
    tab-separated); with ``IO=stdout`` the rows between Soufflé's banner lines instead."""
    from fixflow.pipeline.lake import sorted_rows, text_value

    rows = sorted_rows(table, attributes)
    delimiter = options.get("delimiter", "\t")
    lines = [delimiter.join(text_value(v) for v in row) if row else "()" for row in rows]
    if options.get("IO") == "stdout":
        print(
            "\n".join(["---------------", relation, "===============", *lines, "==============="])
        )
        return
    path = directory / options.get("filename", f"{relation}.csv")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    print(f"{relation}: {len(rows)} rows -> {path}")


def _result_attributes(report: Report, relation: str) -> tuple[Attribute, ...]:
    """The declared attributes of a result table: the iteration index is dropped."""
    return report.catalog[relation].result
