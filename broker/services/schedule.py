"""Delayed messages: RocketMQ's 18 delay levels through ``SCHEDULE_TOPIC_XXXX``.

A message whose ``DELAY`` property is a level (1..18 by default; above the maximum it is
clamped to the maximum, 0 or less means no delay) is stored in ``SCHEDULE_TOPIC_XXXX``, queue
``level - 1``, with ``REAL_TOPIC`` and ``REAL_QID``; the consume-queue tags code of that entry is
its delivery time. When due, it is written again to its real topic as a new record (same
properties and unique key, minus ``DELAY`` and the timer properties) and the waiting copy is
marked for deletion. Each level's progress is kept in ``config/delayOffset.json``.

A delivery the disk refuses (full, read-only) stops its level at that message: the level's
progress does not move past it, and :meth:`ScheduleService.retry_refused` (the broker's
housekeeping, every few seconds of real time) tries again until the disk takes it. The episode
is logged once (``Outage``).

While it waits a message is unavailable (state 10); the delivered copy is available.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

import msgspec

from pocketmq.broker.errors import DelayError
from pocketmq.broker.services.clock import Scheduler
from pocketmq.broker.services.outage import Outage
from pocketmq.broker.services.persist import Write, encode_json, load_json, write_json
from pocketmq.broker.services.topics import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from pocketmq.store.durations import delay_level
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError
from pocketmq.store.message_store import MessageStore, PutMessage, PutResult, copy_of
from pocketmq.store.record import encode_properties
from pocketmq.store.state import MessageState

__all__ = ["DelayError", "ScheduleService"]

log = logging.getLogger("pocketmq.broker")

# Properties a delivered message loses (RocketMQ's messageTimeup).
DROPPED_ON_DELIVERY = ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")


class _DelayOffsets(msgspec.Struct, rename="camel"):
    offset_table: dict[int, int] = {}


class ScheduleService:
    def __init__(
        self,
        store: MessageStore,
        *,
        scheduler: Scheduler,
        now_ms: Callable[[], int],
        put: Callable[[PutMessage], PutResult],
        path: Path | None,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.now_ms = now_ms
        self.put = put  # the writer's put_internal: a delivery may be a timer message again
        self.path = path
        self.levels_ms = store.config.delay_levels_ms
        self.offsets: dict[int, int] = dict(
            load_json(path, _DelayOffsets, _DelayOffsets()).offset_table
        )
        self._scheduled: dict[int, int] = {}  # level -> due time already asked of the scheduler
        self.delivered = 0
        self.refused: set[int] = set()  # levels stopped at a delivery the disk refused
        self.outage = Outage(
            "delivering delay-level messages",
            "they wait, in order, and are delivered once the disk takes writes",
        )

    @property
    def max_level(self) -> int:
        return len(self.levels_ms)

    def level_of(self, properties: dict[str, str]) -> int:
        """The delay level a message asks for (0 = none); raises DelayError on a bad value."""
        text = properties.get("DELAY")
        try:
            return delay_level(text, self.max_level)
        except ValueError:
            raise DelayError(
                f"DELAY property {text!r} is not a delay level (1..{self.max_level})"
            ) from None

    def transform(self, message: PutMessage, properties: dict[str, str], level: int) -> PutMessage:
        """The message as it is stored while it waits (HookUtils.transformDelayLevelMessage)."""
        waiting = dict(properties)
        waiting["REAL_TOPIC"] = message.topic
        waiting["REAL_QID"] = str(message.queue_id)
        waiting["DELAY"] = str(level)
        text = encode_properties(waiting)
        return msgspec.structs.replace(
            message,
            topic=SCHEDULE_TOPIC,
            queue_id=level - 1,
            properties=waiting,
            properties_text=text,
        )

    # -- after a delayed message is stored ------------------------------------------------------

    def stored(self, level: int, physical_offset: int, store_timestamp: int) -> None:
        self.store.set_state(
            physical_offset, MessageState.UNAVAILABLE, f"waiting for delay level {level}"
        )
        self._schedule(level, store_timestamp + self.levels_ms[level - 1])

    def _schedule(self, level: int, due_ms: int) -> None:
        current = self._scheduled.get(level)
        if current is not None and current <= due_ms:
            return  # the pass already asked for will reach this message
        self._scheduled[level] = due_ms
        self.scheduler.at(due_ms, self._pass_for(level))

    def _pass_for(self, level: int) -> Callable[[], None]:
        def run() -> None:
            self._scheduled.pop(level, None)
            self.deliver_due(level)

        return run

    # -- delivery --------------------------------------------------------------------------------

    def start(self) -> None:
        """After a restart: resume every level from its saved position."""
        for level in range(1, self.max_level + 1):
            queue = self.store.consume_queues.get(SCHEDULE_TOPIC, level - 1)
            if queue is None:
                continue
            offset = self.offsets.get(level, 0)
            # RocketMQ clamps saved offsets into [min, max] of the queue.
            offset = min(max(offset, queue.min_offset), queue.max_offset)
            self.offsets[level] = offset
            if offset < queue.max_offset:
                self._schedule(level, queue.get(offset, 1)[0][2])

    def deliver_due(self, level: int) -> int:
        """Deliver every message of ``level`` that is due now; returns how many."""
        store = self.store
        queue = store.consume_queues.get(SCHEDULE_TOPIC, level - 1)
        if queue is None:
            return 0
        now = self.now_ms()
        offset = max(self.offsets.get(level, 0), queue.min_offset)
        delivered = 0
        refused = False
        while offset < queue.max_offset:
            physical, _size, due_ms = queue.get(offset, 1)[0]
            if due_ms > now + self.levels_ms[level - 1]:
                due_ms = now  # RocketMQ's correction of a delivery time beyond the level's delay
            if due_ms > now:
                self._schedule(level, due_ms)
                break
            try:
                # Delivered before a crash that lost delayOffset.json's newest position: the
                # waiting copy is already retired, so it is not delivered twice.
                if store.state_of(physical) is not MessageState.MARKED_FOR_DELETION:
                    self._deliver(store.read(physical))
                    delivered += 1
            except (CorruptRecordError, OffsetOutOfRangeError) as error:
                log.error(
                    "delay level %d: skipping unreadable message at %d: %s", level, physical, error
                )
            except OSError as error:
                # The disk refused the delivered copy (StoreFullError is an OSError too): stay
                # on this message, not past it; retry_refused tries again.
                refused = True
                self.refused.add(level)
                self.outage.failed(error)
                break
            offset += 1
            self.offsets[level] = offset
        if not refused and level in self.refused:
            self.refused.discard(level)
            if not self.refused:
                self.outage.worked()
        self.delivered += delivered
        return delivered

    def retry_refused(self) -> int:
        """Deliver again what the disk refused, level by level; returns how many went out."""
        delivered = 0
        for level in sorted(self.refused):
            delivered += self.deliver_due(level)
            if level in self.refused:
                break  # still refused: the other levels would be too
        return delivered

    def _deliver(self, record) -> None:  # noqa: ANN001 - a store MessageRecord
        properties = dict(record.properties)
        real_topic = properties.get("REAL_TOPIC")
        if not real_topic or real_topic == TRANS_HALF_TOPIC:
            self.store.set_state(
                record.physical_offset, MessageState.MARKED_FOR_DELETION, "discarded"
            )
            return
        for name in DROPPED_ON_DELIVERY:
            properties.pop(name, None)
        properties["WAIT"] = "false"
        queue_id = int(properties.get("REAL_QID", "0") or 0)
        message = copy_of(record, topic=real_topic, queue_id=queue_id, properties=properties)
        self.put(message)
        self.store.set_state(record.physical_offset, MessageState.MARKED_FOR_DELETION, "delivered")

    def persist(self) -> None:
        self.save_later()()

    def save_later(self) -> Write:
        """The delay levels' progress as it is now, written by the returned call (any thread)."""
        content = encode_json(_DelayOffsets(offset_table=self.offsets))
        return functools.partial(write_json, self.path, content)

    def pending(self) -> int:
        total = 0
        for level in range(1, self.max_level + 1):
            queue = self.store.consume_queues.get(SCHEDULE_TOPIC, level - 1)
            if queue is not None:
                total += queue.max_offset - max(self.offsets.get(level, 0), queue.min_offset)
        return total
