"""A Spark job that evaluates a Fixflow program over its own DataFrames.

    spark-submit --master 'local[2]' examples/api/sssp_job.py EDGES.csv SOURCE OUT_DIR

reads a CSV of weighted edges (header ``src,dst,w``), computes the shortest distance of
every node reachable from node SOURCE with ``sssp.dl`` (beside this file), and writes the
``sssp`` relation as Parquet files to OUT_DIR. The SparkSession is the job's own: whatever
``spark-submit`` configures (master, memory, cluster) is what Fixflow runs on.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession

import fixflow


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    edges_csv, source, out = argv
    spark = SparkSession.builder.appName("fixflow-sssp").getOrCreate()
    try:
        program = fixflow.Program.from_file(Path(__file__).with_name("sssp.dl"))
        edges = spark.read.csv(edges_csv, header=True, schema="src long, dst long, w double")
        sources = spark.createDataFrame([(int(source),)], "node long")
        sssp = program.evaluate(spark, edge=edges, source=sources)["sssp"]
        sssp.write.mode("overwrite").parquet(out)
        print(f"sssp: {sssp.count()} rows -> {out}")
    except fixflow.FixflowError as error:
        print(f"sssp_job: {error}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
