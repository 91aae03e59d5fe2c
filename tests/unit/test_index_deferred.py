"""Index keys put on the append path wait in memory (IndexService.put_later) and go into the files
in bulk; every reader, flush, cut and close sees them, a crash loses only what recovery rebuilds,
and the files end up byte for byte as if every key had been put at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.store import index as index_module
from pocketmq.store import paths
from pocketmq.store.config import StoreConfig
from pocketmq.store.errors import StoreFullError
from pocketmq.store.files import Backend, MemoryBackend, Segment
from pocketmq.store.index import IndexService
from pocketmq.store.javahash import ascii_hash, java_string_hash, java_string_hash_unsigned
from pocketmq.store.message_store import MessageStore, PutMessage

T0 = 1_700_000_000_123
SMALL = StoreConfig(
    commitlog_segment_size=4 * 1024 * 1024 + 64 * 1024,
    consume_queue_entries_per_file=50,
    index_slot_count=31,
    index_entry_count=40,  # a few files' worth in these tests
)


def reference_hash(text: str) -> int:
    """String.hashCode over UTF-16 units, unsigned, the plain way."""
    raw = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + int.from_bytes(raw[i : i + 2], "big")) % 2**32
    return h


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        self.now += 400
        return self.now


def message(i: int) -> PutMessage:
    return PutMessage(
        topic="T",
        queue_id=i % 2,
        body=f"body {i}".encode(),
        properties={"KEYS": f"k{i} shared", "UNIQ_KEY": f"{i:032X}"},
    )


def index_bytes(backend: Backend) -> dict[str, bytes]:
    found = {}
    for name in backend.list_names(paths.INDEX):
        segment = backend.open_segment(paths.index_file(name))
        try:
            found[name] = bytes(segment.view)
        finally:
            segment.close()
    return found


# ---- the hash


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=600),
        st.text(alphabet="0123456789ABCDEF", max_size=300),  # UNIQ_KEY: one parse
        st.text(alphabet="/0:@NO", max_size=40),  # both edges of that window
        st.text(alphabet=st.characters(max_codepoint=127), max_size=600),
    )
)
def test_java_hash_matches_utf16_reference(text: str) -> None:
    assert java_string_hash_unsigned(text) == reference_hash(text)
    signed = java_string_hash(text)
    assert signed == reference_hash(text) - (2**32 if reference_hash(text) >= 2**31 else 0)
    if text.isascii():
        assert ascii_hash(text.encode()) == reference_hash(text)


def test_java_hash_known_values() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("0") == 48
    assert java_string_hash("N" * 40) == java_string_hash_unsigned("N" * 40) - 2**32 * (
        java_string_hash_unsigned("N" * 40) >= 2**31
    )


# ---- deferral inside IndexService


def test_put_later_then_drain_writes_the_same_bytes_as_put() -> None:
    messages = [
        ("T", ("a", "b"), 100, T0),
        ("T", ("0000000000000000000000000001E240",), 200, T0 + 10),
        ("%RETRY%g", ("x" * 300, "ключ"), 300, T0 + 3000),  # long and non-ASCII keys
        ("U", ("Aa", "BB", "c"), 400, T0 - 5000),  # clock stepped back; a file fills up
    ] + [("T", (f"k{i}",), 500 + i, T0 + 5000 + i) for i in range(20)]
    direct, deferred = MemoryBackend(), MemoryBackend()
    service = IndexService(direct, slot_count=5, entry_count=7)
    later = IndexService(deferred, slot_count=5, entry_count=7)
    service.load()
    later.load()
    for topic, keys, offset, stamp in messages:
        service.put(topic, list(keys), offset, stamp)
        later.put_later(topic, keys, offset, stamp)
    assert later.max_physical_offset == service.max_physical_offset == 519
    later.drain()
    assert index_bytes(deferred) == index_bytes(direct)
    assert len(index_bytes(direct)) > 1
    service.close()
    later.close()


def test_readers_cuts_and_put_see_pending_keys() -> None:
    service = IndexService(MemoryBackend(), slot_count=7, entry_count=100)
    service.load()
    service.put_later("T", ("a",), 10, T0)
    assert service.query("T", "a", 0, 2**62) == [10]
    service.put_later("T", ("a",), 20, T0 + 1)
    assert [f.entries for f in service.files] == [2]
    service.put_later("T", ("a",), 30, T0 + 2)
    service.put("T", ["a"], 40, T0 + 3)  # in order after the pending one
    assert service.query("T", "a", 0, 2**62) == [40, 30, 20, 10]
    service.put_later("T", ("a",), 50, T0 + 4)
    assert service.truncate_after(30) == 3
    assert service.query("T", "a", 0, 2**62) == [20, 10]
    service.put_later("T", ("a",), 25, T0 + 5)
    service.put_later("T", ("a",), 5, T0 + 5)  # below the newest: a re-dispatch, skipped
    assert service.max_physical_offset == 25
    service.close()
    service.load()
    assert service.query("T", "a", 0, 2**62) == [25, 20, 10]
    service.close()


class FailingBackend(MemoryBackend):
    """Refuses to create index files while ``full`` is set."""

    full = False

    def create_segment(self, rel: paths.PurePosixPath, size: int) -> Segment:
        if self.full and rel.parts[0] == paths.INDEX.name:
            raise StoreFullError(28, "no space left (test)")
        return super().create_segment(rel, size)


def test_a_failed_drain_keeps_the_keys_it_could_not_write() -> None:
    backend = FailingBackend()
    service = IndexService(backend, slot_count=3, entry_count=4)  # 3 entries per file
    service.load()
    service.put("T", ["k0"], 100, T0)  # the first file
    for number in range(1, 5):
        service.put_later("T", (f"k{number}",), 100 * (number + 1), T0 + number)
    backend.full = True
    with pytest.raises(StoreFullError):
        service.drain()  # the first file fills up, the second cannot be created
    assert [f.entries for f in service._files] == [3]
    with pytest.raises(StoreFullError):
        service.query("T", "k4", 0, 2**62)
    backend.full = False
    assert service.query("T", "k4", 0, 2**62) == [500]
    assert [f.entries for f in service.files] == [3, 2]
    expected = IndexService(MemoryBackend(), slot_count=3, entry_count=4)
    expected.load()
    for number in range(5):
        expected.put("T", [f"k{number}"], 100 * (number + 1), T0 + number)
    assert list(index_bytes(backend).values()) == list(index_bytes(expected._backend).values())
    service.close()
    expected.close()


def test_a_key_that_is_not_text_costs_only_its_own_message() -> None:
    service = IndexService(MemoryBackend(), slot_count=7, entry_count=100)
    service.load()
    service.put_later("T", ("a",), 10, T0)
    service.put_later("T", ("b", 12345), 20, T0 + 1)  # type: ignore[arg-type]
    service.put_later("T", ("c",), 30, T0 + 2)
    with pytest.raises((AttributeError, TypeError)):
        service.drain()
    assert service.query("T", "a", 0, 2**62) == [10]
    assert service.query("T", "b", 0, 2**62) == []
    assert service.query("T", "c", 0, 2**62) == [30]
    service.close()


def test_a_key_that_is_not_text_costs_only_itself_when_the_file_has_room() -> None:
    # The one-pass path (the newest file has room for every pending key) stops at the bad key;
    # the keys before it stay written, the ones after it go the careful way.
    service = IndexService(MemoryBackend(), slot_count=7, entry_count=100)
    service.load()
    service.put("T", ["a"], 10, T0)  # the file exists now
    service.put_later("T", ("b", 12345, "d"), 20, T0 + 1)  # type: ignore[arg-type]
    service.put_later("T", ("c",), 30, T0 + 2)
    with pytest.raises((AttributeError, TypeError)):
        service.drain()
    for key, offsets in (("a", [10]), ("b", [20]), ("d", [20]), ("c", [30])):
        assert service.query("T", key, 0, 2**62) == offsets, key
    assert [f.entries for f in service.files] == [4]
    service.close()


def test_the_one_pass_drain_writes_the_same_bytes_as_put() -> None:
    keys = [("a", "b"), ("0000000000000000000000000001E240",), ("x" * 300, "ключ"), ("Aa", "BB")]
    direct, deferred = MemoryBackend(), MemoryBackend()
    service = IndexService(direct, slot_count=5, entry_count=1000)
    later = IndexService(deferred, slot_count=5, entry_count=1000)
    for index in (service, later):
        index.load()
        index.put("T", ["first"], 1, T0)
    for number in range(200):
        stamp = T0 + 700 * number
        service.put("T", list(keys[number % 4]), 100 + number, stamp)
        later.put_later("T", keys[number % 4], 100 + number, stamp)
    later.drain()
    assert index_bytes(deferred) == index_bytes(direct)
    service.close()
    later.close()


def test_lone_surrogates_hash_as_utf16_units() -> None:
    # Java strings may hold them; String.hashCode sums their code units like any other
    assert java_string_hash_unsigned("a\ud800b") == (97 * 31 * 31 + 0xD800 * 31 + 98) % 2**32
    assert java_string_hash_unsigned("\U0001f600") == (0xD83D * 31 + 0xDE00) % 2**32


# ---- through the store


def test_query_by_key_sees_messages_just_put() -> None:
    with MessageStore.in_memory(config=SMALL, clock_ms=Clock()) as store:
        offsets = [store.put(message(i)).physical_offset for i in range(5)]
        assert [r.physical_offset for r in store.query_by_key("T", "k3")] == [offsets[3]]
        assert [r.physical_offset for r in store.query_by_key("T", f"{4:032X}")] == [offsets[4]]
        results = store.put_many([message(i) for i in range(5, 9)])
        found = store.query_by_key("T", "shared")
        assert [r.physical_offset for r in found] == [
            *reversed([r.physical_offset for r in results]),
            *reversed(offsets),
        ]


def test_flush_puts_pending_keys_into_the_files() -> None:
    with MessageStore.in_memory(config=SMALL, clock_ms=Clock()) as store:
        for i in range(7):
            store.put(message(i))
        store.flush_all()
        # another reader of the same files (as `store inspect` would be) sees every key
        reader = IndexService(store.backend, slot_count=31, entry_count=40)
        reader.load()
        assert sum(f.entries for f in reader.files) == 21  # k<i>, shared and UNIQ_KEY
        assert reader.query("T", "k6", 0, 2**62) != []
        reader._files.clear()  # leave the shared segments to the store


@pytest.mark.parametrize("pending_max", [4, 256])
@pytest.mark.parametrize("flush_first", [0, 5, 30])
def test_a_crash_loses_no_indexed_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush_first: int, pending_max: int
) -> None:
    # with 4, keys past the checkpoint are partly in the files, partly pending, at the crash
    monkeypatch.setattr(index_module, "_PENDING_MAX", pending_max)
    root = tmp_path / "s"
    store = MessageStore.open(root, config=SMALL, clock_ms=Clock())
    offsets = []
    for i in range(30):
        offsets.append(store.put(message(i)).physical_offset)
        if i + 1 == flush_first:
            store.flush_all()
    store.crash_for_test()  # keys still pending are lost with the process
    with MessageStore.open(root, config=SMALL, clock_ms=Clock()) as store:
        assert store.recovery_report.abnormal
        for i in range(30):
            assert [r.physical_offset for r in store.query_by_key("T", f"k{i}")] == [offsets[i]]
        assert len(store.query_by_key("T", "shared", max_results=64)) == 30
    with MessageStore.open(root, config=SMALL, clock_ms=Clock()) as store:
        assert not store.recovery_report.abnormal
        assert len(store.query_by_key("T", "shared", max_results=64)) == 30


def test_closing_writes_pending_keys(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, config=SMALL, clock_ms=Clock()) as store:
        for i in range(3):
            store.put(message(i))
    with MessageStore.open(root, config=SMALL, clock_ms=Clock()) as store:
        assert store.recovery_report.redispatched == 0
        assert len(store.query_by_key("T", "shared")) == 3


def test_flush_ranges_cover_files_that_filled_up_since_the_last_flush() -> None:
    """A checkpoint may cover keys in a file that filled up between two flushes: its tail must
    be synced too, not only the newest file's."""
    service = IndexService(MemoryBackend(), slot_count=5, entry_count=7)
    service.load()
    for i in range(20):  # 6 keys per file: several files fill up
        service.put("T", [f"k{i}"], 100 + i, T0 + i)
    files = [r[0] for r in service.flush_ranges()]
    assert len(files) == len(service.files) >= 3
    assert [r[0] for r in service.flush_ranges()] == [service.files[-1].segment]
    service.close()
