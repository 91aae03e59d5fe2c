"""The exporter as a Spark application, for ``spark-submit`` on a cluster (or ``python -m``).

    spark-submit --master spark://host:7077 --jars "$(pocketmq spark-jar)" \\
        "$(python -m pocketmq.sparkexport.submit --path)" \\
        /shared/store-a /shared/store-b --out /shared/export --format parquet
    python -m pocketmq.sparkexport.submit /data/store --out /tmp/export          # local[*]
    python -m pocketmq.sparkexport.submit /data/store --out /tmp/export --follow # keep exporting

The driver and every executor must see each store at the given path (shared storage: NFS,
a mounted volume); the driver needs pocketmq with its ``spark`` extra installed (from a
pocketmq checkout: ``python3 -m pip install '.[spark]'``), and so do the executors when the
Python source reads (not with the JVM source's jar on ``--jars``). Several stores are exported into one
dataset (the ``segment`` column tells them apart). ``--follow`` tails the stores with
``spark.readStream.format("pocketmq")`` into the output (with a checkpoint under
``OUT/_checkpoint``), so messages written later are exported as they arrive; a store whose
broker has not written anything yet is followed from its first record when it appears.

With the JVM data source's jar on ``--jars`` the executors read the stores in their JVMs (run
directly, the jar is built with ``javac`` and used when it can be); without it they read with
the Python source. ``--source`` forces either; one line on stderr says which reads.

Exit status: 0 exported, 1 exported but a store is damaged (or the job failed), 2 wrong argument.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pocketmq.sparkexport.submit",
        description="Export pocketmq / RocketMQ stores (their commitlog) with Spark.",
    )
    parser.add_argument("stores", nargs="*", metavar="STORE_DIR", help="store directories")
    parser.add_argument("--out", help="output directory (shared storage on a cluster)")
    parser.add_argument("--format", default="parquet", choices=("parquet", "json", "orc"))
    parser.add_argument("--topic", action="append", help="export only this topic (repeatable)")
    parser.add_argument(
        "--follow", action="store_true", help="keep exporting new messages (streaming)"
    )
    parser.add_argument(
        "--trigger-seconds", type=float, default=10.0, help="with --follow: micro-batch interval"
    )
    parser.add_argument(
        "--wait-seconds",
        type=float,
        default=0.0,
        help="wait up to this long for each store folder to become a store (a broker starting)",
    )
    parser.add_argument(
        "--source",
        choices=("auto", "jvm", "python"),
        default=None,
        help="the data source: auto (default, or $POCKETMQ_SPARK_SOURCE) is the JVM one when its "
        "jar is on the session (spark-submit --jars) or, run directly, built or buildable with "
        "javac; else the Python one. --follow always reads with the Python one (streaming)",
    )
    parser.add_argument(
        "--path", action="store_true", help="print this file's path (for spark-submit) and exit"
    )
    return parser


def _not_stores(stores: Sequence[str]) -> list[str]:
    """Why each of ``stores`` that is not a store (yet) is not one; a store with no records yet
    is one (it exports no rows)."""
    from pocketmq.store.reader import check_store_folder

    problems = []
    for store in stores:
        try:
            check_store_folder(store)
        except FileNotFoundError as error:  # no such folder, or NotAStoreError
            problems.append(str(error))
    return problems


def _wait_for(stores: Sequence[str], seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while True:
        problems = _not_stores(stores)
        if not problems or time.monotonic() >= deadline:
            return problems
        time.sleep(1.0)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _session(source: str | None):  # type: ignore[no-untyped-def]
    """(session, whether we started it): under spark-submit the session it configured (master,
    executors, ``--jars``); else the session already active in this process, or a local one
    with the JVM source's jar when it can be built. Says which data source reads."""
    from pyspark.sql import SparkSession

    from pocketmq.sparkexport.cli import local_session
    from pocketmq.sparkexport.source import use_source

    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # spark-submit started the JVM for us
        spark = SparkSession.builder.appName("pocketmq-export").getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        used, _ = use_source(spark, source)
        if used == "jvm":
            _say("reading with the JVM data source")
        else:
            _say(
                "reading with the Python data source (for the JVM one, give spark-submit "
                '--jars "$(pocketmq spark-jar)")'
            )
        return spark, True
    started = SparkSession.getActiveSession() is None
    return local_session(source=source, say=_say), started


def _follow(spark, stores: Sequence[str], args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    from pocketmq.sparkexport.source import PYTHON_FORMAT, register

    register(spark, "auto")  # the Python source is pocketmq_python in every session
    frame = None
    for store in stores:
        reader = spark.readStream.format(PYTHON_FORMAT)
        if args.topic:
            reader = reader.option("topics", ",".join(args.topic))
        stream = reader.load(store)
        frame = stream if frame is None else frame.unionByName(stream)
    assert frame is not None  # the parser requires at least one store
    query = (
        frame.writeStream.format(args.format)
        .option("checkpointLocation", os.path.join(args.out, "_checkpoint"))
        .trigger(processingTime=f"{args.trigger_seconds} seconds")
        .start(args.out)
    )
    print(f"following {', '.join(stores)} into {args.out} ({args.format})", file=sys.stderr)
    query.awaitTermination()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.path:
        print(os.path.abspath(__file__))
        return 0
    if not args.stores or not args.out:
        parser.print_usage(sys.stderr)
        print("error: give at least one STORE_DIR and --out", file=sys.stderr)
        return 2
    from pocketmq.sparkexport._require import SparkMissingError, require_spark

    try:
        require_spark()
    except SparkMissingError as error:
        print(error, file=sys.stderr)
        return 2
    problems = [] if args.follow else _wait_for(args.stores, args.wait_seconds)
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        return 2
    from pocketmq.sparkexport.cli import run_export
    from pocketmq.sparkexport.jvm import JvmBuildError

    try:
        # Streaming is the Python source's: no jar to build for --follow.
        spark, started = _session("python" if args.follow else args.source)
    except (JvmBuildError, ValueError, RuntimeError) as error:
        print(error, file=sys.stderr)
        return 2
    try:
        if args.follow:
            return _follow(spark, args.stores, args)
        status = 0
        for index, store in enumerate(args.stores):
            summary = run_export(
                spark,
                store,
                args.out,
                args.format,
                args.topic,
                True,
                mode="overwrite" if index == 0 else "append",
                source=args.source,
            )
            for line in summary.lines():
                print(f"{store}: {line}", file=sys.stderr)
            if summary.damaged_store:
                status = 1
        return status
    finally:
        if started:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
