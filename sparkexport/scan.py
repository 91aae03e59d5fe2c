"""Finding records in commitlog segments: options, partition plans, states and the range walk.

Pure Python (stdlib and ``store``; numpy only to speed up a scan for zero bytes, if present):
no pyspark or pyarrow, so it imports and is tested anywhere. The columnar parser (:mod:`sparkexport.columns`) and the Spark data source
(:mod:`sparkexport.source`) build on it.

A partition is a byte range ``[lo, hi)`` of one segment file and owns every record that *starts*
in it (the last one may end after ``hi``). A partition whose ``lo`` is not 0 scans forward for
the first record boundary at or after ``lo``: a magic code whose PHYSICALOFFSET field equals the
record's own position and whose lengths add up. So a 1 GiB segment is read by several tasks, each
holding one batch at a time.

What the walk does with damage (each case is counted in :class:`RangeStats`):

* END-OF-FILE filler: the segment ends there.
* A record whose structure is broken: the walk resynchronises on the next sound record and
  reports the skipped bytes as damaged. With no sound record after it, the rest is the end of
  written data (zero bytes in the last segment), a torn tail (non-zero bytes in the last segment,
  skipped and counted) or a damaged rest of segment (any other segment).
* A sound record whose CRC does not match is a row with ``crc_ok = false``, never an error.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pocketmq.store.errors import CorruptRecordError
from pocketmq.store.reader import StoreReader
from pocketmq.store.record import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    PHYSICAL_OFFSET_AT,
    SysFlag,
    check_record,
)
from pocketmq.store.state import MessageState, StateTable
from pocketmq.store.topics import SYSTEM_TOPIC_PREFIX, SYSTEM_TOPICS, is_system_topic

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_ROWS",
    "DEFAULT_MAX_PARTITION_BYTES",
    "STATE_LABELS",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "TRANSACTION_LABELS",
    "RangePlan",
    "RangeStats",
    "ReadOptions",
    "StateSnapshot",
    "StorePlan",
    "find_record",
    "is_system_topic",
    "nonzero_extent",
    "plan_store",
    "scan_range",
    "walk",
]

DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
DEFAULT_BATCH_ROWS = 32_768
DEFAULT_BATCH_BYTES = 32 * 1024 * 1024

# SYSFLAG bits 2-3 (SysFlag.TRANSACTION_*_TYPE).
TRANSACTION_LABELS = {
    SysFlag.TRANSACTION_NOT_TYPE: "normal",
    SysFlag.TRANSACTION_PREPARED_TYPE: "prepared",
    SysFlag.TRANSACTION_COMMIT_TYPE: "commit",
    SysFlag.TRANSACTION_ROLLBACK_TYPE: "rollback",
}
STATE_LABELS = {state.value: state.label for state in MessageState}

# MIN_RECORD_SIZE and PHYSICAL_OFFSET_AT come from store.record, as the record's layout does.
_SIZE_MAGIC = struct.Struct(">iI")
_I32 = struct.Struct(">i")
_Q = struct.Struct(">q")
_MAGIC_BYTES = (MAGIC_V1.to_bytes(4, "big"), MAGIC_V2.to_bytes(4, "big"))


# -- options -------------------------------------------------------------------------------


def _parse_bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name}: {text!r} is not true or false")


def _parse_size(name: str, text: str) -> int:
    value = text.strip().lower().removesuffix("b")
    scale = 1
    for suffix, factor in (("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30)):
        if value.endswith(suffix):
            value, scale = value[:-1], factor
            break
    try:
        size = int(value) * scale
    except ValueError:
        raise ValueError(f"option {name}: {text!r} is not a size (e.g. 134217728, 128m)") from None
    if size <= 0:
        raise ValueError(f"option {name}: must be positive, got {text!r}")
    return size


def parse_time_ms(name: str, text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 date/time (UTC unless it names a zone)."""
    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        moment = _dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"option {name}: {text!r} is neither milliseconds since the epoch nor ISO-8601"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return int(moment.timestamp() * 1000)


def _split_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The data source's options (Spark passes strings; names are case-insensitive).

    ``topics``               comma-separated topics to keep (default: every topic)
    ``startTime``/``endTime`` store-time range, ms since the epoch or ISO-8601 (UTC), end exclusive
    ``includeSystemTopics``  keep RocketMQ/pocketmq system topics (default false)
    ``states``               comma-separated states to keep: available, unavailable, poisoned,
                             marked_for_deletion (default: all)
    ``maxPartitionBytes``    segments larger than this are read by several tasks (default 128m)
    ``batchRows``            rows per Arrow batch (default 32768; batches also stop at 32 MiB)
    ``report``               true: one row per partition with what the walk found, not messages
    """

    topics: frozenset[str] | None = None
    start_ms: int | None = None
    end_ms: int | None = None
    include_system_topics: bool = False
    states: frozenset[int] | None = None
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    batch_rows: int = DEFAULT_BATCH_ROWS
    batch_bytes: int = DEFAULT_BATCH_BYTES
    report: bool = False

    KNOWN = (
        "path",
        "paths",
        "topics",
        "starttime",
        "endtime",
        "includesystemtopics",
        "states",
        "maxpartitionbytes",
        "batchrows",
        "batchbytes",
        "report",
        "startingoffsets",
        "maxrecordspertrigger",
    )

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ReadOptions:
        lowered = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        unknown = sorted(set(lowered) - set(cls.KNOWN))
        if unknown:
            raise ValueError(
                f"unknown pocketmq option(s) {unknown}; known: topics, startTime, endTime, "
                "includeSystemTopics, states, maxPartitionBytes, batchRows, report, "
                "startingOffsets, maxRecordsPerTrigger"
            )
        topics = None
        if "topics" in lowered:
            topics = frozenset(_split_list(lowered["topics"]))
        states = None
        if "states" in lowered:
            by_label = {label: code for code, label in STATE_LABELS.items()}
            codes = set()
            for label in _split_list(lowered["states"]):
                key = label.lower().replace("-", "_").replace(" ", "_")
                if key not in by_label:
                    raise ValueError(f"option states: {label!r} is not one of {sorted(by_label)}")
                codes.add(by_label[key])
            states = frozenset(codes)
        return cls(
            topics=topics,
            start_ms=parse_time_ms("startTime", lowered["starttime"])
            if "starttime" in lowered
            else None,
            end_ms=parse_time_ms("endTime", lowered["endtime"]) if "endtime" in lowered else None,
            include_system_topics=_parse_bool(
                "includeSystemTopics", lowered.get("includesystemtopics", "false")
            ),
            states=states,
            max_partition_bytes=_parse_size(
                "maxPartitionBytes",
                lowered.get("maxpartitionbytes", str(DEFAULT_MAX_PARTITION_BYTES)),
            ),
            batch_rows=_parse_size("batchRows", lowered.get("batchrows", str(DEFAULT_BATCH_ROWS))),
            batch_bytes=_parse_size(
                "batchBytes", lowered.get("batchbytes", str(DEFAULT_BATCH_BYTES))
            ),
            report=_parse_bool("report", lowered.get("report", "false")),
        )

    def keeps_topic(self, topic: str) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        return self.include_system_topics or not is_system_topic(topic)

    @property
    def filters_rows(self) -> bool:
        return (
            self.topics is not None
            or not self.include_system_topics
            or self.start_ms is not None
            or self.end_ms is not None
            or self.states is not None
        )


# -- states --------------------------------------------------------------------------------


@dataclass(slots=True)
class StateSnapshot:
    """The states a partition needs, taken from :class:`store.state.StateTable` on the driver
    (picklable, small). ``lookup`` gives what ``StateTable.change_of`` gives."""

    singles: dict[int, tuple[int, str]] = field(default_factory=dict)  # offset -> (code, reason)
    span_starts: list[int] = field(default_factory=list)
    span_ends: list[int] = field(default_factory=list)
    span_codes: list[int] = field(default_factory=list)
    span_reasons: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list, repr=False, compare=False)  # singles, sorted

    @classmethod
    def from_table(cls, table: StateTable) -> StateSnapshot:
        spans = table.spans()
        items = table.items()  # sorted by offset
        return cls(
            singles={o: (int(c.state), c.reason) for o, c in items},
            span_starts=[s.target_offset for s in spans],
            span_ends=[s.span_end for s in spans],
            span_codes=[int(s.state) for s in spans],
            span_reasons=[s.reason for s in spans],
            offsets=[o for o, _ in items],
        )

    def slice(self, start: int, end: int) -> StateSnapshot:
        """Only the single changes for messages starting in ``[start, end)``; every span."""
        if len(self.offsets) != len(self.singles):
            self.offsets = sorted(self.singles)
        low = bisect.bisect_left(self.offsets, start)
        high = bisect.bisect_left(self.offsets, end)
        offsets = self.offsets[low:high]
        return StateSnapshot(
            {o: self.singles[o] for o in offsets},
            self.span_starts,
            self.span_ends,
            self.span_codes,
            self.span_reasons,
            offsets,
        )

    def lookup(self, offset: int) -> tuple[int, str | None]:
        """(state code, reason) of the message at ``offset``; (1, None) when available."""
        single = self.singles.get(offset)
        if single is not None:
            return single
        if self.span_starts:
            index = bisect.bisect_right(self.span_starts, offset) - 1
            if index >= 0 and offset < self.span_ends[index]:
                return self.span_codes[index], self.span_reasons[index]
        return int(MessageState.AVAILABLE), None


# -- planning ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RangePlan:
    """One Spark partition: records starting in ``[lo, hi)`` of one segment file."""

    path: str
    segment_start: int  # physical offset of the file's first byte
    lo: int  # positions in the file
    hi: int
    last_segment: bool  # damage at the end of the last segment is a torn tail
    states: StateSnapshot
    record_crc_from: int | None = None  # physical range written with the whole-record CRC
    record_crc_until: int | None = None

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


@dataclass(slots=True)
class StorePlan:
    ranges: list[RangePlan]
    foreign_files: list[str]
    segments: list[tuple[int, str, int]]  # (start offset, path, size)


def split_ranges(size: int, max_bytes: int) -> list[tuple[int, int]]:
    """``[0, size)`` cut into equal pieces of at most ``max_bytes`` (one piece if it fits)."""
    if size <= max_bytes:
        return [(0, size)]
    count = -(-size // max_bytes)
    step = -(-size // count)
    return [(lo, min(lo + step, size)) for lo in range(0, size, step)]


def plan_store(
    root: str | os.PathLike[str],
    options: ReadOptions,
    *,
    start: int | None = None,
    end: int | None = None,
) -> StorePlan:
    """Partitions for the store at ``root`` (its ``commitlog/`` folder), with the states folded
    from the state records. ``start``/``end`` limit it to a physical range (streaming)."""
    reader = StoreReader(root)
    states = StateSnapshot.from_table(reader.states())
    crc_range = reader.store_format.crc_range
    crc_from, crc_until = crc_range if crc_range is not None else (None, None)
    ranges: list[RangePlan] = []
    for i, segment in enumerate(reader.segments):
        seg_lo, seg_hi = 0, segment.size
        if start is not None:
            seg_lo = max(seg_lo, start - segment.start_offset)
        if end is not None:
            seg_hi = min(seg_hi, end - segment.start_offset)
        if seg_lo >= seg_hi:
            continue
        pieces = [
            (seg_lo + lo, seg_lo + hi)
            for lo, hi in split_ranges(seg_hi - seg_lo, options.max_partition_bytes)
        ]
        for lo, hi in pieces:
            ranges.append(
                RangePlan(
                    path=str(segment.path),
                    segment_start=segment.start_offset,
                    lo=lo,
                    hi=hi,
                    last_segment=i == len(reader.segments) - 1,
                    states=states.slice(segment.start_offset + lo, segment.start_offset + hi),
                    record_crc_from=crc_from,
                    record_crc_until=crc_until,
                )
            )
    return StorePlan(
        ranges=ranges,
        foreign_files=list(reader.foreign_files),
        segments=[(s.start_offset, str(s.path), s.size) for s in reader.segments],
    )


# -- walking -------------------------------------------------------------------------------

WALK_MORE = "more"  # a limit (rows or bytes) was reached
WALK_RANGE = "range"  # the next record starts at or after the range end
WALK_BREAK = "break"  # the bytes at the position are not a record that fits (or a filler)


def walk(
    buf: Any,
    pos: int,
    stop: int,
    end: int,
    max_records: int,
    max_bytes: int,
) -> tuple[list[int], list[int], int, str]:
    """Follow TOTALSIZE from ``pos`` while records start before ``stop``: (positions, sizes,
    next position, why it stopped). Only the size is checked (at least a minimal record, and
    within ``end``); the caller checks magic and structure, and meets END-OF-FILE fillers that
    way (a filler's TOTALSIZE is the rest of the segment)."""
    positions: list[int] = []
    sizes: list[int] = []
    append_pos = positions.append
    append_size = sizes.append
    unpack = _I32.unpack_from
    if max_records < 1:
        raise ValueError("max_records must be positive")
    limit = min(stop, pos + max_bytes, end - 8 + 1)
    for _ in range(max_records):
        if pos >= limit:
            break
        size = unpack(buf, pos)[0]
        if size < MIN_RECORD_SIZE or pos + size > end:
            return positions, sizes, pos, WALK_BREAK
        append_pos(pos)
        append_size(size)
        pos += size
    if pos >= stop:
        return positions, sizes, pos, WALK_RANGE
    if pos >= end - 8 + 1:
        return positions, sizes, pos, WALK_BREAK  # fewer than 8 bytes left
    return positions, sizes, pos, WALK_MORE


def magic_at(buf: Any, position: int) -> int | None:
    if position < 0 or position + 8 > len(buf):
        return None
    return _SIZE_MAGIC.unpack_from(buf, position)[1]


def is_record_at(buf: Any, position: int, segment_start: int) -> bool:
    """A record starts at ``position``: its PHYSICALOFFSET field is its own address and its
    structure is sound (magic, lengths)."""
    if position < 0 or position + PHYSICAL_OFFSET_AT + 8 > len(buf):
        return False
    if _Q.unpack_from(buf, position + PHYSICAL_OFFSET_AT)[0] != segment_start + position:
        return False
    try:
        return check_record(buf, position, check_crc=False) > 0
    except CorruptRecordError:
        return False


def find_record(
    buf: Any, start: int, end: int, segment_start: int, window: int = 1 << 16
) -> int | None:
    """The first position in ``[start, end)`` where a record starts (see :func:`is_record_at`).

    Searches windows that double in size, so a boundary close to ``start`` is found without
    scanning the rest of the segment. ``buf`` needs ``find`` (bytes or mmap)."""
    low = start
    while low < end:
        high = min(end, low + window)
        candidates = []
        for magic in _MAGIC_BYTES:
            hit = buf.find(magic, low + 4, min(high + 8, len(buf)))
            while hit >= 0 and hit - 4 < high:
                candidates.append(hit - 4)
                hit = buf.find(magic, hit + 1, min(high + 8, len(buf)))
        for candidate in sorted(candidates):
            if candidate >= low and is_record_at(buf, candidate, segment_start):
                return candidate
        low = high
        window = min(window * 2, 1 << 26)
    return None


def nonzero_extent(buf: Any, position: int, end: int, chunk: int = 1 << 22) -> int:
    """How many bytes from ``position`` up to the last non-zero byte before ``end``."""
    np: Any
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with the spark extra
        np = None
    high = end
    while high > position:
        low = max(position, high - chunk)
        if np is not None:
            nonzero = np.flatnonzero(
                np.frombuffer(buf, dtype=np.uint8, count=high - low, offset=low)
            )
            if len(nonzero):
                return low + int(nonzero[-1]) + 1 - position
        else:
            stripped = bytes(buf[low:high]).rstrip(b"\0")
            if stripped:
                return low + len(stripped) - position
        high = low
    return 0


@dataclass(slots=True)
class RangeStats:
    """What walking one range found (the ``report`` rows and the export summary)."""

    segment: str
    lo: int
    hi: int
    records: int = 0
    bytes: int = 0
    bad_crc: int = 0
    rows: int = 0  # records kept by the options
    torn_tail: str | None = None
    torn_tail_bytes: int = 0
    damaged: list[str] = field(default_factory=list)


Validator = Callable[[list[int], list[int]], tuple[int, Any]]
Walker = Callable[[Any, int, int, int, int, int], tuple[Any, Any, int, str]]


def scan_range(
    buf: Any,
    plan: RangePlan,
    stats: RangeStats,
    validate: Validator,
    *,
    max_records: int,
    max_bytes: int,
    walker: Walker = walk,
) -> Iterator[Any]:
    """Walk the records starting in ``[plan.lo, plan.hi)``; yield what ``validate`` makes of
    each run of consecutive records. ``validate(positions, sizes)`` returns how many leading
    records are sound and a payload for those (it is not called with an empty run).
    ``walker`` has :func:`walk`'s signature and results (positions and sizes may be arrays)."""
    end = len(buf)
    hi = min(plan.hi, end)
    pos = plan.lo
    if pos > 0:
        if magic_at(buf, pos) == BLANK_MAGIC:
            return  # a range starting at the segment's END-OF-FILE filler (streaming)
        found = find_record(buf, pos, end, plan.segment_start)
        if found is None:
            return
        pos = found
    while pos < hi:
        positions, sizes, next_pos, why = walker(buf, pos, hi, end, max_records, max_bytes)
        if len(positions):
            good, payload = validate(positions, sizes)
            if good:
                stats.records += good
                taken = sizes[:good]
                stats.bytes += int(taken.sum()) if hasattr(taken, "sum") else sum(taken)
                yield payload
            if good < len(positions):
                next_pos, why = int(positions[good]), WALK_BREAK
        if why == WALK_BREAK:
            if next_pos >= end or magic_at(buf, next_pos) == BLANK_MAGIC:
                return  # the segment ends here (END-OF-FILE filler, or exactly full)
            resume = _after_break(buf, plan, stats, next_pos, end)
            if resume is None:
                return
            pos = resume
            continue
        if why == WALK_RANGE:
            return
        pos = next_pos


def _break_reason(buf: Any, position: int) -> str:
    try:
        check_record(buf, position, check_crc=False)
    except CorruptRecordError as error:
        return error.reason
    return "not a record"


def _after_break(
    buf: Any, plan: RangePlan, stats: RangeStats, position: int, end: int
) -> int | None:
    """Classify the bytes at a broken record; returns where to resume (None: the range ends)."""
    where = f"{plan.path} at position {position} (physical offset {plan.segment_start + position})"
    rest = nonzero_extent(buf, position, end)
    if rest == 0:
        if not plan.last_segment:
            stats.damaged.append(f"{where}: zero bytes, rest of the segment unreadable")
        return None  # in the last segment: the end of written data
    found = find_record(buf, position + 1, position + rest, plan.segment_start)
    reason = _break_reason(buf, position)
    if found is not None:
        stats.damaged.append(f"{where}: {reason}; {found - position} bytes skipped")
        return found
    if plan.last_segment:
        stats.torn_tail = f"{where}: {reason}, {rest} bytes after it"
        stats.torn_tail_bytes = rest
    else:
        stats.damaged.append(f"{where}: {reason}, rest of the segment unreadable")
    return None


def first_unsound(buf: Any, positions: list[int]) -> int:
    """Reference check (slow, one ``check_record`` per record): index of the first record whose
    structure is broken, or ``len(positions)``."""
    for index, position in enumerate(positions):
        try:
            if check_record(buf, position, check_crc=False) == 0:
                return index  # an END-OF-FILE filler
        except CorruptRecordError:
            return index
    return len(positions)
