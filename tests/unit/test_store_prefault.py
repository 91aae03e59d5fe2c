"""Appends into a fresh segment: pages are write-faulted ahead of the writes, by a worker thread
(store/files.py)."""

from __future__ import annotations

import threading
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
        segment.settle()  # the worker thread faults the pages in
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


def _populating() -> bool:
    import pocketmq.store.files

    return pocketmq.store.files._populate_works


def test_writes_racing_the_prefault_worker_keep_every_byte(tmp_path: Path) -> None:
    """The loop writes into pages the worker is faulting in at the same time (an append that
    caught up with the prefault): every byte written is there, the rest stays zero."""
    import pocketmq.store.files

    segment = DiskBackend(tmp_path).create_segment(PurePosixPath("seg"), 8 << 20)
    try:
        segment.prefault(0, 8 << 20)  # the whole segment, in the background
        for position in range(0, 8 << 20, 8192):  # every other page, while it runs
            segment.write(position, position.to_bytes(8, "big") * 512)
        segment.settle()
        if not _populating():
            pytest.skip("this kernel has no MADV_POPULATE_WRITE")
        assert pocketmq.store.files._populater is not None
        assert pocketmq.store.files._populater.calls > 0
        view = segment.view
        for position in range(0, 8 << 20, 8192):
            assert bytes(view[position : position + 4096]) == position.to_bytes(8, "big") * 512
            assert bytes(view[position + 4096 : position + 8192]) == bytes(4096)
    finally:
        segment.close()


def test_prefault_runs_on_its_own_thread_and_asks_for_the_next_chunk_too(tmp_path: Path) -> None:
    import resource

    import pocketmq.store.files

    segment = DiskBackend(tmp_path).create_segment(PurePosixPath("seg"), 8 << 20)
    try:
        segment.prefault(0, 1 << 20)
        segment.settle()
        if not _populating():
            pytest.skip("this kernel has no MADV_POPULATE_WRITE")
        assert any(t.name == "pocketmq-prefault" for t in threading.enumerate())
        calls = pocketmq.store.files._populater.calls  # type: ignore[union-attr]
        segment.prefault(1000, 1 << 20)  # asked for already: nothing more to do
        segment.settle()
        assert pocketmq.store.files._populater.calls == calls  # type: ignore[union-attr]
        # The chunk after the one asked for is faulted in too: writing it takes no faults.
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for position in range(1 << 20, 2 << 20, 4096):
            segment.write(position, b"\x01" * 4096)
        assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 64
    finally:
        segment.close()


def test_a_segment_closed_while_the_worker_prefaults_it_is_left_alone(tmp_path: Path) -> None:
    backend = DiskBackend(tmp_path)
    segment = backend.create_segment(PurePosixPath("seg"), 32 << 20)
    segment.write(0, b"kept")
    segment.prefault(0, 32 << 20)
    segment.close()  # waits for the piece under way (1 MiB), if any; the rest is dropped
    segment.prefault(0, 1 << 20)  # closed: nothing asked for
    segment.settle()
    reopened = backend.open_segment(PurePosixPath("seg"))
    try:
        assert bytes(reopened.view[:4]) == b"kept"
    finally:
        reopened.close()


def test_a_forked_child_prefaults_with_its_own_worker(tmp_path: Path) -> None:
    import os

    segment = DiskBackend(tmp_path).create_segment(PurePosixPath("seg"), 4 << 20)
    segment.prefault(0, 1 << 20)
    segment.settle()  # the parent's worker exists now
    if not _populating():
        segment.close()
        pytest.skip("this kernel has no MADV_POPULATE_WRITE")
    pid = os.fork()
    if pid == 0:  # the child: its prefault must be done by a thread of its own, not hang
        code = 1
        try:
            import pocketmq.store.files

            assert pocketmq.store.files._populater is None  # the parent's had no thread here
            segment.prefault(2 << 20, 3 << 20)
            segment.settle()
            segment.write(2 << 20, b"child")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    segment.close()
    assert os.waitstatus_to_exitcode(status) == 0
