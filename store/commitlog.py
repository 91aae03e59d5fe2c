"""The commitlog: one append-only sequence of records over fixed-size segment files.

Segments are named by their start (physical) offset. A record never spans two segments: when the
next record does not fit, an END-OF-FILE filler closes the segment and the record goes to the next
one, as in RocketMQ. Reads return zero-copy views of the mapped segments.

Threads: appends and reads happen on one thread (the broker's event loop). ``flush_to`` may run on
another thread at the same time; it only reads the segment list under ``_lock`` and syncs pages.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from dataclasses import dataclass

from pocketmq.store import paths
from pocketmq.store.crc import crc32
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError, StoreError
from pocketmq.store.files import Backend, Segment
from pocketmq.store.record import (
    CRC_PROPERTY_BACKWARDS,
    CRC_PROPERTY_LENGTH,
    END_FILE_MIN_BLANK_LENGTH,
    HOSTS_V6,
    MAGIC_V1,
    MAGIC_V2,
    PREFIX,
    PREFIX_V4,
    TOPIC_LENGTH_MAX_V1,
    Host,
    MessageRecord,
    SysFlag,
    check_record,
    decode_record,
    encode_blank,
)

__all__ = ["AppendResult", "CommitLog"]

# The record's structs and constants come from store.record (``append`` is its encoder,
# ``pack_record``, written out for the hot path; a property test pins the two together).
_TOPIC_FIELDS_MAX = 4096
_NOT_V6 = ~HOSTS_V6
_PREFAULT_CHUNK = 1 << 20  # see Segment.prefault


@dataclass(frozen=True, slots=True)
class AppendResult:
    physical_offset: int
    total_size: int

    @property
    def end_offset(self) -> int:
        return self.physical_offset + self.total_size


class CommitLog:
    """Append, read and truncate records; segments of ``segment_size`` bytes (each file may differ
    when reading a store written with another size, e.g. RocketMQ's 1 GiB)."""

    def __init__(self, backend: Backend, *, segment_size: int) -> None:
        assert segment_size >= 64 * 1024
        self.backend = backend
        self.segment_size = segment_size
        self._starts: list[int] = []
        self._segments: list[Segment] = []
        self._write_position = 0  # within the last segment
        self._flushed_offset = 0
        self._lock = threading.Lock()
        # topic -> its TOPIC field (length, then the name): one lookup instead of two encodes
        self._topic_fields: dict[bytes, bytes] = {}
        self._prefaulted = 0  # the newest segment is prefaulted up to here
        self.gaps: list[tuple[int, int]] = []  # [start, end) no segment covers (files missing)

    # -- opening ---------------------------------------------------------------------------

    def load(self) -> list[str]:
        """Open every segment file. Returns the names of files in ``commitlog/`` that are not segments."""
        foreign: list[str] = []
        expected = None
        for name in self.backend.list_names(paths.COMMITLOG):
            start = paths.offset_for_file_name(name)
            if start is None:
                foreign.append(name)
                continue
            segment = self.backend.open_segment(paths.COMMITLOG / name)
            if expected is not None and start != expected:
                if start < expected:
                    segment.close()
                    raise StoreError(
                        f"commitlog segment {name} starts at {start}, inside the segment before it"
                    )
                # A segment is missing: the ones around it stay readable; recovery reports it.
                self.gaps.append((expected, start))
            self._starts.append(start)
            self._segments.append(segment)
            expected = start + segment.size
        if self._segments:
            self._write_position = self._segments[-1].size  # recovery sets the real end
        self._flushed_offset = self.max_offset
        return foreign

    def close(self) -> None:
        with self._lock:
            for segment in self._segments:
                segment.close()
            self._segments.clear()
            self._starts.clear()

    # -- offsets ---------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self._starts[0] if self._starts else 0

    @property
    def max_offset(self) -> int:
        """The physical offset the next record will be written at (end of written data)."""
        if not self._segments:
            return 0
        return self._starts[-1] + self._write_position

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    def segment_starts(self) -> list[int]:
        return list(self._starts)

    def segment_for(self, offset: int) -> tuple[int, Segment]:
        index = bisect.bisect_right(self._starts, offset) - 1
        if index < 0 or offset >= self._starts[index] + self._segments[index].size:
            raise OffsetOutOfRangeError(f"physical offset {offset} is not in the commitlog")
        return self._starts[index], self._segments[index]

    # -- writing ---------------------------------------------------------------------------

    def _new_segment(self, start: int) -> Segment:
        segment = self.backend.create_segment(paths.commitlog_segment(start), self.segment_size)
        with self._lock:
            self._starts.append(start)
            self._segments.append(segment)
        self._write_position = 0
        self._prefaulted = 0
        return segment

    def _prefault_ahead(self, segment: Segment, needed: int) -> None:
        # A chunk at a time: one call costs less than the faults it saves, and stays short.
        self._prefaulted = max(self._prefaulted, needed) + _PREFAULT_CHUNK
        segment.prefault(needed - 1, self._prefaulted)

    def make_room(self, total_size: int) -> None:
        """Before a batch: when ``total_size`` bytes (an upper bound of its records) do not fit
        the current segment, roll over now, so the whole batch lands in one preallocated segment
        and a full disk refuses it before any of it is written (RocketMQ writes a batch into one
        file too). A bound larger than a segment is left to the per-record ``reserve``."""
        if not self._segments or total_size + END_FILE_MIN_BLANK_LENGTH > self.segment_size:
            return
        if total_size + END_FILE_MIN_BLANK_LENGTH > self._segments[-1].size - self._write_position:
            self.reserve(self.segment_size - END_FILE_MIN_BLANK_LENGTH)

    def reserve(self, total_size: int) -> tuple[Segment, int, int]:
        """Make room for ``total_size`` bytes: returns (segment, position in it, physical offset)."""
        if not self._segments:
            self._new_segment(0)
        segment = self._segments[-1]
        position = self._write_position
        if total_size + END_FILE_MIN_BLANK_LENGTH > segment.size - position:
            if total_size + END_FILE_MIN_BLANK_LENGTH > self.segment_size:
                raise StoreError(
                    f"{total_size}-byte write does not fit a {self.segment_size}-byte segment"
                )
            remaining = segment.size - position
            if remaining >= END_FILE_MIN_BLANK_LENGTH:
                segment.write(position, encode_blank(remaining))
            segment = self._new_segment(self._starts[-1] + segment.size)
            position = 0
        return segment, position, self._starts[-1] + position

    def room_left(self) -> int:
        """Bytes a write may take in the current segment, the END-OF-FILE filler's kept aside."""
        if not self._segments:
            return self.segment_size - END_FILE_MIN_BLANK_LENGTH
        return self._segments[-1].size - self._write_position - END_FILE_MIN_BLANK_LENGTH

    def write_batch(self, size: int, encode: Callable[[int], bytes]) -> int:
        """Write a batch of ``size`` bytes of records as one: in the current segment, or in
        the next one when it does not fit (a batch never straddles two, as RocketMQ's batch
        append). ``encode(physical offset)`` returns the records (``record.encode_batch``).
        Returns the batch's physical offset.

        The first 8 bytes (the first record's TOTALSIZE and magic) go in last, in one store (a
        kill stops a process between instructions, never inside one): until then the batch
        starts with zeros, which recovery takes for the end of the log, so a process killed
        while the batch is copied in leaves no record of it (a kill in a loop of single appends
        leaves the records before it). A power loss keeps only what was flushed: a sync-flush
        send is answered after the flush, so a batch it tears was never acknowledged."""
        segment, position, physical_offset = self.reserve(size)
        end = position + size
        if end > self._prefaulted:
            self._prefault_ahead(segment, end)
        data = encode(physical_offset)
        assert len(data) == size
        view = segment.view
        head = position + END_FILE_MIN_BLANK_LENGTH
        view[head:end] = memoryview(data)[END_FILE_MIN_BLANK_LENGTH:]
        view[position:head] = data[:END_FILE_MIN_BLANK_LENGTH]  # the batch is in
        self._write_position = end
        return physical_offset

    def append_record(
        self,
        *,
        topic: bytes,
        queue_id: int,
        flag: int,
        queue_offset: int,
        sysflag: int,
        born_timestamp: int,
        born_host: Host,
        store_timestamp: int,
        store_host: Host,
        reconsume_times: int,
        prepared_transaction_offset: int,
        body: bytes | memoryview,
        properties: bytes,
        append_crc: bool = True,
    ) -> AppendResult:
        """Encode and write one record in RocketMQ's layout; see :meth:`append`."""
        offset, total = self.append(
            topic,
            queue_id,
            flag,
            queue_offset,
            sysflag,
            born_timestamp,
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            prepared_transaction_offset,
            body,
            properties,
            append_crc,
        )
        return AppendResult(offset, total)

    def append(
        self,
        topic: bytes,
        queue_id: int,
        flag: int,
        queue_offset: int,
        sysflag: int,
        born_timestamp: int,
        born_host: Host,
        store_timestamp: int,
        store_host: Host,
        reconsume_times: int,
        prepared_transaction_offset: int,
        body: bytes | memoryview,
        properties: bytes,
        append_crc: bool,
    ) -> tuple[int, int]:
        """Encode and write one record in RocketMQ's layout; returns (physical offset, size).
        Limits are the caller's job. ``append_crc`` ends the properties with RocketMQ's
        ``__CRC32#`` whole-record CRC. Positional on purpose: it runs for every message."""
        if append_crc and properties and properties[-1] != 2:
            properties += b"\x02"  # the CRC property needs a separator before it
        born_address = born_host.address
        store_address = store_host.address
        sysflag &= _NOT_V6
        if len(born_address) == 4 and len(store_address) == 4:
            prefix = PREFIX_V4
        else:
            if len(born_address) == 16:
                sysflag |= SysFlag.BORNHOST_V6
            if len(store_address) == 16:
                sysflag |= SysFlag.STOREHOST_V6
            prefix = PREFIX[(len(born_address), len(store_address))]
        topic_field = self._topic_fields.get(topic)
        if topic_field is None:
            if len(self._topic_fields) >= _TOPIC_FIELDS_MAX:
                self._topic_fields.clear()
            # V1 records hold a signed-byte topic length; longer topics need V2's short
            topic_field = (
                len(topic).to_bytes(2 if len(topic) > TOPIC_LENGTH_MAX_V1 else 1, "big") + topic
            )
            self._topic_fields[topic] = topic_field
        body_len = len(body)
        properties_len = len(properties) + (CRC_PROPERTY_LENGTH if append_crc else 0)
        total = prefix.size + body_len + len(topic_field) + 2 + properties_len
        # reserve(), inlined for the common case: the record fits the current segment.
        position = self._write_position
        if (
            self._segments
            and total + END_FILE_MIN_BLANK_LENGTH <= self._segments[-1].size - position
        ):
            segment = self._segments[-1]
            physical_offset = self._starts[-1] + position
        else:
            segment, position, physical_offset = self.reserve(total)
        # The record but its CRC property as one bytes object: one copy into the mapping, and
        # the whole-record CRC runs over it without slicing the mapping.
        record = b"".join(
            (
                prefix.pack(
                    total,
                    MAGIC_V2 if len(topic) > TOPIC_LENGTH_MAX_V1 else MAGIC_V1,
                    crc32(body) & 0x7FFFFFFF,
                    queue_id,
                    flag,
                    queue_offset,
                    physical_offset,
                    sysflag,
                    born_timestamp,
                    born_address,
                    born_host.port,
                    store_timestamp,
                    store_address,
                    store_host.port,
                    reconsume_times,
                    prepared_transaction_offset,
                    body_len,
                ),
                body,
                topic_field,
                properties_len.to_bytes(2, "big"),
                properties,
            )
        )
        at = position + len(record)
        if at + CRC_PROPERTY_LENGTH > self._prefaulted:
            self._prefault_ahead(segment, at + CRC_PROPERTY_LENGTH)
        view = segment.view
        view[position:at] = record
        if append_crc:
            # encode_crc_property, inlined: "__CRC32#\x01", ten digits backwards, "\x02"
            crc = crc32(record) & 0x7FFFFFFF
            view[at : at + CRC_PROPERTY_LENGTH] = (CRC_PROPERTY_BACKWARDS % crc)[::-1]
            at += CRC_PROPERTY_LENGTH
        assert at == position + total
        self._write_position = at
        return physical_offset, total

    # -- reading ---------------------------------------------------------------------------

    def view_at(self, offset: int, size: int) -> memoryview:
        """Zero-copy view of ``size`` bytes at ``offset``; they must lie in one segment."""
        start, segment = self.segment_for(offset)
        position = offset - start
        if position + size > segment.size or offset + size > self.max_offset:
            raise OffsetOutOfRangeError(f"{size} bytes at {offset} pass the end of written data")
        return segment.view[position : position + size]

    def read(
        self, offset: int, *, check_crc: bool = True, require_record_crc: bool = False
    ) -> MessageRecord:
        """Decode the record at ``offset``; its CRC is checked again (pair assertion with append)."""
        if offset < self.min_offset or offset >= self.max_offset:
            raise OffsetOutOfRangeError(
                f"physical offset {offset} outside [{self.min_offset}, {self.max_offset})"
            )
        start, segment = self.segment_for(offset)
        end = self.max_offset - start if segment is self._segments[-1] else segment.size
        view = segment.view[:end]
        try:
            record = decode_record(
                view, offset - start, check_crc=check_crc, require_record_crc=require_record_crc
            )
        except CorruptRecordError as error:
            raise CorruptRecordError(
                error.reason, offset=offset, path=str(paths.commitlog_segment(start))
            ) from None
        if record.physical_offset != offset:
            raise CorruptRecordError(
                f"record claims physical offset {record.physical_offset}", offset=offset
            )
        return record

    def record_size_at(self, offset: int) -> int:
        start, segment = self.segment_for(offset)
        return check_record(segment.view, offset - start, check_crc=False)

    # -- durability --------------------------------------------------------------------------

    def flush_to(self, offset: int | None = None) -> int:
        """Sync written bytes up to ``offset`` (default: all). Safe to call from another thread.

        Returns the new flushed offset."""
        with self._lock:
            target = self.max_offset if offset is None else min(offset, self.max_offset)
            flushed = self._flushed_offset
            if target <= flushed:
                return flushed
            work = [
                (start, segment)
                for start, segment in zip(self._starts, self._segments, strict=True)
                if start + segment.size > flushed and start < target
            ]
        for start, segment in work:
            low = max(flushed, start) - start
            high = min(target, start + segment.size) - start
            segment.flush_range(low, high)
        with self._lock:
            if target > self._flushed_offset:
                self._flushed_offset = target
        return target

    # -- recovery and retention -----------------------------------------------------------

    def set_end(self, end_offset: int) -> int:
        """Cut everything at and after ``end_offset``: zero the rest of its segment and delete the
        segments after it. Returns the number of bytes that were cut (non-zero bytes included)."""
        if not self._segments:
            return 0
        cut = 0
        with self._lock:
            while (
                len(self._starts) > 1
                and self._starts[-1] >= end_offset
                and end_offset > self._starts[0]
            ):
                start = self._starts.pop()
                segment = self._segments.pop()
                cut += segment.size
                segment.close()
                self.backend.remove(paths.commitlog_segment(start))
        start, segment = self._starts[-1], self._segments[-1]
        end_offset = max(end_offset, start)
        if end_offset >= start + segment.size:
            self._write_position = segment.size
        else:
            position = end_offset - start
            cut += max(0, self._write_position - position)
            # Zero the tail so a later recovery can never mistake stale bytes for records.
            segment.zero(position, segment.size)
            segment.flush()
            self._write_position = position
        self._flushed_offset = min(self._flushed_offset, self.max_offset)
        self._prefaulted = 0  # the newest segment may be another one now
        return cut

    def delete_segments_before(self, offset: int) -> list[int]:
        """Delete whole segments that end at or before ``offset``; never the newest."""
        deleted: list[int] = []
        with self._lock:
            while len(self._segments) > 1 and self._starts[0] + self._segments[0].size <= offset:
                start = self._starts.pop(0)
                segment = self._segments.pop(0)
                segment.close()
                self.backend.remove(paths.commitlog_segment(start))
                deleted.append(start)
        return deleted
