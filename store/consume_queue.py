"""Consume queues: per topic and queue id, 20-byte entries pointing into the commitlog.

    offset  size  field
         0     8  commitLogOffset   physical offset of the record
         8     4  size              the record's TOTALSIZE
        12     8  tagsCode          Java String.hashCode of TAGS (0 without a tag); for
                                    SCHEDULE_TOPIC_XXXX the delivery timestamp

Files live under ``consumequeue/<topic>/<queueId>/`` and are named by their first entry's *byte*
offset in the queue (logical offset * 20). An entry's logical offset is its byte position / 20.
A queue whose first file does not start at 0 has older files deleted by retention.

Files have their full size (as RocketMQ's tools expect) but are sparse: disk blocks are
allocated a chunk at a time ahead of the entries (:meth:`ConsumeQueue.make_room`, called before
the record is appended), so a queue with a few entries takes a page of disk, not 600 KB, and a
full disk fails the send before anything is written.

Loading never refuses a queue: a file whose size is not a multiple of 20 or differs from its
siblings, a missing file between two others, or entries after the end of the valid prefix make
:attr:`ConsumeQueue.problem` say why, and the store rebuilds that queue from the commitlog.
"""

from __future__ import annotations

import bisect
import errno
import struct
from collections.abc import Callable, Iterator, Sequence
from itertools import starmap

from pocketmq.store import paths
from pocketmq.store.errors import StoreError, StoreFullError
from pocketmq.store.files import Backend, Segment

__all__ = [
    "ENTRY",
    "ENTRY_SIZE",
    "FILLER",
    "ConsumeQueue",
    "ConsumeQueueStore",
    "QueueEntry",
]

ENTRY = struct.Struct(">qiq")
ENTRY_SIZE = ENTRY.size
assert ENTRY_SIZE == 20

QueueEntry = tuple[int, int, int]  # (physical offset, size, tags code)
# RocketMQ's pre-blank entry; a rebuild also puts it where the commitlog has no record left
# (a damaged range), so that the logical offsets after it keep their meaning.
FILLER: QueueEntry = (0, 0x7FFFFFFF, 0)
_ALLOCATE_MIN = 4096  # disk is allocated a page at first, then doubling, up to the file size
# Entries after the valid prefix that load looks at: a non-zero one means an entry in the middle
# was zeroed (the binary search can step over such a hole, or stop at it).
_LOOK_PAST_END = 16


class ConsumeQueue:
    def __init__(
        self, backend: Backend, topic: str, queue_id: int, *, entries_per_file: int
    ) -> None:
        assert entries_per_file > 0
        self.backend = backend
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = entries_per_file * ENTRY_SIZE
        self.configured_file_size = self.file_size
        self._starts: list[int] = []  # byte offsets
        self._segments: list[Segment] = []
        self._min_logical = 0
        self._max_logical = 0  # next logical offset to write
        self.max_physical_offset = -1  # physical offset of the last entry (for idempotent dispatch)
        self._flushed_logical = 0  # entries below this are synced
        self.last_entry_end = 0  # physical end of the last entry's record
        self._allocated_until = 0  # byte offset in the queue up to which disk blocks exist
        self.problem: str | None = None  # why load could not trust the files (rebuild them)
        self._retired: list[Segment] = []  # files a rewrite replaced

    @property
    def directory(self):
        return paths.consume_queue_dir(self.topic, self.queue_id)

    def load(self) -> None:
        """Open existing files and find the last valid entry (the first entry that is all zero,
        or has a negative offset or non-positive size, ends the queue, as in RocketMQ).

        Files that cannot be a queue written in order set :attr:`problem` (the queue is left
        empty); the caller rebuilds it from the commitlog."""
        self.problem = self._open_files()
        if self.problem is None and self._segments:
            self.problem = self._find_end()
        if self.problem is not None:
            self.close()
            self._min_logical = self._max_logical = self._flushed_logical = 0
            self._allocated_until = 0
            self._refresh_last()

    def _open_files(self) -> str | None:
        names = [
            n
            for n in self.backend.list_names(self.directory)
            if paths.offset_for_file_name(n) is not None
        ]
        for name in names:
            path = self.directory / name
            try:
                segment = self.backend.open_segment(path)
            except (OSError, ValueError) as error:
                return f"{path}: cannot be opened ({error})"
            start = int(name)
            self._starts.append(start)
            self._segments.append(segment)
            if segment.size % ENTRY_SIZE:
                return f"{path}: size {segment.size} is not a multiple of 20"
            if len(self._segments) == 1:
                self.file_size = segment.size  # a store written with another file size keeps it
                if start % ENTRY_SIZE:
                    return f"{path}: name {start} is not a multiple of 20"
                continue
            previous_end = self._starts[-2] + self._segments[-2].size
            if start != previous_end:
                missing = paths.file_name_for_offset(previous_end)
                return f"{path}: file {missing} before it is missing"
            if segment.size != self.file_size:
                return f"{path}: size {segment.size}, the queue's other files have {self.file_size}"
        return None

    def _find_end(self) -> str | None:
        self._min_logical = self._starts[0] // ENTRY_SIZE
        self._max_logical = self._min_logical
        for index, (start, segment) in enumerate(zip(self._starts, self._segments, strict=True)):
            count = self._valid_count(segment)
            self._max_logical = (start + count * ENTRY_SIZE) // ENTRY_SIZE
            capacity = segment.size // ENTRY_SIZE
            if count < capacity:
                if index < len(self._segments) - 1:
                    return f"{self.directory / segment.name}: entries end at {count} of {capacity}, yet a later file exists"
                past_end = min(capacity, count + 1 + _LOOK_PAST_END) * ENTRY_SIZE
                past = segment.read(count * ENTRY_SIZE, past_end - count * ENTRY_SIZE)
                if past.strip(b"\0"):
                    return (
                        f"{self.directory / segment.name}: entry {start // ENTRY_SIZE + count} "
                        "is blank or invalid but entries follow it"
                    )
                break
            if index == len(self._segments) - 1 and segment.size < self.configured_file_size:
                # Full of entries yet smaller than files are made: cut short by something.
                return (
                    f"{self.directory / segment.name}: full at {segment.size} bytes, smaller than "
                    f"the {self.configured_file_size} bytes files are created with"
                )
        self._skip_leading_blanks()
        self._refresh_last()
        self._flushed_logical = self._min_logical
        self._allocated_until = 0  # unknown: make_room allocates again (a no-op where blocks exist)
        return None

    def _valid_count(self, segment: Segment) -> int:
        low, high = 0, segment.size // ENTRY_SIZE
        # Entries are written in order, so the valid ones form a prefix: binary search its end.
        # The probes are read (segment.read), not looked at through the mapping: each would
        # make 64 KiB around it resident, ~300 KiB per queue for a load.
        while low < high:
            mid = (low + high) // 2
            offset, size, _ = ENTRY.unpack(segment.read(mid * ENTRY_SIZE, ENTRY_SIZE))
            if offset >= 0 and size > 0 and not (offset == 0 and size == 0):
                low = mid + 1
            else:
                high = mid
        return low

    def _skip_leading_blanks(self) -> None:
        # RocketMQ pads a queue that starts late with (0, Integer.MAX_VALUE, 0) filler entries.
        while self._min_logical < self._max_logical:
            if self._entry(self._min_logical) != FILLER:  # exactly: a damaged size is no filler
                break
            self._min_logical += 1

    def _refresh_last(self) -> None:
        if self._max_logical > self._min_logical:
            offset, size, _ = self._entry(self._max_logical - 1)
            if (offset, size, _) == FILLER:
                offset, size = self._last_real()
            self.max_physical_offset = offset
            self.last_entry_end = offset + size
        else:
            self.max_physical_offset = -1
            self.last_entry_end = 0

    def _last_real(self) -> tuple[int, int]:
        for logical in range(self._max_logical - 1, self._min_logical - 1, -1):
            offset, size, code = self._entry(logical)
            if (offset, size, code) != FILLER:
                return offset, size
        return -1, 0

    def close(self) -> None:
        for segment in self._segments + self._retired:
            segment.close()
        self._retired.clear()
        self._segments.clear()
        self._starts.clear()

    @property
    def min_offset(self) -> int:
        return self._min_logical

    @property
    def max_offset(self) -> int:
        """The logical offset the next entry gets (RocketMQ's max offset in queue)."""
        return self._max_logical

    def _locate(self, logical: int) -> tuple[Segment, int]:
        byte_offset = logical * ENTRY_SIZE
        index = bisect.bisect_right(self._starts, byte_offset) - 1
        if index < 0:
            raise IndexError(logical)
        return self._segments[index], byte_offset - self._starts[index]

    def _entry(self, logical: int) -> QueueEntry:
        segment, position = self._locate(logical)
        return ENTRY.unpack_from(segment.view, position)

    def has_room(self, logical: int) -> bool:
        """Whether the slot of ``logical`` exists with disk blocks (the append path's test)."""
        return logical * ENTRY_SIZE + ENTRY_SIZE <= self._allocated_until

    def make_room(self, logical: int) -> None:
        """Create the file for ``logical`` and allocate disk blocks up to its slot. Called before
        the record is appended: if this fails (a full disk), nothing was written anywhere.
        Raises StoreFullError (no space) or StoreError (any other I/O error)."""
        try:
            self._make_room(logical)
        except StoreError:
            raise
        except OSError as error:
            where = f"consume queue {self.topic}/{self.queue_id}"
            if error.errno == errno.ENOSPC:
                raise StoreFullError(
                    errno.ENOSPC, f"no space left for the {where}", str(self.directory)
                ) from error
            raise StoreError(f"{where}: file for entry {logical} not made: {error}") from error

    def _make_room(self, logical: int) -> None:
        byte_offset = logical * ENTRY_SIZE
        if not self._segments or byte_offset >= self._starts[-1] + self._segments[-1].size:
            if self._segments and byte_offset != self._starts[-1] + self._segments[-1].size:
                return  # not the next slot: put() refuses it with the reason
            start = byte_offset - byte_offset % self.file_size
            first = min(self.file_size, max(_ALLOCATE_MIN, byte_offset - start + ENTRY_SIZE))
            segment = self.backend.create_segment(
                paths.consume_queue_segment(self.topic, self.queue_id, start),
                self.file_size,
                allocate=first,
            )
            self._starts.append(start)
            self._segments.append(segment)
            self._allocated_until = start + first
            return
        start, segment = self._starts[-1], self._segments[-1]
        position = byte_offset - start
        if position + ENTRY_SIZE <= self._allocated_until - start:
            return
        have = max(0, self._allocated_until - start)
        grow = min(segment.size, max(_ALLOCATE_MIN, 2 * have, position + ENTRY_SIZE))
        # From 0: blocks of a file loaded at start were never counted (allocating again is free).
        segment.allocate(0, grow)
        self._allocated_until = start + grow

    def put(self, logical: int, physical_offset: int, size: int, tags_code: int) -> bool:
        """Write the entry for ``logical``. Re-dispatch is idempotent: an entry whose record is
        already covered is skipped (returns False)."""
        # The append path: the next entry, its slot allocated (make_room).
        if logical == self._max_logical and self._segments:
            segment = self._segments[-1]
            position = logical * ENTRY_SIZE - self._starts[-1]
            if 0 <= position < segment.size and self.has_room(logical):
                ENTRY.pack_into(segment.view, position, physical_offset, size, tags_code)
                self._max_logical = logical + 1
                self.max_physical_offset = physical_offset
                self.last_entry_end = physical_offset + size
                return True
        return self._put_slow(logical, physical_offset, size, tags_code)

    def secure_next(self) -> int:
        """The next entry's logical offset, its slot secured first (:meth:`make_room` unless
        :meth:`has_room`): the append path's one call before it appends the record."""
        logical = self._max_logical
        if logical * ENTRY_SIZE + ENTRY_SIZE > self._allocated_until:
            self.make_room(logical)
        return logical

    def put_next(self, physical_offset: int, size: int, tags_code: int) -> None:
        """The append path's :meth:`put` of the next entry, whose slot the caller secured
        (:meth:`has_room`, else :meth:`make_room`, before the record was appended)."""
        logical = self._max_logical
        byte_offset = logical * ENTRY_SIZE
        position = byte_offset - self._starts[-1]
        if position < 0 or byte_offset + ENTRY_SIZE > self._allocated_until:
            # not in the newest file (one made ahead by a batch that then failed)
            self._put_slow(logical, physical_offset, size, tags_code)
            return
        ENTRY.pack_into(self._segments[-1].view, position, physical_offset, size, tags_code)
        self._max_logical = logical + 1
        self.max_physical_offset = physical_offset
        self.last_entry_end = physical_offset + size

    def put_run(self, logical: int, entries: Sequence[QueueEntry]) -> None:
        """The entries of ``logical`` on, as :meth:`put` writes them one by one: packed and
        written at once (once per queue file they reach) when they are the queue's next ones
        and their slots are allocated (a batch's, secured before its records were appended)."""
        count = len(entries)
        if not (
            count
            and logical == self._max_logical
            and self._segments
            and logical * ENTRY_SIZE >= self._starts[0]
            and self.has_room(logical + count - 1)
        ):
            for at, (physical_offset, size, tags_code) in enumerate(entries, logical):
                self.put(at, physical_offset, size, tags_code)
            return
        pack = ENTRY.pack
        done = 0
        while done < count:
            segment, position = self._locate(logical + done)
            n = min(count - done, (segment.size - position) // ENTRY_SIZE)
            # starmap: the entries are packed with no Python bytecode per entry
            segment.view[position : position + n * ENTRY_SIZE] = b"".join(
                starmap(pack, entries if n == count else entries[done : done + n])
            )
            done += n
        self._max_logical = logical + count
        physical_offset, size, _ = entries[-1]
        self.max_physical_offset = physical_offset
        self.last_entry_end = physical_offset + size

    def _put_slow(self, logical: int, physical_offset: int, size: int, tags_code: int) -> bool:
        if physical_offset <= self.max_physical_offset and logical < self._max_logical:
            return False
        if logical != self._max_logical:
            if self._max_logical == 0 and not self._segments:
                self._min_logical = logical  # a queue that starts late (after retention)
                self._max_logical = logical
            else:
                raise StoreError(
                    f"consume queue {self.topic}/{self.queue_id}: entry {logical} written, "
                    f"expected {self._max_logical}"
                )
        byte_offset = logical * ENTRY_SIZE
        created = not self._segments or byte_offset >= self._starts[-1] + self._segments[-1].size
        self.make_room(logical)
        segment = self._segments[-1]
        start = self._starts[-1]
        if created and len(self._segments) == 1:
            # RocketMQ's fillPreBlank: so that a reload finds the first real entry.
            for position in range(0, byte_offset - start, ENTRY_SIZE):
                ENTRY.pack_into(segment.view, position, *FILLER)
        # Its own file, which need not be the last: a batch makes the files it reaches first.
        segment, position = self._locate(logical)
        ENTRY.pack_into(segment.view, position, physical_offset, size, tags_code)
        self._max_logical = logical + 1
        self.max_physical_offset = physical_offset
        self.last_entry_end = physical_offset + size
        return True

    def get(self, logical: int, max_count: int) -> list[QueueEntry]:
        """Up to ``max_count`` entries from ``logical`` (clamped to what the queue holds)."""
        logical = max(logical, self._min_logical)
        end = min(self._max_logical, logical + max_count)
        result: list[QueueEntry] = []
        while logical < end:
            segment, position = self._locate(logical)
            in_file = min(end - logical, (segment.size - position) // ENTRY_SIZE)
            result.extend(
                ENTRY.iter_unpack(segment.view[position : position + in_file * ENTRY_SIZE])
            )
            logical += in_file
        return result

    def entries(self, logical: int = 0) -> Iterator[tuple[int, QueueEntry]]:
        logical = max(logical, self._min_logical)
        while logical < self._max_logical:
            for entry in self.get(logical, 1024):
                yield logical, entry
                logical += 1

    def offset_by_time(self, timestamp_ms: int, store_time_of: Callable[[int], int | None]) -> int:
        """The first logical offset whose record was stored at or after ``timestamp_ms``
        (binary search over store times read from the commitlog, as RocketMQ does)."""
        low, high = self._min_logical, self._max_logical
        while low < high:
            mid = (low + high) // 2
            stored = store_time_of(self._entry(mid)[0])
            if stored is None or stored < timestamp_ms:
                low = mid + 1
            else:
                high = mid
        return low

    def truncate_from_physical(self, physical_offset: int) -> int:
        """Drop entries whose record starts at or after ``physical_offset`` (recovery). Returns
        how many were dropped."""
        logical = self._max_logical
        while logical > self._min_logical and self._entry(logical - 1)[0] >= physical_offset:
            logical -= 1
        return self.truncate_to_logical(logical)

    def truncate_to_logical(self, logical: int) -> int:
        """Drop the entries from ``logical`` on (a later record took that queue offset: the
        earlier one was never acknowledged). Returns how many were dropped."""
        dropped = 0
        while self._max_logical > max(logical, self._min_logical):
            segment, position = self._locate(self._max_logical - 1)
            segment.write(position, bytes(ENTRY_SIZE))
            self._max_logical -= 1
            dropped += 1
        self._drop_files_after(self._max_logical)
        self._refresh_last()
        if dropped:
            for segment in self._segments:
                segment.flush()  # the zeroed entries went through Segment.write
            self._flushed_logical = min(self._flushed_logical, self._max_logical)
        return dropped

    def rewrite(self, first_logical: int, entries: Sequence[QueueEntry]) -> None:
        """Replace every file of the queue with ``entries`` from ``first_logical`` on (a rebuild
        from the commitlog), and sync them."""
        # Not closed yet: a flush on another thread may still hold them (closed with the queue).
        self._retired.extend(self._segments)
        self._segments = []
        self._starts = []
        self.backend.remove(self.directory)
        self.problem = None
        self.file_size = self.configured_file_size
        self._min_logical = self._max_logical = self._flushed_logical = 0
        self._allocated_until = 0
        self.max_physical_offset = -1
        self.last_entry_end = 0
        if not entries:
            return
        # Written directly (not through put): a filler may stand where records are gone.
        self._min_logical = self._max_logical = first_logical
        for logical, entry in enumerate(entries, first_logical):
            created = not self._segments
            self.make_room(logical)
            segment, position = self._segments[-1], logical * ENTRY_SIZE - self._starts[-1]
            if created:
                for blank in range(0, position, ENTRY_SIZE):
                    ENTRY.pack_into(segment.view, blank, *FILLER)
            ENTRY.pack_into(segment.view, position, *entry)
            self._max_logical = logical + 1
        self._skip_leading_blanks()
        self._refresh_last()
        self.flush()

    def _drop_files_after(self, logical: int) -> None:
        byte_offset = logical * ENTRY_SIZE
        while len(self._segments) > 1 and self._starts[-1] > byte_offset:
            self._allocated_until = 0  # counted for the dropped file: allocate again
            start = self._starts.pop()
            self._segments.pop().close()
            self.backend.remove(paths.consume_queue_segment(self.topic, self.queue_id, start))

    def delete_before_physical(self, physical_offset: int) -> int:
        """Retention: delete whole files whose entries all point below ``physical_offset`` and
        move the min offset past entries below it. Returns files deleted."""
        deleted = 0
        while len(self._segments) > 1:
            last_in_first = (self._starts[1] // ENTRY_SIZE) - 1
            if self._entry(last_in_first)[0] >= physical_offset:
                break
            start = self._starts.pop(0)
            self._segments.pop(0).close()
            self.backend.remove(paths.consume_queue_segment(self.topic, self.queue_id, start))
            deleted += 1
        self._min_logical = max(
            self._min_logical, self._starts[0] // ENTRY_SIZE if self._starts else 0
        )
        while (
            self._min_logical < self._max_logical
            and self._entry(self._min_logical)[0] < physical_offset
        ):
            self._min_logical += 1
        return deleted

    def flush(self) -> None:
        """Sync the entries written since the last flush (puts write into the mapping directly)."""
        for segment, low, high in self.flush_ranges():
            segment.flush_range(low, high)

    def flush_ranges(self) -> list[tuple[Segment, int, int]]:
        """What :meth:`flush` would sync, as (segment, start, end), marked as synced: the caller
        syncs them (possibly on another thread) before it relies on them."""
        low, high = self._flushed_logical * ENTRY_SIZE, self._max_logical * ENTRY_SIZE
        ranges = []
        if high > low:
            for start, segment in zip(self._starts, self._segments, strict=True):
                end = start + segment.size
                if end > low and start < high:
                    ranges.append((segment, max(low, start) - start, min(high, end) - start))
        self._flushed_logical = self._max_logical
        return ranges

    def destroy(self) -> None:
        self.close()
        self.backend.remove(self.directory)
        self._min_logical = self._max_logical = 0
        self._allocated_until = 0
        self.max_physical_offset = -1
        self.last_entry_end = 0


class ConsumeQueueStore:
    """Every consume queue of a store, created on first use."""

    def __init__(self, backend: Backend, *, entries_per_file: int) -> None:
        self.backend = backend
        self.entries_per_file = entries_per_file
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}

    def load(self) -> None:
        for topic in self.backend.list_names(paths.CONSUME_QUEUE):
            for queue_name in self.backend.list_names(paths.CONSUME_QUEUE / topic):
                if not queue_name.isdigit():
                    continue
                queue = ConsumeQueue(
                    self.backend, topic, int(queue_name), entries_per_file=self.entries_per_file
                )
                queue.load()
                self.queues[(topic, int(queue_name))] = queue

    def problems(self) -> dict[tuple[str, int], str]:
        """Queues whose files load could not trust, with the reason (rebuild them)."""
        return {key: q.problem for key, q in self.queues.items() if q.problem is not None}

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            queue = ConsumeQueue(
                self.backend, topic, queue_id, entries_per_file=self.entries_per_file
            )
            self.queues[(topic, queue_id)] = queue
        return queue

    def max_physical_offset(self) -> int:
        return max((q.max_physical_offset for q in self.queues.values()), default=-1)

    def max_record_end(self) -> int:
        return max((q.last_entry_end for q in self.queues.values()), default=0)

    def truncate_from_physical(self, physical_offset: int) -> int:
        return sum(q.truncate_from_physical(physical_offset) for q in self.queues.values())

    def flush_ranges(self) -> list[tuple[Segment, int, int]]:
        return [r for queue in self.queues.values() for r in queue.flush_ranges()]

    def flush(self) -> None:
        for queue in self.queues.values():
            queue.flush()

    def close(self) -> None:
        for queue in self.queues.values():
            queue.close()

    def destroy_all(self) -> None:
        for queue in self.queues.values():
            queue.destroy()
        self.queues.clear()
        self.backend.remove(paths.CONSUME_QUEUE)
