"""Disk pressure: what retention may delete to make room, and how writes are refused.

The disk's usage is a fake probe and a full disk an injected ENOSPC, so every case is exact.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path, PurePosixPath

import pytest

from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.services.retention import (
    DiskGuard,
    RetentionPolicy,
    RetentionService,
    consumed_until,
)
from pocketmq.broker.services.send import SendService
from pocketmq.broker.services.topics import TopicManager
from pocketmq.store.config import StoreConfig
from pocketmq.store.errors import StoreFullError
from pocketmq.store.files import DiskBackend, Segment
from pocketmq.store.message_store import MessageStore, PutMessage
from pocketmq.store.record import RecordLimits

SEGMENT = 256 * 1024
CONFIG = StoreConfig(
    commitlog_segment_size=SEGMENT,
    index_slot_count=101,
    index_entry_count=1000,
    limits=RecordLimits(body_size_max=128 * 1024, properties_size_max=4096),
)
BODY = 60_000  # four messages a segment
HOUR = 3_600_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Ticker:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fill(store: MessageStore, clock: Clock, count: int, topic: str = "T") -> list[int]:
    offsets = []
    for i in range(count):
        clock.now += 1000
        offsets.append(
            store.put(PutMessage(topic=topic, body=bytes([i % 256]) * BODY)).physical_offset
        )
    return offsets


def service(
    store: MessageStore,
    clock: Clock,
    usage: dict[str, float],
    read: dict[tuple[str, int], int],
    **policy: object,
) -> RetentionService:
    return RetentionService(
        store,
        RetentionPolicy(delete_when="", **policy),  # type: ignore[arg-type]
        clock,
        lambda: usage["value"],
        readers=lambda: lambda topic, queue: read.get((topic, queue)),
    )


# -- retention under pressure ------------------------------------------------------------------


def test_unread_unexpired_messages_survive_pressure(tmp_path: Path) -> None:
    clock = Clock()
    with MessageStore.open(tmp_path / "s", config=CONFIG, clock_ms=clock) as store:
        offsets = fill(store, clock, 10)  # 3 segments
        retention = service(store, clock, {"value": 88.0}, {})
        for _ in range(3):
            done = retention.run()
            assert done["deleted"] == [] and done["kept"] == 2
        assert store.min_physical_offset == 0
        assert [p for _, p, _ in store.get_messages("T", 0, 0, 64).messages] == offsets


def test_read_messages_go_under_pressure_and_unread_ones_stay(tmp_path: Path) -> None:
    clock = Clock()
    read: dict[tuple[str, int], int] = {}
    with MessageStore.open(tmp_path / "s", config=CONFIG, clock_ms=clock) as store:
        fill(store, clock, 10)  # segment 0: messages 0-3, segment 1: 4-7, segment 2: 8-9
        retention = service(store, clock, {"value": 80.0}, read)
        read[("T", 0)] = 5  # one message of segment 1 not read yet
        done = retention.run()
        assert done["deleted"] == [0] and done["consumed"] == 1 and done["kept"] == 1
        assert store.min_offset("T", 0) == 4
        read[("T", 0)] = 10  # everything read: still the newest segment stays
        assert retention.run()["deleted"] == [SEGMENT]
        assert store.commitlog.segment_starts() == [2 * SEGMENT]
        # No pressure: read but unexpired messages are not deleted
        assert service(store, clock, {"value": 10.0}, read).run()["deleted"] == []


def test_a_queue_nobody_reads_holds_its_segments(tmp_path: Path) -> None:
    clock = Clock()
    with MessageStore.open(tmp_path / "s", config=CONFIG, clock_ms=clock) as store:
        fill(store, clock, 2)
        unread = fill(store, clock, 1, topic="Unread")[0]  # in segment 0; no group read it
        fill(store, clock, 7)
        read = {("T", 0): 9}
        assert consumed_until(store, lambda t, q: read.get((t, q))) == (unread, ("Unread", 0))
        assert service(store, clock, {"value": 80.0}, read).run()["deleted"] == []
        read[("Unread", 0)] = 1
        assert service(store, clock, {"value": 80.0}, read).run()["deleted"] == [0, SEGMENT]


def test_expired_segments_go_under_pressure_outside_the_deletion_hours(tmp_path: Path) -> None:
    clock = Clock()
    with MessageStore.open(tmp_path / "s", config=CONFIG, clock_ms=clock) as store:
        fill(store, clock, 10)
        clock.now += 73 * HOUR
        assert service(store, clock, {"value": 10.0}, {}).run()["deleted"] == []
        done = service(store, clock, {"value": 80.0}, {}).run()
        assert done["deleted"] == [0, SEGMENT] and done["expired"] == 2


def test_pressure_is_logged_once_with_its_figures(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    with MessageStore.open(tmp_path / "s", config=CONFIG, clock_ms=clock) as store:
        fill(store, clock, 10)
        retention = service(store, clock, {"value": 88.0}, {})
        with caplog.at_level(logging.WARNING, logger="pocketmq.broker"):
            for _ in range(5):
                retention.run()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, warnings
        assert "88%" in warnings[0] and "kept 2" in warnings[0]
        assert "clean_file_forcibly" in warnings[0] and "topic T queue 0" in warnings[0]


# -- refusing writes ---------------------------------------------------------------------------


def send_service(store: MessageStore, guard: DiskGuard) -> SendService:
    from pocketmq.broker.services.writer import MessageWriter

    config = BrokerConfig()
    topics = TopicManager(None, default_queue_nums=4, auto_create=True)
    writer = MessageWriter(store, now_ms=lambda: 0, arrived=lambda topic, queue: None)
    return SendService(store, topics=topics, writer=writer, retry=None, config=config, disk=guard)  # type: ignore[arg-type]


def test_sends_are_refused_at_the_warning_ratio_and_taken_again_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    usage = {"value": 50.0}
    ticker = Ticker()
    with MessageStore.open(tmp_path / "s", config=CONFIG) as store:
        guard = DiskGuard(store, lambda: usage["value"], warning_ratio=90, monotonic=ticker)
        sender = send_service(store, guard)
        message = PutMessage(topic="T", body=b"x")
        assert sender.put(message, {}).physical_offset == 0
        usage["value"] = 90.0
        with caplog.at_level(logging.DEBUG, logger="pocketmq.broker"):
            guard.update(usage["value"])
            for _ in range(20):
                with pytest.raises(BrokerError) as refused:
                    sender.put(message, {})
                assert refused.value.kind is Kind.SERVICE_UNAVAILABLE
            remark = str(refused.value)
            assert "disk is full" in remark and "90%" in remark
            assert str(tmp_path) not in remark and "/" not in remark
            assert store.read(0).body == b"x"  # reads go on
            usage["value"] = 60.0
            with pytest.raises(BrokerError):  # measured again only after a second
                sender.put(message, {})
            ticker.now += 1.0
            assert sender.put(message, {}).physical_offset > 0  # resumed by itself
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "disk full" in warnings[0].getMessage()
        assert any(
            "accepted" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO
        )


class FullDisk(DiskBackend):
    """A disk backend whose new commitlog segments fail with ENOSPC while ``full`` is set."""

    full = False

    def create_segment(self, rel: PurePosixPath, size: int, **kw: object) -> Segment:
        if self.full and rel.parts[0] == "commitlog":
            raise StoreFullError(
                errno.ENOSPC, "no space left to create a segment", str(self.root / rel)
            )
        return super().create_segment(rel, size, **kw)  # type: ignore[arg-type]


def test_enospc_in_an_append_is_refused_without_a_path_and_leaves_no_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FullDisk(tmp_path / "s")
    store = MessageStore(backend, config=CONFIG)
    store._start()
    ticker = Ticker()
    guard = DiskGuard(store, lambda: 50.0, warning_ratio=90, monotonic=ticker)
    sender = send_service(store, guard)
    body = b"y" * BODY
    stored = [sender.put(PutMessage(topic="T", body=body), {}) for _ in range(4)]
    backend.full = True  # the fifth needs a new segment
    with caplog.at_level(logging.WARNING, logger="pocketmq.broker"):
        for _ in range(3):
            with pytest.raises(BrokerError) as refused:
                sender.put(PutMessage(topic="T", body=body), {})
            assert refused.value.kind is Kind.SERVICE_UNAVAILABLE
            ticker.now += 2.0  # each try measures again and meets ENOSPC again
    assert "no space left" in str(refused.value) and str(tmp_path) not in str(refused.value)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(tmp_path) in warnings[0]  # the log keeps the path
    store.crash_for_test()
    reopened = MessageStore.open(tmp_path / "s", config=CONFIG)
    try:
        found = reopened.get_messages("T", 0, 0, 64, max_bytes=1 << 30).messages
        assert [p for _, p, _ in found] == [r.physical_offset for r in stored]
        assert all(reopened.read(p).body == body for _, p, _ in found)
        backend_ok = reopened.put(PutMessage(topic="T", body=body))
        assert backend_ok.physical_offset == SEGMENT  # the next record starts the next segment
    finally:
        reopened.close()


def test_a_topic_that_cannot_be_saved_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    topics = TopicManager(path, default_queue_nums=4, auto_create=True)
    for i in range(300):  # past the size where changes go to the journal
        topics.create(f"T{i}")

    def refuse(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path) + ".journal")

    topics.file.journal.append = refuse  # type: ignore[method-assign]
    with pytest.raises(BrokerError) as refused:
        topics.create("Late")
    assert refused.value.kind is Kind.SERVICE_UNAVAILABLE and "/" not in str(refused.value)
    assert topics.get("Late") is None
    reopened = TopicManager(path, default_queue_nums=4, auto_create=True)
    assert reopened.get("T299") is not None and reopened.get("Late") is None


def test_a_json_save_that_meets_a_full_disk_leaves_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pocketmq.broker.services import persist

    path = tmp_path / "config" / "consumerOffset.json"
    persist.save_json(path, {"offsetTable": {"T@g": {"0": 5}}})
    before = path.read_bytes()

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(persist.os, "fsync", full)
    with pytest.raises(OSError):
        persist.save_json(path, {"offsetTable": {"T@g": {"0": 9}}})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["consumerOffset.json"]


def test_a_batch_that_meets_a_full_disk_is_refused_whole(tmp_path: Path) -> None:
    """A batch crossing into a new segment on a full disk: none of it written (a client's retry
    of the batch would otherwise store its first messages twice)."""
    backend = FullDisk(tmp_path / "s")
    store = MessageStore(backend, config=CONFIG)
    store._start()
    body = b"y" * BODY
    store.put(PutMessage(topic="T", body=body))
    store.put(PutMessage(topic="T", body=body))  # the batch below fits this segment only in part
    backend.full = True
    batch = [PutMessage(topic="T", body=b"b%d" % i + b"." * (BODY // 4)) for i in range(12)]
    with pytest.raises(StoreFullError):
        store.put_many(batch)
    assert store.max_offset("T", 0) == 2
    backend.full = False
    results = store.put_many(batch)
    assert [r.queue_offset for r in results] == list(range(2, 14))
    assert len({r.physical_offset // SEGMENT for r in results}) == 1  # one segment holds it
    store.crash_for_test()
    with MessageStore.open(tmp_path / "s", config=CONFIG) as reopened:
        found = reopened.get_messages("T", 0, 0, 64, max_bytes=1 << 30).messages
        bodies = [reopened.read(p).body for _, p, _ in found]
    assert bodies == [body, body, *(m.body for m in batch)]
