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

__all__ = ["FORMAT", "PocketMQDataSource", "read_store", "register"]

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


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("pocketmq")`` and ``spark.readStream.format("pocketmq")`` work."""
    spark.dataSource.register(PocketMQDataSource)


def read_store(spark: SparkSession, store_dir: str | os.PathLike[str], **options: Any) -> Any:
    """``spark.read.format("pocketmq")`` with ``options`` (e.g. ``topics="A,B"``) on ``store_dir``,
    registering the source first."""
    register(spark)
    reader = spark.read.format(FORMAT)
    for key, value in options.items():
        reader = reader.option(key, _option_text(value))
    return reader.load(os.fspath(store_dir))


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(str(v) for v in value)
    return str(value)
