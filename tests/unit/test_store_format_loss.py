"""Losing config/storeFormat.json turns no check off: the record-CRC range comes back from the
checkpoint's copy, else from the commitlog, and a damaged ``__CRC32#`` is still caught (issue 15)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from pocketmq.store import paths
from pocketmq.store.checkpoint import Checkpoint
from pocketmq.store.config import StoreConfig
from pocketmq.store.message_store import MessageStore, PutMessage
from pocketmq.store.record import decode_record
from pocketmq.store.store_format import FORMAT_FILE, StoreFormat

CONFIG = StoreConfig(
    commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024,
    consume_queue_entries_per_file=50,
    index_slot_count=101,
    index_entry_count=400,
)


def write(root: Path, count: int, config: StoreConfig = CONFIG) -> list[tuple[int, int]]:
    with MessageStore.open(root, config=config) as store:
        results = [
            store.put(PutMessage(topic="T", body=f"m{i}".encode() * 20, properties={"TAGS": "a"}))
            for i in range(count)
        ]
    return [(r.physical_offset, r.total_size) for r in results]


def change_crc_digit(root: Path, offset: int, size: int) -> None:
    """One digit of the record's __CRC32# value becomes another: the body CRC still holds."""
    path = root / paths.commitlog_segment(0)
    data = bytearray(path.read_bytes())
    at = offset + size - 2  # the most significant digit, just before the closing 0x02
    data[at] = ord("0") + (data[at] - ord("0") + 1) % 10
    path.write_bytes(data)


def bodies(store: MessageStore) -> list[bytes]:
    result = store.get_messages("T", 0, 0, 100)
    return [decode_record(view).body for _, _, view in result.messages]


def lose_checkpoint_copy(root: Path) -> None:
    path = root / paths.CHECKPOINT
    data = bytearray(path.read_bytes())
    data[40:64] = bytes(24)
    path.write_bytes(data)


@pytest.mark.parametrize("also_lost", ["nothing", "checkpoint copy", "damaged checkpoint copy"])
def test_damaged_crc_property_is_caught_without_the_file(tmp_path: Path, also_lost: str) -> None:
    records = write(tmp_path, 12)
    change_crc_digit(tmp_path, *records[5])
    (tmp_path / FORMAT_FILE).unlink()
    if also_lost == "checkpoint copy":
        lose_checkpoint_copy(tmp_path)
    elif also_lost == "damaged checkpoint copy":
        path = tmp_path / paths.CHECKPOINT
        data = bytearray(path.read_bytes())
        data[50] ^= 0x01  # inside recordCrcFrom: the copy's own CRC fails, the copy is ignored
        path.write_bytes(data)
    with MessageStore.open(tmp_path, config=CONFIG) as store:
        report = store.recovery_report
        assert report.store_format_rederived is not None
        source = "checkpoint" if also_lost == "nothing" else "derived from the commitlog"
        assert source in report.store_format_rederived
        assert [d.start_offset for d in report.damaged] == [records[5][0]]
        assert "__CRC32#" in report.damaged[0].reason
        served = bodies(store)
        assert b"m5" * 20 not in served and len(served) == 11
    saved = msgspec.json.decode((tmp_path / FORMAT_FILE).read_bytes(), type=StoreFormat)
    assert saved.recordCrcFrom == 0 and saved.recordCrcUntil is None
    assert [d.start for d in saved.damaged] == [records[5][0]]


def test_derived_range_starts_where_the_store_began_writing_crcs(tmp_path: Path) -> None:
    """Records written without the CRC before it was turned on are not taken for damage."""
    write(tmp_path, 5, msgspec.structs.replace(CONFIG, append_record_crc=False))
    later = write(tmp_path, 5)
    (tmp_path / FORMAT_FILE).unlink()
    lose_checkpoint_copy(tmp_path)
    with MessageStore.open(tmp_path, config=CONFIG) as store:
        assert store.recovery_report.damaged == []
        assert store.store_format.crc_range == (later[0][0], 1 << 63)
        assert len(bodies(store)) == 10


def test_derived_range_closes_where_the_store_stopped_writing_crcs(tmp_path: Path) -> None:
    first = write(tmp_path, 4)
    write(tmp_path, 3, msgspec.structs.replace(CONFIG, append_record_crc=False))
    (tmp_path / FORMAT_FILE).unlink()
    lose_checkpoint_copy(tmp_path)
    with MessageStore.open(
        tmp_path, config=msgspec.structs.replace(CONFIG, append_record_crc=False)
    ) as store:
        assert store.store_format.crc_range == (0, first[-1][0] + first[-1][1])
        assert store.recovery_report.damaged == []
        assert len(bodies(store)) == 7


def test_checkpoint_keeps_the_range_beyond_rocketmqs_forty_bytes() -> None:
    for span in [(0, None), (242, 4096), (None, None)]:
        checkpoint = Checkpoint(1, 2, 3, 4, 5, record_crc_range=span)
        data = checkpoint.encode()
        assert len(data) == 4096
        assert Checkpoint.decode(data) == checkpoint
        # What RocketMQ reads (five longs) is unchanged by the copy.
        assert Checkpoint.decode(data[:40]) == Checkpoint(1, 2, 3, 4, 5)
    damaged = bytearray(Checkpoint(1, 2, 3, 4, 5, record_crc_range=(0, None)).encode())
    damaged[60] ^= 0xFF
    assert Checkpoint.decode(bytes(damaged)).record_crc_range is None
