"""Appends into a fresh segment: pages are write-faulted ahead of the writes (store/files.py)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from pocketmq.store.files import DiskBackend
from pocketmq.store.message_store import MessageStore, PutMessage


def test_prefaulted_segment_takes_no_page_faults_while_written(tmp_path: Path) -> None:
    import resource

    import pocketmq.store.files

    backend = DiskBackend(tmp_path)
    segment = backend.create_segment(PurePosixPath("seg"), 4 << 20)
    chunk = b"\x5a" * 4096

    def faults_writing(start: int) -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for position in range(start, start + (1 << 20), 4096):
            segment.write(position, chunk)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    try:
        segment.prefault(0, 1 << 20)
        if not pocketmq.store.files._populate_works:
            pytest.skip("this kernel has no MADV_POPULATE_WRITE")
        prefaulted = faults_writing(0)
        plain = faults_writing(2 << 20)  # never prefaulted
        assert plain >= 200  # 256 pages, one fault each
        assert prefaulted < plain // 4
        assert bytes(segment.view[: 1 << 20]) == chunk * 256
        assert bytes(segment.view[1 << 20 : 2 << 20]) == bytes(1 << 20)  # untouched: zeros
    finally:
        segment.close()


def test_the_commitlog_prefaults_ahead_of_its_appends(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path) as store:
        store.put(PutMessage(topic="T", body=b"x" * 100))
        ahead = store.commitlog._prefaulted
        assert ahead > store.commitlog.max_offset + 512 * 1024
        for _ in range(1000):
            store.put(PutMessage(topic="T", body=b"x" * 1000))
        assert store.commitlog._prefaulted > store.commitlog.max_offset
        assert store.commitlog._prefaulted > ahead  # moved on with the writes
