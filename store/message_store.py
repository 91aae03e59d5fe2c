"""The store facade: put messages, read them back, and keep consume queues, index and state in step.

Synchronous and single-threaded except :meth:`MessageStore.flush_to`, which the broker may run on
a worker thread (group commit) while the event loop keeps appending.

Opening a store takes the ``lock`` file (a second process gets :class:`StoreLockedError`),
writes the ``abort`` file (its presence at the next start means the process did not shut down
cleanly) and runs recovery; :attr:`MessageStore.recovery_report` says what it found.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

import msgspec

from pocketmq.store import paths
from pocketmq.store.checkpoint import Checkpoint
from pocketmq.store.commitlog import CommitLog
from pocketmq.store.config import StoreConfig
from pocketmq.store.consume_queue import (
    ENTRY_SIZE,
    FILLER,
    ConsumeQueue,
    ConsumeQueueStore,
    QueueEntry,
)
from pocketmq.store.crc import crc32
from pocketmq.store.durations import delay_level
from pocketmq.store.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    StoreFullError,
    StoreLockedError,
)
from pocketmq.store.files import Backend, DiskBackend, MemoryBackend
from pocketmq.store.index import IndexFormatError, IndexService
from pocketmq.store.javahash import tags_code as compute_tags_code
from pocketmq.store.record import (
    ADDRESS_V4,
    BODY_AT_V4,
    CRC_PROPERTY_LENGTH,
    CRC_RESERVE,
    END_FILE_MIN_BLANK_LENGTH,
    HOSTS_V6,
    LOCALHOST,
    MAGIC_V1,
    V6_SHIFT,
    Host,
    MessageRecord,
    SysFlag,
    check_limits,
    decode_properties,
    encode_batch,
    encode_properties,
    picking_struct,
    record_intact,
    topic_field,
    unpack_record,
)
from pocketmq.store.recovery import (
    DamagedRange,
    RecoveryReport,
    TornTail,
    next_record_at,
    nonzero_extent,
    scan_intact_records,
    scan_records,
)
from pocketmq.store.state import (
    STATE_TOPIC,
    MessageState,
    StateChange,
    StateTable,
    check_transition,
    decode_state_body,
    encode_state_body,
)
from pocketmq.store.store_format import (
    FORMAT_FILE,
    DamagedRangeEntry,
    StoreFormat,
    classify_record_crc,
)
from pocketmq.store.topics import SCHEDULE_TOPIC

_TX_MASK = SysFlag.TRANSACTION_MASK
_TX_NOT = SysFlag.TRANSACTION_NOT_TYPE
_TX_COMMIT = SysFlag.TRANSACTION_COMMIT_TYPE
_TX_ROLLBACK = SysFlag.TRANSACTION_ROLLBACK_TYPE
_QUEUED = (_TX_NOT, _TX_COMMIT)  # the transaction types that get a consume-queue entry
_TOPIC_FIELDS_MAX = 4096  # topic -> its TOPIC field, for batches (bounded: topics may be many)

__all__ = ["GetResult", "GetStatus", "MessageStore", "PutMessage", "PutResult", "copy_of"]

log = logging.getLogger("pocketmq.store")
# What a consume-queue entry is checked against before its record is served.
_ENTRY_HEAD = picking_struct(
    "total_size", "magic", "queue_id", "queue_offset", "physical_offset", "sysflag", "body_length"
)
_REBUILD_MARKER = paths.config_file("consumeQueueRebuild.json")
# What a clean stop left: the commitlog's first offset and each queue's length. The next open
# checks what it finds against it (a first segment or a whole queue file deleted under a stopped
# store is otherwise indistinguishable from retention, or from a queue never written) and then
# removes it, so that retention and topic deletion while running never look like damage.
_CLEAN_STOP = paths.config_file("cleanStop.json")


class _CleanStop(msgspec.Struct, kw_only=True):
    commitlogMinOffset: int  # noqa: N815 - JSON field names follow RocketMQ's config style
    queues: dict[str, int]  # "<topic>/<queue id>" -> max offset
    crc: int = 0  # of the encoding with crc 0

    def sealed(self) -> bytes:
        body = msgspec.json.encode(msgspec.structs.replace(self, crc=0))
        return msgspec.json.encode(msgspec.structs.replace(self, crc=crc32(body) & 0x7FFFFFFF))

    @classmethod
    def read(cls, data: bytes) -> _CleanStop | None:
        try:
            stop = msgspec.json.decode(data, type=cls)
        except msgspec.DecodeError:
            return None
        body = msgspec.json.encode(msgspec.structs.replace(stop, crc=0))
        return stop if crc32(body) & 0x7FFFFFFF == stop.crc else None


QueueKey = tuple[str, int]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class PutMessage(msgspec.Struct, kw_only=True):
    """A message to append. ``properties_text`` (the wire form) is what gets stored; when both it
    and ``properties`` are given, ``properties`` must be its parse (callers that have it save
    parsing it again)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] | None = None
    properties_text: str | None = None
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: Host = LOCALHOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


def copy_of(
    record: MessageRecord,
    *,
    topic: str,
    queue_id: int,
    properties: dict[str, str],
    reconsume_times: int | None = None,
    sysflag: int | None = None,
    prepared_transaction_offset: int = 0,
) -> PutMessage:
    """A new message carrying ``record``'s body, flag, born time and host (the broker's own
    copies: deliveries, retries, dead letters, commits, resends), with ``properties``."""
    return PutMessage(
        topic=topic,
        body=record.body,
        queue_id=queue_id,
        flag=record.flag,
        properties=properties,
        properties_text=encode_properties(properties),
        sysflag=(record.sysflag if sysflag is None else sysflag)
        & ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6),
        born_timestamp=record.born_timestamp,
        born_host=record.born_host,
        reconsume_times=record.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )


class PutResult(msgspec.Struct, frozen=True):
    # A frozen msgspec struct, not a frozen dataclass: one is built per message, and a frozen
    # dataclass's __init__ (object.__setattr__ per field) costs several times more.
    physical_offset: int
    total_size: int
    queue_offset: int
    store_timestamp: int

    @property
    def end_offset(self) -> int:
        return self.physical_offset + self.total_size


class GetStatus(enum.Enum):
    """RocketMQ's GetMessageStatus values that a read can end with."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_offset: int
    min_offset: int
    max_offset: int
    # (queue offset, physical offset, zero-copy view of the stored record)
    messages: list[tuple[int, int, memoryview]]

    @property
    def total_bytes(self) -> int:
        return sum(len(view) for _, _, view in self.messages)


class MessageStore:
    """Open with :meth:`open` (a directory) or :meth:`in_memory`; use as a context manager."""

    def __init__(
        self,
        backend: Backend,
        *,
        config: StoreConfig | None = None,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.backend = backend
        self.config = config or StoreConfig()
        self.clock_ms = clock_ms
        self.commitlog = CommitLog(backend, segment_size=self.config.commitlog_segment_size)
        self.consume_queues = ConsumeQueueStore(
            backend, entries_per_file=self.config.consume_queue_entries_per_file
        )
        self.index = IndexService(
            backend,
            slot_count=self.config.index_slot_count,
            entry_count=self.config.index_entry_count,
        )
        self.states = StateTable()
        self.damaged: list[DamagedRange] = []
        self.store_format = StoreFormat()
        self.corrupt_reads = 0  # records skipped by reads because they failed a check
        self.bad_entries = 0  # consume-queue entries that disagreed with their record
        self.queues_rebuilt: list[tuple[str, int, str]] = []  # (topic, queue id, why)
        # (topic, queue id, logical offset) a rebuild found no record for: skipped, not rebuilt
        # again (also the entries of a bad entry's rebuild, so one bad entry rebuilds once).
        self._unbacked: set[tuple[str, int, int]] = set()
        # Records from here on were checked in this process: by the recovery scan at open, or
        # by being appended. Reads check the ones below (segments a tail scan skipped).
        self.checked_from = 0
        self.last_store_timestamp = 0  # store time of the newest record appended
        self.recovery_report = RecoveryReport()
        self._lock_fd: int | None = None
        # Topics that passed check_limits, with their UTF-8 bytes (reused by every put).
        self._valid_topics: dict[str, bytes] = {}
        self._tags_codes: dict[str, int] = {}
        # Topics that passed check_limits, but the state topic, with their TOPIC field (batches).
        self._topic_fields: dict[str, bytes] = {}
        self._store_host = self.config.store_host
        self._append_crc = self.config.append_record_crc
        self._index_enable = self.config.message_index_enable
        limits = self.config.limits
        self._body_size_max = limits.body_size_max
        # RocketMQ's record CRC property takes room from the user's properties
        self._properties_size_max = limits.properties_size_max - (
            CRC_RESERVE if self._append_crc else 0
        )
        self._delay_levels_ms = self.config.delay_levels_ms  # parsed once, not per message
        self._first_times: dict[int, int] = {}  # segment start -> store time of its first record
        self.disk_full = False  # set by the broker's retention when usage passes the warning ratio
        self._closed = True

    # -- life cycle --------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        config: StoreConfig | None = None,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> MessageStore:
        store = cls(DiskBackend(Path(root)), config=config, clock_ms=clock_ms)
        store._start()
        return store

    @classmethod
    def in_memory(
        cls, *, config: StoreConfig | None = None, clock_ms: Callable[[], int] = _wall_clock_ms
    ) -> MessageStore:
        store = cls(MemoryBackend(), config=config, clock_ms=clock_ms)
        store._start()
        return store

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _start(self) -> None:
        self._take_lock()
        try:
            abnormal = self.backend.exists(paths.ABORT)
            self.backend.write_bytes(paths.ABORT, str(os.getpid()).encode(), durable=False)
            self.recovery_report = report = self._recover(abnormal)
            self.checked_from = (
                report.scanned_from if self.config.check_crc_on_recover else report.end_offset
            )
            updated = self.store_format.after_recovery(
                self.commitlog.max_offset, append_record_crc=self.config.append_record_crc
            )
            if updated is not None:
                self.store_format = updated
                updated.save(self.backend)
        except BaseException:
            self._release_lock()
            raise
        self._closed = False

    def _take_lock(self) -> None:
        root = self.backend.root
        if root is None:
            return
        fd = os.open(root / paths.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = (self.backend.read_bytes(paths.ABORT) or b"?").decode(errors="replace")
            raise StoreLockedError(
                f"store {root} is already open in another process (pid {pid}); stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, b"lock")
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def close(self) -> None:
        """Flush everything, write the checkpoint, remove ``abort``: the next open is normal."""
        if self._closed:
            return
        self.flush_all()
        self._write_clean_stop()
        self.index.close()
        self.consume_queues.close()
        self.commitlog.close()
        self.backend.remove(paths.ABORT)
        self._release_lock()
        self._closed = True

    def _write_clean_stop(self) -> None:
        queues = {
            f"{topic}/{queue_id}": queue.max_offset
            for (topic, queue_id), queue in self.consume_queues.queues.items()
            if queue.max_offset
        }
        stop = _CleanStop(commitlogMinOffset=self.commitlog.min_offset, queues=queues)
        with contextlib.suppress(OSError):  # only a check for the next open; never a reason to fail
            self.backend.write_bytes(_CLEAN_STOP, stop.sealed())

    def _check_clean_stop(self, report: RecoveryReport) -> None:
        """Compare what the last clean stop left with what this open found (see _CLEAN_STOP)."""
        data = self.backend.read_bytes(_CLEAN_STOP)
        if data is None:
            return
        self.backend.remove(_CLEAN_STOP)
        stop = _CleanStop.read(data)
        if stop is None:
            log.warning("store %s: %s is damaged; not used", self.backend.root, _CLEAN_STOP)
            return
        if not self.commitlog.segment_starts():
            if stop.queues:
                report.missing_segments.append(
                    f"the commitlog holds no segment, but the clean stop left "
                    f"{sum(stop.queues.values())} queue entries in {len(stop.queues)} queues "
                    f"(from offset {stop.commitlogMinOffset}): every segment is missing"
                )
                log.warning("store %s: %s", self.backend.root, report.missing_segments[-1])
            return
        first = self.commitlog.min_offset
        if first > stop.commitlogMinOffset:
            report.missing_segments.append(
                f"the commitlog starts at {first} but the clean stop left it starting at "
                f"{stop.commitlogMinOffset}: segment {paths.file_name_for_offset(stop.commitlogMinOffset)}"
                f" and the {first - stop.commitlogMinOffset} bytes after it are missing"
            )
            log.warning("store %s: %s", self.backend.root, report.missing_segments[-1])
        short: dict[QueueKey, str] = {}
        for name, length in stop.queues.items():
            topic, _, queue_id = name.rpartition("/")
            if not queue_id.isdigit():
                continue
            queue = self.consume_queues.get(topic, int(queue_id))
            found = 0 if queue is None else queue.max_offset
            if found < length:
                short[(topic, int(queue_id))] = (
                    f"it holds {found} entries, the last clean stop left {length}"
                )
        self.rebuild_queues(short)

    def crash_for_test(self) -> None:
        """Drop every handle without flushing or removing ``abort``, as a killed process would."""
        self.index.drop_pending()  # in memory only: lost
        self.index.close()
        self.consume_queues.close()
        self.commitlog.close()
        self._release_lock()
        self._closed = True

    # -- recovery ----------------------------------------------------------------------------

    def _recover(self, abnormal: bool) -> RecoveryReport:
        started = time.perf_counter()
        report = RecoveryReport(abnormal=abnormal, scan_mode=self.config.recovery_scan)
        report.foreign_files = self.commitlog.load()
        self.consume_queues.load()
        broken_queues = self.consume_queues.problems()
        for topic, queue_id in self._interrupted_rebuilds():
            broken_queues.setdefault((topic, queue_id), "its rebuild was interrupted")
        index_broken = self._load_index(report)
        checkpoint = Checkpoint.load(self.backend) or Checkpoint()
        if checkpoint.damaged:
            # It says where the scan may start: a damaged one is not believed (as if absent,
            # every segment is scanned), but its record-CRC copy has its own check.
            report.checkpoint_damaged = True
            log.warning(
                "store %s: the checkpoint is damaged; scanning every segment", self.backend.root
            )
            checkpoint = Checkpoint(record_crc_range=checkpoint.record_crc_range)
        self.last_store_timestamp = checkpoint.physic_msg_timestamp
        self.store_format, format_source = StoreFormat.load_with_source(self.backend)
        starts = self.commitlog.segment_starts()
        if format_source != "file" and starts:
            self._recover_store_format(report, format_source)
        if not starts:
            if not abnormal:
                self._check_clean_stop(report)
            self.consume_queues.destroy_all()
            self.index.truncate_after(0)
            report.seconds = time.perf_counter() - started
            return report
        confirmed = checkpoint.confirm_phy_offset
        if (
            self.config.recovery_scan == "full"
            or not (starts[0] <= confirmed)
            or report.store_format_rederived
        ):
            # (storeFormat.json lost: its list of damaged ranges too; scan everything again.)
            first = 0
        else:
            first = max(0, bisect.bisect_right(starts, confirmed) - 1)
        report.scanned_from = starts[first]
        # A full scan also finds queues that lack a record's entry (a queue directory deleted
        # under a stopped store): a tail scan sees only the records after the checkpoint.
        full_scan = self.config.recovery_scan == "full"
        # Everything before the confirmed offset is durable in every structure; records after it
        # are dispatched again (consume queues skip what they already hold; the index is cut).
        redispatch_from = min(confirmed, self.commitlog.max_offset) if abnormal else confirmed
        redispatch_from = max(redispatch_from, starts[first])
        self.index.truncate_after(redispatch_from, store_timestamp_of=self.store_time_of)
        pending: list[int] = []
        end_offset = starts[first]
        for i in range(first, len(starts)):
            start, segment = starts[i], self.commitlog.segment_for(starts[i])[1]
            last = i == len(starts) - 1

            def collect(
                position: int, size: int, start: int = start, view: memoryview = segment.view
            ) -> None:
                if start + position >= redispatch_from:
                    pending.append(start + position)
                elif full_scan:
                    self._check_covered(view, position, broken_queues)

            name = str(paths.commitlog_segment(start))
            position = 0
            while True:
                records, scanned, stop = scan_records(
                    segment.view,
                    position,
                    base_offset=start,
                    check_crc=self.config.check_crc_on_recover,
                    on_record=collect,
                    record_crc_range=self.store_format.crc_range,
                )
                report.records_scanned += records
                report.bytes_scanned += scanned
                # Zeros before the confirmed offset, or in a segment that is not the last, were
                # written once: damage too, not the end of the log.
                zeros_inside = stop.kind == "end" and (
                    not last or start + stop.position < confirmed
                )
                if stop.kind != "damage" and not zeros_inside:
                    break
                resume = next_record_at(
                    segment.view,
                    stop.position,
                    start,
                    check_crc=self.config.check_crc_on_recover,
                    record_crc_range=self.store_format.crc_range,
                )
                if resume is None:
                    break
                # Quarantine the bad bytes; every intact record after them stays readable.
                reason = stop.reason or "zeros where records were written"
                report.damaged.append(
                    DamagedRange(name, start + stop.position, start + resume, reason)
                )
                position = resume
            end_offset = start + stop.position
            if stop.kind in ("blank", "limit") and not last:
                end_offset = start + segment.size
                continue
            if not last:
                # Damage or zeros up to the end of a segment that is not the last.
                reason = stop.reason or "unfinished segment"
                report.damaged.append(
                    DamagedRange(name, start + stop.position, start + segment.size, reason)
                )
                end_offset = start + segment.size
                continue
            if stop.kind == "damage" and abnormal and start + stop.position >= confirmed:
                # Past the last durable write of a process that did not stop cleanly: the
                # half-written tail a crash leaves. Cut it.
                lost = nonzero_extent(segment.view, stop.position)
                report.torn_tail = TornTail(name, stop.position, lost, stop.reason)
            elif stop.kind == "damage" or start + stop.position < confirmed:
                # Written and synced, or stopped cleanly: damage, not a torn tail. Quarantine it
                # up to the last written byte (at least to the confirmed offset) and append
                # after it; nothing is cut.
                written = start + stop.position + nonzero_extent(segment.view, stop.position)
                damage_end = max(written, min(confirmed, start + segment.size), end_offset + 1)
                reason = stop.reason or "zeros where records were written"
                report.damaged.append(DamagedRange(name, start + stop.position, damage_end, reason))
                end_offset = damage_end
            break
        self.damaged = self._remember_damage(report)
        self.commitlog.set_end(end_offset)
        report.end_offset = self.commitlog.max_offset
        report.consume_queue_entries_dropped = self.consume_queues.truncate_from_physical(
            report.end_offset
        )
        for queue in self.consume_queues.queues.values():
            # RocketMQ's correctMinOffset: entries below the commitlog's first segment are gone.
            queue.delete_before_physical(self.commitlog.min_offset)
        self.index.truncate_after(report.end_offset, store_timestamp_of=self.store_time_of)
        if broken_queues:
            self.rebuild_queues(broken_queues)
        lacking: dict[QueueKey, str] = {}
        for offset in pending:
            if offset < report.end_offset:
                record = self.commitlog.read(offset, check_crc=False)
                self._dispatch(record, lacking)
                self.last_store_timestamp = max(self.last_store_timestamp, record.store_timestamp)
                report.redispatched += 1
        if lacking:
            self.rebuild_queues(lacking)
        if not abnormal:
            self._check_clean_stop(report)
        else:
            self.backend.remove(_CLEAN_STOP)
        report.queues_rebuilt = [f"{t}/{q}: {why}" for t, q, why in self.queues_rebuilt]
        self._report_missing_segments(report, checkpoint.confirm_phy_offset)
        if index_broken:
            self._rebuild_index(report.end_offset)
        self._rebuild_states()
        self.flush_all()
        report.seconds = time.perf_counter() - started
        return report

    # -- consume-queue repair -------------------------------------------------------------

    def _recover_store_format(self, report: RecoveryReport, source: str) -> None:
        """storeFormat.json is missing or unreadable: take the record-CRC range from the
        checkpoint's copy, else derive it from the commitlog; the file is written again."""
        if source == "none":
            self.store_format = StoreFormat(recordCrcFrom=None)
            derived = self._derive_record_crc_range()
            if derived is not None:
                self.store_format = StoreFormat(recordCrcFrom=derived[0], recordCrcUntil=derived[1])
            how = "derived from the commitlog's records"
        else:
            how = "taken from the checkpoint's copy"
        span = self.store_format.crc_range
        text = "no record-CRC range" if span is None else f"record-CRC range from {span[0]}"
        if span is not None and self.store_format.recordCrcUntil is not None:
            text += f" until {self.store_format.recordCrcUntil}"
        report.store_format_rederived = f"{text}, {how}; full scan for damage"
        log.warning(
            "store %s: %s is missing or unreadable: %s",
            self.backend.root or "(memory)",
            FORMAT_FILE,
            report.store_format_rederived,
        )
        self.store_format.save(self.backend)

    def _derive_record_crc_range(self) -> tuple[int, int | None] | None:
        """The last run of records that end in a ``__CRC32#`` property (a valid one, or one
        whose prefix survives with a mangled or wrong value: damage) holding at least one valid
        one: (its first offset, None if it reaches the newest record, else its end)."""
        runs: list[list[int]] = []  # [first offset, end, valid count]
        current: list[int] | None = None
        last_end = 0
        for start in self.commitlog.segment_starts():
            view = self.commitlog.segment_for(start)[1].view
            view = view[: max(0, min(len(view), self.commitlog.max_offset - start))]
            found: list[tuple[int, int]] = []

            def note(position: int, size: int, found: list[tuple[int, int]] = found) -> None:
                found.append((position, size))

            scan_intact_records(view, start, note, check_crc=False)
            for position, size in found:
                kind = classify_record_crc(view, position, size)
                last_end = start + position + size
                if kind == "none":
                    current = None
                    continue
                if current is None:
                    current = [start + position, 0, 0]
                    runs.append(current)
                current[1] = last_end
                current[2] += kind == "valid"
        runs = [run for run in runs if run[2]]
        if not runs:
            return None
        first, end, _ = runs[-1]
        return first, None if end == last_end else end

    def _interrupted_rebuilds(self) -> list[QueueKey]:
        data = self.backend.read_bytes(_REBUILD_MARKER)
        if not data:
            return []
        try:
            return [(str(t), int(q)) for t, q in msgspec.json.decode(data)]
        except (msgspec.DecodeError, TypeError, ValueError):
            return []

    def _check_covered(self, view: memoryview, position: int, broken: dict[QueueKey, str]) -> None:
        fields = unpack_record(view, position)
        if fields.sysflag & _TX_MASK not in (_TX_NOT, _TX_COMMIT):
            return
        key = (fields.topic.decode("utf-8", "replace"), fields.queue_id)
        if key in broken:
            return
        queue = self.consume_queues.get(*key)
        if queue is None or queue.max_offset <= fields.queue_offset:
            have = "no queue" if queue is None else f"the queue ends at {queue.max_offset}"
            broken[key] = (
                f"record at {fields.physical_offset} has queue offset {fields.queue_offset}, {have}"
            )

    def rebuild_queues(self, wanted: dict[QueueKey, str]) -> None:
        """Rebuild the consume queues ``wanted`` (with why) from the commitlog: every intact
        record of each (topic, queue id) outside damaged ranges gets its entry again, at the
        queue offset it carries. Where two records carry one queue offset the later wins (the
        earlier one's send failed); where the commitlog has no record for an offset (damage)
        the entry is a filler that reads skip. Synchronous; each rebuilt queue is synced, and a
        marker file makes an interrupted rebuild run again at the next open."""
        if not wanted:
            return
        marker = sorted(wanted)
        self.backend.write_bytes(_REBUILD_MARKER, msgspec.json.encode(marker))
        found = self._records_of(set(wanted))
        for key in marker:
            topic, queue_id = key
            queue = self.consume_queues.get_or_create(topic, queue_id)
            old_max = queue.max_offset if queue.problem is None else 0
            first, entries, skipped = _queue_entries(found[key], old_max)
            queue.rewrite(first, entries)
            gaps = [first + i for i, entry in enumerate(entries) if entry == FILLER]
            self._unbacked.update((topic, queue_id, logical) for logical in gaps)
            self.queues_rebuilt.append((topic, queue_id, wanted[key]))
            log.warning(
                "consume queue %s/%d rebuilt from the commitlog (%s): %d entries from offset %d, "
                "%d without a record (damaged), %d records with an impossible queue offset left out",
                topic,
                queue_id,
                wanted[key],
                len(entries),
                first,
                len(gaps),
                skipped,
            )
        self.backend.remove(_REBUILD_MARKER)

    def _records_of(self, keys: set[QueueKey]) -> dict[QueueKey, list[tuple[int, QueueEntry]]]:
        """(queue offset, entry) of every intact record of the queues ``keys``, in log order."""
        found: dict[QueueKey, list[tuple[int, QueueEntry]]] = {key: [] for key in keys}
        topics = {topic.encode("utf-8") for topic, _ in keys}
        end = self.commitlog.max_offset
        crc_range = self.store_format.crc_range
        for start in self.commitlog.segment_starts():
            segment = self.commitlog.segment_for(start)[1]
            view = segment.view[: max(0, min(segment.size, end - start))]
            positions: list[int] = []
            scan_intact_records(view, start, _collector(positions), record_crc_range=crc_range)
            for position in positions:
                offset = start + position
                if self.damaged and any(
                    d.start_offset <= offset < d.end_offset for d in self.damaged
                ):
                    continue
                fields = unpack_record(view, position)
                tx_type = fields.sysflag & _TX_MASK
                if fields.topic not in topics or tx_type not in (_TX_NOT, _TX_COMMIT):
                    continue
                key = (fields.topic.decode("utf-8"), fields.queue_id)
                if key not in found:
                    continue
                record = self.commitlog.read(offset, check_crc=False)
                code = self._queue_tags_code(key[0], record.properties, record.store_timestamp)
                found[key].append((fields.queue_offset, (offset, fields.total_size, code)))
        return found

    def _report_missing_segments(self, report: RecoveryReport, confirmed: int) -> None:
        """The checkpoint or a consume queue pointing past the commitlog's end means its last
        segment(s) are gone; a gap in segment names, that one in the middle is."""
        end = self.commitlog.max_offset
        for gap_start, gap_end in self.commitlog.gaps:
            report.missing_segments.append(
                f"commitlog {paths.file_name_for_offset(gap_start)} ({gap_end - gap_start} "
                f"bytes up to {paths.file_name_for_offset(gap_end)}) is missing"
            )
        if confirmed > end:
            report.missing_segments.append(
                f"the checkpoint confirms offset {confirmed} but the commitlog ends at {end}: "
                f"segment {paths.file_name_for_offset(end - end % self.commitlog.segment_size)}"
                " or later is missing"
            )
        for text in report.missing_segments:
            log.warning("store %s: %s", self.backend.root or "(memory)", text)

    def _remember_damage(self, report: RecoveryReport) -> list[DamagedRange]:
        """Damage found now plus damage found by earlier recoveries (kept in storeFormat.json)
        that still lies in the commitlog; every range is reported again."""
        known = {(d.start, d.end): d for d in self.store_format.damaged}
        for damage in report.damaged:
            known[(damage.start_offset, damage.end_offset)] = DamagedRangeEntry(
                file=damage.file,
                start=damage.start_offset,
                end=damage.end_offset,
                reason=damage.reason,
            )
        low = self.commitlog.min_offset
        kept = [d for d in known.values() if d.end > low and d.start < self.commitlog.max_offset]
        kept.sort(key=lambda d: d.start)
        if kept != self.store_format.damaged:
            self.store_format = msgspec.structs.replace(self.store_format, damaged=kept)
            self.store_format.save(self.backend)
        ranges = [DamagedRange(d.file, d.start, d.end, d.reason) for d in kept]
        found = {(d.start_offset, d.end_offset) for d in report.damaged}
        report.damaged.extend(r for r in ranges if (r.start_offset, r.end_offset) not in found)
        return ranges

    def _load_index(self, report: RecoveryReport) -> bool:
        """Open the index; an unreadable index is set aside and rebuilt from the commitlog."""
        try:
            self.index.load()
            return False
        except IndexFormatError as error:
            report.index_rebuilt = str(error)
            self.index.close()
            self.backend.remove(paths.INDEX)
            self.index = IndexService(
                self.backend,
                slot_count=self.config.index_slot_count,
                entry_count=self.config.index_entry_count,
            )
            return True

    def _rebuild_index(self, end_offset: int) -> None:
        if not self.config.message_index_enable:
            return
        for start in self.commitlog.segment_starts():
            segment = self.commitlog.segment_for(start)[1]
            offsets: list[int] = []
            scan_records(segment.view, 0, check_crc=False, on_record=_collector(offsets))
            for position in offsets:
                offset = start + position
                if offset >= end_offset or any(
                    d.start_offset <= offset < d.end_offset for d in self.damaged
                ):
                    continue
                record = self.commitlog.read(offset, check_crc=False)
                if record.sysflag & SysFlag.TRANSACTION_MASK != SysFlag.TRANSACTION_ROLLBACK_TYPE:
                    self.index.put(
                        record.topic, _index_keys(record.properties), offset, record.store_timestamp
                    )

    def _rebuild_states(self) -> None:
        self.states.clear()
        queue = self.consume_queues.get(STATE_TOPIC, 0)
        if queue is None:
            return
        for _, (offset, _, _) in queue.entries():
            try:
                record = self.commitlog.read(offset)
                self.states.apply(decode_state_body(record.body, record.store_timestamp))
            except (CorruptRecordError, OffsetOutOfRangeError, ValueError):
                continue  # a damaged state record is reported by recovery; skip it

    # -- writing -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the store is closed")

    def put(self, message: PutMessage) -> PutResult:
        """Append one message and dispatch it. Raises LimitExceededError (nothing written) when
        the message breaks a limit, StoreFullError when the disk is full."""
        if self._closed:
            self._check_open()
        # _prepare's common case inline (a known topic, the properties as text and parsed,
        # within the limits), as in _prepare_batch; anything else takes it.
        topic = message.topic
        text = message.properties_text
        properties = message.properties
        topic_bytes = self._valid_topics.get(topic)
        if (
            topic_bytes is not None
            and text is not None
            and properties is not None
            and not self.disk_full
            and topic != STATE_TOPIC
            and len(message.body) <= self._body_size_max
        ):
            properties_bytes = text.encode()
            if len(properties_bytes) > self._properties_size_max:
                topic_bytes, properties, properties_bytes = self._prepare(message)
        else:
            topic_bytes, properties, properties_bytes = self._prepare(message)
        queue_id = message.queue_id
        sysflag = message.sysflag
        tx_type = sysflag & _TX_MASK
        if tx_type in _QUEUED:
            queue = self.consume_queues.queues.get((topic, queue_id))
            if queue is None:
                queue = self.consume_queues.get_or_create(topic, queue_id)
            # The entry's slot first: a full disk fails the send before the record is written,
            # so no record is left without its entry and the offset is not reused.
            queue_offset = queue.secure_next()
        else:
            queue = None
            queue_offset = 0
        store_timestamp = self.clock_ms()
        self.last_store_timestamp = store_timestamp
        # Positional: this runs for every message, and keyword passing costs a measurable share.
        offset, total_size = self.commitlog.append(
            topic_bytes,
            queue_id,
            message.flag,
            queue_offset,
            sysflag,
            message.born_timestamp,
            message.born_host,
            store_timestamp,
            self._store_host,
            message.reconsume_times,
            message.prepared_transaction_offset,
            message.body,
            properties_bytes,
            self._append_crc,
        )
        if queue is not None:
            # _queue_tags_code's common case (a cached tag) inline
            tags = properties.get("TAGS")
            code = self._tags_codes.get(tags) if tags else 0
            if code is None or topic == SCHEDULE_TOPIC:
                code = self._queue_tags_code(topic, properties, store_timestamp)
            queue.put_next(offset, total_size, code)  # its slot secured above
        if self._index_enable and tx_type != _TX_ROLLBACK:
            # _index_keys' common case (one key and a unique key) inline
            key = properties.get("KEYS")
            unique = properties.get("UNIQ_KEY")
            if key and unique and " " not in key:
                self.index.put_later(topic, (key, unique), offset, store_timestamp)
            elif key or unique:
                keys = _index_keys(properties)
                if keys:
                    self.index.put_later(topic, keys, offset, store_timestamp)
        if topic == STATE_TOPIC:
            self.states.apply(decode_state_body(message.body, store_timestamp))
        return PutResult(offset, total_size, queue_offset, store_timestamp)

    def put_many(self, messages: Iterable[PutMessage]) -> list[PutResult]:
        """Append a batch, in order, as one write. Every message is checked first: one that
        breaks a limit refuses the whole batch and nothing of it is written.

        The records are encoded in one pass and copied into one segment at once
        (``record.encode_batch`` through ``CommitLog.write_batch``: a batch never straddles two
        segments, and a process killed while it is written leaves none of it); the
        consume-queue entries of each queue are packed and written together, the index keys
        queued together. Byte for byte what a loop of :meth:`put` writes, but that the batch
        starts in the next segment when it does not fit the current one. A batch larger than a
        segment (only with segments smaller than the defaults) is written as consecutive parts
        that each fill a segment, each whole or not at all."""
        if self._closed:
            self._check_open()
        batch = messages if isinstance(messages, list) else list(messages)
        if not batch:
            return []
        topic_fields, properties_list, properties_fields, sizes = self._prepare_batch(batch)
        queue_offsets, runs = self._secure_batch(batch)
        # A store time per record, as a loop of puts takes them (RocketMQ gives a batch one;
        # within a millisecond they are the same, and a test clock that ticks sees each).
        clock = self.clock_ms
        store_timestamps = [clock() for _ in batch]
        self.last_store_timestamp = store_timestamps[-1]
        store_host = self._store_host
        append_crc = self._append_crc
        offsets: list[int] = []
        for first, last, size in _batch_parts(sizes, self.commitlog.segment_size):
            whole = first == 0 and last == len(batch)  # nearly always: no copies of the lists

            def encode(
                physical_offset: int, first: int = first, last: int = last, whole: bool = whole
            ) -> bytes:
                return encode_batch(
                    batch if whole else batch[first:last],
                    topic_fields if whole else topic_fields[first:last],
                    properties_fields if whole else properties_fields[first:last],
                    queue_offsets if whole else queue_offsets[first:last],
                    sizes if whole else sizes[first:last],
                    store_timestamps if whole else store_timestamps[first:last],
                    physical_offset=physical_offset,
                    store_host=store_host,
                    append_crc=append_crc,
                )

            at = self.commitlog.write_batch(size, encode)
            # each record's offset: where the one before ends (accumulate: no bytecode per record)
            offsets += accumulate(sizes[first : last - 1], initial=at)
        return self._dispatch_batch(
            batch, properties_list, queue_offsets, runs, offsets, sizes, store_timestamps
        )

    def _prepare_batch(
        self, batch: list[PutMessage]
    ) -> tuple[list[bytes], list[dict[str, str]], list[bytes], list[int]]:
        """:meth:`_prepare` over a batch, with each record's TOPIC and PROPERTIES fields (the
        properties' length first, the ``__CRC32#`` property's separator and room counted) and
        its TOTALSIZE. The common case (a known topic, the properties as text and parsed,
        within the limits) is checked here without a call per message; anything else takes
        :meth:`_prepare`, which names the limit broken."""
        prepare = self._prepare
        fields_of = self._topic_fields
        # Topics known good (never the state topic, whose bodies _prepare checks), or none:
        # with the disk full, every message takes _prepare, which refuses it.
        known = fields_of if not self.disk_full else {}
        body_max = self._body_size_max
        properties_max = self._properties_size_max
        append_crc = self._append_crc
        crc_room = CRC_PROPERTY_LENGTH if append_crc else 0
        store_shift = V6_SHIFT if self._store_host.is_v6 else 0
        fixed = BODY_AT_V4 + 2 + store_shift + crc_room  # with the properties' length
        topic_fields: list[bytes] = []
        properties_list: list[dict[str, str]] = []
        properties_fields: list[bytes] = []
        sizes: list[int] = []
        for message in batch:
            topic = message.topic
            text = message.properties_text
            properties = message.properties
            field = known.get(topic)
            if (
                field is not None
                and text is not None
                and properties is not None
                and len(message.body) <= body_max
            ):
                properties_bytes = text.encode()
                if len(properties_bytes) > properties_max:
                    prepare(message)  # raises: it names the limit
            else:
                topic_bytes, properties, properties_bytes = prepare(message)
                field = fields_of.get(topic)
                if field is None:
                    field = topic_field(topic_bytes)
                    if topic != STATE_TOPIC:
                        if len(fields_of) >= _TOPIC_FIELDS_MAX:
                            fields_of.clear()
                        fields_of[topic] = field
            if not properties_bytes.endswith(b"\x02") and append_crc and properties_bytes:
                properties_bytes += b"\x02"  # the CRC property needs a separator before it
            properties_len = len(properties_bytes)
            topic_fields.append(field)
            properties_list.append(properties)
            properties_fields.append(
                (properties_len + crc_room).to_bytes(2, "big") + properties_bytes
            )
            size = fixed + len(message.body) + len(field) + properties_len
            if len(message.born_host.address) != ADDRESS_V4:
                size += V6_SHIFT
            sizes.append(size)
        return topic_fields, properties_list, properties_fields, sizes

    def _dispatch_batch(
        self,
        batch: list[PutMessage],
        properties_list: list[dict[str, str]],
        queue_offsets: list[int],
        runs: dict[QueueKey, tuple[ConsumeQueue, int]],
        offsets: list[int],
        sizes: list[int],
        store_timestamps: list[int],
    ) -> list[PutResult]:
        """Consume-queue entries (each queue's in one write), index keys and state changes of
        a batch whose records are written."""
        entries: dict[QueueKey, list[QueueEntry]] = {key: [] for key in runs}
        # a batch of one queue (the common case) appends to its list without a lookup
        only = next(iter(entries.values())) if len(entries) == 1 else None
        keyed: list[tuple[str, tuple[str, ...], int, int]] = []
        key_count = 0
        index_enable = self._index_enable
        tags_codes = self._tags_codes
        for message, properties, offset, size, store_timestamp in zip(
            batch, properties_list, offsets, sizes, store_timestamps, strict=True
        ):
            topic = message.topic
            tx_type = message.sysflag & _TX_MASK
            if tx_type in _QUEUED:
                tags = properties.get("TAGS")
                code = tags_codes.get(tags) if tags else 0
                if code is None or topic == SCHEDULE_TOPIC:
                    code = self._queue_tags_code(topic, properties, store_timestamp)
                (only if only is not None else entries[(topic, message.queue_id)]).append(
                    (offset, size, code)
                )
            if index_enable and tx_type != _TX_ROLLBACK:
                # _index_keys' common case (one key and a unique key) inline
                key_text = properties.get("KEYS")
                unique = properties.get("UNIQ_KEY")
                if key_text and unique and " " not in key_text:
                    keyed.append((topic, (key_text, unique), offset, store_timestamp))
                    key_count += 2
                elif key_text or unique:
                    keys = _index_keys(properties)
                    if keys:
                        keyed.append((topic, keys, offset, store_timestamp))
                        key_count += len(keys)
            if topic == STATE_TOPIC:
                self.states.apply(decode_state_body(message.body, store_timestamp))
        for key, (queue, first) in runs.items():
            queue.put_run(first, entries[key])
        if keyed:
            self.index.put_later_many(keyed, key_count)
        # map: the results are made with no Python bytecode per message
        return list(map(PutResult, offsets, sizes, queue_offsets, store_timestamps))

    def _secure_batch(
        self, batch: list[PutMessage]
    ) -> tuple[list[int], dict[QueueKey, tuple[ConsumeQueue, int]]]:
        """The queue offset of each message of a batch, and the queues it writes (with their
        first offset), after securing every consume-queue slot it takes: a full disk then
        refuses all of it (StoreFullError) before anything is written, never a part that the
        client's retry would write twice. (Its commitlog segment is secured by the write.)"""
        queue_offsets: list[int] = []
        runs: dict[QueueKey, tuple[ConsumeQueue, int]] = {}
        next_offsets: dict[QueueKey, int] = {}
        # The queue of the message before: a batch goes to one queue (RocketMQ sends it so),
        # and the next message of the same queue needs no lookup.
        last_topic: str | None = None
        last_queue_id = queue_offset = 0
        for message in batch:
            if message.sysflag & _TX_MASK in _QUEUED:
                topic = message.topic
                queue_id = message.queue_id
                if queue_id == last_queue_id and topic == last_topic:
                    queue_offset += 1
                else:
                    if last_topic is not None:
                        next_offsets[(last_topic, last_queue_id)] = queue_offset + 1
                    key = (topic, queue_id)
                    known = next_offsets.get(key)
                    if known is None:
                        queue = self.consume_queues.queues.get(key)
                        if queue is None:
                            queue = self.consume_queues.get_or_create(*key)
                        known = queue.max_offset
                        runs[key] = (queue, known)
                    queue_offset = known
                    last_topic, last_queue_id = topic, queue_id
                queue_offsets.append(queue_offset)
            else:
                queue_offsets.append(0)
        if last_topic is not None:
            next_offsets[(last_topic, last_queue_id)] = queue_offset + 1
        for key, (queue, first) in runs.items():
            last = next_offsets[key] - 1
            if queue.has_room(last):
                continue
            # one slot per queue file the batch reaches (make_room allocates up to its slot)
            for logical in (*range(first, last, queue.file_size // ENTRY_SIZE), last):
                if not queue.has_room(logical):
                    queue.make_room(logical)
        return queue_offsets, runs

    def _prepare(self, message: PutMessage) -> tuple[bytes, dict[str, str], bytes]:
        """Check the limits; returns (topic bytes, properties, properties bytes)."""
        topic = message.topic
        if self.disk_full and topic != STATE_TOPIC:
            raise StoreFullError(28, "disk usage is above the warning ratio; writes are refused")
        text = message.properties_text
        if text is not None:
            properties_bytes = text.encode("utf-8")
            # A caller that already parsed the text passes both; they must agree.
            properties = message.properties
            if properties is None:
                properties = decode_properties(text)
        else:
            properties = message.properties or {}
            properties_bytes = encode_properties(properties).encode("utf-8")
        body = message.body
        if topic == STATE_TOPIC:
            decode_state_body(body)  # refuse a malformed state change before writing it
        topic_bytes = self._valid_topics.get(topic)
        if (
            topic_bytes is None
            or len(body) > self._body_size_max
            or len(properties_bytes) > self._properties_size_max
        ):
            # A new topic, or a limit broken: the full check, which names the limit.
            topic_bytes = topic.encode("utf-8")
            check_limits(
                topic,
                topic_bytes,
                body,
                properties_bytes,
                self.config.limits,
                reserve=CRC_RESERVE if self._append_crc else 0,
            )
            self._valid_topics[topic] = topic_bytes
        return topic_bytes, properties, properties_bytes

    def _dispatch(self, record: MessageRecord, lacking: dict[QueueKey, str]) -> None:
        """Build consume-queue, index and state entries for a record read back (recovery). A
        queue that lacks the entries before the record's is noted in ``lacking`` (rebuild it)."""
        tx_type = record.sysflag & SysFlag.TRANSACTION_MASK
        if tx_type in (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE):
            key = (record.topic, record.queue_id)
            queue = self.consume_queues.get_or_create(*key)
            if key in lacking:
                pass
            elif record.queue_offset > queue.max_offset:
                lacking[key] = (
                    f"record at {record.physical_offset} has queue offset "
                    f"{record.queue_offset}, the queue ends at {queue.max_offset}"
                )
            elif queue.max_physical_offset < record.physical_offset:
                code = self._queue_tags_code(
                    record.topic, record.properties, record.store_timestamp
                )
                if record.queue_offset < queue.max_offset:
                    # A later record took this queue offset: the earlier one failed its send
                    # (stores before the put path secured the slot first). The later one wins.
                    queue.truncate_to_logical(record.queue_offset)
                queue.put(record.queue_offset, record.physical_offset, record.total_size, code)
        if self.config.message_index_enable and tx_type != SysFlag.TRANSACTION_ROLLBACK_TYPE:
            self.index.put(
                record.topic,
                _index_keys(record.properties),
                record.physical_offset,
                record.store_timestamp,
            )

    def _queue_tags_code(self, topic: str, properties: dict[str, str], store_timestamp: int) -> int:
        if topic == SCHEDULE_TOPIC and "DELAY" in properties:
            # RocketMQ keeps the delivery time of a delayed message in its tags code.
            delays = self._delay_levels_ms
            with contextlib.suppress(ValueError):
                level = delay_level(properties["DELAY"], len(delays))
                if level:
                    return store_timestamp + delays[level - 1]
        tags = properties.get("TAGS")
        if not tags:
            return 0
        code = self._tags_codes.get(tags)
        if code is None:
            if len(self._tags_codes) >= 4096:
                self._tags_codes.clear()  # bounded: tags are usually a small set
            code = self._tags_codes[tags] = compute_tags_code(tags)
        return code

    def set_state(
        self, physical_offset: int, state: MessageState, reason: str = "", *, group: str = ""
    ) -> PutResult:
        """Record a state change of the message at ``physical_offset`` (an appended record);
        with ``group`` it holds for that consumer group only. A change that
        ``store.state.TRANSITIONS`` does not allow raises ``IllegalStateChangeError``."""
        self.read(physical_offset, check_crc=False)  # the target must exist
        check_transition(
            physical_offset, self.states.state_of(physical_offset, group or None), state
        )
        return self.put(
            PutMessage(
                topic=STATE_TOPIC,
                body=encode_state_body(physical_offset, state, reason, group=group),
                properties={"TAGS": state.label},
            )
        )

    def set_state_span(
        self, start: int, end: int, state: MessageState, reason: str = ""
    ) -> PutResult:
        """One state change for every message in [start, end) (retention marks whole segments)."""
        return self.put(
            PutMessage(
                topic=STATE_TOPIC,
                body=encode_state_body(start, state, reason, span_end=end),
                properties={"TAGS": state.label},
            )
        )

    # -- retention -------------------------------------------------------------------------

    def segment_ages(self) -> list[tuple[int, int, int | None]]:
        """(start, end, newest store time) of every segment but the newest, oldest first. The
        newest store time of a segment is bounded by the first record of the next one."""
        starts = self.commitlog.segment_starts()
        result: list[tuple[int, int, int | None]] = []
        for current, following in zip(starts, starts[1:], strict=False):
            end = current + self.commitlog.segment_for(current)[1].size
            result.append((current, end, self._first_store_time(following)))
        return result

    def _first_store_time(self, segment_start: int) -> int | None:
        cached = self._first_times.get(segment_start)
        if cached is None:
            cached = self.store_time_of(segment_start)
            if cached is not None:
                self._first_times[segment_start] = cached
        return cached

    def mark_expired(self, now_ms: int, reserve_ms: int) -> list[int]:
        """Mark every message of each segment older than ``reserve_ms`` as marked for deletion
        (one span record per segment); returns the starts of the segments marked now."""
        marked = []
        for start, end, newest in self.segment_ages():
            if newest is None or newest + reserve_ms > now_ms:
                break
            change = self.states.change_of(start)
            if (
                change is not None
                and change.span_end >= end
                and change.state is MessageState.MARKED_FOR_DELETION
            ):
                continue
            self.set_state_span(
                start, end, MessageState.MARKED_FOR_DELETION, "expired: older than fileReservedTime"
            )
            marked.append(start)
        return marked

    def delete_segments(
        self, count_max: int, *, now_ms: int, reserve_ms: int, force: bool = False
    ) -> list[int]:
        """Delete up to ``count_max`` of the oldest segments that are expired (any but the newest
        when ``force``), with their consume-queue, index and state entries; returns their starts."""
        doomed: list[int] = []
        for start, end, newest in self.segment_ages()[:count_max]:
            expired = newest is not None and newest + reserve_ms <= now_ms
            if not (expired or force):
                break
            if not expired and self.states.state_of(start) is not MessageState.MARKED_FOR_DELETION:
                self.set_state_span(
                    start, end, MessageState.MARKED_FOR_DELETION, "deleted: disk space"
                )
            doomed.append(end)
        if not doomed:
            return []
        new_min = doomed[-1]
        self._carry_states_forward(new_min)
        self.flush_all()
        deleted = self.commitlog.delete_segments_before(new_min)
        low = self.commitlog.min_offset
        for queue in self.consume_queues.queues.values():
            queue.delete_before_physical(low)
        self.index.delete_files_before(low)
        self.states.drop_before(low)
        self.damaged = [d for d in self.damaged if d.end_offset > low]
        for start in deleted:
            self._first_times.pop(start, None)
        return deleted

    def _carry_states_forward(self, new_min: int) -> None:
        """State records about messages that stay, but stored in segments about to go, are
        appended again, so that recovery still finds them."""
        queue = self.consume_queues.get(STATE_TOPIC, 0)
        if queue is None:
            return
        carried: list[StateChange] = []
        for _, (physical, _size, _code) in queue.entries(queue.min_offset):
            if physical >= new_min:
                break
            try:
                record = self.commitlog.read(physical)
                change = decode_state_body(record.body, record.store_timestamp)
            except (CorruptRecordError, OffsetOutOfRangeError, ValueError):
                continue
            reaches = change.span_end or change.target_offset + 1
            if (
                reaches > new_min
                and self.states.change_of(max(change.target_offset, new_min)) == change
            ):
                carried.append(change)
        for change in carried:
            start = max(change.target_offset, new_min) if change.span_end else change.target_offset
            self.put(
                PutMessage(
                    topic=STATE_TOPIC,
                    body=encode_state_body(
                        start,
                        change.state,
                        change.reason,
                        span_end=change.span_end,
                        group=change.group,
                    ),
                    properties={"TAGS": change.state.label},
                )
            )

    def state_of(self, physical_offset: int, group: str | None = None) -> MessageState:
        return self.states.state_of(physical_offset, group)

    def state_change_of(self, physical_offset: int) -> StateChange | None:
        return self.states.change_of(physical_offset)

    # -- reading -----------------------------------------------------------------------------

    def read(self, physical_offset: int, *, check_crc: bool = True) -> MessageRecord:
        """The record at ``physical_offset``; raises CorruptRecordError if it fails a check or
        lies in a range recovery reported as damaged."""
        self._check_damaged(physical_offset)
        return self.commitlog.read(
            physical_offset,
            check_crc=check_crc,
            require_record_crc=check_crc and self.store_format.requires_crc(physical_offset),
        )

    def _check_damaged(self, physical_offset: int) -> None:
        for damage in self.damaged:
            if damage.start_offset <= physical_offset < damage.end_offset:
                raise CorruptRecordError(
                    f"in a damaged range: {damage.reason}", offset=physical_offset, path=damage.file
                )

    def store_time_of(self, physical_offset: int) -> int | None:
        try:
            return self.commitlog.read(physical_offset, check_crc=False).store_timestamp
        except (CorruptRecordError, OffsetOutOfRangeError):
            return None

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        *,
        tags_codes: set[int] | None = None,
        max_bytes: int = 4 * 1024 * 1024,
        only_available: bool = True,
        verify_crc: bool = True,
        group: str | None = None,
    ) -> GetResult:
        """Read up to ``max_count`` stored records from a queue, as RocketMQ's getMessage does.

        Entries whose tags code is not in ``tags_codes`` (when given), whose message is not
        available (when ``only_available``) or which lie in a damaged range are skipped; the
        next offset moves past them. With ``verify_crc``, a record this process has not
        checked yet (below ``checked_from``) is checked first and skipped if it fails.

        Every entry is checked against the record it points at (``_entry_mismatch``) before
        anything else: a bad entry is never served nor skipped past; it is logged, the queue is
        rebuilt from the commitlog (:meth:`rebuild_queues`) and the read done again."""
        while True:
            result = self._get_messages(
                topic,
                queue_id,
                offset,
                max_count,
                tags_codes,
                max_bytes,
                only_available,
                verify_crc,
                group,
            )
            if result is not None:
                return result

    def _get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tags_codes: set[int] | None,
        max_bytes: int,
        only_available: bool,
        verify_crc: bool,
        group: str | None,
    ) -> GetResult | None:
        """One read of :meth:`get_messages`; None when a bad entry made it rebuild the queue."""
        queue = self.consume_queues.get(topic, queue_id)
        if queue is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0, [])
        low, high = queue.min_offset, queue.max_offset
        if high == 0 or low == high:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, low, low, high, [])
        if offset < low:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, low, low, high, [])
        if offset == high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, low, high, [])
        if offset > high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, high, low, high, [])
        topic_bytes = self._valid_topics.get(topic) or topic.encode("utf-8")
        messages: list[tuple[int, int, memoryview]] = []
        total_bytes = 0
        next_offset = offset
        min_physical = self.commitlog.min_offset
        # Read a few more entries than asked, since filtered ones do not count.
        for physical, size, code in queue.get(offset, max(max_count * 4, 64)):
            if len(messages) >= max_count or (messages and total_bytes + size > max_bytes):
                break
            queue_offset = next_offset
            next_offset += 1
            if physical < min_physical:
                continue
            if self.damaged and any(
                d.start_offset <= physical < d.end_offset for d in self.damaged
            ):
                continue
            try:
                view = self.commitlog.view_at(physical, size)
            except OffsetOutOfRangeError:
                mismatch: str | None = f"size {size} at {physical} passes the end of written data"
            else:
                mismatch = _entry_mismatch(view, topic_bytes, queue_id, queue_offset, physical)
            if mismatch is not None:
                if self._bad_entry(topic, queue_id, queue_offset, physical, size, mismatch):
                    return None
                continue  # rebuilt already: no record backs this offset
            if tags_codes is not None and code not in tags_codes:
                continue
            if (
                only_available
                and self.states.state_of(physical, group) is not MessageState.AVAILABLE
            ):
                continue
            if (
                verify_crc
                and physical < self.checked_from
                and not record_intact(view, self.store_format.requires_crc(physical))
            ):
                self._quarantine(physical, size, f"{topic}/{queue_id} offset {queue_offset}")
                continue  # never served; every record after it stays readable
            messages.append((queue_offset, physical, view))
            total_bytes += size
        status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, next_offset, low, high, messages)

    def _quarantine(self, physical: int, size: int, where: str) -> None:
        """A read met a record that fails its CRC (damage after the recovery scan, or in a
        part no scan checked): reported once at WARNING, remembered as a damaged range (in
        storeFormat.json, so later starts report it too) and never served."""
        self.corrupt_reads += 1
        start = physical - physical % self.commitlog.segment_size
        damage = DamagedRange(
            str(paths.commitlog_segment(start)),
            physical,
            physical + size,
            f"record of {where} fails its CRC when read",
        )
        self.damaged.append(damage)
        log.warning(
            "store %s: %s at offset %d (%d bytes): %s; not served",
            self.backend.root or "(memory)",
            damage.file,
            physical - start,
            size,
            damage.reason,
        )
        entry = DamagedRangeEntry(
            file=damage.file, start=physical, end=physical + size, reason=damage.reason
        )
        self.store_format = msgspec.structs.replace(
            self.store_format, damaged=[*self.store_format.damaged, entry]
        )
        with contextlib.suppress(OSError):  # the warning stands; the next recovery finds it
            self.store_format.save(self.backend)

    def _bad_entry(
        self, topic: str, queue_id: int, logical: int, physical: int, size: int, mismatch: str
    ) -> bool:
        """A read met an entry that disagrees with its record. Returns True when the queue was
        rebuilt (read again), False when a rebuild already found no record for that offset."""
        if (topic, queue_id, logical) in self._unbacked:
            self.corrupt_reads += 1
            return False
        self.bad_entries += 1
        self._unbacked.add((topic, queue_id, logical))  # rebuild once for it, not per read
        log.warning(
            "consume queue %s/%d: entry %d (physical offset %d, size %d) is not served: %s",
            topic,
            queue_id,
            logical,
            physical,
            size,
            mismatch,
        )
        self.rebuild_queues({(topic, queue_id): f"entry {logical} disagrees with its record"})
        return True

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self.consume_queues.get(topic, queue_id)
        return 0 if queue is None else queue.min_offset

    def max_offset(self, topic: str, queue_id: int) -> int:
        queue = self.consume_queues.get(topic, queue_id)
        return 0 if queue is None else queue.max_offset

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        queue = self.consume_queues.get(topic, queue_id)
        return 0 if queue is None else queue.offset_by_time(timestamp_ms, self.store_time_of)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for (t, q) in self.consume_queues.queues if t == topic)

    def topics(self) -> list[str]:
        return sorted({t for (t, _) in self.consume_queues.queues})

    def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        begin_ms: int = 0,
        end_ms: int | None = None,
        max_results: int = 64,
    ) -> list[MessageRecord]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY equal ``key``, newest first. The index
        hash can collide, so each candidate's real keys are compared."""
        end_ms = end_ms if end_ms is not None else (1 << 62)
        found: list[MessageRecord] = []
        for offset in self.index.query(topic, key, begin_ms, end_ms, max_results * 2):
            try:
                record = self.read(offset)
            except (CorruptRecordError, OffsetOutOfRangeError):
                continue
            if record.topic == topic and (key in record.keys or record.unique_key == key):
                found.append(record)
                if len(found) >= max_results:
                    break
        return found

    # -- durability --------------------------------------------------------------------------

    def flush_to(self, offset: int | None = None) -> int:
        """fsync the commitlog up to ``offset``; safe from a worker thread (group commit)."""
        return self.commitlog.flush_to(offset)

    def flush_all(self) -> None:
        """Flush commitlog, consume queues and index, then advance the checkpoint past them."""
        self.flush_plan()()

    def flush_plan(self) -> Callable[[], None]:
        """:meth:`flush_all` in two steps: this call (on the thread that appends) notes what to
        sync; the returned function does the syncing and writes the checkpoint, and may run on
        a worker thread, so that msync never stalls the broker's event loop."""
        confirmed = self.commitlog.max_offset
        ranges = self.consume_queues.flush_ranges() + self.index.flush_ranges()
        # RocketMQ's timestamps are the store time of the last record each structure holds.
        stamp = self.last_store_timestamp
        # A copy of storeFormat.json's range, so that losing that file loses no check.
        crc_range = (self.store_format.recordCrcFrom, self.store_format.recordCrcUntil)

        def run() -> None:
            self.commitlog.flush_to(confirmed)
            for segment, low, high in ranges:
                segment.flush_range(low, high)
            Checkpoint(stamp, stamp, stamp, confirmed, confirmed, record_crc_range=crc_range).save(
                self.backend
            )

        return run

    @property
    def min_physical_offset(self) -> int:
        return self.commitlog.min_offset

    @property
    def max_physical_offset(self) -> int:
        return self.commitlog.max_offset


def _batch_parts(sizes: list[int], segment_size: int) -> list[tuple[int, int, int]]:
    """A batch's writes, (first, end, bytes): one, unless the batch is larger than a segment
    can hold; then as many records as fill a segment each (greedy, in order)."""
    room = segment_size - END_FILE_MIN_BLANK_LENGTH
    total = sum(sizes)
    if total <= room:
        return [(0, len(sizes), total)]
    parts: list[tuple[int, int, int]] = []
    first = part = 0
    for i, size in enumerate(sizes):
        if part + size > room:
            parts.append((first, i, part))
            first, part = i, 0
        part += size
    parts.append((first, len(sizes), part))
    return parts


def _queue_entries(
    found: list[tuple[int, QueueEntry]], old_max: int
) -> tuple[int, list[QueueEntry], int]:
    """A queue's entries from its records (queue offset, entry) in log order: (first logical
    offset, entries, records left out). A later record takes the offset of an earlier one and
    drops what came after it; a queue offset past both the old end and the next one is damage
    the CRC did not cover (left out); offsets no record carries become fillers."""
    by_offset: dict[int, QueueEntry] = {}
    high = -1
    skipped = 0
    for queue_offset, entry in found:
        if by_offset and queue_offset > max(old_max - 1, high + 1):
            skipped += 1
            continue
        if queue_offset <= high:
            for later in range(queue_offset + 1, high + 1):
                by_offset.pop(later, None)
        by_offset[queue_offset] = entry
        high = queue_offset
    if not by_offset:
        return 0, [], skipped
    first = min(by_offset)
    return first, [by_offset.get(i, FILLER) for i in range(first, high + 1)], skipped


def _entry_mismatch(
    view: memoryview, topic: bytes, queue_id: int, queue_offset: int, physical: int
) -> str | None:
    """What disagrees between a consume-queue entry (``view``: its size at its offset) and the
    record there, or None. Checks the record starts there and is that long, and names the
    entry's place: PHYSICALOFFSET, topic, queue id and queue offset."""
    n = len(view)
    if n >= _ENTRY_HEAD.size + 3:
        total, magic, got_queue, got_offset, got_physical, sysflag, body_len = (
            _ENTRY_HEAD.unpack_from(view, 0)
        )
        if magic == MAGIC_V1 and not sysflag & HOSTS_V6 and total == n:
            topic_at = BODY_AT_V4 + body_len
            if body_len < 0 or topic_at + 1 > n:
                return f"body length {body_len} overruns the record"
            got_topic = bytes(view[topic_at + 1 : topic_at + 1 + view[topic_at]])
            return _place_mismatch(
                (got_physical, got_topic, got_queue, got_offset),
                (physical, topic, queue_id, queue_offset),
            )
    try:
        fields = unpack_record(view, 0)
    except CorruptRecordError as error:
        return f"no record starts there ({error.reason})"
    if fields.total_size != n:
        return f"entry size {n}, record TOTALSIZE {fields.total_size}"
    return _place_mismatch(
        (fields.physical_offset, fields.topic, fields.queue_id, fields.queue_offset),
        (physical, topic, queue_id, queue_offset),
    )


def _place_mismatch(
    got: tuple[int, bytes, int, int], want: tuple[int, bytes, int, int]
) -> str | None:
    for name, have, expected in zip(
        ("PHYSICALOFFSET", "topic", "queue id", "queue offset"), got, want, strict=True
    ):
        if have != expected:
            return f"record {name} is {have!r}, the entry's is {expected!r}"
    return None


def _collector(positions: list[int]) -> Callable[[int, int], None]:
    def collect(position: int, _size: int) -> None:
        positions.append(position)

    return collect


def _index_keys(properties: dict[str, str]) -> tuple[str, ...]:
    """The keys RocketMQ indexes a message under: KEYS split on spaces, then UNIQ_KEY.

    A tuple of strings, which the garbage collector stops tracking: the index holds these for a
    while (IndexService.put_later), and tracked survivors make collections more frequent."""
    text = properties.get("KEYS")
    unique = properties.get("UNIQ_KEY")
    if text and " " not in text:  # one key, the common case: no split
        return (text, unique) if unique else (text,)
    keys = [k for k in text.split(" ") if k] if text else []
    if unique:
        keys.append(unique)
    return tuple(keys)
