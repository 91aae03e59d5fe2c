"""Property tests of recovery: cut or corrupt the commitlog anywhere; what was whole survives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.store import paths
from pocketmq.store.config import StoreConfig
from pocketmq.store.files import MemoryBackend
from pocketmq.store.message_store import MessageStore, PutMessage
from pocketmq.store.record import RecordLimits

SEGMENT = 64 * 1024
CONFIG = StoreConfig(
    commitlog_segment_size=SEGMENT,
    consume_queue_entries_per_file=16,
    index_slot_count=31,
    index_entry_count=200,
    limits=RecordLimits(body_size_max=2048, properties_size_max=512),
    recovery_scan="full",
)


def reopen(backend: MemoryBackend) -> MessageStore:
    store = MessageStore(backend, config=CONFIG)
    store._start()
    return store


@settings(max_examples=60, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=1500), min_size=1, max_size=80),
    cut=st.floats(0, 1),
    corrupt=st.booleans(),
)
def test_whole_records_before_the_damage_survive(
    bodies: list[bytes], cut: float, corrupt: bool
) -> None:
    backend = MemoryBackend()
    store = reopen(backend)
    written = [
        (store.put(PutMessage(topic="T", queue_id=i % 2, body=b, properties={"KEYS": f"k{i}"})), b)
        for i, b in enumerate(bodies)
    ]
    end = store.max_physical_offset
    store.crash_for_test()
    point = min(int(cut * end), end - 1)
    start = point - point % SEGMENT
    buffer = backend._segments[paths.commitlog_segment(start)]
    position = point - start
    if corrupt:
        buffer[position] ^= 0x5A
    else:
        buffer[position:] = bytes(len(buffer) - position)
    store = reopen(backend)
    assert store.recovery_report.abnormal
    for result, body in written:
        if result.end_offset <= point:
            assert store.read(result.physical_offset).body == body
    served = []
    for queue_id in (0, 1):
        got = store.get_messages("T", queue_id, 0, 1000, max_bytes=1 << 30)
        served += [physical for _, physical, _ in got.messages]
    whole = {r.physical_offset for r, _ in written if r.end_offset <= point}
    damaged = {r.physical_offset for r, _ in written if r.physical_offset <= point < r.end_offset}
    assert whole <= set(served)
    assert not damaged & set(served)
    store.close()


@settings(max_examples=80, deadline=None)
@given(
    bodies=st.lists(st.binary(min_size=1, max_size=1500), min_size=2, max_size=60),
    which=st.floats(0, 1),
    where=st.floats(0, 1),
    xor=st.integers(1, 255),
)
def test_one_damaged_record_after_a_clean_stop_is_quarantined_alone(
    bodies: list[bytes], which: float, where: float, xor: int
) -> None:
    """Any byte of any record changed in a cleanly stopped store (the whole-record CRC is on, so
    every byte is covered): that record alone is quarantined, nothing is cut, and every other
    record is still read and served."""
    backend = MemoryBackend()
    store = reopen(backend)
    written = [
        (store.put(PutMessage(topic="T", queue_id=i % 2, body=b, properties={"KEYS": f"k{i}"})), b)
        for i, b in enumerate(bodies)
    ]
    end = store.max_physical_offset
    store.close()
    k = min(int(which * len(written)), len(written) - 1)
    bad = written[k][0]
    point = bad.physical_offset + min(int(where * bad.total_size), bad.total_size - 1)
    start = point - point % SEGMENT
    backend._segments[paths.commitlog_segment(start)][point - start] ^= xor
    store = reopen(backend)
    report = store.recovery_report
    assert not report.abnormal and report.torn_tail is None
    [damage] = report.damaged
    assert damage.start_offset == bad.physical_offset
    assert store.max_physical_offset == end
    served = set()
    for queue_id in (0, 1):
        offset = 0
        while offset < store.max_offset("T", queue_id):
            got = store.get_messages("T", queue_id, offset, 32)
            served.update(physical for _, physical, _ in got.messages)
            offset = got.next_offset
    for i, (result, body) in enumerate(written):
        if i == k:
            assert result.physical_offset not in served
            continue
        assert not damage.start_offset <= result.physical_offset < damage.end_offset
        assert store.read(result.physical_offset).body == body
        assert result.physical_offset in served
