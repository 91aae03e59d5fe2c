from __future__ import annotations

import os
from pathlib import Path

import pytest

from pocketmq.store import paths
from pocketmq.store.config import StoreConfig
from pocketmq.store.consume_queue import ENTRY
from pocketmq.store.errors import (
    CorruptRecordError,
    LimitExceededError,
    StoreFullError,
    StoreLockedError,
)
from pocketmq.store.files import DiskBackend
from pocketmq.store.javahash import java_string_hash
from pocketmq.store.message_store import GetStatus, MessageStore, PutMessage
from pocketmq.store.record import RecordLimits
from pocketmq.store.state import MessageState

SMALL = StoreConfig(
    commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024,
    consume_queue_entries_per_file=50,
    index_slot_count=101,
    index_entry_count=400,
)


class FakeClock:
    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now


def put(
    store: MessageStore, i: int, *, topic: str = "T", queue_id: int = 0, size: int = 100
) -> int:
    result = store.put(
        PutMessage(
            topic=topic,
            queue_id=queue_id,
            body=(f"m{i}-".encode() * size)[:size],
            properties={
                "TAGS": "A" if i % 2 else "B",
                "KEYS": f"k{i} shared",
                "UNIQ_KEY": f"U{i:08d}",
            },
        )
    )
    return result.physical_offset


@pytest.fixture(params=["disk", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "disk":
        opened = MessageStore.open(tmp_path / "store", config=SMALL, clock_ms=FakeClock())
    else:
        opened = MessageStore.in_memory(config=SMALL, clock_ms=FakeClock())
    yield opened
    opened.close()


def test_put_and_read_back(store: MessageStore) -> None:
    offsets = [put(store, i, queue_id=i % 3) for i in range(30)]
    assert offsets[0] == 0
    for i, offset in enumerate(offsets):
        record = store.read(offset)
        assert record.body.startswith(f"m{i}-".encode())
        assert record.queue_id == i % 3
        assert record.queue_offset == i // 3
        assert record.physical_offset == offset
        assert record.unique_key == f"U{i:08d}"
    assert store.max_offset("T", 0) == 10 and store.min_offset("T", 0) == 0
    assert store.topics() == ["T"] and store.queue_ids("T") == [0, 1, 2]


def test_consume_queue_entries_hold_offset_size_and_tag_hash(store: MessageStore) -> None:
    put(store, 1)
    queue = store.consume_queues.get("T", 0)
    assert queue is not None
    physical, size, code = queue.get(0, 1)[0]
    assert physical == 0 and size == store.read(0).total_size
    assert code == java_string_hash("A")
    raw = bytes(queue._segments[0].view[:20])
    assert ENTRY.unpack(raw) == (physical, size, code)


def test_get_messages_statuses_and_tag_filter(store: MessageStore) -> None:
    assert store.get_messages("T", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    for i in range(10):
        put(store, i)
    result = store.get_messages("T", 0, 0, 4)
    assert result.status is GetStatus.FOUND
    assert [q for q, _, _ in result.messages] == [0, 1, 2, 3] and result.next_offset == 4
    only_a = store.get_messages("T", 0, 0, 32, tags_codes={java_string_hash("A")})
    assert [q for q, _, _ in only_a.messages] == [1, 3, 5, 7, 9]
    assert store.get_messages("T", 0, 10).status is GetStatus.OFFSET_OVERFLOW_ONE
    assert store.get_messages("T", 0, 11).status is GetStatus.OFFSET_OVERFLOW_BADLY
    raw = bytes(result.messages[1][2])
    assert raw == bytes(store.commitlog.view_at(result.messages[1][1], len(raw)))


def test_state_changes_hide_messages_and_survive_restart(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, config=SMALL) as store:
        offsets = [put(store, i) for i in range(5)]
        store.set_state(offsets[1], MessageState.POISONED, "sent to DLQ")
        store.set_state(offsets[2], MessageState.UNAVAILABLE)
        store.set_state(offsets[2], MessageState.AVAILABLE)
        assert store.state_of(offsets[1]) is MessageState.POISONED
        visible = [q for q, _, _ in store.get_messages("T", 0, 0).messages]
        assert visible == [0, 2, 3, 4]
    with MessageStore.open(root, config=SMALL) as store:
        assert store.state_of(offsets[1]) is MessageState.POISONED
        assert store.state_change_of(offsets[1]).reason == "sent to DLQ"
        assert store.state_of(offsets[2]) is MessageState.AVAILABLE
        assert [q for q, _, _ in store.get_messages("T", 0, 0).messages] == [0, 2, 3, 4]


def test_query_by_key_compares_the_real_key(store: MessageStore) -> None:
    for i in range(20):
        put(store, i)
    assert [r.keys[0] for r in store.query_by_key("T", "k7")] == ["k7"]
    assert len(store.query_by_key("T", "shared", max_results=64)) == 20
    assert store.query_by_key("T", "U00000003")[0].unique_key == "U00000003"
    assert store.query_by_key("Other", "k7") == []


def test_records_never_span_segments(tmp_path: Path) -> None:
    config = StoreConfig(commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024)
    with MessageStore.open(tmp_path / "s", config=config) as store:
        offsets = [
            store.put(PutMessage(topic="T", body=b"z" * 1_000_000)).physical_offset
            for _ in range(9)
        ]
        starts = store.commitlog.segment_starts()
        assert len(starts) == 3
        assert offsets[4] == starts[1]  # the fifth did not fit the first segment
        assert all(store.read(o).body == b"z" * 1_000_000 for o in offsets)
    names = sorted(os.listdir(tmp_path / "s" / "commitlog"))
    assert names == [f"{s:020d}" for s in starts]


def test_limits_refuse_and_write_nothing(store: MessageStore) -> None:
    limited = MessageStore.in_memory(config=StoreConfig(limits=RecordLimits(body_size_max=10)))
    with pytest.raises(LimitExceededError, match="body_size_max"):
        limited.put(PutMessage(topic="T", body=b"x" * 11))
    assert limited.max_physical_offset == 0
    with pytest.raises(LimitExceededError):
        store.put_many(
            [PutMessage(topic="T", body=b"ok"), PutMessage(topic="bad topic!", body=b"x")]
        )
    assert store.max_physical_offset == 0
    limited.close()


def test_second_process_gets_a_clear_error(tmp_path: Path) -> None:
    with (
        MessageStore.open(tmp_path / "s", config=SMALL),
        pytest.raises(StoreLockedError, match="already open"),
    ):
        MessageStore.open(tmp_path / "s", config=SMALL)


def test_abort_file_marks_an_abnormal_start(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path / "s", config=SMALL)
    assert (tmp_path / "s" / "abort").exists() and (tmp_path / "s" / "lock").exists()
    for i in range(10):
        put(store, i)
    store.crash_for_test()
    with MessageStore.open(tmp_path / "s", config=SMALL) as reopened:
        assert reopened.recovery_report.abnormal
        assert reopened.max_offset("T", 0) == 10
    assert not (tmp_path / "s" / "abort").exists()
    with MessageStore.open(tmp_path / "s", config=SMALL) as reopened:
        assert not reopened.recovery_report.abnormal


def test_torn_tail_is_cut_and_reported(tmp_path: Path) -> None:
    """A crash with the last record half-written past the last durable write: only that tail
    is cut."""
    root = tmp_path / "s"
    store = MessageStore.open(root, config=SMALL)
    offsets = [put(store, i) for i in range(10)]
    store.flush_all()  # the checkpoint confirms records 0-9
    offsets.append(put(store, 10))
    end = store.max_physical_offset
    store.crash_for_test()  # abort stays: an abnormal stop
    segment = root / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as handle:
        handle.seek(offsets[10] + 90)
        handle.write(b"\xff\xff")  # inside the body of the record written after the checkpoint
    with MessageStore.open(root, config=SMALL) as store:
        torn = store.recovery_report.torn_tail
        assert torn is not None and torn.valid_size == offsets[10] and "CRC" in torn.reason
        assert torn.bytes_lost == end - offsets[10]
        assert store.recovery_report.damaged == []
        assert store.max_physical_offset == offsets[10]
        assert store.max_offset("T", 0) == 10
        assert store.query_by_key("T", "k10") == []
        assert put(store, 99) == offsets[10]  # appending resumes where the valid data ends
    with MessageStore.open(root, config=SMALL) as store:
        assert store.recovery_report.torn_tail is None
        assert store.read(offsets[10]).unique_key == "U00000099"


def test_damage_after_a_clean_stop_is_quarantined_and_nothing_after_it_is_lost(
    tmp_path: Path,
) -> None:
    """One flipped body byte in the last segment of a cleanly stopped store: that record is
    quarantined (reported, never served) and every record after it stays readable."""
    root = tmp_path / "s"
    with MessageStore.open(root, config=SMALL) as store:
        offsets = [put(store, i) for i in range(10)]
        end = store.max_physical_offset
    with open(root / "commitlog" / f"{0:020d}", "r+b") as handle:
        handle.seek(offsets[7] + 90)
        handle.write(b"\xff\xff")
    for _ in range(2):  # and again at the next open: the quarantine is remembered
        with MessageStore.open(root, config=SMALL) as store:
            report = store.recovery_report
            assert report.torn_tail is None
            [damage] = report.damaged
            assert (damage.start_offset, damage.end_offset) == (offsets[7], offsets[8])
            assert "CRC" in damage.reason
            assert store.max_physical_offset == end
            served = [q for q, _, _ in store.get_messages("T", 0, 0, 32).messages]
            assert served == [0, 1, 2, 3, 4, 5, 6, 8, 9]
            assert store.read(offsets[9]).unique_key == "U00000009"
            with pytest.raises(CorruptRecordError):
                store.read(offsets[7])
    with MessageStore.open(root, config=SMALL) as store:
        assert put(store, 10) == end  # appending goes on after the last record


def damage_the_third_of_nine(root: Path, config: StoreConfig) -> list[int]:
    """Nine 1 MB messages over three segments, two bytes of the third (first segment) changed
    while the store is closed; returns their offsets."""
    with MessageStore.open(root, config=config) as store:
        assert store.checked_from == 0  # a new store: everything is appended by this process
        offsets = [
            store.put(PutMessage(topic="T", body=bytes([i]) * 1_000_000)).physical_offset
            for i in range(9)
        ]
    with open(root / "commitlog" / f"{0:020d}", "r+b") as handle:
        handle.seek(offsets[2] + 100)
        handle.write(b"\x00\x01")
    return offsets


def test_damage_in_an_older_segment_is_reported_and_never_served(tmp_path: Path) -> None:
    root = tmp_path / "s"
    config = StoreConfig(commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024, recovery_scan="full")
    offsets = damage_the_third_of_nine(root, config)
    with MessageStore.open(root, config=config) as store:
        report = store.recovery_report
        assert report.torn_tail is None
        [damage] = report.damaged  # the bad record only: the scan goes on at the next one
        assert (damage.start_offset, damage.end_offset) == (offsets[2], offsets[3])
        assert "DAMAGED" in report.summary()
        with pytest.raises(CorruptRecordError):
            store.read(offsets[2])
        assert store.read(offsets[3]).body == bytes([3]) * 1_000_000
        served, offset = [], 0
        while offset < store.max_offset("T", 0):
            result = store.get_messages("T", 0, offset, 32)
            served += [p for _, p, _ in result.messages]
            offset = result.next_offset
        assert served == [offsets[0], offsets[1], *offsets[3:]]
        assert store.read(offsets[8]).body == bytes([8]) * 1_000_000


def test_a_read_checks_what_this_process_has_not_checked(tmp_path: Path) -> None:
    # A tail recovery scans the newest segment only: damage in an older one is found by the
    # read that would serve it. What the scan or this process wrote is served unchecked.
    root = tmp_path / "s"
    config = StoreConfig(commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024)
    offsets = damage_the_third_of_nine(root, config)
    with MessageStore.open(root, config=config) as store:
        assert store.recovery_report.damaged == []  # not scanned
        assert offsets[2] < store.checked_from == store.recovery_report.scanned_from
        served = [p for _, p, _ in store.get_messages("T", 0, 0, 32, max_bytes=1 << 26).messages]
        assert served == offsets[:2] + offsets[3:]
        assert store.corrupt_reads == 1
        later = store.put(PutMessage(topic="T", body=b"new")).physical_offset
        assert [p for _, p, _ in store.get_messages("T", 0, 9, 32).messages] == [later]
        assert store.corrupt_reads == 1


def test_a_full_disk_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    store = MessageStore.open(tmp_path / "s", config=SMALL)
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(StoreFullError, match="no space left"):
        put(store, 1)
    assert store.max_physical_offset == 0
    assert not (tmp_path / "s" / "commitlog" / f"{0:020d}").exists()
    monkeypatch.undo()
    assert put(store, 2) == 0
    store.close()


def test_flush_to_from_another_thread(tmp_path: Path) -> None:
    import threading

    with MessageStore.open(tmp_path / "s", config=SMALL) as store:
        for i in range(100):
            put(store, i)
        target = store.max_physical_offset
        done: list[int] = []
        worker = threading.Thread(target=lambda: done.append(store.flush_to(target)))
        worker.start()
        for i in range(100, 200):
            put(store, i)
        worker.join()
        assert done == [target] and store.commitlog.flushed_offset >= target


def test_offset_by_time(store: MessageStore) -> None:
    times = [store.put(PutMessage(topic="T", body=b"x")).store_timestamp for _ in range(10)]
    assert store.offset_by_time("T", 0, times[4]) == 4
    assert store.offset_by_time("T", 0, 0) == 0
    assert store.offset_by_time("T", 0, times[-1] + 10) == 10


def test_files_follow_rocketmq_layout(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, config=SMALL) as store:
        for i in range(120):
            put(store, i, topic="Orders", queue_id=1)
        end = store.max_physical_offset
    queue_files = sorted(os.listdir(root / "consumequeue" / "Orders" / "1"))
    assert queue_files == [
        f"{0:020d}",
        f"{1000:020d}",
        f"{2000:020d}",
    ]  # 50 entries * 20 bytes per file
    assert (root / "checkpoint").stat().st_size == 4096
    assert len(os.listdir(root / "index")) >= 1
    assert DiskBackend(root).read_bytes(paths.CHECKPOINT)[32:40] == end.to_bytes(8, "big")


def test_an_unreadable_index_is_rebuilt_from_the_commitlog(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, config=SMALL) as store:
        for i in range(30):
            put(store, i)
    index_file = next((root / "index").iterdir())
    with open(index_file, "r+b") as handle:
        handle.seek(32)
        handle.write((10**6).to_bytes(4, "big"))  # hashSlotCount no header could have
    with MessageStore.open(root, config=SMALL) as store:
        assert (
            store.recovery_report.index_rebuilt
            and "index rebuilt" in store.recovery_report.summary()
        )
        assert [r.keys[0] for r in store.query_by_key("T", "k17")] == ["k17"]
        assert len(store.query_by_key("T", "shared")) == 30


def test_damage_found_once_is_reported_by_every_later_recovery(tmp_path: Path) -> None:
    root = tmp_path / "s"
    full = StoreConfig(commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024, recovery_scan="full")
    tail = StoreConfig(commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024, recovery_scan="tail")
    with MessageStore.open(root, config=full) as store:
        offsets = [
            store.put(PutMessage(topic="T", body=bytes([i]) * 1_000_000)).physical_offset
            for i in range(9)
        ]
    with open(root / "commitlog" / f"{0:020d}", "r+b") as handle:
        handle.seek(offsets[1] + 200)
        handle.write(b"\xee")
    with MessageStore.open(root, config=full) as store:
        assert [d.start_offset for d in store.recovery_report.damaged] == [offsets[1]]
    with MessageStore.open(root, config=tail) as store:  # tail mode does not rescan segment 0
        assert [d.start_offset for d in store.recovery_report.damaged] == [offsets[1]]
        with pytest.raises(CorruptRecordError, match="damaged range"):
            store.read(offsets[1])
        assert store.read(offsets[2]).body == bytes([2]) * 1_000_000  # the next one is intact
