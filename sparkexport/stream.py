"""Following a live commitlog: where the complete records end (streaming offsets).

The broker may be writing the last record while we look. A record counts as complete when its
structure is sound and, if it is the last one found, its CRC matches too (the writer puts the
whole-record CRC in last). A sound record with a bad CRC is passed only once a sound record
follows it; damage followed by sound records is skipped as the batch reader skips it.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from pocketmq.sparkexport.columns import Words, layout
from pocketmq.sparkexport.scan import WALK_BREAK, WALK_RANGE, find_record, magic_at, walk
from pocketmq.store import paths
from pocketmq.store.errors import CorruptRecordError
from pocketmq.store.files import DiskBackend
from pocketmq.store.record import BLANK_MAGIC, check_record
from pocketmq.store.store_format import StoreFormat

__all__ = ["StoreTail"]


def _crc_ok(buf: mmap.mmap, position: int, require_record_crc: bool) -> bool:
    """Body CRC, or the whole-record CRC where the store wrote one."""
    try:
        # any buffer will do (it unpacks from it); a memoryview would pin the mmap open
        check_record(buf, position, check_crc=True, require_record_crc=require_record_crc)  # type: ignore[arg-type]
    except CorruptRecordError:
        return False
    return True


class StoreTail:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{root}: no such store directory")
        # commitlog/ may not be there yet (a broker that has not stored anything): it is empty.
        self.root = Path(root)
        self.directory = os.path.join(os.fspath(root), str(paths.COMMITLOG))
        self.known_end: int | None = None

    def segments(self) -> list[tuple[int, str, int]]:
        found = []
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        for name in names:
            start = paths.offset_for_file_name(name)
            path = os.path.join(self.directory, name)
            if start is None or not os.path.isfile(path):
                continue
            size = os.path.getsize(path)
            if size:
                found.append((start, path, size))
        return found

    def first_offset(self) -> int:
        segments = self.segments()
        return segments[0][0] if segments else 0

    def advance(self, start: int, max_records: int | None) -> tuple[int, int]:
        """(offset after the last complete record from ``start`` on, records passed)."""
        offset = start
        records = 0
        for seg_start, path, size in self.segments():
            if seg_start + size <= offset:
                continue
            position = max(offset - seg_start, 0)
            store_format = StoreFormat.load(DiskBackend.read_only(self.root))
            with open(path, "rb") as handle:
                buf = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                end_position, passed, complete = self._segment(
                    buf,
                    seg_start,
                    position,
                    None if max_records is None else max_records - records,
                    store_format,
                )
            finally:
                buf.close()
            records += passed
            offset = seg_start + end_position
            if not complete or (max_records is not None and records >= max_records):
                break
            offset = seg_start + size  # the segment is done: go on with the next one
        self.known_end = offset
        return offset, records

    def _segment(
        self,
        buf: mmap.mmap,
        seg_start: int,
        position: int,
        budget: int | None,
        store_format: StoreFormat,
    ) -> tuple[int, int, bool]:
        """Walk one segment: (position after the last complete record, records, whether the
        segment is finished: a filler or its last byte reached)."""
        size = len(buf)
        words = Words(buf)
        passed = 0
        last_sound: int | None = None  # start of the last sound record
        try:
            while position < size:
                limit = 65_536 if budget is None else max(1, min(65_536, budget - passed))
                positions, sizes, next_pos, why = walk(buf, position, size, size, limit, 64 << 20)
                if positions:
                    good, _ = layout(words, positions, sizes)
                    passed += good
                    if good:
                        last_sound = positions[good - 1]
                    if good < len(positions):
                        next_pos, why = positions[good], WALK_BREAK
                position = next_pos
                if budget is not None and passed >= budget:
                    return position, passed, False
                if why == WALK_RANGE and position >= size:
                    return position, passed, True
                if why == WALK_BREAK:
                    if position >= size or magic_at(buf, position) == BLANK_MAGIC:
                        return position, passed, True
                    found = find_record(buf, position + 1, size, seg_start)
                    if found is None:
                        break  # the end of written data (or a write in flight)
                    position = found
        finally:
            words.release()
        # Hold back a last record whose CRC does not match yet: it may still be being written.
        requires = (
            store_format.requires_crc(seg_start + last_sound) if last_sound is not None else False
        )
        if last_sound is not None and not _crc_ok(buf, last_sound, requires):
            return last_sound, passed - 1, False
        return position, passed, False
