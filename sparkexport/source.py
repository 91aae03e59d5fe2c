"""The ``pocketmq`` PySpark data source: batch and streaming reads of a store's commitlog.

    from pocketmq import sparkexport
    sparkexport.register(spark)
    df = spark.read.format("pocketmq").load("/data/store")
    report = spark.read.format("pocketmq").option("report", "true").load("/data/store")
    stream = spark.readStream.format("pocketmq").load("/data/store")

Planning (``partitions``) runs on the driver: it lists the segments, folds the state records and
cuts segments larger than ``maxPartitionBytes`` into byte ranges. Reading runs in Python workers,
one task per range, each yielding Arrow record batches; the driver and every executor must see
the store at the same path (a local disk, or shared storage on a cluster).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Sequence
from typing import Any

from pocketmq.sparkexport._require import require_spark

require_spark()

import pyarrow as pa  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType  # noqa: E402

from pocketmq.sparkexport.columns import (  # noqa: E402
    REPORT_SPARK_SCHEMA_DDL,
    SPARK_SCHEMA_DDL,
    count_range,
    read_range,
    report_batch,
)
from pocketmq.sparkexport.scan import (  # noqa: E402
    RangePlan,
    RangeStats,
    ReadOptions,
    plan_store,
)
from pocketmq.sparkexport.stream import StoreTail  # noqa: E402

__all__ = [
    "FORMAT",
    "PYTHON_FORMAT",
    "PocketMQDataSource",
    "PocketMQPythonDataSource",
    "jvm_source_active",
    "read_store",
    "register",
    "session",
    "source_choice",
    "use_source",
]

FORMAT = "pocketmq"


class RangePartition(InputPartition):
    """One Spark task: the records starting in a byte range of one segment."""

    def __init__(self, plan: RangePlan) -> None:
        self.plan = plan

    def __repr__(self) -> str:
        plan = self.plan
        return f"RangePartition({plan.path} [{plan.lo}, {plan.hi}))"


class ForeignFilesPartition(InputPartition):
    """The report rows for files in ``commitlog/`` that are not segments."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __repr__(self) -> str:
        return f"ForeignFilesPartition({len(self.paths)} files)"


def _store_path(options: Any) -> str:
    if options.get("paths"):
        raise ValueError(
            "pocketmq: load one store at a time and union the DataFrames (unionByName)"
        )
    path = options.get("path")
    if not path:
        raise ValueError(
            "pocketmq: give the store directory, e.g. spark.read.format('pocketmq').load('/data/store')"
        )
    return os.fspath(path)


def _read(partition: InputPartition, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, ForeignFilesPartition):
        yield report_batch([], partition.paths)
        return
    if not isinstance(partition, RangePartition):
        # Spark's stand-in when partitions() found nothing (a store with no records yet):
        # InputPartition(None), read as no rows.
        assert partition.value is None, partition
        return
    plan = partition.plan
    stats = RangeStats(plan.path, plan.segment_start + plan.lo, plan.segment_start + plan.hi)
    if options.report:
        with open(plan.path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            count_range(mapped, plan, stats)
        finally:
            mapped.close()
        yield report_batch([stats], [])
        return
    yield from read_range(plan, options, stats)


class PocketMQReader(DataSourceReader):
    def __init__(self, path: str, options: ReadOptions) -> None:
        self.path = path
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        plan = plan_store(self.path, self.options)
        parts: list[InputPartition] = [RangePartition(r) for r in plan.ranges]
        if self.options.report and plan.foreign_files:
            parts.append(ForeignFilesPartition(plan.foreign_files))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(partition, self.options)


class PocketMQStreamReader(DataSourceStreamReader):
    """Tails a live commitlog; offsets are ``{"offset": physical offset}`` (the end of the last
    complete record read). New records arrive in micro-batches."""

    def __init__(self, path: str, options: ReadOptions, raw: Any) -> None:
        self.path = path
        self.options = options
        lowered = {str(k).lower(): str(v) for k, v in raw.items()}
        self.starting = lowered.get("startingoffsets", "earliest").strip().lower()
        max_records = lowered.get("maxrecordspertrigger")
        self.max_records = int(max_records) if max_records else None
        self.tail = StoreTail(path)

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's API
        if self.starting == "earliest":
            return {"offset": self.tail.first_offset()}
        if self.starting == "latest":
            return {"offset": self.tail.advance(self.tail.first_offset(), None)[0]}
        try:
            return {"offset": int(self.starting)}
        except ValueError:
            raise ValueError(
                f"startingOffsets: {self.starting!r} is not earliest, latest or a physical offset"
            ) from None

    def getDefaultReadLimit(self) -> Any:  # noqa: N802
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        if self.max_records:
            return ReadMaxRows(self.max_records)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: Any) -> dict:  # noqa: N802
        from pyspark.sql.streaming.datasource import ReadMaxRows

        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end, _ = self.tail.advance(int(start["offset"]), max_rows)
        return {"offset": end}

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        return {"offset": self.tail.known_end} if self.tail.known_end is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        low, high = int(start["offset"]), int(end["offset"])
        if high <= low:
            return []
        plan = plan_store(self.path, self.options, start=low, end=high)
        return [RangePartition(r) for r in plan.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(partition, self.options)

    def commit(self, end: dict) -> None:
        pass


class PocketMQDataSource(DataSource):
    """``spark.read.format("pocketmq")``: see :mod:`sparkexport` for the schema and options."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _options(self) -> ReadOptions:
        return ReadOptions.from_options(self.options)

    def schema(self) -> str:
        return REPORT_SPARK_SCHEMA_DDL if self._options().report else SPARK_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return PocketMQReader(_store_path(self.options), self._options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        options = self._options()
        if options.report:
            raise ValueError("pocketmq: the report option is for batch reads only")
        return PocketMQStreamReader(_store_path(self.options), options, self.options)


class PocketMQPythonDataSource(PocketMQDataSource):
    """The Python source under a second name, ``pocketmq_python``: when the JVM source holds
    ``pocketmq`` (Spark refuses a Python source whose name a JVM source already has), streaming
    reads and a forced Python read go through this name."""

    @classmethod
    def name(cls) -> str:
        return PYTHON_FORMAT


PYTHON_FORMAT = "pocketmq_python"
JVM_CLASS = "io.pocketmq.spark.PocketMQSource"
SOURCE_ENV = "POCKETMQ_SPARK_SOURCE"  # auto (default), jvm or python
_CHOICES = ("auto", "jvm", "python")


def jvm_source_active(spark: SparkSession) -> bool:
    """Whether ``format("pocketmq")`` resolves to the JVM source in this session (its jar is on
    the classpath with its service registration)."""
    try:
        jvm: Any = spark._jvm  # type: ignore[attr-defined]
        lookup = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource
        found = lookup(FORMAT, spark._jsparkSession.sessionState().conf())  # type: ignore[attr-defined]
        return str(found.getName()) == JVM_CLASS
    except Exception:  # noqa: BLE001 - no JVM source by that name (or a Connect session)
        return False


def register(spark: SparkSession, source: str | None = None) -> str:
    """Make ``spark.read.format("pocketmq")`` work, with the JVM source when its jar is on the
    session's classpath and the Python source otherwise; returns which (``"jvm"``/``"python"``).

    ``source`` (else ``$POCKETMQ_SPARK_SOURCE``): ``auto`` (default), ``jvm`` (build the jar if
    needed and add it to this session with ``ADD JAR``: the session's own thread then finds it;
    for clusters start the session with it, :func:`session` or ``spark.jars``) or ``python``
    (refused when the JVM jar is already on the classpath: Spark resolves ``pocketmq`` to it
    first; ``format("pocketmq_python")`` is the Python source then). Streaming reads are the
    Python source's: ``pocketmq``, or ``pocketmq_python`` when the JVM source holds the name."""
    choice = source_choice(source)
    active = jvm_source_active(spark)
    if choice == "jvm" and not active:
        from pocketmq.sparkexport.jvm import build_jar

        spark.sql(f"ADD JAR '{build_jar()}'")
        active = jvm_source_active(spark)
        if not active:
            raise RuntimeError(
                "pocketmq: the JVM source's jar was added but Spark does not find it; start the "
                "session with it (sparkexport.session(), or spark.jars = "
                "`python -m pocketmq.sparkexport.jvm build`)"
            )
    if choice == "python" and active:
        raise ValueError(
            "pocketmq: the JVM source's jar is on this session's classpath, so Spark reads "
            "format('pocketmq') with it; use format('pocketmq_python') for the Python source"
        )
    spark.dataSource.register(PocketMQPythonDataSource)
    if active:
        return "jvm"
    spark.dataSource.register(PocketMQDataSource)
    return "python"


def session(
    master: str = "local[*]",
    *,
    app_name: str = "pocketmq",
    jvm: bool | None = None,
    config: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the ``pocketmq`` source registered; with the JVM source's jar on
    ``spark.jars`` (built at first use) unless ``jvm=False``, or ``$POCKETMQ_SPARK_SOURCE`` is
    ``python``, or the jar cannot be built (no ``javac``: the Python source then)."""
    choice = os.environ.get(SOURCE_ENV, "auto").strip().lower()
    want_jvm = jvm if jvm is not None else choice != "python"
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    if want_jvm:
        from pocketmq.sparkexport.jvm import JvmBuildError, build_jar

        try:
            jar = str(build_jar())
        except JvmBuildError:
            if jvm:
                raise
        else:
            jars = (config or {}).get("spark.jars")
            builder = builder.config("spark.jars", f"{jars},{jar}" if jars else jar)
    spark = builder.getOrCreate()
    register(spark, "auto")
    return spark


def source_choice(source: str | None = None) -> str:
    """``source``, else ``$POCKETMQ_SPARK_SOURCE``, else ``auto``; checked."""
    choice = (source or os.environ.get(SOURCE_ENV) or "auto").strip().lower()
    if choice not in _CHOICES:
        raise ValueError(f"pocketmq source {choice!r}: choose one of {', '.join(_CHOICES)}")
    return choice


def use_source(spark: SparkSession, source: str | None = None) -> tuple[str, str]:
    """Register the sources and say which one a read with ``source`` goes through:
    (``"jvm"`` or ``"python"``, the format name to read with). Unlike :func:`register`, a forced
    ``python`` in a session holding the JVM jar reads ``pocketmq_python`` instead of refusing."""
    choice = source_choice(source)
    if choice == "python" and jvm_source_active(spark):
        register(spark, "auto")
        return "python", PYTHON_FORMAT
    return register(spark, choice), FORMAT


def read_store(
    spark: SparkSession,
    store_dir: str | os.PathLike[str],
    *,
    source: str | None = None,
    **options: Any,
) -> Any:
    """``spark.read.format("pocketmq")`` with ``options`` (e.g. ``topics="A,B"``) on ``store_dir``,
    registering the source first; ``source`` (``auto``, ``jvm``, ``python``) as :func:`use_source`."""
    _, name = use_source(spark, source)
    reader = spark.read.format(name)
    for key, value in options.items():
        reader = reader.option(key, _option_text(value))
    return reader.load(os.fspath(store_dir))


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(str(v) for v in value)
    return str(value)
