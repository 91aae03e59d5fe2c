"""CPU time per record of the JVM data source's reader alone, in one JVM without Spark's
scheduler: every partition of a store read into columnar batches by ``MessageReader``, with all
columns or the ones named, optionally each row then projected to an ``UnsafeRow`` as Spark's
ColumnarToRow does (``--rows``). Thread CPU time, so a loaded machine changes it less than wall
time; the ceiling line in the same run is the walk and record copy alone (``physical_offset``).

    python bench/spark_reader_cpu.py STORE_DIR [--columns all|a,b,...] [--runs 7] [--rows]
        [--sources DIR]      # another version's Java sources, e.g. from git archive, to compare

The harness (``bench/jvm/ReaderCpu.java``) is compiled with the reader's sources into a
temporary folder (it uses package-private classes) against pyspark's jars.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from pocketmq.sparkexport.jvm import SOURCE_DIR, _javac, pyspark_jars

HARNESS = Path(__file__).resolve().parent / "jvm" / "ReaderCpu.java"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store")
    parser.add_argument("--columns", default="all", help="all, or comma-separated column names")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rows", action="store_true", help="also project each row (UnsafeRow)")
    parser.add_argument("--sources", type=Path, default=SOURCE_DIR, help="the reader's sources")
    args = parser.parse_args(argv)
    jars = f"{pyspark_jars()}/*"
    with tempfile.TemporaryDirectory(prefix="pocketmq-reader-cpu-") as work:
        sources = [str(p) for p in args.sources.rglob("*.java")] + [str(HARNESS)]
        built = subprocess.run(
            [_javac(), "-nowarn", "-proc:none", "-cp", jars, "-d", work, *sources],
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            print(built.stderr, file=sys.stderr)
            return 1
        for columns in (args.columns, "physical_offset"):
            done = subprocess.run(
                [str(Path(_javac()).with_name("java")), "-Xmx3g", "-cp", f"{work}:{jars}", "io.pocketmq.spark.ReaderCpu",
                 args.store, columns, str(args.runs), "rows" if args.rows else "batches"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            label = "ceiling (walk + copy)" if columns == "physical_offset" else columns
            print(f"{label}: {done.stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
