"""The message index in RocketMQ's IndexFile layout: bytes, queries, rollover, recovery, retention."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.store import paths
from pocketmq.store.files import Backend, DiskBackend, MemoryBackend
from pocketmq.store.index import (
    ENTRY,
    ENTRY_OFFSETS,
    HEADER,
    HEADER_OFFSETS,
    IndexFormatError,
    IndexService,
    index_file_name,
    index_file_size,
    index_key_hash,
)
from pocketmq.store.javahash import java_string_hash

T0 = 1_700_000_000_123  # 2023-11-14 22:13:20.123 UTC


@pytest.fixture(params=["memory", "disk"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "memory":
        return MemoryBackend()
    return DiskBackend(tmp_path / "store")


@pytest.fixture
def make(backend: Backend) -> Iterator[Callable[..., IndexService]]:
    """Loaded services on the test's backend, all closed at the end."""
    made: list[IndexService] = []

    def factory(**sizes: int) -> IndexService:
        service = IndexService(backend, **sizes)
        service.load()
        made.append(service)
        return service

    yield factory
    for service in made:
        service.close()


@pytest.fixture
def utc() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", "UTC")
        time.tzset()
        yield
    time.tzset()


def file_bytes(backend: Backend, name: str) -> bytes:
    segment = backend.open_segment(paths.index_file(name))
    try:
        return bytes(segment.view)
    finally:
        segment.close()


def store_bytes(backend: Backend) -> dict[str, bytes]:
    return {name: file_bytes(backend, name) for name in backend.list_names(paths.INDEX)}


def i32(value: int) -> bytes:
    return value.to_bytes(4, "big", signed=True)


def i64(value: int) -> bytes:
    return value.to_bytes(8, "big", signed=True)


# ---- layout


def test_layout_matches_rocketmq() -> None:
    assert HEADER.size == 40
    assert HEADER_OFFSETS == {
        "begin_timestamp": 0,
        "end_timestamp": 8,
        "begin_phy_offset": 16,
        "end_phy_offset": 24,
        "hash_slot_count": 32,
        "index_count": 36,
    }
    assert ENTRY.size == 20
    assert ENTRY_OFFSETS == {"key_hash": 0, "phy_offset": 4, "time_diff": 12, "prev_index": 16}
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040
    assert index_file_size(500_000, 2_000_000) == 42_000_040


def test_file_name_is_local_time(utc: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert index_file_name(T0) == "20231114221320123"
    assert index_file_name(T0 - 123) == "20231114221320000"
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    assert index_file_name(T0) == "20231115061320123"


def test_key_hash_is_abs_of_java_hash() -> None:
    assert java_string_hash("hello") == 99162322
    # hash("T#") = 84*31 + 35 = 2639; hash("T#hello") = 2639 * 31**5 + 99162322 mod 2**32,
    # which is 2637047779 = -1657919517 as a Java int, so abs() gives 1657919517
    assert (2639 * 28629151 + 99162322) % 2**32 == 2637047779
    assert java_string_hash("T#hello") == -1657919517
    assert index_key_hash("T", "hello") == 1657919517
    assert index_key_hash("T", "Aa") == index_key_hash("T", "BB") == 2538191


# ---- bytes


def test_bytes_at_exact_offsets(make: Callable[..., IndexService], backend: Backend) -> None:
    service = make(slot_count=8, entry_count=4)
    assert service.put("T", ["hello"], 1234, T0) == 1
    assert service.put("T", ["", "hello"], 2000, T0 + 2500) == 1  # same slot: chain
    assert service.put("T", ["Ab"], 3000, T0 + 999_000) == 1  # "T#Ab" -> 2538192 -> slot 0
    assert service.max_physical_offset == 3000
    (name,) = backend.list_names(paths.INDEX)
    assert name == index_file_name(T0)

    expected = bytearray(40 + 8 * 4 + 4 * 20)
    expected[0:8] = i64(T0)  # beginTimestamp
    expected[8:16] = i64(T0 + 999_000)  # endTimestamp
    expected[16:24] = i64(1234)  # beginPhyOffset
    expected[24:32] = i64(3000)  # endPhyOffset
    expected[32:36] = i32(2)  # hashSlotCount: slots 5 and 0 in use
    expected[36:40] = i32(4)  # indexCount: entries 1..3 used, next is 4
    expected[40 + 5 * 4 : 40 + 6 * 4] = i32(2)  # slot 5 = 1657919517 % 8 -> newest entry 2
    expected[40 + 0 * 4 : 40 + 1 * 4] = i32(3)  # slot 0 = 2538192 % 8 -> entry 3
    entries = 40 + 8 * 4
    expected[entries + 20 : entries + 40] = i32(1657919517) + i64(1234) + i32(0) + i32(0)
    expected[entries + 40 : entries + 60] = i32(1657919517) + i64(2000) + i32(2) + i32(1)
    expected[entries + 60 : entries + 80] = i32(2538192) + i64(3000) + i32(999) + i32(0)
    service.flush()
    assert file_bytes(backend, name) == bytes(expected)

    assert service.query("T", "hello", 0, 2**62) == [2000, 1234]
    assert service.query("T", "Ab", 0, 2**62) == [3000]
    assert service.query("U", "hello", 0, 2**62) == []


def test_min_value_hash_is_stored_as_zero(make: Callable[..., IndexService]) -> None:
    # a key whose "T#" + key hash is Integer.MIN_VALUE: 7 base-31 digits solve the congruence
    rest = (-(2**31) - java_string_hash("T#") * 31**7) % 2**32
    key = "".join(chr(rest // 31**power % 31) for power in range(6, -1, -1))
    assert java_string_hash("T#" + key) == -(2**31)
    service = make(slot_count=4, entry_count=8)
    service.put("T", [key], 7, T0)
    assert service.files[0].entry(1)[0] == 0
    assert service.files[0].slot(0) == 1
    assert service.query("T", key, 0, 2**62) == [7]


@settings(max_examples=200, deadline=None)
@given(topic=st.text(min_size=1, max_size=20), key=st.text(min_size=1, max_size=300))
def test_put_hash_matches_reference(topic: str, key: str) -> None:
    # covers the dot-product fast path (short ASCII), long keys and non-ASCII keys
    service = IndexService(MemoryBackend(), slot_count=7, entry_count=4)
    try:
        service.put(topic, [key], 1, T0)
        java = java_string_hash(f"{topic}#{key}")
        expected = 0 if java == -(2**31) else abs(java)
        assert service.files[0].entry(1)[0] == expected == index_key_hash(topic, key)
        assert service.files[0].slot(expected % 7) == 1
    finally:
        service.close()


# ---- queries


def test_put_and_query_many(make: Callable[..., IndexService]) -> None:
    service = make(slot_count=61, entry_count=2000)
    messages = {}
    for number in range(400):
        offset = 1000 + number * 137
        keys = [f"order-{number}", f"user-{number % 7}"]
        assert service.put("Orders", keys, offset, T0 + number * 10) == 2
        messages[offset] = keys
    assert service.files[0].entries == 800
    for number in (0, 1, 199, 399):
        assert service.query("Orders", f"order-{number}", 0, 2**62) == [1000 + number * 137]
    # many messages under one key: newest first, capped, and the caller's filter keeps them all
    found = service.query("Orders", "user-3", 0, 2**62, max_results=1000)
    wanted = sorted((o for o, keys in messages.items() if "user-3" in keys), reverse=True)
    assert [o for o in found if "user-3" in messages[o]] == wanted
    assert service.query("Orders", "user-3", 0, 2**62) == wanted[:64]
    assert service.query("Orders", "user-3", 0, 2**62, max_results=5) == wanted[:5]
    assert service.query("Orders", "user-3", 0, 2**62, max_results=0) == []
    assert service.query("Orders", "missing", 0, 2**62) == []


def test_hash_collision_returns_both_and_caller_filters(
    make: Callable[..., IndexService],
) -> None:
    service = make(slot_count=1000, entry_count=100)
    service.put("T", ["Aa"], 100, T0)
    service.put("T", ["BB"], 200, T0 + 1)
    service.put("T", ["Ab"], 300, T0 + 2)  # next hash, next slot: not returned
    real_key = {100: "Aa", 200: "BB", 300: "Ab"}
    assert service.query("T", "Aa", 0, 2**62) == [200, 100]
    assert service.query("T", "BB", 0, 2**62) == [200, 100]
    assert [o for o in service.query("T", "Aa", 0, 2**62) if real_key[o] == "Aa"] == [100]
    assert [o for o in service.query("T", "BB", 0, 2**62) if real_key[o] == "BB"] == [200]


def test_time_range_has_second_precision(make: Callable[..., IndexService]) -> None:
    service = make(slot_count=16, entry_count=100)
    begin = 10_000_500
    service.put("T", ["k"], 100, begin)  # reads back as 10_000_500
    service.put("T", ["k"], 200, begin + 1900)  # timeDiff 1: reads back as 10_001_500
    service.put("T", ["k"], 300, begin + 4100)  # timeDiff 4: reads back as 10_004_500
    assert service.query("T", "k", 0, 2**62) == [300, 200, 100]
    # the real store time 10_002_400 is inside, but the index only knows 10_001_500
    assert service.query("T", "k", 10_001_600, 10_003_000) == []
    assert service.query("T", "k", 10_001_500, 10_001_500) == [200]
    assert service.query("T", "k", 10_000_000, 10_001_499) == [100]
    assert service.query("T", "k", 10_001_000, 10_004_499) == [200]
    assert service.query("T", "k", 10_004_500, 2**62) == [300]
    assert service.query("T", "k", 0, 10_000_499) == []


def test_chain_walk_stops_at_first_entry_before_range(make: Callable[..., IndexService]) -> None:
    # RocketMQ assumes store times grow along a chain and stops at the first older entry
    service = make(slot_count=4, entry_count=10)
    service.put("T", ["k"], 100, T0)
    service.put("T", ["k"], 200, T0 + 5000)
    service.put("T", ["k"], 300, T0 + 1000)  # clock stepped back
    service.put("T", ["z"], 400, T0 + 3000)  # the file now ends inside the range
    assert service.query("T", "k", T0 + 2000, T0 + 9000) == []
    assert service.query("T", "k", T0, T0 + 9000) == [300, 200, 100]


def test_rollover_to_new_files(make: Callable[..., IndexService], backend: Backend) -> None:
    service = make(slot_count=4, entry_count=3)  # 2 usable entries per file
    for number in range(5):
        service.put("T", [f"a{number}", "shared"], 100 * (number + 1), T0 + 1000 * number)
    names = backend.list_names(paths.INDEX)
    assert names == [f.name for f in service.files]
    assert len(names) == 5
    assert names == sorted(names)
    assert names[0] == index_file_name(T0)
    assert all(f.is_full for f in service.files)
    assert service.query("T", "shared", 0, 2**62, max_results=100) == [500, 400, 300, 200, 100]
    assert service.query("T", "shared", 0, 2**62, max_results=3) == [500, 400, 300]
    assert service.query("T", "a0", 0, 2**62) == [100]
    # the last message's two keys span files: both files name the message as their end
    service.put("T", ["x", "y", "z"], 600, T0 + 9000)
    assert service.files[-2].end_phy_offset == service.files[-1].begin_phy_offset == 600


def test_rollover_in_one_millisecond_keeps_names_sorted(
    make: Callable[..., IndexService], backend: Backend, utc: None
) -> None:
    service = make(slot_count=4, entry_count=2)  # one usable entry per file
    service.put("T", ["a", "b", "c"], 100, T0)
    service.put("T", ["d"], 200, T0 - 5000)  # store time went backwards
    assert backend.list_names(paths.INDEX) == [
        "20231114221320123",
        "20231114221320124",
        "20231114221320125",
        "20231114221320126",
    ]


def test_redispatch_below_indexed_offset_is_skipped(make: Callable[..., IndexService]) -> None:
    service = make(slot_count=4, entry_count=10)
    assert service.max_physical_offset == -1
    assert service.put("T", ["a", "b"], 500, T0) == 2
    assert service.put("T", ["c"], 499, T0) == 0
    assert service.put("T", ["c"], 500, T0) == 1  # same message, more keys: still indexed
    assert service.put("T", ["", ""], 600, T0) == 0
    assert service.max_physical_offset == 500
    assert service.files[0].entries == 3
    with pytest.raises(TypeError):
        service.put("T", "abc", 700, T0)


# ---- reopen and foreign files


def test_reopen_from_disk(tmp_path: Path) -> None:
    backend = DiskBackend(tmp_path)
    service = IndexService(backend, slot_count=8, entry_count=6)
    service.load()
    for number in range(6):
        service.put("T", [f"k{number}", "all"], 10 * number, T0 + number)
    service.close()
    before = store_bytes(backend)
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == sorted(before)

    reopened = IndexService(DiskBackend(tmp_path), slot_count=8, entry_count=6)
    reopened.load()
    try:
        assert reopened.max_physical_offset == 50
        assert reopened.query("T", "all", 0, 2**62, max_results=10) == [50, 40, 30, 20, 10, 0]
        assert reopened.query("T", "k3", 0, 2**62) == [30]
        assert store_bytes(backend) == before
        assert reopened.files[-1].entries == 2
        reopened.put("T", ["k6"], 60, T0 + 6)  # goes on into the newest, unfilled file
        assert len(reopened.files) == len(before) == 3
        assert reopened.files[-1].entries == 3
        assert reopened.query("T", "k6", 0, 2**62) == [60]
    finally:
        reopened.close()


def write_file(backend: Backend, name: str, data: bytes) -> None:
    segment = backend.create_segment(paths.index_file(name), len(data))
    try:
        segment.write(0, data)
        segment.flush()
    finally:
        segment.close()


def test_rocketmq_sized_files_open_with_their_own_layout(
    make: Callable[..., IndexService], backend: Backend
) -> None:
    # What RocketMQ leaves with 4 entries per slot (as its 5M/20M), here 2 slots / 8 entries:
    # a used file, then a new file never written to (indexCount still 0, begin/end inherited).
    slots, entries = 2, 8
    key_hash = index_key_hash("T", "x")
    used = bytearray(index_file_size(slots, entries))
    used[0:40] = HEADER.pack(5000, 7000, 100, 300, 1, 3)
    slot_at = 40 + (key_hash % slots) * 4
    used[slot_at : slot_at + 4] = i32(2)
    used[48 + 20 : 48 + 60] = ENTRY.pack(key_hash, 100, 0, 0) + ENTRY.pack(key_hash, 300, 2, 1)
    fresh = bytearray(index_file_size(slots, entries))
    fresh[0:40] = HEADER.pack(7000, 7000, 300, 300, 0, 0)
    write_file(backend, "20240101000000000", bytes(used))
    write_file(backend, "20240101000001000", bytes(fresh))

    service = make(slot_count=4, entry_count=2)
    assert [(f.slot_count, f.entry_count) for f in service.files] == [(2, 8), (2, 8)]
    assert service.files[1].is_empty
    assert service.max_physical_offset == 300
    assert service.query("T", "x", 0, 2**62) == [300, 100]
    assert service.query("T", "x", 6000, 7000) == [300]  # 5000 + 2 s
    assert service.query("T", "x", 5000, 6999) == [100]
    service.put("T", ["y"], 400, 9000)
    assert service.files[1].entry(1)[1:] == (400, 0, 0)
    assert len(service.files) == 2
    assert service.query("T", "y", 0, 2**62) == [400]


def test_not_an_index_file_is_a_clear_error(backend: Backend) -> None:
    backend.write_bytes(paths.INDEX / "notes.txt", b"hello")
    service = IndexService(backend, slot_count=4, entry_count=8)
    with pytest.raises(IndexFormatError, match=r"index/notes\.txt is not an index file: 5 bytes"):
        service.load()
    assert service.files == ()


def test_inconsistent_header_is_a_clear_error(backend: Backend) -> None:
    data = bytearray(index_file_size(4, 8))
    data[0:40] = HEADER.pack(1, 2, 3, 4, 0, 999)  # 999 entries in an 8-entry file
    write_file(backend, "20240101000000000", bytes(data))
    service = IndexService(backend, slot_count=4, entry_count=8)
    with pytest.raises(IndexFormatError, match=r"20240101000000000: inconsistent header"):
        service.load()


def test_bad_sizes_are_rejected() -> None:
    backend = MemoryBackend()
    with pytest.raises(ValueError):
        IndexService(backend, slot_count=0)
    with pytest.raises(ValueError):
        IndexService(backend, entry_count=1)
    with pytest.raises(ValueError):
        IndexService(backend, slot_count=5_000_000, entry_count=200_000_000)


# ---- recovery: truncate_after


Message = tuple[str, list[str], int, int]  # topic, keys, physical offset, store timestamp


def build(backend: Backend, messages: list[Message], slots: int, entries: int) -> IndexService:
    service = IndexService(backend, slot_count=slots, entry_count=entries)
    service.load()
    for topic, keys, offset, timestamp in messages:
        service.put(topic, keys, offset, timestamp)
    return service


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Message], int]:
    count = draw(st.integers(1, 25))
    messages: list[Message] = []
    offset, timestamp = 0, T0
    for _ in range(count):
        offset += draw(st.integers(1, 300))
        timestamp += draw(st.integers(-1500, 4000))
        keys = draw(st.lists(st.sampled_from(["", "a", "b", "Aa", "BB", "k1", "uniq"]), max_size=3))
        messages.append((draw(st.sampled_from(["T", "U"])), keys, offset, timestamp))
    cut = draw(st.integers(0, offset + 1))
    return messages, cut


@settings(max_examples=150, deadline=None)
@given(
    history=histories(),
    slots=st.sampled_from([1, 3, 7]),
    entries=st.sampled_from([2, 3, 5, 64]),
)
def test_truncate_after_equals_never_indexed(
    history: tuple[list[Message], int], slots: int, entries: int
) -> None:
    messages, cut = history
    time_of = {offset: timestamp for _, _, offset, timestamp in messages}
    kept = [m for m in messages if m[2] < cut]
    full, fresh, replayed = MemoryBackend(), MemoryBackend(), MemoryBackend()
    services = [
        build(full, messages, slots, entries),
        build(fresh, kept, slots, entries),
        build(replayed, messages, slots, entries),
    ]
    try:
        truncated, expected, again = services
        removed = truncated.truncate_after(cut, store_timestamp_of=time_of.__getitem__)
        assert removed == sum(len([k for k in m[1] if k]) for m in messages if m[2] >= cut)
        assert store_bytes(full) == store_bytes(fresh)
        assert truncated.max_physical_offset == expected.max_physical_offset
        assert truncated.query("T", "a", 0, 2**62) == expected.query("T", "a", 0, 2**62)
        # and indexing the cut messages again rebuilds exactly the original store
        for topic, keys, offset, timestamp in messages:
            if offset >= cut:
                truncated.put(topic, keys, offset, timestamp)
        assert store_bytes(full) == store_bytes(replayed)
    finally:
        for service in services:
            service.close()


def test_truncate_after_on_disk(tmp_path: Path) -> None:
    messages: list[Message] = [("T", ["a", f"m{n}"], 100 * n, T0 + 700 * n) for n in range(1, 8)]
    full = DiskBackend(tmp_path / "full")
    fresh = DiskBackend(tmp_path / "fresh")
    time_of = {offset: timestamp for _, _, offset, timestamp in messages}
    truncated = build(full, messages, 3, 4)
    expected = build(fresh, messages[:3], 3, 4)
    try:
        assert len(truncated.files) == 5
        assert truncated.truncate_after(350, store_timestamp_of=time_of.__getitem__) == 8
        assert len(truncated.files) == 2
        assert sorted(p.name for p in (tmp_path / "full" / "index").iterdir()) == sorted(
            p.name for p in (tmp_path / "fresh" / "index").iterdir()
        )
        assert store_bytes(full) == store_bytes(fresh)
        assert truncated.max_physical_offset == 300
        assert truncated.truncate_after(0) == 6
        assert truncated.files == ()
        assert truncated.max_physical_offset == -1
        assert full.list_names(paths.INDEX) == []
    finally:
        truncated.close()
        expected.close()


def test_truncate_without_timestamps_keeps_whole_seconds(make: Callable[..., IndexService]) -> None:
    service = make(slot_count=5, entry_count=10)
    service.put("T", ["a"], 100, T0)
    service.put("T", ["b"], 200, T0 + 2_750)
    service.put("T", ["c"], 300, T0 + 5_000)
    assert service.truncate_after(250) == 1
    header = service.files[0]
    assert (header.end_phy_offset, header.end_timestamp, header.index_count) == (200, T0 + 2_000, 3)
    assert service.truncate_after(10_000) == 0
    assert service.query("T", "b", 0, 2**62) == [200]
    assert service.query("T", "c", 0, 2**62) == []


# ---- retention


def test_delete_files_before(make: Callable[..., IndexService], backend: Backend) -> None:
    service = make(slot_count=4, entry_count=3)
    for number in range(1, 7):
        service.put("T", [f"k{number}", "all"], 100 * number, T0 + number)
    names = [f.name for f in service.files]
    assert [f.end_phy_offset for f in service.files] == [100, 200, 300, 400, 500, 600]
    assert service.delete_files_before(100) == 0
    assert service.delete_files_before(301) == 3
    assert backend.list_names(paths.INDEX) == names[3:]
    assert service.query("T", "all", 0, 2**62) == [600, 500, 400]
    assert service.query("T", "k1", 0, 2**62) == []
    assert service.delete_files_before(10**9) == 2  # never the newest
    assert backend.list_names(paths.INDEX) == names[5:]
    assert service.max_physical_offset == 600
    service.put("T", ["k7"], 700, T0 + 7)
    assert service.query("T", "all", 0, 2**62) == [600]


def test_close_is_idempotent_and_load_reopens(make: Callable[..., IndexService]) -> None:
    service = make(slot_count=4, entry_count=10)
    service.put("T", ["a"], 1, T0)
    service.close()
    service.close()
    assert service.files == ()
    service.load()
    assert service.query("T", "a", 0, 2**62) == [1]
