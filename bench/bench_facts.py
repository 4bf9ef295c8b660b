"""Reading facts files as `fixflow eval` does (``facts.read_table``: Arrow's CSV parser where it
reads the file exactly as the row reader would) against the row reader it falls back to
(``facts.read_rows``, a Python loop), on the same files in one run: a numeric ``.facts``, a
headed ``.csv``, a ``.facts`` with a symbol column, and a gzip-compressed ``.csv.gz``.

    PYTHONPATH=src .venv/bin/python bench/bench_facts.py --rows 1000000 --repeat 3

Prints one Markdown table row per file (medians) and the machine's load.
"""

from __future__ import annotations

import argparse
import gzip
import os
import tempfile
from pathlib import Path

import numpy as np
from benchlib import median_s

from fixflow.checker.ast import Attribute
from fixflow.pipeline.lake.delta import rows_to_arrow
from fixflow.pipeline.lake.facts import arrow_table, read_rows, read_table

EDGE = (Attribute("src", "number"), Attribute("dst", "number"), Attribute("w", "float"))
NAMED = (Attribute("src", "number"), Attribute("name", "symbol"), Attribute("w", "float"))


def files(directory: Path, rows: int) -> dict[str, tuple[Path, tuple[Attribute, ...]]]:
    rng = np.random.default_rng(7)
    src = rng.integers(0, rows // 4, rows)
    dst = rng.integers(0, rows // 4, rows)
    weight = np.round(rng.random(rows) * 10, 3)
    tsv = "".join(f"{a}\t{b}\t{w}\n" for a, b, w in zip(src, dst, weight, strict=True))
    csv = "src,dst,w\n" + tsv.replace("\t", ",")
    named = "".join(f"{a}\tnode {b}\t{w}\n" for a, b, w in zip(src, dst, weight, strict=True))
    made = {
        "numeric .facts": ("edge.facts", tsv.encode(), EDGE),
        "numeric .csv": ("edge.csv", csv.encode(), EDGE),
        ".facts with a symbol": ("named.facts", named.encode(), NAMED),
        "numeric .csv.gz": ("edge.csv.gz", gzip.compress(csv.encode(), 6), EDGE),
    }
    out = {}
    for label, (name, data, attributes) in made.items():
        path = directory / name
        path.write_bytes(data)
        out[label] = (path, attributes)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}, cores: {os.cpu_count()}, rows: {args.rows:,}")
    print("| file | read_table (Arrow) | row reader | ratio |")
    print("| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for label, (path, attributes) in files(Path(tmp), args.rows).items():
            assert arrow_table(path, attributes) is not None, f"{label}: not read by Arrow"
            fast = median_s(args.repeat, lambda p=path, a=attributes: read_table(p, a))
            slow = median_s(
                args.repeat, lambda p=path, a=attributes: rows_to_arrow(read_rows(p, a), a)
            )
            print(f"| {label} | {fast:.2f} s | {slow:.2f} s | {slow / fast:.0f}x |")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
