"""``pocketmq export STORE_DIR --out DIR [--format parquet] [--topic T ...]``.

The ``pocketmq`` command line (``cli/``) parses the arguments and calls
:func:`export_main`; this module imports without pyspark, so a missing extra gives a message,
not a traceback. The export runs a local Spark session (``local[*]``, or the session already
active in the process), writes the store's messages with the ``pocketmq`` data source into one
folder per topic and day (``topic=Orders/day=2026-11-26/``), showing its progress in bytes read
and records written, then prints what the walk found: records (and why they are more than the
rows exported), bad CRCs, a torn tail, damaged ranges and files in ``commitlog/`` that are not
segments.

Exit status, as the rest of ``pocketmq``: 0 exported, 1 exported but the store is damaged (bad
CRC, torn tail, damaged range) or the Spark job failed, 2 a wrong argument (not a store, unknown
format, pyspark missing, a ``--topic`` with no record in the store). A store with no records yet
(no ``commitlog/`` segment) exports an empty dataset.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pocketmq.sparkexport._require import SparkMissingError, require_spark
from pocketmq.sparkexport.session import ExportProgress

__all__ = ["FORMATS", "ExportSummary", "export_main", "jar_for", "local_session", "run_export"]

FORMATS = ("parquet", "json", "orc")
Progress = bool | Callable[[str], None] | None


@dataclass(slots=True)
class ExportSummary:
    out: str
    format: str
    rows: int = 0
    records: int = 0
    bad_crc: int = 0
    torn_tail_bytes: int = 0
    torn_tails: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    foreign_files: list[str] = field(default_factory=list)
    seconds: float = 0.0
    topics_named: list[str] = field(default_factory=list)  # --topic, if any
    rows_per_topic: dict[str, int] = field(default_factory=dict)

    @property
    def damaged_store(self) -> bool:
        return bool(self.bad_crc or self.torn_tails or self.damaged)

    @property
    def missing_topics(self) -> list[str]:
        """Topics named with --topic that have no record in the store."""
        return [t for t in self.topics_named if not self.rows_per_topic.get(t)]

    def explain(self) -> str:
        """Why the rows exported and the records stored differ."""
        other = self.records - self.rows
        if other <= 0:
            return f"the store holds {self.records:,} records"
        where = (
            "in topics not named by --topic or in system topics"
            if self.topics_named
            else "in system topics"
        )
        return (
            f"the store holds {self.records:,} records: the other {other:,} are {where} "
            "(SCHEDULE_TOPIC_XXXX, RMQ_SYS_TRANS_*, pocketmq's rmq_sys_ state records ...), "
            "which an export leaves out"
        )

    def lines(self) -> list[str]:
        lines = [
            f"exported {self.rows:,} rows to {self.out} ({self.format}) in {self.seconds:.1f} s; "
            + self.explain()
        ]
        if self.bad_crc:
            lines.append(f"bad CRC: {self.bad_crc} records (exported with crc_ok = false)")
        lines.extend(f"torn tail skipped: {text}" for text in self.torn_tails)
        lines.extend(f"damaged: {text}" for text in self.damaged)
        lines.extend(f"not a segment (ignored): {path}" for path in self.foreign_files)
        return lines


def _say(progress: Progress) -> Callable[[str], None]:
    if callable(progress):
        return progress
    if progress:
        return lambda text: print(text, file=sys.stderr, flush=True)
    return lambda text: None


def _topic_list(topics: Iterable[str] | str | None) -> list[str]:
    if topics is None:
        return []
    if isinstance(topics, str):
        topics = [topics]
    return [t.strip() for item in topics for t in item.split(",") if t.strip()]


def jar_for(choice: str, say: Callable[[str], None]) -> tuple[str | None, str]:
    """(the JVM source's jar, "") for a new session, built first if need be; (None, why) when
    ``choice`` is ``python`` or, for ``auto``, when it cannot be built (no javac, no pyspark:
    the error's first line). For ``jvm`` a jar that cannot be built raises JvmBuildError."""
    from pocketmq.sparkexport.jvm import JvmBuildError, _javac, build_jar, jar_path

    if choice == "python":
        return None, "asked for"
    try:
        if not jar_path().is_file():
            _javac()  # none: said as the reason, not after a "building" line
            say("building the JVM data source's jar with javac (once per pyspark version)")
        return str(build_jar()), ""
    except JvmBuildError as error:
        if choice == "jvm":
            raise
        return None, str(error).splitlines()[0]


def session_for(
    command: str,
    app_name: str,
    *,
    source: str | None,
    say: Callable[[str], None] | None,
) -> Any:
    """:func:`local_session` for a command, or the exit status once it has said on stderr why
    there is none: 2 for the user's choice (``--source jvm`` without ``javac``, an unknown
    source), 1 when Spark itself does not start (no Java, a jar Spark did not take)."""
    from pocketmq.sparkexport.jvm import JvmBuildError

    try:
        return local_session(app_name, source=source, say=say)
    except (JvmBuildError, ValueError) as error:
        print(f"{command}: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - said, with the status
        print(f"{command}: no Spark session with the pocketmq source: {error}", file=sys.stderr)
        return 1


def local_session(
    app_name: str = "pocketmq-export",
    *,
    source: str | None = None,
    say: Callable[[str], None] | None = None,
) -> Any:
    """The active session, or a new local one that starts fast and quiet on a laptop
    (``POCKETMQ_SPARK_MASTER``, default ``local[*]``; ``POCKETMQ_SPARK_DRIVER_MEMORY``, 2g),
    with the ``pocketmq`` source registered: the JVM one when its jar is built or can be
    (``javac``), the Python one otherwise. ``source`` (else ``$POCKETMQ_SPARK_SOURCE``):
    ``auto``, ``jvm`` (a jar that cannot be built raises :class:`JvmBuildError`) or ``python``.
    ``say`` gets one line saying which source reads."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from pocketmq.sparkexport.session import quiet_local_session
    from pocketmq.sparkexport.source import source_choice, use_source

    tell = say or (lambda text: None)
    choice = source_choice(source)
    why_not_jvm = "asked for" if choice == "python" else ""
    spark = SparkSession.getActiveSession()
    if spark is None:
        jar, why = jar_for(choice, tell)
        why_not_jvm = why_not_jvm or why
        spark = quiet_local_session(
            app_name,
            os.environ.get("POCKETMQ_SPARK_MASTER", "local[*]"),
            os.environ.get("POCKETMQ_SPARK_DRIVER_MEMORY", "2g"),
            jars=jar,
        )
    used, _ = use_source(spark, choice)
    if used == "jvm":
        tell("reading with the JVM data source (--source python for the Python one)")
    else:
        tell(f"reading with the Python data source ({why_not_jvm or 'the session has no JVM jar'})")
    return spark


def _rows_per_topic(spark: Any, fmt: str, target: str) -> dict[str, int]:
    """Rows per topic in an export folder (the topic is its partition column: cheap)."""
    try:
        frame = spark.read.format(fmt).load(target)
        return {row.topic: row["count"] for row in frame.groupBy("topic").count().collect()}
    except Exception as error:  # an empty export has no files to infer a schema from
        if "UNABLE_TO_INFER_SCHEMA" in str(error) or "PATH_NOT_FOUND" in str(error):
            return {}
        raise


def _planned(store: str, options: dict[str, Any]) -> tuple[int, int]:
    """(bytes, ranges) the reader will read: its own partition plan."""
    from pocketmq.sparkexport.scan import ReadOptions, plan_store

    plan = plan_store(store, ReadOptions.from_options({k: str(v) for k, v in options.items()}))
    total = 0
    for part in plan.ranges:
        end = part.hi
        if part.last_segment:  # preallocated: the data ends where the zeros begin
            end = min(end, _data_end(part.path))
        total += max(0, end - part.lo)
    return total, len(plan.ranges)


def _data_end(path: str) -> int:
    import mmap

    from pocketmq.sparkexport.scan import nonzero_extent

    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return 0
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return nonzero_extent(view, 0, size)


def _bytes_under(target: str) -> int:
    """Bytes of the data files under a local output folder (0 elsewhere: hdfs://, s3a://)."""
    total = 0
    for folder, _dirs, files in os.walk(target):
        total += sum(
            os.path.getsize(os.path.join(folder, name))
            for name in files
            if not name.startswith(("_", "."))
        )
    return total


def run_export(
    spark: Any,
    store_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    fmt: str = "parquet",
    topics: Iterable[str] | str | None = None,
    progress: Progress = True,
    *,
    mode: str = "overwrite",
    source: str | None = None,
) -> ExportSummary:
    """Export one store with ``spark`` (any session: local or a cluster's); returns the summary.
    ``source``: which data source reads (``auto``, ``jvm``, ``python``; see ``use_source``)."""
    from pyspark.sql import functions as F

    from pocketmq.sparkexport.source import read_store

    say = _say(progress)
    store = os.fspath(store_dir)
    target = os.fspath(out)
    wanted = _topic_list(topics)
    options: dict[str, Any] = {"topics": ",".join(wanted)} if wanted else {}
    started = time.perf_counter()
    before: dict[str, int] = {}
    if mode == "append" and os.path.exists(target):
        before = _rows_per_topic(spark, fmt, target)
        if not before:  # nothing to keep (at most the empty file of an export with no rows)
            mode = "overwrite"
    # One folder per topic and day (store time, UTC): topic=Orders/day=2026-11-26/part-....
    frame = read_store(spark, store, source=source, **options).withColumn(
        "day", F.to_date(F.col("store_timestamp"))
    )
    watcher = None
    if progress:
        planned_bytes, ranges = _planned(store, options)
        say(f"exporting {store} to {target} ({fmt}, by topic and day)")
        watcher = ExportProgress(spark, planned_bytes, ranges, None if progress is True else say)
        watcher.start()
    try:
        frame.write.mode(mode).format(fmt).partitionBy("topic", "day").save(target)
    finally:
        if watcher:
            watcher.done.set()
    summary = ExportSummary(out=target, format=fmt, topics_named=wanted)
    after = _rows_per_topic(spark, fmt, target)
    counts = {t: n - before.get(t, 0) for t, n in after.items()}
    summary.rows_per_topic = {t: n for t, n in counts.items() if n}
    summary.rows = sum(summary.rows_per_topic.values())
    if not after and mode == "overwrite":
        # No rows: partitionBy wrote no file at all, and a reader could not tell the columns.
        # One empty file with them (limit 0 reads nothing).
        frame.limit(0).write.mode("overwrite").format(fmt).save(target)
    if watcher:
        watcher.finish(summary.rows, _bytes_under(target))
    say("checking the store (CRCs, torn tail, damaged ranges)")
    for row in read_store(spark, store, source=source, report=True).collect():
        if row.foreign_file:
            summary.foreign_files.append(row.foreign_file)
            continue
        summary.records += row.records
        summary.bad_crc += row.bad_crc
        summary.torn_tail_bytes += row.torn_tail_bytes
        if row.torn_tail:
            summary.torn_tails.append(row.torn_tail)
        summary.damaged.extend(row.damaged)
    summary.seconds = time.perf_counter() - started
    return summary


def export_main(
    store_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    fmt: str = "parquet",
    topics: Iterable[str] | str | None = None,
    progress: Progress = True,
    *,
    source: str | None = None,
) -> int:
    """What ``pocketmq export`` runs. ``topics``: topic names (each may hold several, comma
    separated) or None for all; ``progress``: True prints progress and the summary to stderr,
    False/None prints only errors and damage found, a callable receives each line instead;
    ``source``: the data source (``auto``: the JVM one when its jar is built or can be, else
    the Python one; ``jvm``; ``python``; default ``$POCKETMQ_SPARK_SOURCE`` or ``auto``).
    Returns the exit status (0 exported, 1 damaged store or failed job, 2 wrong argument,
    among them a topic with no record in the store, or a JVM source that cannot be built)."""
    from pocketmq.store.reader import check_store_folder

    say = _say(progress)
    store = os.fspath(store_dir)
    try:
        # A store with no commitlog/ yet (a broker that has stored nothing) exports no rows.
        check_store_folder(store)
    except FileNotFoundError as error:  # no such folder, or NotAStoreError
        print(f"pocketmq export: {error}", file=sys.stderr)
        return 2
    fmt = (fmt or "parquet").lower()
    if fmt not in FORMATS:
        print(
            f"pocketmq export: format {fmt!r} is not one of {', '.join(FORMATS)}",
            file=sys.stderr,
        )
        return 2
    try:
        require_spark()
    except SparkMissingError as error:
        print(f"pocketmq export: {error}", file=sys.stderr)
        return 2
    spark = session_for("pocketmq export", "pocketmq-export", source=source, say=say)
    if isinstance(spark, int):
        return spark
    try:
        summary = run_export(spark, store, out, fmt, topics, progress, source=source)
    except Exception as error:  # noqa: BLE001 - a failed job is reported, not raised
        print(f"pocketmq export: the export failed: {error}", file=sys.stderr)
        return 1
    lines = summary.lines()
    missing = summary.missing_topics
    if missing:  # a misspelt --topic: said in one line, whatever --quiet says
        found = ", ".join(f"{t} ({n:,} rows)" for t, n in sorted(summary.rows_per_topic.items()))
        print(
            f"pocketmq export: no records of topic {', '.join(map(repr, missing))} in {store}"
            + (f"; exported {found}" if found else "; nothing exported"),
            file=sys.stderr,
        )
        return 2
    say(lines[0])
    for line in lines[1:]:  # damage is reported even when progress is off
        if progress:
            say(line)
        else:
            print(f"pocketmq export: {line}", file=sys.stderr)
    return 1 if summary.damaged_store else 0


if __name__ == "__main__":  # pragma: no cover - for a quick try without the console script
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pocketmq.sparkexport.cli")
    parser.add_argument("store_dir")
    parser.add_argument("--out", required=True)
    parser.add_argument("--format", default="parquet", choices=FORMATS)
    parser.add_argument("--topic", action="append")
    parser.add_argument("--source", choices=("auto", "jvm", "python"))
    args = parser.parse_args()
    sys.exit(
        export_main(args.store_dir, args.out, args.format, args.topic, True, source=args.source)
    )
