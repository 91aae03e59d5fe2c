from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.store import paths
from pocketmq.store.consume_queue import ENTRY, ConsumeQueue
from pocketmq.store.errors import StoreError
from pocketmq.store.files import DiskBackend, MemoryBackend


def fill(queue: ConsumeQueue, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        queue.put(i, 1000 + i * 100, 100, i * 7)


def test_entries_files_and_reload(tmp_path: Path) -> None:
    backend = DiskBackend(tmp_path)
    queue = ConsumeQueue(backend, "T", 3, entries_per_file=10)
    fill(queue, 25)
    assert queue.max_offset == 25 and queue.min_offset == 0
    assert queue.get(9, 3) == [(1900, 100, 63), (2000, 100, 70), (2100, 100, 77)]
    assert backend.list_names(paths.consume_queue_dir("T", 3)) == [
        f"{0:020d}",
        f"{200:020d}",
        f"{400:020d}",
    ]
    queue.flush()
    queue.close()
    raw = (tmp_path / "consumequeue" / "T" / "3" / f"{200:020d}").read_bytes()
    assert ENTRY.unpack_from(raw, 0) == (2000, 100, 70) and len(raw) == 200
    reopened = ConsumeQueue(backend, "T", 3, entries_per_file=999)
    reopened.load()
    assert reopened.max_offset == 25 and reopened.file_size == 200
    assert reopened.max_physical_offset == 1000 + 24 * 100 and reopened.last_entry_end == 3500
    fill(reopened, 5, start=25)
    assert reopened.get(29, 1) == [(3900, 100, 203)]
    reopened.close()


def test_redispatch_is_idempotent_and_gaps_are_refused() -> None:
    queue = ConsumeQueue(MemoryBackend(), "T", 0, entries_per_file=10)
    fill(queue, 5)
    assert queue.put(4, 1400, 100, 28) is False  # already there
    with pytest.raises(StoreError, match="expected 5"):
        queue.put(7, 9999, 100, 0)


def test_truncate_from_physical_and_retention() -> None:
    queue = ConsumeQueue(MemoryBackend(), "T", 0, entries_per_file=10)
    fill(queue, 35)
    assert queue.truncate_from_physical(1000 + 30 * 100) == 5
    assert queue.max_offset == 30 and queue.max_physical_offset == 3900
    assert queue.delete_before_physical(1000 + 12 * 100) == 1
    assert queue.min_offset == 12
    assert queue.get(0, 2) == [(2200, 100, 84), (2300, 100, 91)]


def test_a_queue_that_starts_late_is_padded_like_rocketmq(tmp_path: Path) -> None:
    backend = DiskBackend(tmp_path)
    queue = ConsumeQueue(backend, "T", 0, entries_per_file=10)
    fill(queue, 4, start=13)
    queue.close()
    raw = (tmp_path / "consumequeue" / "T" / "0" / f"{200:020d}").read_bytes()
    assert ENTRY.unpack_from(raw, 0) == (0, 0x7FFFFFFF, 0)  # fillPreBlank
    reopened = ConsumeQueue(backend, "T", 0, entries_per_file=10)
    reopened.load()
    assert (reopened.min_offset, reopened.max_offset) == (13, 17)
    reopened.close()


def test_offset_by_time_binary_search() -> None:
    queue = ConsumeQueue(MemoryBackend(), "T", 0, entries_per_file=10)
    fill(queue, 20)
    times = {1000 + i * 100: 5000 + i * 10 for i in range(20)}
    assert queue.offset_by_time(5055, times.get) == 6
    assert queue.offset_by_time(0, times.get) == 0
    assert queue.offset_by_time(10**9, times.get) == 20


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 60), st.integers(1, 12), st.integers(0, 60))
def test_truncation_then_reload_matches_a_queue_that_never_had_the_entries(
    total: int, per_file: int, keep: int
) -> None:
    keep = min(keep, total)
    backend = MemoryBackend()
    queue = ConsumeQueue(backend, "T", 0, entries_per_file=per_file)
    fill(queue, total)
    queue.truncate_from_physical(1000 + keep * 100)
    reloaded = ConsumeQueue(backend, "T", 0, entries_per_file=per_file)
    reloaded.load()
    expected = ConsumeQueue(MemoryBackend(), "T", 0, entries_per_file=per_file)
    fill(expected, keep)
    assert reloaded.max_offset == expected.max_offset == keep
    assert reloaded.get(0, 100) == expected.get(0, 100)
