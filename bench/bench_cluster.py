"""Fixflow on a Spark standalone cluster on loopback (a master and 2 workers): the
program-forms benchmark (``bench_forms.py``, `fixflow eval` processes) or the stream
benchmark (``bench_stream.py``, a continuous stream and its update batches) run with
``--master`` of a cluster this script starts, every result checked against the same oracles.

    .venv/bin/python bench/bench_cluster.py --memory 6g -- \\
        --graphs rmat_10m --programs sssp cc --facts csv --spellings semicolon \\
        --repeats 1 --eval-args=--local-rows=0 --out bench/CLUSTER_RESULTS.md
    .venv/bin/python bench/bench_cluster.py --memory 6g --bench stream -- \\
        --graphs rmat --edges 10m --batch 1000 --programs sssp --kinds insert,delete,mixed \\
        --repeats 3 --local-rows 0 --markdown

Arguments after ``--`` are the benchmark's; ``--master`` is added to ``bench_forms.py``'s
``--eval-args`` or given to ``bench_stream.py``. The workers (``--workers``, ``--cores``
each, ``--memory`` each for the executors) run on this machine, so the figures measure
what a cluster changes (executors in JVMs of their own, tasks reading the facts and shards
from the workers' side, the driver's traffic over TCP), not what more machines would bring.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the cluster launcher the tests use

import bench_forms  # noqa: E402
import bench_stream  # noqa: E402

from standalone import Shape, standalone  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores of each worker")
    parser.add_argument("--memory", default="6g", help="executor memory of each worker")
    parser.add_argument(
        "--bench", choices=("forms", "stream"), default="forms", help="the benchmark to run"
    )
    parser.add_argument("given", nargs=argparse.REMAINDER, help="-- the benchmark's arguments")
    args = parser.parse_args()
    given = [a for a in args.given if a != "--"]
    with tempfile.TemporaryDirectory(prefix="fixflow-cluster-") as scratch:
        shape = Shape(args.workers, args.cores, args.memory)
        with standalone(Path(scratch), shape) as cluster:
            os.environ.update(
                SPARK_CONF_DIR=cluster.env["SPARK_CONF_DIR"], SPARK_LOCAL_IP="127.0.0.1"
            )
            print(f"cluster {cluster.master}: {shape}", file=sys.stderr)
            if args.bench == "stream":
                sys.argv = ["bench_stream.py", *given, f"--master={cluster.master}"]
                bench_stream.main()
            else:
                sys.argv = ["bench_forms.py", *given, f"--eval-args=--master={cluster.master}"]
                bench_forms.main()


if __name__ == "__main__":
    main()
