"""The command line, run as a user runs it (a subprocess of the installed console script's module)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from pocketmq.store.config import StoreConfig
from pocketmq.store.message_store import MessageStore, PutMessage
from pocketmq.store.state import MessageState


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_id_decode_prints_every_scheme_as_json() -> None:
    done = run(
        "id", "decode", "0156F7E71C361B21BC024CCDBE00000000", "0a00000500002a9f0000000000012345"
    )
    assert done.returncode == 0, done.stderr
    v5, offset = (json.loads(line) for line in done.stdout.splitlines())
    assert v5["scheme"] == "v5" and v5["mac"] == "56:F7:E7:1C:36:1B" and v5["pid"] == 8636
    assert v5["time"].startswith("2022-03-23T14:50:38") and v5["sequence"] == 0
    assert offset["scheme"] == "offset" and offset["host"] == "10.0.0.5" and offset["port"] == 10911
    assert offset["physical_offset"] == 0x12345


def test_id_decode_rejects_with_a_reason_and_status_2() -> None:
    done = run("id", "decode", "XYZ")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "XYZ" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_store_inspect_lists_records_states_and_summary(tmp_path: Path) -> None:
    config = StoreConfig(
        commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024,
        index_slot_count=100,
        index_entry_count=400,
    )
    with MessageStore.open(tmp_path, config=config) as store:
        first = store.put(
            PutMessage(
                topic="Orders",
                body=b"hello",
                properties={"TAGS": "new", "KEYS": "o-1 o-2", "UNIQ_KEY": "ABC"},
            )
        )
        store.put(PutMessage(topic="Other", body=b"\x00\x01binary"))
        store.set_state(first.physical_offset, MessageState.POISONED, "test")
    done = run("store", "inspect", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    summary = rows.pop()["summary"]
    assert summary["records"] == 3 and summary["bad_records"] == 0 and summary["torn_tail"] is None
    orders = rows[0]
    assert (
        orders["topic"] == "Orders"
        and orders["keys"] == ["o-1", "o-2"]
        and orders["unique_key"] == "ABC"
    )
    assert orders["state"] == "poisoned" and orders["crc_ok"] and orders["body_preview"] == "hello"
    assert orders["offset_msg_id"] == "7F00000100002A9F" + "0" * 16
    assert rows[1]["body_preview"].startswith("0x0001")
    text = run("store", "inspect", str(tmp_path), "--topic", "Orders")
    assert text.returncode == 0
    assert "Orders" in text.stdout and "Other" not in text.stdout.split("--")[0]
    assert "state=poisoned" in text.stdout


def test_store_inspect_reports_a_bad_crc_and_a_torn_tail(tmp_path: Path) -> None:
    config = StoreConfig(
        commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024,
        index_slot_count=100,
        index_entry_count=400,
    )
    with MessageStore.open(tmp_path, config=config) as store:
        offsets = [
            store.put(PutMessage(topic="T", body=b"x" * 100)).physical_offset for _ in range(4)
        ]
    segment = tmp_path / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as handle:
        handle.seek(offsets[1] + 100)
        handle.write(b"Y")  # body byte: CRC mismatch, structure intact
        handle.seek(offsets[3] + 4)
        handle.write(b"\0\0\0\0")  # magic of the last record: torn tail
    done = run("store", "inspect", str(tmp_path), "--json")
    assert done.returncode == 1
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    summary = rows.pop()["summary"]
    assert [r["crc_ok"] for r in rows] == [True, False, True]
    assert summary["bad_records"] == 1 and summary["records"] == 3
    assert "bad magic" in summary["torn_tail"] and str(offsets[3]) in summary["torn_tail"]


def _java_style_record(
    topic: str, body: bytes, properties: str, queue_offset: int, physical: int
) -> bytes:
    """A record built field by field the way RocketMQ's encoder lays it out (independent of store/)."""
    topic_bytes = topic.encode()
    props = properties.encode()
    total = (
        4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + 8
        + 8
        + 8
        + 4
        + 8
        + 4
        + len(body)
        + 1
        + len(topic_bytes)
        + 2
        + len(props)
    )
    out = struct.pack(">iiiii", total, -626843481, zlib.crc32(body) & 0x7FFFFFFF, 2, 0)
    out += struct.pack(">qqi", queue_offset, physical, 0)
    out += struct.pack(">q4si", 1_700_000_000_000, bytes([192, 168, 0, 7]), 53000)
    out += struct.pack(">q4si", 1_700_000_000_050, bytes([192, 168, 0, 1]), 10911)
    out += struct.pack(">iq", 0, 0)
    out += struct.pack(">i", len(body)) + body + struct.pack(">b", len(topic_bytes)) + topic_bytes
    out += struct.pack(">h", len(props)) + props
    assert len(out) == total
    return out


def test_store_inspect_reads_a_rocketmq_commitlog_alone(tmp_path: Path) -> None:
    """Only commitlog/, a segment size pocketmq would not choose, a filler, and a second segment."""
    size = 1024 * 1024
    first = bytearray(size)
    position = 0
    for i in range(3):
        record = _java_style_record(
            "TopicTest",
            f"Hello RocketMQ {i}".encode(),
            f"TAGS\x01TagA\x02KEYS\x01k{i}\x02UNIQ_KEY\x01C0A80007{i:024X}\x02WAIT\x01true\x02",
            i,
            position,
        )
        first[position : position + len(record)] = record
        position += len(record)
    first[position : position + 8] = struct.pack(">iI", size - position, 0xCBD43194)
    second = bytearray(size)
    record = _java_style_record("TopicTest", b"next file", "TAGS\x01TagB\x02", 3, size)
    second[: len(record)] = record
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(first)
    (tmp_path / "commitlog" / f"{size:020d}").write_bytes(second)
    (tmp_path / "commitlog" / "notes.txt").write_text("not a segment")
    done = run("store", "inspect", str(tmp_path), "--json")
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    summary = rows.pop()["summary"]
    assert [r["body_preview"] for r in rows] == [
        "Hello RocketMQ 0",
        "Hello RocketMQ 1",
        "Hello RocketMQ 2",
        "next file",
    ]
    assert rows[3]["physical_offset"] == size and rows[3]["tags"] == "TagB"
    assert (
        rows[0]["born_host"] == "192.168.0.7:53000" and rows[0]["store_host"] == "192.168.0.1:10911"
    )
    assert rows[0]["offset_msg_id"] == "C0A8000100002A9F0000000000000000"
    assert all(r["state"] == "available" and r["crc_ok"] for r in rows)
    assert summary["torn_tail"] is None and summary["not_segments"][0].endswith("notes.txt")
    assert done.returncode == 0


def test_store_inspect_on_a_folder_that_is_not_a_store(tmp_path: Path) -> None:
    done = run("store", "inspect", str(tmp_path))
    assert done.returncode == 2 and "not a RocketMQ or pocketmq store" in done.stderr


def test_bad_delay_levels_are_refused_before_anything_starts() -> None:
    done = run("standalone", "--memory", "--delay-levels", "1s soon")
    assert done.returncode != 0 and "--delay-levels" in done.stderr and "'soon'" in done.stderr


def test_a_second_broker_on_the_same_store_says_why_in_one_line(tmp_path: Path) -> None:
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pocketmq.cli",
            "standalone",
            "--port",
            "0",
            "--namesrv-port",
            "0",
            "--data",
            str(tmp_path),
            "--no-grpc",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert first.stdout is not None and b"ready" in first.stdout.readline()
        second = run(
            "standalone", "--port", "0", "--namesrv-port", "0", "--data", str(tmp_path), "--no-grpc"
        )
        assert second.returncode == 1
        assert (
            "cannot start" in second.stderr and "already open in another process" in second.stderr
        )
        assert "Traceback" not in second.stderr
    finally:
        first.terminate()
        first.wait(10)
        assert first.stdout is not None
        first.stdout.close()


def test_a_grpc_port_in_use_is_said_in_one_line() -> None:
    pytest.importorskip("grpc", reason="from a pocketmq checkout: pip install -e '.[grpc]'")
    from tests.integration.cluster import free_port

    port = str(free_port())
    common = ("standalone", "--memory", "--port", "0", "--namesrv-port", "0", "--grpc-port", port)
    first = subprocess.Popen(
        [sys.executable, "-m", "pocketmq.cli", *common],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert first.stdout is not None
        assert f"grpc 127.0.0.1:{port}" in first.stdout.readline().decode()
        second = run(*common)
        assert second.returncode == 1
        assert f"cannot start: gRPC port 127.0.0.1:{port} is not available" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        first.terminate()
        first.wait(10)
        first.stdout.close()
