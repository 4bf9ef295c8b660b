"""``fixflow eval PROG.dl -F FACTS_DIR -D OUT_DIR``: one-shot batch evaluation.

Inputs: ``<relation>.facts`` (tab-separated) or ``<relation>.csv`` (header) per ``.input``
relation. Outputs: one Delta table per ``.output`` relation in OUT_DIR (exact declared
schema, iteration index dropped), and ``<relation>.csv`` with ``--csv``.

Soufflé's I/O options are honoured here (and only here: a stream uses the Kafka topic
named after the relation): ``.input r(filename="f", delimiter=",")`` reads FACTS_DIR/f,
``.output r(IO=file, filename="f", delimiter=",")`` also writes OUT_DIR/f (Soufflé's
headerless format), ``IO=stdout`` prints the rows; ``.printsize r`` prints ``r<TAB>rows``.
As in Soufflé, every ``.input`` and ``.output`` directive of a relation is honoured.

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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, cast

from fixflow.checker.ast import Attribute
from fixflow.checker.mutual import tagged_title
from fixflow.operators.thresholds import TASK_IO_ROWS
from fixflow.pipeline.cli.commands.progress import RoundPrinter, engine_figures
from fixflow.pipeline.config import (
    Config,
    ConfigError,
    add_conf_argument,
    load_config,
)
from fixflow.pipeline.object_store import StorageError, use_lake

if TYPE_CHECKING:  # imported where used: Spark and Z3 load only when a command needs them
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from fixflow.checker.model import Report
    from fixflow.operators.evaluate import CountedFrame, EvalOptions, Evaluation, Progress
    from fixflow.pipeline.lake.task_facts import FactsFile

    EvalRows: TypeAlias = pa.Table | CountedFrame
    """An input as ``fixflow eval`` reads it: in the driver, or by Spark tasks."""

HELP = "evaluate a program once over fact files, writing Delta tables"
ENGINES = ("sync", "async", "hybrid")

EXIT_PARTIAL = 3
"""The exit status when a round cap stopped a stratum before it converged: the tables are
written, those depending on it marked partial (``fixflow.partial``), but the result is
not the program's."""

log = logging.getLogger(__name__)


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
        default=".",
        metavar="OUT_DIR",
        help="directory for one Delta table per .output relation, local or in an object "
        "store (s3://bucket/prefix, reached as [lake.storage] says; default: the current "
        "directory, as in Soufflé)",
    )
    parser.add_argument("--csv", action="store_true", help="also write <relation>.csv files")
    parser.add_argument(
        "--explainable",
        action="store_true",
        help="also keep the program (OUT_DIR/program.dl) and its inputs (OUT_DIR/edb/<relation>, "
        "Delta) so that `fixflow explain RELATION KEY --results OUT_DIR` can explain a row",
    )
    _add_evaluation_arguments(parser)
    parser.add_argument(
        "--explain",
        action="store_true",
        help="evaluate, write nothing, and print for each stratum where it ran and why "
        "(driver or Spark, MRA engine, shards: decided from the sizes of the relations it "
        "reads, known once the earlier strata ran) and its plan",
    )
    parser.add_argument(
        "--master", default=None, help="Spark master (default: [spark] master, local[2])"
    )


def _add_evaluation_arguments(parser: argparse.ArgumentParser) -> None:
    """How strata are evaluated: the MRA engine, the caps, the driver's share. Each flag
    overrides the ``--conf`` file's key; a key neither sets keeps eval's default."""
    add_conf_argument(parser)
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="MRA engine: sync (one Spark job per round), async (sharded local loops, "
        "buffers flushed by the adaptive beta rule) or hybrid (shards exchange only when "
        "locally quiescent) (default: [engine] mode, hybrid)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=None,
        metavar="N",
        help="shards of an async/hybrid MonoTable (default: [engine] shards, 0: one per 20M "
        "auxiliary rows; at most one per Spark task slot)",
    )
    parser.add_argument(
        "--max-iterations",
        type=int,
        default=None,
        metavar="N",
        help="round cap of every recursive stratum (default: [engine] max_iterations, 0: "
        "none on strata that reach a fixpoint, as in Soufflé; 1000 on strata that approach "
        "a limit: sum/count recursion, naive ones). One iteration is a round on the sync "
        "engine and the semi-naive/naive loops (every pending delta propagated once), a stage "
        "on async/hybrid (each shard's local loop run to quiescence, then an exchange). A "
        f"stratum stopped by a cap makes its tables partial and the exit status {EXIT_PARTIAL}",
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
        type=_local_rows,
        default=None,
        metavar="N",
        help="run a stratum in the driver, without Spark jobs, when its inputs and results "
        "stay within N rows together (default: [engine] local_rows, auto: as many rows as "
        "half of [engine] memory (the machine's) holds, 0.6 GB + 105 bytes a row; 0: always "
        "on Spark)",
    )
    parser.add_argument(
        "--task-rows",
        type=_task_rows,
        default=None,
        metavar="N",
        help="off the driver, run a set, aggregate-seminaive or naive stratum's loop in one "
        "Spark task (one job, not one a round) while its relations hold at most N rows "
        "(default: [engine] task_rows, 20000000; 0: a Spark job a round)",
    )


def _task_rows(text: str) -> int:
    """``--task-rows``: a number of rows, at least 0."""
    return _row_count(text, "never in one task", "a number of rows")


def _local_rows(text: str) -> int | str:
    """``--local-rows``: ``auto`` or a number of rows, at least 0."""
    if text == "auto":
        return text
    return _row_count(text, "never in the driver", "auto or a number of rows")


def _row_count(text: str, zero_means: str, expected: str) -> int:
    try:
        rows = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}") from None
    if rows < 0:
        raise argparse.ArgumentTypeError(f"must be 0 ({zero_means}) or more")
    return rows


def settings(args: argparse.Namespace) -> Config:
    """The ``--conf`` file over the embedded settings, then the flags over both."""
    config = load_config(args.conf)
    flags = {
        "mode": args.engine,
        "shards": args.shards,
        "max_iterations": args.max_iterations,
        "local_rows": args.local_rows,
        "task_rows": args.task_rows,
    }
    engine = replace(config.engine, **{k: v for k, v in flags.items() if v is not None})
    spark = config.spark if args.master is None else replace(config.spark, master=args.master)
    return replace(config, engine=engine, spark=spark)


def _rows(given: EvalRows) -> int:
    from fixflow.operators.evaluate import CountedFrame

    return given.rows if isinstance(given, CountedFrame) else given.num_rows


def _error(message: str) -> int:
    print(f"fixflow eval: error: {message}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    from fixflow.checker import CheckError, load
    from fixflow.checker.diagnostics import render_all
    from fixflow.pipeline.engine_settings import local_rows
    from fixflow.pipeline.lake.facts import FactsError, input_files, load_inputs
    from fixflow.pipeline.lake.task_facts import read_by_tasks_above

    if args.shards is not None and args.shards < 0:
        return _error("--shards must be 0 (automatic) or more")
    if args.max_iterations is not None and args.max_iterations < 1:
        return _error("--max-iterations must be at least 1")
    try:
        config = settings(args)
        # An object store for OUT_DIR is checked now, not after the evaluation.
        use_lake(replace(config.lake, path=args.output))
    except (ConfigError, StorageError) as exc:
        return _error(str(exc))
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
    schemas = report.analysis.schemas
    program = report.analysis.program
    relations = {rel: schemas[rel] for rel in program.inputs}
    directives = {rel: program.input_directives(rel) for rel in program.inputs}
    try:
        files = input_files(args.facts, list(relations), directives)
        # Files bound for Spark anyway are read there (``lake.task_facts``), others here.
        by_tasks = read_by_tasks_above(files, relations, local_rows(config))
        in_driver = {r: a for r, a in relations.items() if r not in by_tasks}
        inputs = load_inputs(args.facts, in_driver, directives)
    except FactsError as exc:
        return _error(str(exc))
    return _evaluate_and_write(args, config, report, inputs, by_tasks)


def _evaluate_and_write(
    args: argparse.Namespace,
    config: Config,
    report: Report,
    tables: dict[str, pa.Table],
    by_tasks: Mapping[str, FactsFile],
) -> int:
    from fixflow.operators.evaluate import EvaluationError, evaluate_with_stats
    from fixflow.operators.on_demand import SessionOnDemand
    from fixflow.pipeline.engine_settings import (
        MemoryExceeded,
        eval_options,
        refuse_beyond_memory,
    )
    from fixflow.pipeline.lake.facts import FactsError
    from fixflow.pipeline.lake.task_facts import read_input
    from fixflow.pipeline.spark import make_session

    # Spark starts when the first stratum or input placed on it needs it: a program whose
    # strata all run in the driver starts no JVM (docs/architecture.md, placement).
    on_demand = SessionOnDemand(
        lambda: make_session(config.spark.master, "fixflow-eval", dict(config.spark.conf))
    )
    spark = cast("SparkSession", on_demand)
    started = time.monotonic()  # the inputs Spark tasks read are the evaluation's work
    try:
        inputs: dict[str, EvalRows] = {
            **tables,
            **{r: read_input(spark, facts) for r, facts in by_tasks.items()},
        }
    except FactsError as exc:
        return _error(str(exc))
    try:  # the inputs' rows are known, nothing is evaluated yet
        refuse_beyond_memory(config, report, {r: _rows(i) for r, i in inputs.items()})
    except MemoryExceeded as exc:
        return _error(str(exc))
    options = eval_options(config, partitions=args.partitions, progress=RoundPrinter())
    try:
        # Arrow tables: small inputs stay in the driver (--local-rows), others go to Spark.
        evaluation = evaluate_with_stats(report, inputs, spark, options)
    except EvaluationError as exc:
        return _error(str(exc))
    if args.explain:
        _explain(report, evaluation, options)
        return EXIT_PARTIAL if evaluation.capped else 0
    printer = options.progress if isinstance(options.progress, RoundPrinter) else None
    results = _Results(report, evaluation, inputs)
    _write_outputs(args, report, results, printer, config.lake.task_io_rows)
    _summarize(config, evaluation, options)
    for stats in evaluation.capped:
        last = printer.last.get(stats.stratum) if printer is not None else None
        print(
            f"warning: stratum {stats.stratum} ({', '.join(stats.relations)}) stopped at its "
            f"iteration cap ({stats.cap} rounds) before converging: its results are partial"
            + _residual(last),
            file=sys.stderr,
        )
    log.info(
        "evaluated in %.3f s (%s)",
        time.monotonic() - started,
        "Spark started" if on_demand.started else "Spark not started",
    )
    return EXIT_PARTIAL if evaluation.capped else 0


def _explain(report: Report, evaluation: Evaluation, options: EvalOptions) -> None:
    """Each stratum: where it ran and why (``placement.place``), what it cost, its plan."""
    from fixflow.operators.evaluate import stratum_plans
    from fixflow.operators.plan import explain

    for stratum, stats in zip(report.strata, evaluation.stats, strict=True):
        where = "not placed" if stats.placement is None else stats.placement.describe()
        print(f"stratum {stats.stratum} ({', '.join(stats.relations)}, {stats.strategy}): {where}")
        for relation in stratum.relations:
            if relation in report.analysis.tagged:
                print(f"  {tagged_title(relation, report.analysis.tagged[relation])}")
        rounds = "1 round" if stats.rounds == 1 else f"{stats.rounds} rounds"
        jobs = "1 Spark job" if stats.jobs == 1 else f"{stats.jobs} Spark jobs"
        print(f"  {rounds}, {jobs}, {stats.seconds:.3f} s")
        for plan in stratum_plans(report, stratum, options.max_iterations):
            print(explain(plan, indent=1))


def _residual(last: Progress | None) -> str:
    """What was left when a cap stopped a stratum: its pending deltas (the rows of its last
    round's change on the semi-naive loops) and the termination measure over them."""
    if last is None:
        return ""
    measure = "" if last.measure is None else f", termination measure {last.measure:.3g}"
    return f" ({last.pending} pending{measure})"


def _summarize(config: Config, evaluation: Evaluation, options: EvalOptions) -> None:
    """A line per stratum the async/hybrid engine ran, with its engine figures."""
    printer = options.progress
    for stats in evaluation.stats:
        last = printer.last.get(stats.stratum) if isinstance(printer, RoundPrinter) else None
        if last is not None and last.detail:
            where = " in the driver" if stats.local else ""
            print(
                f"stratum {stats.stratum} ({', '.join(stats.relations)}): "
                f"{config.engine.mode} engine"
                f"{where}, {stats.rounds} stages, {stats.jobs} Spark jobs"
                f"{engine_figures(last.detail)}",
                file=sys.stderr,
            )


class _Results:
    """Every relation's result rows as Arrow tables in its table's schema: straight from
    the driver when it evaluated them, else from Spark (one job)."""

    def __init__(self, report: Report, evaluation: Evaluation, inputs: Mapping[str, EvalRows]):
        from fixflow.operators.evaluate import partial_relations

        self.report, self.evaluation, self.inputs = report, evaluation, inputs
        self.partial = partial_relations(report, (s.stratum for s in evaluation.capped))
        """Relation → the capped strata its rows depend on."""

    def metadata(self, relation: str, printer: RoundPrinter | None = None) -> dict[str, str]:
        """The commit entries of the relation's table: ``fixflow.partial`` if it is, and a
        ``sum`` MRA relation's residual (the termination measure of its stratum's last
        round, from ``printer``, a ``RoundPrinter``)."""
        from fixflow.pipeline.lake.results import partial_metadata, residual_entry

        capped = self.partial.get(relation, frozenset())
        entries = partial_metadata(
            (s.stratum, s.relations, s.cap, s.rounds)
            for s in self.evaluation.capped
            if s.stratum in capped
        )
        strata = [s.stratum for s in self.evaluation.stats if relation in s.relations]
        last = printer.last.get(strata[0]) if printer is not None and strata else None
        measure = None if last is None else last.measure
        residual = residual_entry(self.report, relation, measure, converged=not entries)
        return {**entries, **residual}

    def spark_frame(self, relation: str, task_io_rows: int) -> DataFrame | None:
        """The relation's rows as a Spark frame in its table's columns when Spark tasks
        write its table (``lake.task_write.by_tasks``: evaluated on Spark, more than
        ``task_io_rows`` rows); None when the driver writes it."""
        from fixflow.pipeline.lake.task_write import by_tasks

        attributes = _result_attributes(self.report, relation)
        if relation in self.evaluation.tables or not attributes:
            return None  # held in the driver: asking for its frame would start Spark
        frame = self.evaluation.relations.get(relation)
        return frame if frame is not None and by_tasks(frame, task_io_rows) else None

    def table(self, relation: str) -> pa.Table | None:
        from fixflow.pipeline.lake.delta import positional_to_arrow, to_arrow

        attributes = _result_attributes(self.report, relation)
        if relation in self.evaluation.tables:
            return positional_to_arrow(self.evaluation.tables[relation], attributes)
        if relation in self.evaluation.relations:
            return to_arrow(self.evaluation.relations[relation], attributes)
        if relation in self.inputs:
            return self.input_table(relation)
        return None

    def input_table(self, relation: str) -> pa.Table | None:
        """An input relation's rows (collected from Spark if tasks read them)."""
        from fixflow.operators.evaluate import CountedFrame
        from fixflow.pipeline.lake.delta import positional_to_arrow, to_arrow

        given = self.inputs.get(relation)
        if given is None:
            return None
        attributes = _result_attributes(self.report, relation)
        if isinstance(given, CountedFrame):
            return to_arrow(given.frame, attributes)
        return positional_to_arrow(given, attributes)


def _write_outputs(
    args: argparse.Namespace,
    report: Report,
    results: _Results,
    printer: RoundPrinter | None = None,
    task_io_rows: int = TASK_IO_ROWS,
) -> None:
    """The Delta table (and files) of every ``.output``, then every ``.printsize`` line. A
    relation on Spark of more than ``task_io_rows`` rows is written by Spark tasks
    (``lake.task_write``) unless files of it are asked for too (``--csv``, Soufflé's
    ``.output`` options: written from the driver)."""
    from fixflow.pipeline.lake.delta import table_schema, write_csv, write_table
    from fixflow.pipeline.lake.lakehouse import join_path
    from fixflow.pipeline.lake.results import PARTIAL
    from fixflow.pipeline.lake.task_write import write_frame

    program = report.analysis.program
    written: dict[str, int] = {}
    for relation in program.outputs:
        attributes = _result_attributes(report, relation)
        metadata = results.metadata(relation, printer)
        path = join_path(args.output, relation)
        files = args.csv or any(program.output_directives(relation))
        frame = None if files else results.spark_frame(relation, task_io_rows)
        if frame is not None:
            by_tasks = write_frame(
                path, frame, table_schema(attributes), "overwrite", None, metadata
            )
            assert by_tasks is not None, "a write without a batch is never skipped"
            written[relation] = by_tasks.rows
        else:
            table = results.table(relation)
            assert table is not None, f"`{relation}` is neither evaluated nor an input"
            write_table(path, table, attributes, metadata=metadata)
            written[relation] = table.num_rows
            if args.csv:
                write_csv(join_path(args.output, f"{relation}.csv"), table, attributes)
            for options in program.output_directives(relation):  # Soufflé writes every one
                if options:
                    _write_souffle_output(args.output, relation, table, attributes, options)
        partial = " (partial)" if PARTIAL in metadata else ""
        print(f"{relation}: {written[relation]} rows{partial} -> {path}")
    for relation in program.printsizes:
        if relation in written:
            print(f"{relation}\t{written[relation]}")
            continue
        sized = results.table(relation)
        print(f"{relation}\t{0 if sized is None else sized.num_rows}")  # Soufflé's format
    if args.explainable:
        _keep_for_explain(args, report, results)


def _keep_for_explain(args: argparse.Namespace, report: Report, results: _Results) -> None:
    """``--explainable``: the program and the input relations beside the results, as
    ``lake.explain.EvalTables`` reads them."""
    from fixflow.pipeline.lake.delta import write_table
    from fixflow.pipeline.lake.explain import EvalTables
    from fixflow.pipeline.lake.lakehouse import write_text

    tables = EvalTables(str(args.output))
    write_text(tables.source, args.program.read_text(encoding="utf-8"))
    for relation in report.analysis.program.inputs:
        table = results.input_table(relation)
        if table is not None:
            write_table(tables.edb(relation), table, _result_attributes(report, relation))
    print(f"kept {tables.source} and the inputs under {tables.edb('')}")


def _write_souffle_output(
    directory: str,
    relation: str,
    table: pa.Table,
    attributes: Sequence[Attribute],
    options: Mapping[str, str],
) -> None:
    """Soufflé's ``.output r(IO=file, filename=..., delimiter=...)``: one line per (sorted)
    row, no header, into ``filename`` relative to ``directory`` (default ``r.csv``,
    tab-separated); with ``IO=stdout`` the rows between Soufflé's banner lines instead."""
    from fixflow.pipeline.lake.delta import sorted_rows
    from fixflow.pipeline.lake.lakehouse import join_path, write_text

    rows = sorted_rows(table, attributes)
    delimiter = options.get("delimiter", "\t")
    lines = [delimiter.join(map(souffle_text, row)) if row else "()" for row in rows]
    if options.get("IO") == "stdout":
        print(
            "\n".join(["---------------", relation, "===============", *lines, "==============="])
        )
        return
    path = join_path(directory, options.get("filename", f"{relation}.csv"))
    write_text(path, "".join(line + "\n" for line in lines))
    print(f"{relation}: {len(rows)} rows -> {path}")


def souffle_text(value: object) -> str:
    """A value as Soufflé writes it: a float as C++ streams print it at Soufflé's precision
    of 17 significant digits (``%.17g``: ``10``, ``0.10000000000000001``, ``1e+20``)."""
    return format(value, ".17g") if isinstance(value, float) else str(value)


def _result_attributes(report: Report, relation: str) -> tuple[Attribute, ...]:
    """The declared attributes of a result table: the iteration index is dropped."""
    return report.catalog[relation].result
