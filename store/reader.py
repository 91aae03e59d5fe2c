"""Read-only access to a store directory: for inspection tools and the Spark exporter.

It takes no lock and writes nothing, so it can read a store that a broker has open, or one
written by Apache RocketMQ (only ``commitlog/`` is needed; states are folded from the state
topic's records when pocketmq wrote them).

Unlike recovery, a record whose structure is sound but whose CRC does not match (the
whole-record CRC where ``config/storeFormat.json`` says the store wrote one, else the body CRC)
is reported (``crc_ok = False``) and the walk goes on; a record whose structure is broken ends its
segment: in the last segment that is a torn tail, elsewhere a damaged range.

Which folders it reads (:func:`check_store_folder`): a store with records (``commitlog/``
segments); a store with none yet, which reads as empty (no records, an all-zero summary): the
``commitlog/`` folder is missing or empty but the folder holds what a broker writes when it
starts (``config/`` with a store's JSON files, ``checkpoint``, ``abort``, ``consumequeue/``). A
missing folder raises ``FileNotFoundError`` ("no such folder: <path>"); a folder (or file) that
holds none of that raises :class:`store.errors.NotAStoreError` ("<path>: not a RocketMQ or
pocketmq store"), a subclass of ``FileNotFoundError``.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pocketmq.store import paths
from pocketmq.store.consume_queue import ENTRY, ENTRY_SIZE
from pocketmq.store.errors import CorruptRecordError, NotAStoreError
from pocketmq.store.files import DiskBackend
from pocketmq.store.record import MessageRecord, check_record, decode_record
from pocketmq.store.state import STATE_TOPIC, StateTable, decode_state_body
from pocketmq.store.store_format import StoreFormat

__all__ = ["ReadRecord", "ScanSummary", "SegmentFile", "StoreReader", "check_store_folder"]

# What a RocketMQ or pocketmq broker writes into its store folder, besides commitlog/, from the
# moment it starts (pocketmq: config/storeFormat.json, checkpoint, abort; both write config/*.json
# on a clean stop). Generic names (index/, lock, an empty config/) alone do not make a store.
_STORE_FILES = (paths.CHECKPOINT, paths.ABORT)
_STORE_FOLDERS = (paths.CONSUME_QUEUE,)
_STORE_CONFIG_FILES = (
    "storeFormat.json",
    "topics.json",
    "consumerOffset.json",
    "delayOffset.json",
    "subscriptionGroup.json",
)


def check_store_folder(root: str | os.PathLike[str]) -> bool:
    """Whether ``root`` is a store with a ``commitlog/`` folder (True) or a store without one
    yet (False: nothing stored). Raises ``FileNotFoundError`` when ``root`` does not exist,
    :class:`NotAStoreError` when it holds nothing a store holds (or is a file)."""
    folder = Path(root)
    if not folder.exists():
        raise FileNotFoundError(f"no such folder: {folder}")
    if not folder.is_dir():
        raise NotAStoreError(str(folder), "a file, not a folder")
    if (folder / paths.COMMITLOG).is_dir():
        return True
    if (
        any((folder / name).is_file() for name in _STORE_FILES)
        or any((folder / name).is_dir() for name in _STORE_FOLDERS)
        or any((folder / paths.CONFIG / name).is_file() for name in _STORE_CONFIG_FILES)
    ):
        return False
    if any(paths.offset_for_file_name(entry.name) is not None for entry in folder.iterdir()):
        raise NotAStoreError(
            str(folder), "it looks like a commitlog/ folder: give the store folder above it"
        )
    raise NotAStoreError(
        str(folder), "no commitlog/, consumequeue/, checkpoint, abort or config/*.json in it"
    )


@dataclass(frozen=True, slots=True)
class SegmentFile:
    start_offset: int
    path: Path
    size: int


@dataclass(frozen=True, slots=True)
class ReadRecord:
    physical_offset: int
    size: int
    record: MessageRecord
    crc_ok: bool
    segment: SegmentFile
    # Why the record could only be shown in part (text that is not UTF-8, shown with U+FFFD);
    # None when it decoded as written.
    problem: str | None = None


@dataclass(slots=True)
class ScanSummary:
    records: int = 0
    bytes: int = 0
    bad_crc: int = 0
    undecodable: int = 0  # records whose topic or properties are not UTF-8
    torn_tail: str | None = None  # "file at position: reason, N bytes after it"
    torn_tail_bytes: int = 0
    damaged: list[str] = field(default_factory=list)
    foreign_files: list[str] = field(default_factory=list)


class StoreReader:
    """A store folder, read-only. Raises what :func:`check_store_folder` raises; a store with
    no records yet has no :attr:`segments` and iterates as empty."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        has_commitlog = check_store_folder(self.root)
        directory = self.root / paths.COMMITLOG
        self.segments: list[SegmentFile] = []
        self.foreign_files: list[str] = []
        for name in sorted(os.listdir(directory)) if has_commitlog else ():
            start = paths.offset_for_file_name(name)
            path = directory / name
            if start is None or not path.is_file():
                self.foreign_files.append(str(path))
                continue
            size = path.stat().st_size
            if size == 0:
                self.foreign_files.append(str(path))
                continue
            self.segments.append(SegmentFile(start, path, size))
        self.summary = ScanSummary(foreign_files=list(self.foreign_files))
        self.store_format = StoreFormat.load(DiskBackend.read_only(self.root))

    def iter_records(self, from_offset: int = 0) -> Iterator[ReadRecord]:
        """Every record from ``from_offset`` (rounded down to the segment holding it) on,
        skipping records before it. Updates :attr:`summary` as it goes."""
        summary = self.summary
        for i, segment in enumerate(self.segments):
            if segment.start_offset + segment.size <= from_offset:
                continue
            last = i == len(self.segments) - 1
            with (
                open(segment.path, "rb") as handle,
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
            ):
                view = memoryview(mapped)
                try:
                    yield from self._walk(segment, view, from_offset, last, summary)
                finally:
                    view.release()

    def _walk(
        self,
        segment: SegmentFile,
        view: memoryview,
        from_offset: int,
        last: bool,
        summary: ScanSummary,
    ) -> Iterator[ReadRecord]:
        position = 0
        while position + 8 <= len(view):
            try:
                size = check_record(view, position, check_crc=False)
            except CorruptRecordError as error:
                self._note_stop(segment, view, position, error.reason, last, summary)
                return
            if size == 0:
                return  # END-OF-FILE filler
            offset = segment.start_offset + position
            if offset >= from_offset:
                problem = None
                try:
                    record = decode_record(view, position, check_crc=False)
                except CorruptRecordError as error:  # text that is not UTF-8: show it anyway
                    problem = error.reason
                    record = decode_record(view, position, check_crc=False, text_errors="replace")
                    summary.undecodable += 1
                crc_ok = _crc_ok(view, position, self.store_format.requires_crc(offset))
                summary.records += 1
                summary.bytes += size
                if not crc_ok:
                    summary.bad_crc += 1
                yield ReadRecord(offset, size, record, crc_ok, segment, problem)
            position += size

    @staticmethod
    def _note_stop(
        segment: SegmentFile,
        view: memoryview,
        position: int,
        reason: str,
        last: bool,
        summary: ScanSummary,
    ) -> None:
        rest = len(bytes(view[position:]).rstrip(b"\0"))
        if rest == 0 and last:
            return  # the end of written data
        where = f"{segment.path} at position {position} (physical offset {segment.start_offset + position})"
        if last:
            summary.torn_tail = f"{where}: {reason}, {rest} bytes after it"
            summary.torn_tail_bytes = rest
        else:
            summary.damaged.append(f"{where}: {reason}, rest of the segment unreadable")

    def states(self) -> StateTable:
        """Current states, folded from the state topic's records (found through its consume
        queue, so only those records are read); ``change_of(offset)`` gives a message's."""
        result = StateTable()
        queue_dir = self.root / paths.consume_queue_dir(STATE_TOPIC, 0)
        if not queue_dir.is_dir():
            return result
        offsets: list[int] = []
        for name in sorted(os.listdir(queue_dir)):
            if paths.offset_for_file_name(name) is None:
                continue
            data = (queue_dir / name).read_bytes()
            for physical, size, _ in ENTRY.iter_unpack(data[: len(data) - len(data) % ENTRY_SIZE]):
                if size <= 0 or size == 0x7FFFFFFF:
                    if size <= 0:
                        break
                    continue
                offsets.append(physical)
        for physical in offsets:
            segment = self._segment_of(physical)
            if segment is None:
                continue
            with open(segment.path, "rb") as handle:
                handle.seek(physical - segment.start_offset)
                head = handle.read(4)
                if len(head) < 4:
                    continue
                handle.seek(physical - segment.start_offset)
                data = handle.read(int.from_bytes(head, "big", signed=True))
            try:
                record = decode_record(data, 0)
                change = decode_state_body(record.body, record.store_timestamp)
            except (CorruptRecordError, ValueError):
                continue
            if record.topic == STATE_TOPIC:
                result.apply(change)
        return result

    def _segment_of(self, physical: int) -> SegmentFile | None:
        for segment in self.segments:
            if segment.start_offset <= physical < segment.start_offset + segment.size:
                return segment
        return None


def _crc_ok(view: memoryview, position: int, require_record_crc: bool) -> bool:
    try:
        check_record(view, position, check_crc=True, require_record_crc=require_record_crc)
    except CorruptRecordError:
        return False
    return True
