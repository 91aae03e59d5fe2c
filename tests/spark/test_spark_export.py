"""``pocketmq export`` (``sparkexport.cli.export_main``), the spark-submit entry point and an
end-to-end run: messages sent to a running broker come back from its store."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from pocketmq.sparkexport.cli import export_main
from tests.spark.stores import expected_rows, flip_byte, segment_paths, varied_messages, write_store

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export-store")
    write_store(root, varied_messages(60))
    return root


def test_export_writes_parquet_and_says_what_it_found(
    spark: Any, store: Path, tmp_path: Path
) -> None:
    lines: list[str] = []
    out = tmp_path / "orders"
    assert export_main(store, out, "parquet", ["Orders", "Payments"], lines.append) == 0
    exported = spark.read.parquet(str(out))
    expected = [r for r in expected_rows(store) if r["topic"] in ("Orders", "Payments")]
    assert exported.count() == len(expected)
    # The source's columns (topic last: a partition column) and the day, the other one.
    source = spark.read.format("pocketmq").load(str(store)).schema
    assert {f.name: f.dataType for f in exported.schema if f.name != "day"} == {
        f.name: f.dataType for f in source
    }
    assert exported.schema["day"].dataType.typeName() == "date"
    # The shared session has no JVM jar: the Python source reads, and the first line says so.
    assert lines[0] == "reading with the Python data source (the session has no JVM jar)"
    assert lines[1].startswith(f"exporting {store}")
    assert f"exported {len(expected)} rows to {out} (parquet)" in lines[-1]

    damaged = tmp_path / "damaged"
    shutil.copytree(store, damaged, ignore=shutil.ignore_patterns("lock"))
    flip_byte(segment_paths(damaged)[0], 300)
    lines.clear()
    assert (
        export_main(damaged, tmp_path / "all.json", "json", None, lines.append, source="python")
        == 1
    )
    assert lines[0] == "reading with the Python data source (asked for)"
    assert "bad CRC: 1 records (exported with crc_ok = false)" in lines
    assert spark.read.json(str(tmp_path / "all.json")).filter("not crc_ok").count() == 1


def test_export_refuses_wrong_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert export_main(tmp_path, tmp_path / "out", "parquet", None, False) == 2
    assert "not a RocketMQ or pocketmq store" in capsys.readouterr().err
    (tmp_path / "commitlog").mkdir()
    assert export_main(tmp_path, tmp_path / "out", "csv", None, False) == 2
    assert "format 'csv' is not one of parquet, json, orc" in capsys.readouterr().err
    assert export_main(tmp_path, tmp_path / "out", "parquet", None, False, source="scala") == 2
    assert capsys.readouterr().err.strip() == (
        "pocketmq export: pocketmq source 'scala': choose one of auto, jvm, python"
    )


def test_a_store_with_no_records_yet_exports_no_rows(
    spark: Any, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pocketmq.sparkexport import read_store_fallback, submit
    from pocketmq.store.message_store import MessageStore

    empty = tmp_path / "just-started"
    MessageStore.open(empty).close()  # a broker's files, no commitlog/ segment
    lines: list[str] = []
    assert export_main(empty, tmp_path / "out", "parquet", None, lines.append) == 0
    exported = spark.read.parquet(str(tmp_path / "out"))
    assert exported.count() == 0
    # The source's columns (topic last: a partition column) and the day, the other one.
    source = spark.read.format("pocketmq").load(str(store)).schema
    assert {f.name: f.dataType for f in exported.schema if f.name != "day"} == {
        f.name: f.dataType for f in source
    }
    assert exported.schema["day"].dataType.typeName() == "date"
    assert any("exported 0 rows" in line for line in lines), lines
    assert read_store_fallback(spark, empty).count() == 0
    assert submit.main([str(empty), "--out", str(tmp_path / "submitted")]) == 0
    missing = tmp_path / "missing"
    assert export_main(missing, tmp_path / "out2", "parquet", None, False) == 2
    assert f"no such folder: {missing}" in capsys.readouterr().err
    assert submit.main([str(missing), "--out", str(tmp_path / "out3")]) == 2
    assert f"no such folder: {missing}" in capsys.readouterr().err


def test_the_spark_submit_entry_point(
    spark: Any, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pocketmq.sparkexport import submit

    assert submit.main(["--path"]) == 0
    assert Path(capsys.readouterr().out.strip()) == Path(submit.__file__).resolve()
    out = tmp_path / "both"
    assert submit.main([str(store), str(store), "--out", str(out), "--topic", "Orders"]) == 0
    orders = sum(r["topic"] == "Orders" for r in expected_rows(store))
    assert spark.read.parquet(str(out)).count() == 2 * orders
    assert submit.main(["--out", str(out)]) == 2


async def test_messages_sent_to_a_running_broker_come_back(spark: Any, tmp_path: Path) -> None:
    from pocketmq.broker.app import Broker
    from tests.integration.raw import RawClient

    data = tmp_path / "broker"
    async with Broker(port=0, store=data) as broker:

        def send() -> list[Any]:
            with RawClient(broker.address) as client:
                return [
                    client.send_message(
                        "E2E",
                        f"hello {i}".encode(),
                        queue_id=i % 2,
                        properties=f"UNIQ_KEY\x01ID{i:04d}\x02TAGS\x01t{i % 2}\x02KEYS\x01k{i} x\x02",
                    )
                    for i in range(20)
                ]

        responses = await asyncio.to_thread(send)
        address = broker.address
    rows = (
        spark.read.format("pocketmq")
        .option("topics", "E2E")
        .load(str(data))
        .orderBy("physical_offset")
        .collect()
    )
    assert len(rows) == 20
    for i, (response, row) in enumerate(zip(responses, rows, strict=True)):
        assert response.code == 0, response.remark
        assert row.offset_msg_id == response.ext_fields["msgId"]
        assert row.queue_id == int(response.ext_fields["queueId"]) == i % 2
        assert row.queue_offset == int(response.ext_fields["queueOffset"])
        assert row.msg_id == f"ID{i:04d}"
        assert (row.tags, list(row.keys), bytes(row.body)) == (
            f"t{i % 2}",
            [f"k{i}", "x"],
            f"hello {i}".encode(),
        )
        assert row.store_host == address and row.crc_ok and row.state == "available"
