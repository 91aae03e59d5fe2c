"""The ``pocketmq`` data source in a real local Spark session: every column, options, damaged
data, byte-range partitions, a RocketMQ store and the binaryFile fallback."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from pocketmq.ids import decode_offset_msg_id, offset_msg_id_from_packed
from pocketmq.store.record import Host
from tests.spark.stores import (
    REPLY_TOPIC,
    data_end,
    expected_rows,
    flip_byte,
    rocketmq_store,
    segment_paths,
    varied_messages,
    write_store,
)

pytestmark = pytest.mark.spark


def collect(frame: Any) -> list[dict[str, Any]]:
    """Rows as plain dicts in the form of ``tests.spark.stores.row_of`` (timestamps checked
    against the raw milliseconds through ``unix_millis``, so no time zone gets in)."""
    from pyspark.sql import functions as F

    checked = frame.select(
        "*",
        F.unix_millis("born_timestamp").alias("_born"),
        F.unix_millis("store_timestamp").alias("_stored"),
    ).orderBy("segment", "physical_offset")
    rows = []
    for row in checked.collect():
        item = row.asDict()
        born, stored = item.pop("_born"), item.pop("_stored")
        del item["born_timestamp"], item["store_timestamp"]
        if born is not None:
            assert born == item["born_timestamp_ms"]
        assert stored == item["store_timestamp_ms"]
        item["body"] = bytes(item["body"])
        rows.append(item)
    return rows


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("spark-store")
    write_store(root, varied_messages(200))
    return root


def test_every_column_comes_back(spark: Any, store: Path) -> None:
    frame = spark.read.format("pocketmq").load(str(store))
    assert frame.rdd.getNumPartitions() == len(segment_paths(store)) >= 3
    rows = collect(frame)
    expected = sorted(expected_rows(store), key=lambda r: (r["segment"], r["physical_offset"]))
    assert rows == expected
    # msg_id and offset_msg_id as the ids package has them
    for row in rows:
        decoded = decode_offset_msg_id(row["offset_msg_id"])
        assert decoded.physical_offset == row["physical_offset"]
        assert f"{decoded.host}:{decoded.port}" == row["store_host"]
        host = Host.parse(row["store_host"])
        assert row["offset_msg_id"] == offset_msg_id_from_packed(
            host.address, host.port, row["physical_offset"]
        )
        assert row["msg_id"] == row["properties"].get("UNIQ_KEY", row["offset_msg_id"])
    states = {row["state"] for row in rows}
    assert states == {"available", "poisoned", "marked_for_deletion"}
    assert {row["transaction_type"] for row in rows} == {"normal", "commit"}
    types = {field.name: field.dataType.simpleString() for field in frame.schema.fields}
    assert types["born_timestamp"] == "timestamp"
    assert types["properties"] == "map<string,string>"
    assert types["keys"] == "array<string>"
    assert types["body"] == "binary"


def test_options(spark: Any, store: Path) -> None:
    expected = expected_rows(store)
    read = spark.read.format("pocketmq")
    orders = read.option("topics", "Orders,%DLQ%group-a").load(str(store))
    assert orders.count() == sum(r["topic"] in ("Orders", "%DLQ%group-a") for r in expected)
    times = sorted(r["store_timestamp_ms"] for r in expected)
    window = (
        spark.read.format("pocketmq")
        .option("startTime", times[5])
        .option("endTime", times[15])
        .load(str(store))
    )
    assert window.count() == 10
    states = spark.read.format("pocketmq").option("states", "poisoned").load(str(store))
    assert [r.state_reason for r in states.collect()] == ["16 retries"]
    everything = (
        spark.read.format("pocketmq").option("includeSystemTopics", "true").load(str(store))
    )
    system = everything.filter("topic = 'rmq_sys_MESSAGE_STATE'").count()
    reply = everything.filter(f"topic = '{REPLY_TOPIC}'").count()  # a system topic too
    assert system == 4 and reply == 1
    assert everything.count() == len(expected) + system + reply


def test_large_segments_are_read_in_byte_ranges(spark: Any, store: Path) -> None:
    whole = spark.read.format("pocketmq").load(str(store))
    split = spark.read.format("pocketmq").option("maxPartitionBytes", "8k").load(str(store))
    assert split.rdd.getNumPartitions() == 8 * len(segment_paths(store))
    offsets = [r.physical_offset for r in split.select("physical_offset").collect()]
    assert len(offsets) == len(set(offsets))
    assert sorted(offsets) == sorted(
        r.physical_offset for r in whole.select("physical_offset").collect()
    )


def test_damaged_data_is_flagged_skipped_and_reported(
    spark: Any, store: Path, tmp_path: Path
) -> None:
    root = tmp_path / "damaged"
    shutil.copytree(store, root, ignore=shutil.ignore_patterns("lock"))
    before = {r["physical_offset"]: r for r in expected_rows(root, system=True)}
    segments = segment_paths(root)
    first = int(segments[0].name)
    victim = sorted(o for o in before if o < int(segments[1].name))[3]
    flip_byte(segments[0], victim - first + 120)  # a body byte: bad CRC
    last = segments[-1]
    end = data_end(last)
    with open(last, "r+b") as handle:  # a write cut short: half a record header
        handle.seek(end)
        handle.write(b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + bytes(range(1, 33)))
    (root / "commitlog" / "00000000000000000000.bak").write_bytes(b"copy")

    frame = spark.read.format("pocketmq").option("includeSystemTopics", "true").load(str(root))
    rows = {
        r.physical_offset: r.crc_ok for r in frame.select("physical_offset", "crc_ok").collect()
    }
    assert set(rows) == set(before)
    assert [o for o, ok in rows.items() if not ok] == [victim]

    report = spark.read.format("pocketmq").option("report", "true").load(str(root)).collect()
    segments_seen = [r for r in report if r.foreign_file is None]
    assert sum(r.records for r in segments_seen) == len(before)
    assert sum(r.bad_crc for r in segments_seen) == 1
    torn = [r for r in segments_seen if r.torn_tail]
    assert len(torn) == 1 and torn[0].torn_tail_bytes == 40 and str(last) in torn[0].torn_tail
    assert [r.foreign_file for r in report if r.foreign_file] == [
        str(root / "commitlog" / "00000000000000000000.bak")
    ]


def test_a_store_written_by_rocketmq(spark: Any, tmp_path: Path) -> None:
    expected = rocketmq_store(tmp_path)
    for row in expected:
        row["state"], row["state_reason"] = "available", None
    rows = collect(spark.read.format("pocketmq").load(str(tmp_path)))
    assert rows == sorted(expected, key=lambda r: (r["segment"], r["physical_offset"]))


def test_the_binary_file_fallback_gives_the_same_frame(spark: Any, store: Path) -> None:
    from pocketmq.sparkexport import read_store_fallback

    fallback = read_store_fallback(spark, store, topics=["Orders", "Payments"])
    source = spark.read.format("pocketmq").option("topics", "Orders,Payments").load(str(store))
    assert fallback.schema == source.schema
    assert collect(fallback) == collect(source)
