"""Spark reads of the same messages four ways, in one run: the JVM and the Python ``pocketmq``
data sources over the commitlog, ``spark.read.json`` over JSON lines and ``spark.read.parquet``
over Parquet, for each store size and Spark master asked for.

    python bench/spark_read.py                      # 1,000,000 messages, bodies of ~200 bytes
    python bench/spark_read.py --messages 1000000,3000000 --masters 'local[1],local[2]' \
        --runs 3 --data /tmp/pocketmq-bench

The store is written through ``store.message_store.MessageStore`` (8 topics, tags, two keys
and a unique key per message, like a producer sends them; bodies are random bytes, so neither
Parquet's dictionaries nor its compression get them for free); the JSON lines and Parquet files are
the same rows exported once by the data source, with every column (JSON keeps the body as
base64, as Spark writes binary). The JVM source's jar is built (or taken from its cache) and put
on ``spark.jars``; the Python source is then ``format("pocketmq_python")``. ``--ceiling`` adds a
line: a ceiling: a Python data source yielding
batches parsed beforehand, i.e. what Spark itself costs to take these rows from Python. Each timing is a full scan (``write.format("noop")``, which
materialises every column; ``count()`` would let Parquet and JSON skip the values), the median
of ``--runs`` warm runs after one warm-up. Goals: the JVM source at least 1x Parquet, and
linear in cores (``local[2]`` about twice ``local[1]``).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pocketmq.store.config import StoreConfig  # noqa: E402
from pocketmq.store.message_store import MessageStore, PutMessage  # noqa: E402

TOPICS = [f"bench-topic-{i}" for i in range(8)]


def write_store(root: Path, messages: int, seed: int = 7) -> float:
    """Write ``messages`` messages; returns the seconds it took."""
    rnd = random.Random(seed)
    started = time.perf_counter()
    with MessageStore.open(root, config=StoreConfig()) as store:
        batch: list[PutMessage] = []
        for i in range(messages):
            batch.append(
                PutMessage(
                    topic=TOPICS[i % len(TOPICS)],
                    queue_id=i % 4,
                    body=rnd.randbytes(rnd.randint(180, 220)),
                    born_timestamp=1_700_000_000_000 + i,
                    properties={
                        "UNIQ_KEY": f"7F0000010001{i:020X}",
                        "TAGS": f"tag{i % 5}",
                        "KEYS": f"order-{i} customer-{i % 1000}",
                        "WAIT": "true",
                    },
                )
            )
            if len(batch) == 1000:
                store.put_many(batch)
                batch.clear()
        if batch:
            store.put_many(batch)
    return time.perf_counter() - started


def session(master: str, jar: str):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .config("spark.jars", jar)
        .appName("pocketmq-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def register_ceiling(spark, store_dir: Path, rows: int, partitions: int) -> None:  # type: ignore[no-untyped-def]
    """A Python data source that parses one batch of the store once per task and then yields
    it again and again: what Spark itself costs to take ``rows`` rows of this schema from a
    Python data source (Arrow to the JVM, rows out), with no parsing."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from pocketmq.sparkexport.columns import SPARK_SCHEMA_DDL

    per_task = -(-rows // partitions)

    class PrebuiltReader(DataSourceReader):
        def partitions(self):  # type: ignore[no-untyped-def]
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            from pocketmq.sparkexport.columns import read_range
            from pocketmq.sparkexport.scan import RangeStats, ReadOptions, plan_store

            options = ReadOptions()
            first = plan_store(store_dir, options).ranges[0]
            batch = next(read_range(first, options, RangeStats(first.path, 0, 0)))
            left = min(per_task, rows - partition.value * per_task)
            while left > 0:
                piece = batch.slice(0, min(left, batch.num_rows))
                left -= piece.num_rows
                yield piece

    class PrebuiltSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "pocketmq_prebuilt"

        def schema(self) -> str:
            return SPARK_SCHEMA_DDL

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return PrebuiltReader()

    spark.dataSource.register(PrebuiltSource)


def timed(action, runs: int) -> list[float]:  # type: ignore[no-untyped-def]
    action()  # warm-up
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return seconds


def prepare(work: Path, messages: int) -> tuple[Path, Path, Path]:
    """The store, and the same rows as JSON lines and Parquet (written once, then reused)."""
    store_dir, json_dir, parquet_dir = work / "store", work / "json", work / "parquet"
    marker = work / "written"
    if not marker.exists():
        for path in (store_dir, json_dir, parquet_dir):
            shutil.rmtree(path, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        seconds = write_store(store_dir, messages)
        print(f"wrote {messages:,} messages through MessageStore in {seconds:.1f} s", flush=True)
    return store_dir, json_dir, parquet_dir


ROUTE_KEYS = {
    "jvm": "JVM data source",
    "python": "Python data source",
    "json": "spark.read.json",
    "parquet": "spark.read.parquet",
}


def measure(  # type: ignore[no-untyped-def]
    spark, work: Path, messages: int, runs: int, ceiling: bool, only: list[str] | None = None
) -> dict[str, float]:
    """Records per second of each route (medians of ``runs``)."""
    store_dir, json_dir, parquet_dir = prepare(work, messages)
    marker = work / "written"
    source = spark.read.format("pocketmq_python").load(str(store_dir))
    if not marker.exists():
        source.write.mode("overwrite").json(str(json_dir))
        source.write.mode("overwrite").parquet(str(parquet_dir))
        marker.write_text("ok\n")
    schema = source.schema
    rows = spark.read.format("pocketmq").load(str(store_dir)).count()
    assert rows == messages, (rows, messages)
    routes = {
        "JVM data source": lambda: spark.read.format("pocketmq").load(str(store_dir)),
        "Python data source": lambda: spark.read.format("pocketmq_python").load(str(store_dir)),
        "spark.read.json": lambda: spark.read.schema(schema).json(str(json_dir)),
        "spark.read.parquet": lambda: spark.read.parquet(str(parquet_dir)),
    }
    if only:
        routes = {name: frame for name, frame in routes.items() if name in only}
    if ceiling:
        register_ceiling(spark, store_dir, rows, source.rdd.getNumPartitions())
        routes["prebuilt batches"] = lambda: spark.read.format("pocketmq_prebuilt").load()
    results = {}
    for name, frame in routes.items():
        seconds = timed(
            lambda frame=frame: frame().write.format("noop").mode("overwrite").save(), runs
        )
        median = statistics.median(seconds)
        results[name] = rows / median
        print(
            f"  {name:20s} full scan {median:6.2f} s  {rows / median:>12,.0f} records/s  "
            f"(runs: {', '.join(f'{s:.2f}' for s in seconds)})",
            flush=True,
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", default="1000000", help="comma-separated store sizes")
    parser.add_argument("--masters", default="local[2]", help="comma-separated Spark masters")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ceiling", action="store_true", help="add the prebuilt-batches line")
    parser.add_argument(
        "--routes",
        default="jvm,python,json,parquet",
        help="comma-separated routes to time, of jvm, python, json, parquet",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="keep the stores, JSON and Parquet here and reuse them (default: a temporary folder)",
    )
    args = parser.parse_args(argv)
    sizes = [int(m) for m in args.messages.split(",")]
    masters = [m.strip() for m in args.masters.split(",") if m.strip()]
    only = [ROUTE_KEYS[r.strip()] for r in args.routes.split(",") if r.strip()]

    from pocketmq import sparkexport
    from pocketmq.sparkexport.jvm import build_jar

    jar = str(build_jar())
    base = args.data or Path(tempfile.mkdtemp(prefix="pocketmq-bench-"))
    table: dict[tuple[int, str], dict[str, float]] = {}
    try:
        for master in masters:
            spark = session(master, jar)
            try:
                assert sparkexport.register(spark) == "jvm"
                for messages in sizes:
                    print(f"{messages:,} messages, {master}:", flush=True)
                    table[(messages, master)] = measure(
                        spark, base / f"m{messages}", messages, args.runs, args.ceiling, only
                    )
            finally:
                spark.stop()
    finally:
        if args.data is None:
            shutil.rmtree(base, ignore_errors=True)
    routes = list(next(iter(table.values())))
    print("\n| records | master | " + " | ".join(routes) + " | JVM / Parquet | JVM / Python |")
    print("|---" * (len(routes) + 4) + "|")
    for (messages, master), result in table.items():
        cells = " | ".join(f"{result[r] / 1000:,.0f}k/s" for r in routes)
        jvm = result.get("JVM data source", 0.0)
        ratios = " | ".join(
            f"{jvm / result[other]:.2f}x" if jvm and other in result else "-"
            for other in ("spark.read.parquet", "Python data source")
        )
        print(f"| {messages:,} | `{master}` | {cells} | {ratios} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
