"""Scanning the commitlog: the recovery walk and its report.

The scan checks every record it passes (magic, lengths, body CRC). What it finds:

* the end of written data: zero bytes where the next record would start, in the last segment;
* damage: a record that fails a check. The scan looks for the next intact record that names
  itself (its PHYSICALOFFSET is where it lies: ``next_record_at``) and goes on from there; the
  bytes in between are reported as a damaged range, quarantined (never served), and every
  intact record after them stays readable. RocketMQ would cut everything after the damage;
* a torn tail: only after an abnormal stop, damage in the last segment past the last durable
  write (the checkpoint's confirmed offset) with no intact record after it: the bytes a crash
  left half-written. Everything from it on is cut, and the report names the file, the valid
  size and the bytes lost. After a clean stop nothing is ever cut.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pocketmq.store.crc import crc32
from pocketmq.store.errors import CorruptRecordError
from pocketmq.store.record import (
    BLANK_MAGIC,
    BODY_CRC_AT,
    BODY_LENGTH_AT_V4,
    CRC_PROPERTY_LENGTH,
    CRC_PROPERTY_PREFIX,
    HOSTS_V6,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    PHYSICAL_OFFSET_AT,
    SYSFLAG_AT,
    check_record,
)

__all__ = [
    "DamagedRange",
    "RecoveryReport",
    "ScanStop",
    "TornTail",
    "next_record_at",
    "scan_intact_records",
    "scan_records",
]

# The fast path's reads, at the offsets store.record defines (a property test pins the scan to
# check_record).
_SIZE_MAGIC = struct.Struct(">iI")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_Q = struct.Struct(">q")
_CRC_DIGITS_AT = CRC_PROPERTY_LENGTH - len(CRC_PROPERTY_PREFIX)  # 11: from the end


@dataclass(frozen=True, slots=True)
class TornTail:
    file: str
    valid_size: int  # bytes of the segment that hold valid records
    bytes_lost: int  # non-zero bytes cut after them
    reason: str


@dataclass(frozen=True, slots=True)
class DamagedRange:
    file: str
    start_offset: int  # physical offsets, end exclusive
    end_offset: int
    reason: str


@dataclass(slots=True)
class RecoveryReport:
    abnormal: bool = False
    scan_mode: str = "tail"
    scanned_from: int = 0
    end_offset: int = 0
    records_scanned: int = 0
    bytes_scanned: int = 0
    redispatched: int = 0
    consume_queue_entries_dropped: int = 0
    torn_tail: TornTail | None = None
    damaged: list[DamagedRange] = field(default_factory=list)
    foreign_files: list[str] = field(default_factory=list)
    index_rebuilt: str | None = None  # why the index was unreadable and rebuilt
    queues_rebuilt: list[str] = field(default_factory=list)  # "topic/queue: why"
    missing_segments: list[str] = field(default_factory=list)  # commitlog files found missing
    store_format_rederived: str | None = None  # where the record-CRC range came from instead
    checkpoint_damaged: bool = False  # its seal failed: not believed, every segment scanned
    seconds: float = 0.0

    @property
    def needs_attention(self) -> bool:
        """Whether an operator should see this report (a broker logs it at WARNING)."""
        return bool(
            self.damaged
            or self.torn_tail
            or self.queues_rebuilt
            or self.missing_segments
            or self.store_format_rederived
            or self.checkpoint_damaged
        )

    def summary(self) -> str:
        kind = "abnormal (no clean shutdown)" if self.abnormal else "normal"
        text = (
            f"recovery {kind}, {self.scan_mode} scan from offset {self.scanned_from}: "
            f"{self.records_scanned} records / {self.bytes_scanned} bytes checked in "
            f"{self.seconds * 1000:.1f} ms, end offset {self.end_offset}, "
            f"{self.redispatched} re-dispatched"
        )
        if self.checkpoint_damaged:
            text += "; CHECKPOINT DAMAGED (its seal fails): not believed, every segment scanned"
        if self.torn_tail:
            t = self.torn_tail
            text += f"; torn tail cut in {t.file}: valid size {t.valid_size}, {t.bytes_lost} bytes lost ({t.reason})"
        for d in self.damaged:
            text += f"; DAMAGED {d.file} [{d.start_offset}, {d.end_offset}): {d.reason}"
        if self.consume_queue_entries_dropped:
            text += f"; {self.consume_queue_entries_dropped} consume-queue entries dropped"
        if self.index_rebuilt:
            text += f"; index rebuilt from the commitlog ({self.index_rebuilt})"
        for queue in self.queues_rebuilt:
            text += f"; consume queue rebuilt from the commitlog: {queue}"
        for missing in self.missing_segments:
            text += f"; MISSING {missing}"
        if self.store_format_rederived:
            text += f"; storeFormat.json lost: {self.store_format_rederived}"
        if self.foreign_files:
            text += f"; not segments (ignored): {', '.join(self.foreign_files)}"
        return text


@dataclass(frozen=True, slots=True)
class ScanStop:
    """Why a segment scan stopped: at a filler (``blank``), at zeros (``end``) or at damage."""

    position: int
    kind: str  # "blank", "end", "damage", "limit"
    reason: str = ""


def scan_records(
    view: memoryview,
    position: int = 0,
    *,
    base_offset: int | None = None,
    check_crc: bool = True,
    on_record: Callable[[int, int], None] | None = None,
    record_crc_range: tuple[int, int] | None = None,
) -> tuple[int, int, ScanStop]:
    """Walk records of one segment from ``position``. Returns (records, bytes, stop).

    ``on_record(position, size)`` is called for each valid record. With ``base_offset`` (the
    segment's start offset) each record's PHYSICALOFFSET field must match where it lies. A
    record inside ``record_crc_range`` has its whole-record ``__CRC32#`` checked, any other its
    body CRC.
    The common case (a V1 record with IPv4 hosts) is checked inline; anything unusual goes
    through :func:`store.record.check_record`, which gives the precise reason.
    Records whose physical offset falls in ``record_crc_range`` (needs ``base_offset``) must
    carry the whole-record CRC: the store wrote them with ``append_record_crc``.
    """
    if record_crc_range is not None:
        assert base_offset is not None
        crc_low, crc_high = record_crc_range[0] - base_offset, record_crc_range[1] - base_offset
    else:
        crc_low = crc_high = 0
    limit = len(view)
    records = 0
    start = position
    unpack_size_magic = _SIZE_MAGIC.unpack_from
    unpack_u32 = _U32.unpack_from
    unpack_i32 = _I32.unpack_from
    unpack_i16 = _I16.unpack_from
    unpack_q = _Q.unpack_from
    while True:
        if limit - position < 8:
            return records, position - start, ScanStop(position, "limit")
        total, magic = unpack_size_magic(view, position)
        if (
            base_offset is not None
            and magic != BLANK_MAGIC
            and total >= MIN_RECORD_SIZE
            and total <= limit - position
        ):
            claimed = unpack_q(view, position + PHYSICAL_OFFSET_AT)[0]
            if claimed != base_offset + position:
                reason = (
                    f"PHYSICALOFFSET field says {claimed}, record lies at {base_offset + position}"
                )
                return records, position - start, ScanStop(position, "damage", reason)
        if magic == MAGIC_V1 and MIN_RECORD_SIZE <= total <= limit - position:
            sysflag = unpack_i32(view, position + SYSFLAG_AT)[0]
            if not sysflag & HOSTS_V6:
                body_len = unpack_i32(view, position + BODY_LENGTH_AT_V4)[0]
                body_at = position + BODY_LENGTH_AT_V4 + 4
                topic_at = body_at + body_len
                end = position + total
                if body_len >= 0 and topic_at + 3 <= end:
                    topic_len = view[topic_at]
                    props_at = topic_at + 1 + topic_len
                    if topic_len <= 127 and props_at + 2 <= end:
                        props_len = unpack_i16(view, props_at)[0]
                        if props_at + 2 + props_len == end:
                            if not check_crc:
                                ok = True
                            elif crc_low <= position < crc_high:
                                # Written with the whole-record CRC: it must be there and match.
                                digits = bytes(view[end - _CRC_DIGITS_AT : end - 1])
                                ok = (
                                    props_len >= CRC_PROPERTY_LENGTH
                                    and view[end - 1] == 2
                                    and view[end - CRC_PROPERTY_LENGTH : end - _CRC_DIGITS_AT]
                                    == CRC_PROPERTY_PREFIX
                                    and digits.isdigit()
                                    and int(digits[::-1])
                                    == crc32(view[position : end - CRC_PROPERTY_LENGTH])
                                    & 0x7FFFFFFF
                                )
                            else:
                                ok = (
                                    crc32(view[body_at:topic_at]) & 0x7FFFFFFF
                                    == unpack_u32(view, position + BODY_CRC_AT)[0]
                                )
                            if ok:
                                if on_record is not None:
                                    on_record(position, total)
                                records += 1
                                position = end
                                continue
        elif magic == BLANK_MAGIC:
            return records, position - start, ScanStop(position, "blank")
        elif total == 0 and magic == 0:
            return records, position - start, ScanStop(position, "end")
        # Slow path: an unusual record (V2, IPv6) or a bad one; check_record says which.
        try:
            size = check_record(
                view,
                position,
                check_crc=check_crc,
                require_record_crc=crc_low <= position < crc_high,
            )
        except CorruptRecordError as error:
            return records, position - start, ScanStop(position, "damage", error.reason)
        if size == 0:
            return records, position - start, ScanStop(position, "blank")
        if on_record is not None:
            on_record(position, size)
        records += 1
        position += size


_MAGIC_BYTES = (MAGIC_V1.to_bytes(4, "big"), MAGIC_V2.to_bytes(4, "big"))


def next_record_at(
    view: memoryview,
    position: int,
    base_offset: int,
    *,
    check_crc: bool = True,
    record_crc_range: tuple[int, int] | None = None,
) -> int | None:
    """Where the scan of a segment goes on after damage at ``position``: the first position
    after it where an intact record starts whose PHYSICALOFFSET names that very place (a record
    that only looks intact, inside another one's body, names another offset). None when no
    record follows in the segment."""
    owner = view.obj
    data = owner if hasattr(owner, "find") and len(owner) == len(view) else bytes(view)  # type: ignore[arg-type]
    limit = len(view)
    low, high = record_crc_range or (0, 0)
    search = position + 1
    while True:
        hits = [hit for hit in (data.find(m, search + 4, limit) for m in _MAGIC_BYTES) if hit >= 0]
        if not hits:
            return None
        candidate = min(hits) - 4
        search = candidate + 1
        if candidate + PHYSICAL_OFFSET_AT + 8 > limit:
            continue
        if _Q.unpack_from(view, candidate + PHYSICAL_OFFSET_AT)[0] != base_offset + candidate:
            continue
        try:
            check_record(
                view,
                candidate,
                check_crc=check_crc,
                require_record_crc=low <= base_offset + candidate < high,
            )
        except CorruptRecordError:
            continue
        return candidate


def scan_intact_records(
    view: memoryview,
    base_offset: int,
    on_record: Callable[[int, int], None],
    *,
    check_crc: bool = True,
    record_crc_range: tuple[int, int] | None = None,
) -> None:
    """``on_record(position, size)`` for every intact record of a segment, going on past each
    damage at the next record that names itself (``next_record_at``): for rebuilds, which
    need the records, not a report of what lies between them."""
    position = 0
    while True:
        _, _, stop = scan_records(
            view,
            position,
            base_offset=base_offset,
            check_crc=check_crc,
            on_record=on_record,
            record_crc_range=record_crc_range,
        )
        if stop.kind != "damage":
            return
        resume = next_record_at(
            view,
            stop.position,
            base_offset,
            check_crc=check_crc,
            record_crc_range=record_crc_range,
        )
        if resume is None:
            return
        position = resume


def iter_records(
    view: memoryview, position: int = 0, *, check_crc: bool = True
) -> Iterator[tuple[int, int]]:
    """(position, size) of every valid record of a segment, stopping at the first stop."""
    found: list[tuple[int, int]] = []
    scan_records(view, position, check_crc=check_crc, on_record=lambda p, s: found.append((p, s)))
    yield from found


def nonzero_extent(view: memoryview, position: int) -> int:
    """How many bytes after ``position`` up to the last non-zero byte (what a cut loses)."""
    tail = bytes(view[position:])
    return len(tail.rstrip(b"\0"))


def now() -> float:
    return time.perf_counter()
