"""What a reopened store keeps resident (store/files.py): recovery zeroes the newest segment's
tail only where it is not zero, and loading a consume queue reads its probes from the file, so
neither maps megabytes of empty file into the process."""

from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath

import pytest

from pocketmq.store.config import StoreConfig
from pocketmq.store.files import DiskBackend, MemoryBackend
from pocketmq.store.message_store import MessageStore, PutMessage

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/self/smaps"
)

SEGMENT = 8 << 20


def resident_kib(path: Path) -> int:
    """Rss of this process's mappings of ``path``."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0] and not line.startswith(("Rss", "Size")):
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.parametrize("backend", ["disk", "memory"])
def test_zero_clears_what_is_written_and_writes_nothing_where_all_is_zero(
    tmp_path: Path, backend: str
) -> None:
    store = DiskBackend(tmp_path) if backend == "disk" else MemoryBackend()
    segment = store.create_segment(PurePosixPath("seg"), 4 << 20)
    try:
        segment.write(100, b"\x01" * 10)
        segment.write((3 << 20) + 5, b"\x02")
        segment.flush()
        segment.zero(50, segment.size)
        assert segment.read(0, segment.size) == bytes(segment.size)
        assert bytes(segment.view[:4096]) == bytes(4096)
        segment.flush()
        segment.zero(0, segment.size)  # all zero already: nothing written, nothing to sync
        assert segment._dirty_to == 0
    finally:
        segment.close()


def test_zeroing_an_empty_tail_maps_none_of_it(tmp_path: Path) -> None:
    segment = DiskBackend(tmp_path).create_segment(PurePosixPath("seg"), SEGMENT)
    try:
        segment.zero(4096, SEGMENT)
        assert resident_kib(tmp_path / "seg") == 0
    finally:
        segment.close()


def test_a_reopened_store_maps_no_more_than_it_scanned(tmp_path: Path) -> None:
    config = StoreConfig(commitlog_segment_size=SEGMENT)
    with MessageStore.open(tmp_path, config=config) as store:
        for _ in range(100):
            store.put(PutMessage(topic="T", body=b"x" * 1000, queue_id=0))
        written = store.commitlog.max_offset
    with MessageStore.open(tmp_path, config=config) as store:
        segment_path = tmp_path / "commitlog" / "00000000000000000000"
        queue_path = tmp_path / "consumequeue" / "T" / "0" / "00000000000000000000"
        # The scanned records and the page after them (with the kernel's fault-around), not
        # the 8 MiB segment the whole tail of which used to be written with zeros.
        assert resident_kib(segment_path) * 1024 < written + (256 << 10)
        assert resident_kib(queue_path) <= 64  # the last entry's page and those around it
        assert store.max_offset("T", 0) == 100
        assert store.commitlog.max_offset == written
        store.put(PutMessage(topic="T", body=b"after", queue_id=0))
        assert store.max_offset("T", 0) == 101
