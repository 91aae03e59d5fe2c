"""The same DataFrame without registering a data source: ``binaryFile`` + ``mapInArrow``.

    from pocketmq.sparkexport.fallback import read_store_fallback
    df = read_store_fallback(spark, "/data/store", topics="Orders")

For clusters where Python data sources cannot be registered (Spark before 4.0, locked-down
sessions). Each segment file is read whole by Spark's ``binaryFile`` source, handed to a Python
worker as one Arrow value and parsed there by the same code as the data source. It costs more:
the whole file passes JVM -> Python, one task may hold several files, and a file must be under
2 GiB (one binary value). States and the whole-record CRC range are read on the driver when it
sees the store as a local path; otherwise every message reads as ``available`` and only body CRCs
are checked. No ``report`` option: use the data source, or ``pocketmq export``, for that.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlparse

from pocketmq.sparkexport._require import require_spark

require_spark()

import pyarrow as pa  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

from pocketmq.sparkexport.columns import SPARK_SCHEMA_DDL, read_buffer  # noqa: E402
from pocketmq.sparkexport.scan import RangePlan, RangeStats, ReadOptions, StateSnapshot  # noqa: E402
from pocketmq.store import paths  # noqa: E402
from pocketmq.store.reader import StoreReader  # noqa: E402

__all__ = ["SEGMENT_GLOB", "read_store_fallback"]

SEGMENT_GLOB = "[0-9]" * paths.FILE_NAME_DIGITS  # 20-digit segment names only


def _local_path(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return uri


class ParseSegments:
    """The ``mapInArrow`` function: binaryFile rows (path, content) -> message batches."""

    def __init__(
        self,
        options: ReadOptions,
        states: StateSnapshot,
        crc_range: tuple[int, int] | None,
        last_start: int,
    ) -> None:
        self.options = options
        self.states = states
        self.crc_range = crc_range
        self.last_start = last_start

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            paths_column = batch.column("path")
            contents = batch.column("content")
            for index in range(batch.num_rows):
                path = _local_path(paths_column[index].as_py())
                start = paths.offset_for_file_name(os.path.basename(path))
                data = contents[index].as_py()
                if start is None or not data:
                    continue
                crc_from, crc_until = self.crc_range if self.crc_range else (None, None)
                plan = RangePlan(
                    path=path,
                    segment_start=start,
                    lo=0,
                    hi=len(data),
                    last_segment=start == self.last_start,
                    states=self.states.slice(start, start + len(data)),
                    record_crc_from=crc_from,
                    record_crc_until=crc_until,
                )
                stats = RangeStats(path, start, start + len(data))
                yield from read_buffer(data, plan, self.options, stats)


def read_store_fallback(
    spark: SparkSession, store_dir: str | os.PathLike[str], **options: Any
) -> DataFrame:
    """The ``pocketmq`` DataFrame (same schema and options) through ``binaryFile`` + ``mapInArrow``."""
    from pocketmq.sparkexport.source import _option_text

    read_options = ReadOptions.from_options({k: _option_text(v) for k, v in options.items()})
    if read_options.report:
        raise ValueError("the binaryFile route has no report; use the pocketmq data source")
    root = os.fspath(store_dir)
    commitlog = root.rstrip("/") + "/" + str(paths.COMMITLOG)
    states, crc_range = StateSnapshot(), None
    if os.path.isdir(_local_path(root)) and not os.path.isdir(_local_path(commitlog)):
        # No commitlog/ for binaryFile to list: a store with no records yet reads as empty;
        # StoreReader raises NotAStoreError for a folder that is no store at all.
        StoreReader(_local_path(root))
        return spark.createDataFrame([], SPARK_SCHEMA_DDL)
    if os.path.isdir(_local_path(commitlog)):
        reader = StoreReader(_local_path(root))
        states = StateSnapshot.from_table(reader.states())
        crc_range = reader.store_format.crc_range
    files = (
        spark.read.format("binaryFile")
        .option("pathGlobFilter", SEGMENT_GLOB)
        .option("recursiveFileLookup", "false")
        .load(commitlog)
    )
    starts = [
        paths.offset_for_file_name(os.path.basename(_local_path(row.path)))
        for row in files.select("path").collect()
    ]
    last_start = max((s for s in starts if s is not None), default=-1)
    parse = ParseSegments(read_options, states, crc_range, last_start)
    return files.select("path", "content").mapInArrow(parse, SPARK_SCHEMA_DDL)
