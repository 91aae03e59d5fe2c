"""Consume-queue damage is found and contained: a bad entry is never served, the queue is rebuilt
from the commitlog, and a consumer reading on gets every message once, in order (issue 15)."""

from __future__ import annotations

import errno
import logging
import os
import random
from pathlib import Path, PurePosixPath

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pocketmq.store import paths
from pocketmq.store.checkpoint import Checkpoint
from pocketmq.store.config import StoreConfig
from pocketmq.store.consume_queue import ENTRY, ENTRY_SIZE
from pocketmq.store.errors import StoreFullError
from pocketmq.store.files import DiskBackend, Segment
from pocketmq.store.message_store import MessageStore, PutMessage
from pocketmq.store.record import decode_record
from pocketmq.store.recovery import scan_records

PER_FILE = 10
CONFIG = StoreConfig(
    commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024,
    consume_queue_entries_per_file=PER_FILE,
    index_slot_count=101,
    index_entry_count=400,
)


# Several segments in a few hundred messages: a tail recovery does not rescan the first.
SMALL = StoreConfig(
    commitlog_segment_size=64 * 1024,
    consume_queue_entries_per_file=PER_FILE,
    index_slot_count=101,
    index_entry_count=400,
    limits=msgspec.structs.replace(CONFIG.limits, body_size_max=8 * 1024),
)


def put(store: MessageStore, topic: str, i: int, *, size: int = 60) -> None:
    body = (f"{topic}-{i}|".encode() * size)[:size]
    store.put(PutMessage(topic=topic, body=body, properties={"TAGS": "t", "KEYS": f"{topic}{i}"}))


def fill(root: Path, counts: dict[str, int]) -> None:
    """Messages interleaved over the topics (queue 0 each), then a clean close."""
    with MessageStore.open(root, config=CONFIG) as store:
        for i in range(max(counts.values())):
            for topic, count in counts.items():
                if i < count:
                    put(store, topic, i, size=60 if topic != "BigT" else 400)


def drain(store: MessageStore, topic: str, batch: int = 4) -> list[bytes]:
    """Every body a consumer that commits each pull's next offset gets, in order."""
    bodies: list[bytes] = []
    offset = 0
    for _ in range(10_000):
        result = store.get_messages(topic, 0, offset, batch)
        for queue_offset, _physical, view in result.messages:
            record = decode_record(view)
            assert record.topic == topic and record.queue_offset == queue_offset
            bodies.append(record.body)
        if result.next_offset == offset and not result.messages:
            return bodies
        offset = result.next_offset
    raise AssertionError("the queue never ended")


def expected(topic: str, count: int, size: int = 60) -> list[bytes]:
    size = 400 if topic == "BigT" else size
    return [(f"{topic}-{i}|".encode() * size)[:size] for i in range(count)]


def queue_file(root: Path, topic: str, first_entry: int = 0) -> Path:
    return root / paths.consume_queue_segment(topic, 0, first_entry * ENTRY_SIZE)


def rewrite_entry(root: Path, topic: str, logical: int, change) -> tuple[int, int, int]:
    path = queue_file(root, topic, logical - logical % PER_FILE)
    data = bytearray(path.read_bytes())
    at = (logical % PER_FILE) * ENTRY_SIZE
    entry = ENTRY.unpack_from(data, at)
    ENTRY.pack_into(data, at, *change(entry))
    path.write_bytes(data)
    return entry


def test_swapped_entry_is_not_served_and_the_queue_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, {"SmallT": 25, "BigT": 25})
    big = rewrite_entry(tmp_path, "BigT", 13, lambda e: e)
    small = rewrite_entry(tmp_path, "SmallT", 13, lambda e: big)
    rewrite_entry(tmp_path, "BigT", 13, lambda e: small)
    with (
        caplog.at_level(logging.WARNING, "pocketmq.store"),
        MessageStore.open(tmp_path, config=CONFIG) as store,
    ):
        assert drain(store, "SmallT") == expected("SmallT", 25)
        assert drain(store, "BigT") == expected("BigT", 25)
        assert store.bad_entries == 2
        assert {(t, q) for t, q, _ in store.queues_rebuilt} == {("SmallT", 0), ("BigT", 0)}
    warnings = [r.getMessage() for r in caplog.records if "is not served" in r.getMessage()]
    assert len(warnings) == 2
    assert any("SmallT/0: entry 13" in w and "topic" in w for w in warnings), warnings
    # The rebuilt queue is on disk: the next open serves it without another rebuild.
    with MessageStore.open(tmp_path, config=CONFIG) as store:
        assert drain(store, "SmallT") == expected("SmallT", 25)
        assert store.bad_entries == 0


@pytest.mark.parametrize(
    ("damage", "what"),
    [
        (lambda e: (e[0] + 50, e[1], e[2]), "into the middle of a record"),
        (lambda e: (e[0], 0x7FFFFFF0, e[2]), "huge size"),
        (lambda e: (e[0], e[1] - 20, e[2]), "short size"),
        (lambda e: (e[0] + e[1], e[1], e[2]), "the next record"),
        (lambda e: (10**15, e[1], e[2]), "past the commitlog"),
    ],
)
def test_bad_entry_never_served_nor_skipped(tmp_path: Path, damage, what: str) -> None:
    fill(tmp_path, {"SmallT": 30, "Other": 30})
    rewrite_entry(tmp_path, "SmallT", 7, damage)
    with MessageStore.open(tmp_path, config=CONFIG) as store:
        assert drain(store, "SmallT") == expected("SmallT", 30), what
        assert store.bad_entries == 1
        # Every pull succeeds, also from the offset of the damaged entry itself.
        assert [
            decode_record(v).body for _, _, v in store.get_messages("SmallT", 0, 7, 1).messages
        ] == [expected("SmallT", 30)[7]]


def test_zeroed_entry_in_the_middle_is_a_hole_not_the_end(tmp_path: Path) -> None:
    fill(tmp_path, {"SmallT": 8})
    rewrite_entry(tmp_path, "SmallT", 3, lambda e: (0, 0, 0))
    with MessageStore.open(tmp_path, config=CONFIG) as store:
        assert store.max_offset("SmallT", 0) == 8
        assert drain(store, "SmallT") == expected("SmallT", 8)
        assert store.queues_rebuilt, "the hole is found at load"


@pytest.mark.parametrize(
    "damage",
    ["odd size", "short file", "short last file", "missing middle file", "empty file", "no dir"],
)
def test_untrusted_queue_files_are_rebuilt_at_start(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, {"SmallT": 35, "Other": 5})
    first, middle, last = (queue_file(tmp_path, "SmallT", n) for n in (0, 10, 30))
    if damage == "odd size":
        with middle.open("ab") as f:
            f.write(b"1234567")
    elif damage == "short file":
        os.truncate(middle, 100)
    elif damage == "short last file":
        os.truncate(last, 5 * ENTRY_SIZE)  # full of entries, but cut
    elif damage == "missing middle file":
        middle.unlink()
    elif damage == "empty file":
        os.truncate(first, 0)
    else:
        for path in first.parent.iterdir():
            path.unlink()
        first.parent.rmdir()
    # After a clean stop nothing follows the checkpoint: only a full scan sees every record,
    # so only it finds a queue directory deleted whole.
    config = msgspec.structs.replace(CONFIG, recovery_scan="full") if damage == "no dir" else CONFIG
    with (
        caplog.at_level(logging.WARNING, "pocketmq.store"),
        MessageStore.open(tmp_path, config=config) as store,
    ):
        assert store.recovery_report.queues_rebuilt, store.recovery_report.summary()
        assert "consume queue rebuilt" in store.recovery_report.summary()
        assert drain(store, "SmallT") == expected("SmallT", 35)
        assert store.max_offset("SmallT", 0) == 35
        put(store, "SmallT", 35)
        assert store.max_offset("SmallT", 0) == 36
    assert any("SmallT/0 rebuilt" in r.getMessage() for r in caplog.records)


def test_missing_queue_dir_is_rebuilt_when_records_follow_the_checkpoint(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, config=CONFIG)
    for i in range(12):
        put(store, "SmallT", i)
    store.flush_all()
    for i in range(12, 15):
        put(store, "SmallT", i)
    store.crash_for_test()
    directory = queue_file(tmp_path, "SmallT").parent
    for path in directory.iterdir():
        path.unlink()
    with MessageStore.open(tmp_path, config=CONFIG) as reopened:
        assert reopened.recovery_report.queues_rebuilt
        assert drain(reopened, "SmallT") == expected("SmallT", 15)


def test_orphan_of_an_old_store_loses_to_the_later_record(tmp_path: Path) -> None:
    """Stores written before the slot was secured first hold an orphan: a record whose send
    failed, with the queue offset the next send got too. Recovery keeps the later record."""
    store = MessageStore.open(tmp_path, config=CONFIG)
    for i in range(5):
        put(store, "SmallT", i)
    store.flush_all()
    queue = store.consume_queues.get("SmallT", 0)
    assert queue is not None
    # the old failure: no entry (put_next is the append path's queue write)
    queue.put_next = lambda *args: None  # type: ignore[method-assign]
    put(store, "SmallT", 99)  # the orphan, queue offset 5
    del queue.put_next
    put(store, "SmallT", 5)  # queue offset 5 again, acknowledged
    put(store, "SmallT", 6)
    store.crash_for_test()
    with MessageStore.open(tmp_path, config=CONFIG) as reopened:
        assert drain(reopened, "SmallT") == expected("SmallT", 7)


class FullDisk(DiskBackend):
    """Refuses to create consume-queue files while ``full`` (ENOSPC, as a full disk does)."""

    full = False

    def create_segment(
        self, rel: PurePosixPath, size: int, *, allocate: int | None = None
    ) -> Segment:
        if self.full and rel.parts[0] == str(paths.CONSUME_QUEUE):
            raise OSError(errno.ENOSPC, "No space left on device", str(rel))
        return super().create_segment(rel, size, allocate=allocate)


def test_send_failing_at_queue_file_rollover_leaves_no_record(tmp_path: Path) -> None:
    backend = FullDisk(tmp_path)
    store = MessageStore(backend, config=CONFIG)
    store._start()
    for i in range(PER_FILE):
        put(store, "SmallT", i)
    end = store.max_physical_offset
    backend.full = True
    for _ in range(3):
        with pytest.raises(StoreFullError, match="consume queue SmallT/0"):
            put(store, "SmallT", 99)
    assert store.max_physical_offset == end  # nothing appended
    assert store.max_offset("SmallT", 0) == PER_FILE
    backend.full = False
    put(store, "SmallT", PER_FILE)
    assert store.get_messages("SmallT", 0, PER_FILE, 1).messages[0][0] == PER_FILE
    store.crash_for_test()  # a power loss: the restart must not refuse
    with MessageStore.open(tmp_path, config=CONFIG) as reopened:
        assert drain(reopened, "SmallT") == expected("SmallT", PER_FILE + 1)
        segment = reopened.commitlog.segment_for(0)[1]
        offsets: list[int] = []
        scan_records(segment.view, 0, on_record=lambda p, s: offsets.append(p))
        queue_offsets = [decode_record(segment.view, p).queue_offset for p in offsets]
        assert queue_offsets == list(range(PER_FILE + 1)), "no orphan record in the commitlog"


def test_queue_files_take_disk_as_entries_are_written(tmp_path: Path) -> None:
    config = StoreConfig(
        commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024,
        index_slot_count=101,
        index_entry_count=400,
    )
    with MessageStore.open(tmp_path, config=config) as store:
        put(store, "T", 0)
    path = queue_file(tmp_path, "T")
    full_size = config.consume_queue_entries_per_file * ENTRY_SIZE
    assert path.stat().st_size == full_size  # the size RocketMQ's tools expect
    used = path.stat().st_blocks * 512
    if used >= full_size:
        pytest.skip("this file system does not keep files sparse")
    assert used <= 16 * 1024
    with MessageStore.open(tmp_path, config=config) as store:
        for i in range(1, 2000):
            put(store, "T", i)
        assert drain(store, "T", batch=32)[-1] == expected("T", 2000)[-1]
    assert 2000 * ENTRY_SIZE <= path.stat().st_blocks * 512 < full_size


def test_commitlog_gap_is_reported_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = StoreConfig(
        commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024,
        # queue files of PER_FILE entries would be 1,260 files, each synced at close: the
        # commitlog is what this test damages, so its queue keeps few files
        consume_queue_entries_per_file=1000,
        index_slot_count=101,
        index_entry_count=400,
    )
    with MessageStore.open(tmp_path, config=config) as store:
        for i in range(3 * 4200):
            store.put(PutMessage(topic="T", body=bytes(1000 + i % 7)))
        assert len(store.commitlog.segment_starts()) >= 3
        second = store.commitlog.segment_starts()[1]
    (tmp_path / paths.commitlog_segment(second)).unlink()
    with (
        caplog.at_level(logging.WARNING, "pocketmq.store"),
        MessageStore.open(tmp_path, config=config) as store,
    ):
        assert any("missing" in m for m in store.recovery_report.missing_segments)
        bodies = 0
        offset = 0
        while (result := store.get_messages("T", 0, offset, 32)).next_offset != offset:
            bodies += len(result.messages)
            offset = result.next_offset
        assert 0 < bodies < 3 * 4200
    assert any(paths.file_name_for_offset(second) in r.getMessage() for r in caplog.records)


DAMAGES = ("swap", "shift", "size", "zero", "huge", "other queue")


def _int32(value: int) -> int:
    """The field's bits after the change (a size already at the maximum wraps, as in Java)."""
    return (value + 2**31) % 2**32 - 2**31


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**32 - 1),
    damages=st.lists(st.tuples(st.sampled_from(DAMAGES), st.integers(0, 39)), max_size=4),
)
@example(seed=0, damages=[("huge", 0), ("size", 0)])  # a size changed past the int maximum
def test_any_entry_damage_serves_every_message_once(
    tmp_path_factory: pytest.TempPathFactory, seed: int, damages: list[tuple[str, int]]
) -> None:
    root = tmp_path_factory.mktemp("store")
    rng = random.Random(seed)
    counts = {"SmallT": 40, "BigT": 40}
    fill(root, counts)
    for kind, logical in damages:
        if kind == "swap":
            other = rng.randrange(40)
            a = rewrite_entry(root, "SmallT", logical, lambda e: e)
            b = rewrite_entry(root, "SmallT", other, lambda e, a=a: a)
            rewrite_entry(root, "SmallT", logical, lambda e, b=b: b)
        elif kind == "other queue":
            big = rewrite_entry(root, "BigT", logical, lambda e: e)
            rewrite_entry(root, "SmallT", logical, lambda e, big=big: big)
        else:
            change = {
                "shift": lambda e: (e[0] + rng.randrange(1, 200), e[1], e[2]),
                "size": lambda e: (e[0], _int32(e[1] + rng.choice((-8, 8, 91))), e[2]),
                "zero": lambda e: (0, 0, 0),
                "huge": lambda e: (e[0], 0x7FFFFFFF, e[2]),
            }[kind]
            rewrite_entry(root, "SmallT", logical, change)
    with MessageStore.open(root, config=CONFIG) as store:
        got = drain(store, "SmallT", batch=rng.randint(1, 8))
    assert got == expected("SmallT", 40), f"seed {seed}, damages {damages}"


def test_a_record_damaged_after_a_clean_stop_is_reported_once_and_never_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with MessageStore.open(tmp_path, config=SMALL) as store:
        for i in range(400):
            put(store, "SmallT", i, size=400)
        assert len(store.commitlog.segment_starts()) > 2  # the tail scan will not read the first
        physical = store.get_messages("SmallT", 0, 3, 1).messages[0][1]
    segment = tmp_path / paths.commitlog_segment(0)
    data = bytearray(segment.read_bytes())
    data[physical + 44] ^= 0x10  # BORNTIMESTAMP: only the whole-record CRC covers it
    segment.write_bytes(data)
    caplog.set_level(logging.WARNING, "pocketmq.store")
    intact = [b for i, b in enumerate(expected("SmallT", 400, 400)) if i != 3]
    with MessageStore.open(tmp_path, config=SMALL) as store:
        assert drain(store, "SmallT") == intact
        assert drain(store, "SmallT") == intact
    said = [r.getMessage() for r in caplog.records if "fails its CRC" in r.getMessage()]
    assert len(said) == 1 and "SmallT/0 offset 3" in said[0] and "00000000000000000000" in said[0]
    # remembered: the next start reports the range again and still never serves it
    with MessageStore.open(tmp_path, config=SMALL) as store:
        assert [d.start_offset for d in store.damaged] == [physical]
        assert drain(store, "SmallT") == intact


def test_a_queue_file_deleted_under_a_stopped_store_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fill(tmp_path, {"SmallT": 25, "OtherT": 3})
    for name in (tmp_path / paths.consume_queue_dir("SmallT", 0)).iterdir():
        name.unlink()  # every file of the queue; the folder is left (or not: both are found)
    caplog.set_level(logging.WARNING, "pocketmq.store")
    with MessageStore.open(tmp_path, config=CONFIG) as store:
        assert drain(store, "SmallT") == expected("SmallT", 25)
        assert drain(store, "OtherT") == expected("OtherT", 3)
    assert any("the last clean stop left 25" in r.getMessage() for r in caplog.records)
    # the check is spent at open: a queue emptied while running (topic deletion, retention)
    # is not "damage" at the next start
    caplog.clear()
    with MessageStore.open(tmp_path, config=CONFIG):
        pass
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_missing_first_segment_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    small = SMALL
    with MessageStore.open(tmp_path, config=small) as store:
        for i in range(400):
            put(store, "SmallT", i, size=400)
        assert len(store.commitlog.segment_starts()) > 2
    (tmp_path / paths.commitlog_segment(0)).unlink()
    caplog.set_level(logging.WARNING, "pocketmq.store")
    with MessageStore.open(tmp_path, config=small) as store:
        assert store.commitlog.min_offset == 64 * 1024
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "the clean stop left it starting at 0" in said and "00000000000000000000" in said


@pytest.mark.parametrize("byte", [3, 17, 36])  # a timestamp, another, confirmPhyOffset
def test_a_damaged_checkpoint_is_not_believed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, byte: int
) -> None:
    with MessageStore.open(tmp_path, config=SMALL) as store:
        for i in range(300):
            put(store, "SmallT", i, size=400)
    path = tmp_path / paths.CHECKPOINT
    data = bytearray(path.read_bytes())
    data[byte] ^= 0x04
    path.write_bytes(data)
    caplog.set_level(logging.WARNING, "pocketmq.store")
    with MessageStore.open(tmp_path, config=SMALL) as store:
        report = store.recovery_report
        assert report.checkpoint_damaged and report.needs_attention
        assert report.scanned_from == 0  # every segment, not where the checkpoint pointed
        assert drain(store, "SmallT") == expected("SmallT", 300, 400)
    assert any("checkpoint is damaged" in r.getMessage() for r in caplog.records)
    with MessageStore.open(tmp_path, config=SMALL) as store:  # the clean stop sealed it again
        assert not store.recovery_report.checkpoint_damaged


def test_a_checkpoint_without_a_seal_is_read_as_before() -> None:
    sealed = Checkpoint(1, 2, 3, 4, 5).encode()
    unsealed = sealed[:64] + bytes(len(sealed) - 64)  # RocketMQ's, or pocketmq's before the seal
    assert Checkpoint.decode(unsealed) == Checkpoint(1, 2, 3, 4, 5)
    assert Checkpoint.decode(sealed) == Checkpoint(1, 2, 3, 4, 5)
