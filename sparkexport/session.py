"""A local Spark session that keeps quiet, and a progress bar for a running export.

Spark's start-up prints, on a laptop, a page of lines the user can do nothing about: the
JVM's "Using incubator modules", log4j's "Using Spark's default log4j profile", "Your hostname
... resolves to a loopback address", "Unable to load native-hadoop library". The session here
binds to 127.0.0.1 (with a ``local`` master) unless ``SPARK_LOCAL_IP`` says otherwise, gives the driver a log4j
configuration that logs errors only, and drops the JVM's known start-up notices from its
standard error (everything else it writes still reaches the user).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ExportProgress", "quiet_local_session"]

# Lines the JVM writes at start whatever the log level (the rest goes through log4j).
_NOISE = re.compile(
    r"WARNING: Using incubator modules|Using Spark's default log4j profile|"
    r"Setting default log level to|To adjust logging level use sc\.setLogLevel|"
    r"NativeCodeLoader|resolves to a loopback address|Set SPARK_LOCAL_IP if you need"
)
_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""


def _log4j_file() -> str:
    path = os.path.join(tempfile.gettempdir(), f"pocketmq-spark-log4j2-{os.getuid()}.properties")
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as file:
            file.write(_LOG4J)
    return path


class _StderrFilter:
    """While the JVM starts, fd 2 is a pipe read by a thread that forwards every line but the
    known notices; the JVM keeps that pipe as its standard error, so the thread keeps running
    (a daemon) after fd 2 is given back to Python."""

    def __init__(self) -> None:
        self.saved = os.dup(2)
        read, write = os.pipe()
        self.read = read
        os.dup2(write, 2)
        os.close(write)
        threading.Thread(target=self._forward, name="spark-stderr", daemon=True).start()

    def _forward(self) -> None:
        with os.fdopen(self.read, "rb") as pipe, os.fdopen(os.dup(self.saved), "wb", 0) as out:
            for line in pipe:
                if not _NOISE.search(line.decode("utf-8", "replace")):
                    out.write(line)

    def restore(self) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)


def quiet_local_session(
    app_name: str, master: str, driver_memory: str, *, jars: str | None = None
) -> Any:
    """A new session without the start-up noise (see the module), local unless ``master``
    names a cluster (then the driver binds as Spark chooses); ``jars`` goes on ``spark.jars``
    (the JVM data source's jar, which Spark ships to the executors)."""
    if master.startswith("local"):  # a cluster's executors must reach the driver: not loopback
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        # One machine: a few shuffle partitions per core, not Spark's 200 (the analyses and
        # the report shuffle small tables many times).
        .config("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 2)))
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_log4j_file()}")
    )
    if jars:
        builder = builder.config("spark.jars", jars)
    try:
        filtered: _StderrFilter | None = _StderrFilter()
    except OSError:  # no fd 2 to take over (a daemon): start as is
        filtered = None
    try:
        spark = builder.getOrCreate()
    finally:
        if filtered is not None:
            filtered.restore()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"  # pragma: no cover - the loop returns


class ExportProgress(threading.Thread):
    """Reports a running export in records and bytes, every half second while it changes.

    The byte ranges the reader will read are known beforehand (``planned_bytes``, the
    partition plan); Spark's status store says, per running stage, how many of its tasks (one
    per range) are done and how many records and bytes they have written. On a terminal it is
    one line redrawn in place, a bar; otherwise (or given ``say``) a line per change."""

    def __init__(
        self,
        spark: Any,
        planned_bytes: int,
        ranges: int,
        say: Callable[[str], None] | None = None,
        *,
        interval: float = 0.5,
    ) -> None:
        super().__init__(name="pocketmq-export-progress", daemon=True)
        self.spark = spark
        self.planned_bytes = planned_bytes
        self.ranges = ranges
        self.say = say
        self.interval = interval
        self.done = threading.Event()
        self.tty = say is None and sys.stderr.isatty()
        self.last: tuple[int, int, int] | None = None

    def snapshot(self) -> tuple[int, int, int, int]:
        """(ranges done, ranges in all, records written, bytes written) of the running job."""
        done = total = records = written = 0
        try:
            stages = self.spark.sparkContext._jsc.sc().statusStore().activeStages()  # noqa: SLF001
            for index in range(stages.size()):
                stage = stages.apply(index)
                done += stage.numCompleteTasks()
                total += stage.numTasks()
                records += stage.outputRecords()
                written += stage.outputBytes()
        except Exception:  # noqa: BLE001 - another Spark build: the public tracker, tasks only
            tracker = self.spark.sparkContext.statusTracker()
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
        return done, total or self.ranges, records, written

    def line(self, done: int, total: int, records: int, written: int) -> str:
        share = done / total if total else 0.0
        read = self.planned_bytes * share
        text = (
            f"{_size(read)} of {_size(self.planned_bytes)} read ({done}/{total} ranges), "
            f"{records:,} records written ({_size(written)})"
        )
        if self.tty:
            filled = int(share * 30)
            return f"[{'#' * filled}{'.' * (30 - filled)}] {share:4.0%} {text}"
        return f"exporting: {text}"

    def show(self, text: str, final: bool = False) -> None:
        if self.say is not None:
            self.say(text)
        elif self.tty:
            sys.stderr.write("\r\033[K" + text + ("\n" if final else ""))
            sys.stderr.flush()
        else:
            print(text, file=sys.stderr, flush=True)

    def run(self) -> None:
        while not self.done.wait(self.interval):
            done, total, records, written = self.snapshot()
            if (done, records, written) != self.last:
                self.last = (done, records, written)
                self.show(self.line(done, total, records, written))

    def finish(self, records: int, written: int) -> None:
        """Stop, and show the end state (all ranges read, ``records`` in the output)."""
        self.done.set()
        self.join()
        self.show(self.line(self.ranges, self.ranges, records, written), final=True)
