"""``config/storeFormat.json``: which part of the commitlog carries the whole-record CRC.

A store opened with ``append_record_crc`` ends every record it writes with RocketMQ's
``__CRC32#`` property. Records written before (or by Apache RocketMQ, which leaves it off by
default) have only the body CRC. This file remembers the physical range written with the
record CRC, so that a record there whose CRC property was damaged is caught instead of
being checked by its body CRC alone.

The range must not depend on this one file: the checkpoint keeps a copy of it (written at every
flush), and when both are lost the store derives it again from the commitlog
(:func:`classify_record_crc`, ``MessageStore._derive_record_crc_range``), then writes the file
again. docs/format.md §2.7 says why each source is sound.
"""

from __future__ import annotations

import msgspec

from pocketmq.store import paths
from pocketmq.store.checkpoint import Checkpoint
from pocketmq.store.crc import crc32
from pocketmq.store.files import Backend
from pocketmq.store.record import CRC_PROPERTY_LENGTH, CRC_PROPERTY_PREFIX, record_crc_at

__all__ = ["FORMAT_FILE", "DamagedRangeEntry", "StoreFormat", "classify_record_crc"]

FORMAT_FILE = paths.CONFIG / "storeFormat.json"
_NO_END = 1 << 63


class DamagedRangeEntry(msgspec.Struct, kw_only=True):
    file: str
    start: int
    end: int
    reason: str


class StoreFormat(msgspec.Struct, kw_only=True):
    recordCrcFrom: int | None = None  # noqa: N815 - JSON field names follow RocketMQ's config style
    recordCrcUntil: int | None = None  # noqa: N815
    # Ranges recovery found damaged: remembered so that a later tail-mode recovery, which does
    # not rescan old segments, still reports them and never serves them.
    damaged: list[DamagedRangeEntry] = []

    @property
    def crc_range(self) -> tuple[int, int] | None:
        if self.recordCrcFrom is None:
            return None
        return self.recordCrcFrom, _NO_END if self.recordCrcUntil is None else self.recordCrcUntil

    def requires_crc(self, physical_offset: int) -> bool:
        span = self.crc_range
        return span is not None and span[0] <= physical_offset < span[1]

    @classmethod
    def load(cls, backend: Backend) -> StoreFormat:
        """The file, else the checkpoint's copy of its range, else no range."""
        return cls.load_with_source(backend)[0]

    @classmethod
    def load_with_source(cls, backend: Backend) -> tuple[StoreFormat, str]:
        """(format, where it came from): ``"file"``, ``"checkpoint"`` (the file is missing or
        unreadable, the checkpoint holds a copy of the range) or ``"none"`` (neither)."""
        data = backend.read_bytes(FORMAT_FILE)
        if data:
            try:
                return msgspec.json.decode(data, type=cls), "file"
            except msgspec.DecodeError:
                pass
        checkpoint = Checkpoint.load(backend)
        if checkpoint is not None and checkpoint.record_crc_range is not None:
            low, high = checkpoint.record_crc_range
            return cls(
                recordCrcFrom=low, recordCrcUntil=None if low is None else high
            ), "checkpoint"
        return cls(), "none"

    def save(self, backend: Backend) -> None:
        backend.write_bytes(FORMAT_FILE, msgspec.json.encode(self))

    def after_recovery(self, end_offset: int, *, append_record_crc: bool) -> StoreFormat | None:
        """The format to save now that appends resume at ``end_offset`` (None: unchanged)."""
        if append_record_crc and (self.recordCrcFrom is None or self.recordCrcUntil is not None):
            return StoreFormat(recordCrcFrom=end_offset, damaged=self.damaged)
        if not append_record_crc and self.recordCrcFrom is not None and self.recordCrcUntil is None:
            return StoreFormat(
                recordCrcFrom=self.recordCrcFrom, recordCrcUntil=end_offset, damaged=self.damaged
            )
        return None


def classify_record_crc(view: memoryview | bytes, position: int, size: int) -> str:
    """How the record at ``position`` ends: ``"valid"`` (a ``__CRC32#`` property whose value is
    the CRC of the rest of the record: the store wrote it, since that CRC covers the physical
    offset and store time no client knows in advance), ``"broken"`` (the property's prefix or
    frame is there but the value is mangled or wrong: a damaged one) or ``"none"``."""
    end = position + size
    stored = record_crc_at(view, end)
    if stored is not None:
        if crc32(view[position : end - CRC_PROPERTY_LENGTH]) & 0x7FFFFFFF == stored:
            return "valid"
        return "broken"
    # The prefix in its place with the digits or the closing byte mangled. (Digits alone prove
    # nothing: many properties end in ten digits.)
    tail = bytes(view[max(position, end - CRC_PROPERTY_LENGTH) : end])
    return "broken" if tail.startswith(CRC_PROPERTY_PREFIX) else "none"
