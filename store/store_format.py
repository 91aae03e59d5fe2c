"""``config/storeFormat.json``: which part of the commitlog carries the whole-record CRC.

A store opened with ``append_record_crc`` ends every record it writes with RocketMQ's
``__CRC32#`` property. Records written before (or by Apache RocketMQ, which leaves it off by
default) have only the body CRC. This file remembers the physical range written with the
record CRC, so that a record there whose CRC property was damaged is caught instead of
being checked by its body CRC alone.
"""

from __future__ import annotations

import msgspec

from pocketmq.store import paths
from pocketmq.store.files import Backend

__all__ = ["FORMAT_FILE", "DamagedRangeEntry", "StoreFormat"]

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
        data = backend.read_bytes(FORMAT_FILE)
        if not data:
            return cls()
        try:
            return msgspec.json.decode(data, type=cls)
        except msgspec.DecodeError:
            # Unreadable: claim nothing, so records fall back to their body CRC.
            return cls()

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
