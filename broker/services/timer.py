"""Exact delivery times (RocketMQ 5.x timer messages).

A message with ``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS`` or ``TIMER_DELIVER_MS`` (that precedence,
as RocketMQ's HookUtils) is due at that time. A time not in the future delivers at once, as a
normal message; one more than ``timer_max_delay_ms`` ahead (3 days, RocketMQ's
``timerMaxDelaySec``) is refused. Otherwise the message waits in ``rmq_sys_wheel_timer``
(queue 0) with ``TIMER_OUT_MS``, ``REAL_TOPIC`` and ``REAL_QID``, unavailable (state 10), and is
written again to its real topic when due, with ``TIMER_ENQUEUE_MS`` and ``TIMER_DEQUEUE_MS`` (its
timer properties kept; ``TIMER_OUT_MS`` says it is not to be timed again).

Unlike RocketMQ (1 s precision, times rounded down to the second) a timer fires at its
millisecond: the scheduler sleeps until exactly the earliest due time.

After a restart the waiting records still unavailable are found again from a low-water offset
kept in ``config/timerCheck.json`` and rescheduled; nothing is lost. A crash between writing the
delivered copy and the state record that retires the waiting one can deliver that message a
second time (same unique key) after the restart: at-least-once, like RocketMQ's timer.

A delivery the disk refuses (full, read-only) is not dropped: the waiting record stays
unavailable (so the low-water mark stays below it) and :meth:`TimerService.retry_refused` (the
broker's housekeeping, every few seconds of real time) delivers it once the disk takes writes,
late, and before any timer due after it. The episode is logged once (``Outage``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import msgspec

from pocketmq.broker.errors import TimerError
from pocketmq.broker.services.clock import Scheduler
from pocketmq.broker.services.outage import Outage
from pocketmq.broker.services.persist import Write, encode_json, load_json, write_json
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError
from pocketmq.store.message_store import MessageStore, PutMessage, PutResult, copy_of
from pocketmq.store.record import encode_properties
from pocketmq.store.state import MessageState

__all__ = ["TIMER_TOPIC", "TimerError", "TimerService"]

log = logging.getLogger("pocketmq.broker")

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_PROPERTIES = ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")


class _TimerCheck(msgspec.Struct, rename="camel"):
    low_water_offset: int = 0


class TimerService:
    def __init__(
        self,
        store: MessageStore,
        *,
        scheduler: Scheduler,
        now_ms: Callable[[], int],
        put: Callable[[PutMessage], PutResult],
        path: Path | None,
        max_delay_ms: int,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.now_ms = now_ms
        self.put = put
        self.path = path
        self.max_delay_ms = max_delay_ms
        self.low_water = load_json(path, _TimerCheck, _TimerCheck()).low_water_offset
        self.delivered = 0
        self.refused: dict[int, int] = {}  # physical offset -> due time, of refused deliveries
        self.outage = Outage(
            "delivering timer messages",
            "they wait and are delivered once the disk takes writes",
        )

    def deliver_ms_of(self, properties: dict[str, str], now_ms: int) -> int | None:
        """The delivery time a message asks for, None when it has no timer property. A message
        with ``TIMER_OUT_MS`` is one the timer delivered already: it keeps its timer
        properties, and is not timed again (RocketMQ's HookUtils.checkIfTimerMessage)."""
        if "TIMER_OUT_MS" in properties:
            return None
        for name, scale, relative in (
            ("TIMER_DELAY_SEC", 1000, True),
            ("TIMER_DELAY_MS", 1, True),
            ("TIMER_DELIVER_MS", 1, False),
        ):
            text = properties.get(name)
            if text is None or text == "":
                continue
            try:
                value = int(text)
            except ValueError:
                raise TimerError(f"{name} {text!r} is not a number") from None
            deliver_ms = now_ms + value * scale if relative else value
            if deliver_ms - now_ms > self.max_delay_ms:
                raise TimerError(
                    f"timer message illegal, the delay time should not be bigger than the max delay "
                    f"{self.max_delay_ms}ms ({name}={text})"
                )
            return deliver_ms
        return None

    def transform(
        self, message: PutMessage, properties: dict[str, str], deliver_ms: int
    ) -> PutMessage:
        waiting = dict(properties)
        waiting["TIMER_OUT_MS"] = str(deliver_ms)
        waiting["REAL_TOPIC"] = message.topic
        waiting["REAL_QID"] = str(message.queue_id)
        waiting["TIMER_ENQUEUE_MS"] = str(self.now_ms())
        return msgspec.structs.replace(
            message,
            topic=TIMER_TOPIC,
            queue_id=0,
            properties=waiting,
            properties_text=encode_properties(waiting),
        )

    def stored(self, physical_offset: int, deliver_ms: int) -> None:
        self.store.set_state(
            physical_offset, MessageState.UNAVAILABLE, f"timer due at {deliver_ms}"
        )
        self.stored_again(physical_offset, deliver_ms)

    def stored_again(self, physical_offset: int, deliver_ms: int) -> None:
        """Arm the delivery of a waiting timer (after it is stored, or after a restart)."""

        def deliver() -> None:
            self._deliver_or_keep(physical_offset, deliver_ms)

        self.scheduler.at(
            deliver_ms,
            deliver,
            alive=lambda: self.store.state_of(physical_offset) is MessageState.UNAVAILABLE,
        )

    def start(self) -> int:
        """Reschedule every waiting timer after a restart; returns how many."""
        store = self.store
        queue = store.consume_queues.get(TIMER_TOPIC, 0)
        if queue is None:
            return 0
        found = 0
        for _, (physical, _size, _code) in queue.entries(max(self.low_water, queue.min_offset)):
            if store.state_of(physical) is not MessageState.UNAVAILABLE:
                continue
            try:
                record = store.read(physical)
                deliver_ms = int(record.properties.get("TIMER_OUT_MS", "0"))
            except (CorruptRecordError, OffsetOutOfRangeError, ValueError) as error:
                log.error("timer at %d unreadable, not rescheduled: %s", physical, error)
                continue
            self.stored_again(physical, deliver_ms)
            found += 1
        return found

    def _deliver_or_keep(self, physical_offset: int, deliver_ms: int) -> bool:
        """Deliver a due timer; one the disk refuses is kept for :meth:`retry_refused`. True
        when it was delivered (or needed nothing)."""
        if self.refused and physical_offset not in self.refused:
            self.retry_refused()  # those due before it go first
            if self.refused:
                self.refused[physical_offset] = deliver_ms
                return False
        try:
            self._deliver(physical_offset)
        except OSError as error:  # StoreFullError too: the disk, not this message
            self.refused[physical_offset] = deliver_ms
            self.outage.failed(error)
            return False
        self.refused.pop(physical_offset, None)
        if not self.refused:
            self.outage.worked()
        return True

    def retry_refused(self) -> int:
        """Deliver again what the disk refused, earliest due first; returns how many went
        out. Stops at the first refusal: the disk refuses the rest too."""
        delivered = 0
        for physical, deliver_ms in sorted(
            self.refused.items(), key=lambda item: (item[1], item[0])
        ):
            if not self._deliver_or_keep(physical, deliver_ms):
                break
            delivered += 1
        return delivered

    def _deliver(self, physical_offset: int) -> None:
        store = self.store
        if store.state_of(physical_offset) is not MessageState.UNAVAILABLE:
            return  # already delivered (e.g. rescheduled twice)
        record = store.read(physical_offset)
        properties = dict(record.properties)
        real_topic = properties.pop("REAL_TOPIC", None)
        real_queue = int(properties.pop("REAL_QID", "0") or 0)
        # The timer properties stay, as RocketMQ's TimerMessageStore.convertMessage keeps them:
        # 5.x consumers read the delivery time and the DELAY type from them.
        properties["TIMER_DEQUEUE_MS"] = str(self.now_ms())
        properties["WAIT"] = "false"
        if real_topic:
            self.put(copy_of(record, topic=real_topic, queue_id=real_queue, properties=properties))
        store.set_state(physical_offset, MessageState.MARKED_FOR_DELETION, "timer delivered")
        self.delivered += 1

    def persist(self) -> None:
        """Move the low-water mark past delivered timers and save it."""
        write = self.save_later()
        if write is not None:
            write()

    def save_later(self) -> Write | None:
        """The low-water mark moved past delivered timers, saved by the returned call (any
        thread); None when it did not move."""
        store = self.store
        queue = store.consume_queues.get(TIMER_TOPIC, 0)
        if queue is None:
            return None
        offset = max(self.low_water, queue.min_offset)
        for logical, (physical, _size, _code) in queue.entries(offset):
            if store.state_of(physical) is MessageState.UNAVAILABLE:
                break
            offset = logical + 1
        if offset == self.low_water:
            return None
        content = encode_json(_TimerCheck(low_water_offset=offset))

        def write() -> None:
            write_json(self.path, content)
            self.low_water = offset  # after the save: a refused one is tried again next time

        return write

    def recall(self, topic: str, message_id: str) -> bool:
        """Cancel a message still waiting for its time (RocketMQ 5.x RecallMessage); False when
        no waiting message of ``topic`` has that unique key (delivered, recalled, or unknown)."""
        store = self.store
        for record in store.query_by_key(TIMER_TOPIC, message_id, max_results=8):
            if (
                record.unique_key == message_id
                and record.properties.get("REAL_TOPIC") == topic
                and store.state_of(record.physical_offset) is MessageState.UNAVAILABLE
            ):
                store.set_state(
                    record.physical_offset, MessageState.MARKED_FOR_DELETION, "recalled"
                )
                return True
        return False
