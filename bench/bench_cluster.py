"""`fixflow eval` on a Spark standalone cluster on loopback (a master and 2 workers): the
program-forms benchmark (``bench_forms.py``) run with ``--master`` of a cluster this script
starts, every result checked against the same oracles.

    .venv/bin/python bench/bench_cluster.py --memory 6g -- \\
        --graphs rmat_10m --programs sssp cc --facts csv --spellings semicolon \\
        --repeats 1 --eval-args=--local-rows=0 --out bench/CLUSTER_RESULTS.md

Arguments after ``--`` are ``bench_forms.py``'s; ``--master`` is added to its
``--eval-args``. The workers (``--workers``, ``--cores`` each, ``--memory`` each for the
executors) run on this machine, so the figures measure what a cluster changes (executors
in JVMs of their own, tasks reading the facts and shards from the workers' side, the
driver's traffic over TCP), not what more machines would bring.
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

from standalone import Shape, standalone  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores of each worker")
    parser.add_argument("--memory", default="6g", help="executor memory of each worker")
    parser.add_argument("forms", nargs=argparse.REMAINDER, help="-- bench_forms.py's arguments")
    args = parser.parse_args()
    forms = [a for a in args.forms if a != "--"]
    with tempfile.TemporaryDirectory(prefix="fixflow-cluster-") as scratch:
        shape = Shape(args.workers, args.cores, args.memory)
        with standalone(Path(scratch), shape) as cluster:
            os.environ.update(
                SPARK_CONF_DIR=cluster.env["SPARK_CONF_DIR"], SPARK_LOCAL_IP="127.0.0.1"
            )
            print(f"cluster {cluster.master}: {shape}", file=sys.stderr)
            sys.argv = ["bench_forms.py", *_with_master(forms, cluster.master)]
            bench_forms.main()


def _with_master(forms: list[str], master: str) -> list[str]:
    """``bench_forms``' arguments with ``--master`` among its ``--eval-args``."""
    return [*forms, f"--eval-args=--master={master}"]


if __name__ == "__main__":
    main()
