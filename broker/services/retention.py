"""Retention (RocketMQ's CleanCommitLogService) and the disk guard that refuses writes.

Retention, one pass every ``cleanResourceInterval`` (10 s) and after each manual clock advance:

* A segment whose newest message is older than ``fileReservedTime`` (72 h) **expires**: its
  messages are marked for deletion at once (state 30, one span record), so consumers stop
  getting them. Expired segments are deleted during the deletion hours (``deleteWhen``, "04")
  or at any hour while disk usage is at or above ``diskMaxUsedSpaceRatio`` (75 %).
* Under that pressure, a segment that has not expired goes only when every message in it has
  been **consumed** (see :func:`consumed_until`), or when the user opted in to forced cleaning
  (``clean_file_forcibly``, RocketMQ's ``cleanFileForciblyEnable``) and usage is at or above
  ``diskSpaceCleanForciblyRatio`` (85 %). RocketMQ's default forces (its setting is on);
  pocketmq's is off: unexpired messages nobody has read are never deleted to make room, the
  broker refuses writes instead and says so.
* At most ``deleteFileBatchMax`` (10) segments go per pass; the newest is never deleted.

The disk guard (:class:`DiskGuard`) refuses writes while usage is at or above
``diskSpaceWarningLevelRatio`` (90 %), or after the disk ran out of space in an append, with
SERVICE_NOT_AVAILABLE and a remark that names no server path; reads go on. It logs one WARNING
when it starts refusing (not one per send) and an INFO when writes are taken again, which
happens by itself once space returns (the guard probes again at most once a second).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.services.offsets import OffsetManager
from pocketmq.broker.services.schedule import ScheduleService
from pocketmq.broker.services.timer import TIMER_TOPIC, TimerService
from pocketmq.store.message_store import MessageStore
from pocketmq.store.state import STATE_TOPIC
from pocketmq.store.topics import SCHEDULE_TOPIC

__all__ = [
    "ConsumedBelow",
    "DiskGuard",
    "RetentionPolicy",
    "RetentionService",
    "broker_readers",
    "consumed_until",
    "disk_usage_of",
]

log = logging.getLogger("pocketmq.broker")

# (topic, queue id) -> the queue offset below which every known reader of the queue has
# consumed it; None when no reader is known (nobody has consumed anything of it).
ConsumedBelow = Callable[[str, int], "int | None"]
UsageProbe = Callable[[], "float | None"]

# Under lasting pressure the same WARNING is repeated at most this often (passes run every 10 s).
_REPEAT_WARNING_S = 300.0


def disk_usage_of(path: object) -> UsageProbe:
    """A probe of the used share (percent) of the file system holding ``path``; None when it
    cannot be measured."""

    def usage() -> float | None:
        try:
            total, used, _free = shutil.disk_usage(str(path))
        except OSError:
            return None
        return 100.0 * used / total if total else None

    return usage


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    file_reserved_time_ms: int = 72 * 3_600_000
    delete_when: str = "04"  # hours, ';'-separated, local time
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85  # RocketMQ clamps it to 30..85
    disk_space_warning_level_ratio: int = 90  # RocketMQ clamps it to 35..90
    delete_file_batch_max: int = 10
    # RocketMQ's cleanFileForciblyEnable (on there): delete unexpired, unconsumed segments past
    # the forcible ratio. Off here: a user opts in to losing unread messages.
    clean_file_forcibly: bool = False

    def deletion_hours(self) -> set[int]:
        return {int(h) for h in self.delete_when.split(";") if h.strip().isdigit()}

    @property
    def warning_ratio(self) -> int:
        return min(max(self.disk_space_warning_level_ratio, 35), 90)

    @property
    def forcibly_ratio(self) -> int:
        return min(max(self.disk_space_clean_forcibly_ratio, 30), 85)


def consumed_until(
    store: MessageStore, consumed_below: ConsumedBelow
) -> tuple[int, tuple[str, int] | None]:
    """The physical offset below which every message has been consumed, and the queue that
    holds the first message that has not (None when all have).

    A message is consumed when its queue has a known reader (a consumer group with a committed
    offset, or the broker's own service for its system topics) and every such reader's offset
    is past it. A queue nobody reads counts as unconsumed from its first message: messages
    sent and never read are exactly what must not be deleted to make room.
    """
    boundary: int | None = None
    holder: tuple[str, int] | None = None
    for (topic, queue_id), queue in store.consume_queues.queues.items():
        low, high = queue.min_offset, queue.max_offset
        if low >= high:
            continue
        position = consumed_below(topic, queue_id)
        position = low if position is None else max(position, low)
        if position >= high:
            continue
        entries = queue.get(position, 1) or queue.get(low, 1)
        physical = entries[0][0] if entries else 0  # an unreadable entry: keep everything
        if boundary is None or physical < boundary:
            boundary, holder = physical, (topic, queue_id)
    if boundary is None:
        return store.max_physical_offset, None
    return boundary, holder


def broker_readers(
    offsets: OffsetManager, schedule: ScheduleService, timer: TimerService
) -> Callable[[], ConsumedBelow]:
    """Who has read what on this broker, as a snapshot per retention pass: consumer groups by
    their committed offsets (every group with an offset on the topic, and each of them on that
    queue: a group that never committed on a queue has read none of it), the delay levels and
    the timer by their own progress. State records count as read: retention writes the ones
    that still matter again before it deletes their segment."""

    def snapshot() -> ConsumedBelow:
        tables: dict[str, list[dict[int, int]]] = {}
        for key, table in offsets.table.items():
            tables.setdefault(key.partition("@")[0], []).append(table)
        delays = dict(schedule.offsets)
        timer_low = timer.low_water

        def below(topic: str, queue_id: int) -> int | None:
            if topic == STATE_TOPIC:
                return 1 << 62
            if topic == SCHEDULE_TOPIC:
                return delays.get(queue_id + 1)  # queue id = delay level - 1
            if topic == TIMER_TOPIC:
                return timer_low
            groups = tables.get(topic)
            if not groups:
                return None
            positions = [group.get(queue_id) for group in groups]
            if None in positions:
                return None
            return min(p for p in positions if p is not None)

        return below

    return snapshot


class DiskGuard:
    """Whether the store takes writes, by disk usage and by what appends met; the broker's one
    place that says the disk is full (one WARNING), and the refusal every front sends."""

    def __init__(
        self,
        store: MessageStore,
        probe: UsageProbe,
        *,
        warning_ratio: int,
        recheck_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.probe = probe
        self.warning_ratio = warning_ratio
        self.recheck_s = recheck_s
        self.monotonic = monotonic
        self.usage: float | None = None  # the last measure
        self.reason = ""  # why writes are refused (no path in it); "" when they are not
        self.refusals = 0  # writes refused since start
        self._checked_at = float("-inf")
        self._warned_at = float("-inf")
        self._warned = False  # the current episode was announced at WARNING

    @property
    def refusing(self) -> bool:
        return bool(self.reason)

    def update(self, usage: float | None) -> None:
        """A new measure of the disk (each retention pass, each recheck)."""
        self.usage = usage
        self._checked_at = self.monotonic()
        if usage is not None and usage >= self.warning_ratio:
            self._refuse(
                f"disk usage {usage:.0f}% is at or above diskSpaceWarningLevelRatio "
                f"{self.warning_ratio}%"
            )
        elif self.reason:
            self._resume()

    def recheck(self) -> bool:
        """Measure again if the last measure is older than ``recheck_s``; True when writes are
        taken now. Called by a refused write, so writes resume without waiting for a pass."""
        if self.reason and self.monotonic() - self._checked_at >= self.recheck_s:
            self.update(self.probe())
        return not self.reason

    def write_failed(self, error: OSError) -> BrokerError:
        """An append (or a file the broker saves) met ``error``: writes are refused until the
        next measure, and the refusal is returned. The log keeps the whole error, paths too."""
        self._checked_at = self.monotonic()
        reason = (
            "no space left on the disk"
            if error.errno in (errno.ENOSPC, errno.EDQUOT)
            else f"the disk refused a write ({os.strerror(error.errno) if error.errno else 'I/O error'})"
        )
        self._refuse(reason, detail=str(error))
        return self.refusal()

    def refusal(self) -> BrokerError:
        """SERVICE_NOT_AVAILABLE (14) for a write refused now, in RocketMQ's words."""
        self.refusals += 1
        return BrokerError(
            Kind.SERVICE_UNAVAILABLE,
            "service not available now: the broker's disk is full "
            f"({self.reason or 'writes refused'}); writes resume once space is freed",
        )

    def _refuse(self, reason: str, *, detail: str = "") -> None:
        self.store.disk_full = True
        starting = not self.reason
        self.reason = reason
        if not starting:
            return
        now = self.monotonic()
        # One WARNING per episode, and a disk flapping around the ratio not more often than this
        self._warned = now - self._warned_at >= _REPEAT_WARNING_S
        level = logging.WARNING if self._warned else logging.DEBUG
        if self._warned:
            self._warned_at = now
        log.log(
            level,
            "disk full: %s; sends are refused with SERVICE_NOT_AVAILABLE, reads go on%s",
            reason,
            f" ({detail})" if detail else "",
        )

    def _resume(self) -> None:
        self.store.disk_full = False
        self.reason = ""
        log.log(
            logging.INFO if self._warned else logging.DEBUG,
            "disk space available again (usage %s): writes are accepted",
            "?" if self.usage is None else f"{self.usage:.0f}%",
        )


@dataclass(slots=True)
class RetentionService:
    store: MessageStore
    policy: RetentionPolicy
    clock_ms: Callable[[], int]
    disk_usage: UsageProbe = field(default=lambda: None)
    # Who has read what, a snapshot per pass; the default knows no reader, so nothing
    # unexpired counts as consumed.
    readers: Callable[[], ConsumedBelow] = field(default=lambda: lambda topic, queue_id: None)
    guard: DiskGuard | None = None
    monotonic: Callable[[], float] = time.monotonic
    deleted_total: int = 0
    _warned_at: float = float("-inf")
    _last_report: tuple[object, ...] = ()

    # Kept for callers of the former static method.
    disk_usage_of = staticmethod(disk_usage_of)

    def __post_init__(self) -> None:
        if self.guard is None:
            self.guard = DiskGuard(
                self.store,
                self.disk_usage,
                warning_ratio=self.policy.warning_ratio,
                monotonic=self.monotonic,
            )

    def run(self) -> dict[str, object]:
        """One pass; returns what it did (for logs and tests)."""
        policy = self.policy
        store = self.store
        now = self.clock_ms()
        marked = store.mark_expired(now, policy.file_reserved_time_ms)
        usage = self.disk_usage()
        guard = self.guard
        assert guard is not None
        guard.warning_ratio = policy.warning_ratio
        guard.update(usage)
        pressure = usage is not None and usage >= policy.disk_max_used_space_ratio
        forcing = (
            policy.clean_file_forcibly and usage is not None and usage >= policy.forcibly_ratio
        )
        time_up = time.localtime(now / 1000).tm_hour in policy.deletion_hours()
        ages = store.segment_ages()  # oldest first; the newest segment is not in it
        boundary: int | None = None
        holder: tuple[str, int] | None = None
        expired = consumed = forced = 0
        blocked = False  # stopped at a segment with unread messages
        for _start, end, newest in ages[: policy.delete_file_batch_max]:
            if newest is not None and newest + policy.file_reserved_time_ms <= now:
                if time_up or pressure:
                    expired += 1
                    continue
                break
            if not pressure:
                break
            if boundary is None:
                boundary, holder = consumed_until(store, self.readers())
            if end <= boundary:
                consumed += 1
            elif forcing:
                forced += 1
            else:
                blocked = True
                break
        count = expired + consumed + forced
        deleted: list[int] = []
        if count:
            # Exactly the ``count`` oldest: each was checked above, so no age test is needed.
            deleted = store.delete_segments(
                count, now_ms=now, reserve_ms=policy.file_reserved_time_ms, force=True
            )
            self.deleted_total += len(deleted)
        kept = len(ages) - len(deleted) if blocked else 0
        if pressure:
            assert usage is not None
            self._report_pressure(usage, deleted, (expired, consumed, forced), kept, holder)
        elif marked or deleted:
            log.info(
                "retention: marked %d segment(s) expired, deleted %d", len(marked), len(deleted)
            )
        return {
            "marked": marked,
            "deleted": deleted,
            "expired": expired,
            "consumed": consumed,
            "forced": forced,
            "kept": kept,  # older segments kept under pressure: unexpired and unread
            "unconsumed_queue": holder,
            "disk_usage": usage,
            "disk_full": store.disk_full,
        }

    def _report_pressure(
        self,
        usage: float,
        deleted: list[int],
        why: tuple[int, int, int],
        kept: int,
        holder: tuple[str, int] | None,
    ) -> None:
        """A WARNING with the figures when something changed (or now and then while it lasts)."""
        policy = self.policy
        disk_full = self.store.disk_full
        report = (kept, holder, disk_full)
        now = self.monotonic()
        repeat = now - self._warned_at >= _REPEAT_WARNING_S
        if not deleted and report == self._last_report and not repeat:
            return
        self._last_report = report
        self._warned_at = now
        expired, consumed, forced = why
        parts = [
            f"disk usage {usage:.0f}% is at or above diskMaxUsedSpaceRatio "
            f"{policy.disk_max_used_space_ratio}%",
            f"deleted {len(deleted)} segment(s) ({expired} expired, {consumed} consumed by "
            f"every reader, {forced} forced)",
        ]
        if kept:
            where = f" (first unread: topic {holder[0]} queue {holder[1]})" if holder else ""
            parts.append(
                f"kept {kept} older segment(s): unexpired, with messages not yet consumed{where}"
            )
            if not policy.clean_file_forcibly:
                parts.append(
                    "they are never deleted to make room unless clean_file_forcibly is set"
                )
        if disk_full:
            parts.append(f"writes refused at or above {policy.warning_ratio}%")
        log.warning("retention: %s", "; ".join(parts))
