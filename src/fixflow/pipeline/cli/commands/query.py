"""`fixflow query "SQL" [--engine datafusion|spark] [--conf FILE] [--program STEM | --results DIR]
[--format ...]`.

By default the SQL runs on DataFusion, the engine bundled with deltalake, in this process:
each result relation is a table named after it (and ``program.relation``), read straight
from its Delta files, so a query costs no JVM and answers in well under a second.
``--engine spark`` registers the relations as Spark temp views instead and runs the SQL on
a local SparkSession (~8 s to start), for Spark's dialect and functions. Tables are read
with deltalake (no Delta jars needed), so both work on the embedded default and on any lake
deltalake can read.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from fixflow.pipeline.config import ConfigError, add_conf_argument, config_from_args
from fixflow.pipeline.object_store import StorageError, use_location

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from fixflow.pipeline.lake.results import ResultSet

HELP = "run SQL over the result tables"
PREFIX = "fixflow query"

# The data passes through the driver anyway (deltalake -> Arrow -> Spark), so a small local
# session answers ad-hoc queries; a cluster master from the config would only add start-up.
QUERY_MASTER = "local[2]"
ENGINES = ("datafusion", "spark")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sql",
        metavar="SQL",
        help='the query; result relations are tables: "SELECT * FROM sssp WHERE dist < 3" '
        "(with datafusion, also program.relation: sssp.sssp)",
    )
    add_scope_arguments(parser)
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=ENGINES[0],
        help="datafusion (default): DataFusion SQL in this process, no JVM, under a second; "
        "spark: Spark SQL on a local SparkSession, ~8 s to start",
    )
    parser.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="output format (default: an aligned table)",
    )
    add_conf_argument(parser)


def add_scope_arguments(parser: argparse.ArgumentParser) -> None:
    """``--program`` and ``--results``: which result tables a command sees."""
    parser.add_argument(
        "--program",
        metavar="STEM",
        default=None,
        help="only the results of this program (sssp for sssp.dl); needed "
        "when several programs have a relation of the same name",
    )
    parser.add_argument(
        "--results",
        metavar="DIR",
        default=None,
        help="read the Delta tables directly under DIR (e.g. the OUT_DIR of "
        "`fixflow eval`) instead of the lake",
    )


def run(args: argparse.Namespace) -> int:
    from fixflow.pipeline.lake.results import FORMATTERS, ResultsError, find_results

    try:
        config = config_from_args(args)
        use_location(config.lake, args.results)
        results = find_results(config.lake.path, args.program, args.results)
        results.require_tables()  # before Spark: an empty lake needs no 8-second start-up
    except (ConfigError, ResultsError, StorageError) as error:
        return _fail(str(error))
    if args.engine == "spark":
        outcome = _run_spark(args.sql, results, verbose=args.verbose > 0)
    else:
        outcome = _run_datafusion(args.sql, results)
    if isinstance(outcome, str):
        return _fail(outcome)
    print(FORMATTERS[args.format](outcome))
    if args.format == "table":
        print(f"({outcome.num_rows} row{'' if outcome.num_rows == 1 else 's'})")
    return 0


def _run_datafusion(sql: str, results: ResultSet) -> pa.Table | str:
    """The query's rows as an Arrow table, or the one-line error message (the traceback is
    logged at INFO: -v shows it)."""
    from fixflow.pipeline.lake.datafusion_sql import SqlError, new_builder, run_sql
    from fixflow.pipeline.lake.results import (
        ResultsError,
        explain_missing_sql_table,
        register_tables,
    )

    builder = new_builder()
    try:
        register_tables(builder, results, sql)
        return run_sql(builder, sql)
    except SqlError as error:
        if error.missing_table is None:
            return error.message
        return explain_missing_sql_table(error.missing_table, results, error.message)
    except ResultsError as error:
        return str(error)


def _run_spark(sql: str, results: ResultSet, verbose: bool) -> pa.Table | str:
    """The query's rows as an Arrow table, or the one-line error message."""
    from pyspark.errors import PySparkException

    from fixflow.pipeline.lake.results import ResultsError, register_views
    from fixflow.pipeline.spark import make_session

    with tempfile.TemporaryFile() as jvm_log:
        if verbose:
            spark = make_session(master=QUERY_MASTER, app_name="fixflow-query")
        else:
            _silence_pyspark_error_log()
            spark = _quiet_session(jvm_log)
        try:
            register_views(spark, results, sql)
            return spark.sql(sql).toArrow()
        except PySparkException as error:
            return spark_error_message(error, results)
        except ResultsError as error:
            return str(error)
        finally:
            spark.stop()


def _quiet_session(jvm_log: BinaryIO) -> SparkSession:
    """A session whose JVM writes its start-up chatter and log4j output to ``jvm_log``.

    The JVM inherits file descriptor 2 when it starts, so pointing fd 2 at a file just for
    the start keeps the terminal clean for the answer; if the start fails, the log is shown.
    """
    from fixflow.pipeline.spark import make_session

    try:
        with _stderr_to(jvm_log):
            return make_session(master=QUERY_MASTER, app_name="fixflow-query")
    except Exception:
        jvm_log.seek(0)
        sys.stderr.write(jvm_log.read().decode(errors="replace"))
        raise


@contextlib.contextmanager
def _stderr_to(target: BinaryIO) -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(target.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def spark_error_message(error: Exception, results: ResultSet) -> str:
    """One line for a failed query; a missing table gets the ambiguity or a list of names."""
    from pyspark.errors import PySparkException

    from fixflow.pipeline.lake.results import explain_missing_table

    message = one_line(str(error))
    if isinstance(error, PySparkException) and error.getCondition() == "TABLE_OR_VIEW_NOT_FOUND":
        missing = (error.getMessageParameters() or {}).get("relationName", "")
        return explain_missing_table(missing, results, message)
    return message


def one_line(message: str) -> str:
    """Spark's message without the plan or SQL excerpt it appends, on one line."""
    lines = [line.strip() for line in message.strip().splitlines()]
    kept = []
    for line in lines:
        if line.startswith("==") or line.startswith("'") or line.startswith("+-"):
            break  # "== SQL ==" excerpt or the unresolved plan: useful in a log, not here
        if line:
            kept.append(line)
    return " ".join(kept) if kept else message.strip().replace("\n", " ")


def _silence_pyspark_error_log() -> None:
    # PySpark logs every SQL error with the JVM stack trace as JSON on stderr before raising
    # it; the CLI prints the message itself. (-v keeps the log.)
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True
    logging.getLogger("py4j").setLevel(logging.ERROR)


def _fail(message: str) -> int:
    print(f"{PREFIX}: {message}", file=sys.stderr)
    return 1
