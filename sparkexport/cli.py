"""``pocketmq export STORE_DIR --out DIR [--format parquet] [--topic T ...]``.

The ``pocketmq`` command line (``cli/``) parses the arguments and calls
:func:`export_main`; this module imports without pyspark, so a missing extra gives a message,
not a traceback. The export runs a local Spark session (``local[*]``, or the session already
active in the process), writes the store's messages with the ``pocketmq`` data source, then
prints what the walk found: records, bad CRCs, a torn tail, damaged ranges and files in
``commitlog/`` that are not segments.

Exit status, as the rest of ``pocketmq``: 0 exported, 1 exported but the store is damaged (bad
CRC, torn tail, damaged range) or the Spark job failed, 2 a wrong argument (not a store, unknown
format, pyspark missing). A store with no records yet (no ``commitlog/`` segment) exports an
empty dataset.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pocketmq.sparkexport._require import SparkMissingError, require_spark

__all__ = ["FORMATS", "ExportSummary", "export_main", "local_session", "run_export"]

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

    @property
    def damaged_store(self) -> bool:
        return bool(self.bad_crc or self.torn_tails or self.damaged)

    def lines(self) -> list[str]:
        lines = [
            f"exported {self.rows:,} rows to {self.out} ({self.format}) in {self.seconds:.1f} s; "
            f"the store holds {self.records:,} records"
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


def local_session(app_name: str = "pocketmq-export") -> Any:
    """The active session, or a new local one with settings that start fast on a laptop."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    spark = (
        SparkSession.builder.master(os.environ.get("POCKETMQ_SPARK_MASTER", "local[*]"))
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", os.environ.get("POCKETMQ_SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class _ProgressWatcher(threading.Thread):
    """Reports finished tasks of the running stages every half second while a job runs."""

    def __init__(self, spark: Any, say: Callable[[str], None], label: str) -> None:
        super().__init__(name="pocketmq-export-progress", daemon=True)
        self.tracker = spark.sparkContext.statusTracker()
        self.say = say
        self.label = label
        self.done = threading.Event()

    def run(self) -> None:
        last = None
        while not self.done.wait(0.5):
            finished = total = 0
            for stage_id in self.tracker.getActiveStageIds():
                info = self.tracker.getStageInfo(stage_id)
                if info is not None:
                    finished += info.numCompletedTasks
                    total += info.numTasks
            if total and (finished, total) != last:
                last = (finished, total)
                self.say(f"{self.label}: {finished}/{total} partitions")


def run_export(
    spark: Any,
    store_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    fmt: str = "parquet",
    topics: Iterable[str] | str | None = None,
    progress: Progress = True,
    *,
    mode: str = "overwrite",
) -> ExportSummary:
    """Export one store with ``spark`` (any session: local or a cluster's); returns the summary."""
    from pocketmq.sparkexport.source import read_store

    say = _say(progress)
    store = os.fspath(store_dir)
    target = os.fspath(out)
    wanted = _topic_list(topics)
    options: dict[str, Any] = {"topics": wanted} if wanted else {}
    started = time.perf_counter()
    before = 0
    if mode == "append" and os.path.exists(target):
        before = spark.read.format(fmt).load(target).count()
    frame = read_store(spark, store, **options)
    watcher = _ProgressWatcher(spark, say, f"exporting {store}") if progress else None
    if watcher:
        say(f"exporting {store} to {target} ({fmt})")
        watcher.start()
    try:
        frame.write.mode(mode).format(fmt).save(target)
    finally:
        if watcher:
            watcher.done.set()
            watcher.join()
    summary = ExportSummary(out=target, format=fmt)
    summary.rows = spark.read.format(fmt).load(target).count() - before
    say("checking the store (CRCs, torn tail, damaged ranges)")
    for row in read_store(spark, store, report=True).collect():
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
) -> int:
    """What ``pocketmq export`` runs. ``topics``: topic names (each may hold several, comma
    separated) or None for all; ``progress``: True prints progress and the summary to stderr,
    False/None prints only errors and damage found, a callable receives each line instead.
    Returns the exit status (0 exported, 1 damaged store or failed job, 2 wrong argument)."""
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
    try:
        spark = local_session()
        summary = run_export(spark, store, out, fmt, topics, progress)
    except Exception as error:  # noqa: BLE001 - a failed job is reported, not raised
        print(f"pocketmq export: the export failed: {error}", file=sys.stderr)
        return 1
    lines = summary.lines()
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
    args = parser.parse_args()
    sys.exit(export_main(args.store_dir, args.out, args.format, args.topic, True))
