"""Retention: expired segments are marked for deletion, then deleted with their queue, index and
state entries; states that still matter survive; the newest segment is never deleted."""

from __future__ import annotations

from pathlib import Path

from pocketmq.store.config import StoreConfig
from pocketmq.store.message_store import MessageStore, PutMessage
from pocketmq.store.state import MessageState

SEGMENT = 4 * 1024 * 1024 + 64 * 1024
CONFIG = StoreConfig(commitlog_segment_size=SEGMENT, index_slot_count=101, index_entry_count=1000)
HOUR = 3_600_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def fill(store: MessageStore, clock: Clock, count: int) -> list[int]:
    offsets = []
    for i in range(count):
        clock.now += 1000
        offsets.append(
            store.put(
                PutMessage(
                    topic="T", body=bytes([i % 256]) * 1_000_000, properties={"KEYS": f"k{i}"}
                )
            ).physical_offset
        )
    return offsets


def test_expired_segments_are_marked_then_deleted(tmp_path: Path) -> None:
    clock = Clock()
    with MessageStore.open(tmp_path / "s", config=CONFIG, clock_ms=clock) as store:
        offsets = fill(store, clock, 10)  # 3 segments: 4 + 4 + 2 messages
        clock.now += 10 * HOUR
        assert store.mark_expired(clock.now, 72 * HOUR) == []  # nothing is old enough yet
        poisoned = offsets[6]  # in the second segment, which stays
        store.set_state(poisoned, MessageState.POISONED, "dead-lettered")
        clock.now += 70 * HOUR
        marked = store.mark_expired(clock.now, 72 * HOUR)
        assert marked == [0, SEGMENT]  # the newest segment is never expired
        assert store.state_of(offsets[0]) is MessageState.MARKED_FOR_DELETION
        visible = [p for _, p, _ in store.get_messages("T", 0, 0, 64, max_bytes=1 << 30).messages]
        assert visible == offsets[8:]  # marked messages are no longer served
        assert store.mark_expired(clock.now, 72 * HOUR) == []  # marking is not repeated
        deleted = store.delete_segments(1, now_ms=clock.now, reserve_ms=72 * HOUR)
        assert deleted == [0] and store.min_physical_offset == SEGMENT
        assert store.min_offset("T", 0) == 4
        assert store.query_by_key("T", "k1") == []
        assert store.state_of(poisoned) is MessageState.MARKED_FOR_DELETION
    assert sorted(p.name for p in (tmp_path / "s" / "commitlog").iterdir()) == [
        f"{SEGMENT:020d}",
        f"{2 * SEGMENT:020d}",
    ]
    with MessageStore.open(tmp_path / "s", config=CONFIG) as store:
        assert store.state_of(offsets[5]) is MessageState.MARKED_FOR_DELETION
        assert store.min_offset("T", 0) == 4


def test_a_state_stored_in_a_deleted_segment_survives_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    with MessageStore.open(tmp_path / "s", config=CONFIG, clock_ms=clock) as store:
        offsets = fill(store, clock, 3)  # segment 0 holds these and the state record below
        clock.now += 1000
        late = fill(store, clock, 6)  # the rest of segment 0, then segment 1 and 2
        store.set_state(
            late[-1], MessageState.POISONED, "dead-lettered"
        )  # record lands in segment 2
        first_state = store.set_state(late[-2], MessageState.UNAVAILABLE, "waiting")
        assert first_state.physical_offset >= 2 * SEGMENT
        clock.now += 100 * HOUR
        # Force: delete the first segment whatever its age (disk pressure).
        assert store.delete_segments(1, now_ms=clock.now, reserve_ms=10**12, force=True) == [0]
        assert store.state_of(late[-1]) is MessageState.POISONED
        assert offsets[0] < store.min_physical_offset
    with MessageStore.open(tmp_path / "s", config=CONFIG) as store:
        assert store.state_of(late[-1]) is MessageState.POISONED
        assert store.state_of(late[-2]) is MessageState.UNAVAILABLE


def test_states_recorded_in_old_segments_are_carried_forward(tmp_path: Path) -> None:
    clock = Clock()
    with MessageStore.open(tmp_path / "s", config=CONFIG, clock_ms=clock) as store:
        offsets = fill(store, clock, 2)
        store.set_state(offsets[1], MessageState.POISONED, "early")  # state record in segment 0
        fill(store, clock, 8)
        keep = offsets[1]
        # Delete segment 0 but pretend the poisoned message lived on: mark a later one instead.
        later = store.get_messages("T", 0, 5, 1, only_available=False).messages[0][1]
        store.set_state(later, MessageState.POISONED, "later")
        clock.now += 100 * HOUR
        store.delete_segments(1, now_ms=clock.now, reserve_ms=HOUR)
        assert store.min_physical_offset > keep
    with MessageStore.open(tmp_path / "s", config=CONFIG) as store:
        assert store.state_of(later) is MessageState.POISONED


def test_retention_service_follows_the_deletion_hour_and_the_disk_ratios(tmp_path: Path) -> None:
    import time

    import pytest

    from pocketmq.broker.services.retention import RetentionPolicy, RetentionService
    from pocketmq.store.errors import StoreFullError

    clock = Clock()
    usage = {"value": 10.0}
    with MessageStore.open(tmp_path / "s", config=CONFIG, clock_ms=clock) as store:
        fill(store, clock, 10)
        service = RetentionService(store, RetentionPolicy(), clock, lambda: usage["value"])
        clock.now += 73 * HOUR
        hour_now = time.localtime(clock.now / 1000).tm_hour
        service.policy = RetentionPolicy(delete_when=f"{(hour_now + 12) % 24:02d}")
        done = service.run()
        assert done["marked"] == [0, SEGMENT] and done["deleted"] == []  # not the deletion hour
        service.policy = RetentionPolicy(delete_when=f"{hour_now:02d};{(hour_now + 1) % 24:02d}")
        assert service.run()["deleted"] == [0, SEGMENT]
        assert store.commitlog.segment_starts() == [2 * SEGMENT]  # the newest stays
        usage["value"] = 95.0
        service.run()
        with pytest.raises(StoreFullError, match="warning ratio"):
            store.put(PutMessage(topic="T", body=b"refused"))
        usage["value"] = 50.0
        service.run()
        assert store.put(PutMessage(topic="T", body=b"accepted")).physical_offset > 0


def test_forced_deletion_above_the_forcible_ratio_only_when_opted_in(tmp_path: Path) -> None:
    from pocketmq.broker.services.retention import RetentionPolicy, RetentionService

    clock = Clock()
    with MessageStore.open(tmp_path / "s", config=CONFIG, clock_ms=clock) as store:
        fill(store, clock, 10)
        policy = RetentionPolicy(delete_when="", delete_file_batch_max=1)
        service = RetentionService(store, policy, clock, lambda: 88.0)
        done = service.run()  # nothing is expired or read, and forced cleaning is off
        assert done["deleted"] == [] and done["kept"] == 2
        assert done["unconsumed_queue"] == ("T", 0)
        service.policy = RetentionPolicy(
            delete_when="", delete_file_batch_max=1, clean_file_forcibly=True
        )
        done = service.run()  # the user opted in: the oldest goes though nobody read it
        assert done["deleted"] == [0] and done["forced"] == 1
        assert store.min_physical_offset == SEGMENT and store.min_offset("T", 0) == 4
