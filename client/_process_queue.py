"""Per-queue consumer state (RocketMQ's ``ProcessQueue``): the messages pulled and not yet
done, the next offset to pull, and the queue's lock (orderly consumption).

The offset a consumer may commit is the lowest offset still cached (pulled but not done),
or the next offset to pull when nothing is cached. So a slow message holds the committed
offset back and is redelivered after a crash, never skipped.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import deque
from typing import Final

from .message import MessageQueue, ReceivedMessage

__all__ = ["ProcessQueue"]

LOCK_MAX_LIVE_S: Final = 30.0  # rocketmq.client.rebalance.lockMaxLiveTime


class ProcessQueue:
    def __init__(self, mq: MessageQueue, next_offset: int) -> None:
        self.mq = mq
        self.next_offset = next_offset  # next offset to pull
        # offset -> message, in the order pulled (increasing, but for an offset pulled again)
        self.messages: dict[int, ReceivedMessage] = {}
        # The cached offsets in increasing order, done ones dropped lazily from the left (a
        # dict's first key costs a scan over every slot emptied at its front since the last
        # resize, about 0.9 us with 600 messages cached, and this is asked per message).
        self._order: deque[int] = deque()
        self.size_bytes = 0
        self.dropped = False
        self.lock_expires_at = 0.0  # loop time
        # epoch ms, for GET_CONSUMER_RUNNING_INFO's ProcessQueueInfo
        self.last_lock_timestamp = 0
        self.last_pull_timestamp = 0
        self.last_consume_timestamp = 0
        self.space = asyncio.Event()  # set when messages leave (flow control waits on it)
        self.arrived = asyncio.Event()  # set when messages arrive (orderly waits on it)
        self.lock_changed = asyncio.Event()
        self.pull_task: asyncio.Task[None] | None = None
        self.consume_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return (
            f"ProcessQueue({self.mq}, next={self.next_offset}, cached={len(self.messages)}, "
            f"dropped={self.dropped})"
        )

    # -- messages ----------------------------------------------------------------------------

    @property
    def count(self) -> int:
        return len(self.messages)

    @property
    def span(self) -> int:
        """Offset distance between the first and last cached message."""
        lowest = self._lowest()
        if lowest is None:  # no message cached
            return 0
        return next(reversed(self.messages)) - lowest

    def _lowest(self) -> int | None:
        """The lowest cached offset, None when nothing is cached."""
        order, messages = self._order, self.messages
        while order and order[0] not in messages:
            order.popleft()
        return order[0] if order else None

    def add(self, messages: list[ReceivedMessage]) -> list[ReceivedMessage]:
        """Cache messages not cached yet; returns the ones added."""
        added = []
        for m in messages:
            if m.queue_offset not in self.messages:
                self.messages[m.queue_offset] = m
                order = self._order
                if not order or m.queue_offset > order[-1]:
                    order.append(m.queue_offset)
                else:  # an offset pulled again after a lower one: keep the order sorted
                    order.insert(bisect.bisect_left(order, m.queue_offset), m.queue_offset)
                self.size_bytes += len(m.body)
                added.append(m)
        if added:
            self.arrived.set()
        return added

    def first(self) -> ReceivedMessage | None:
        lowest = self._lowest()
        return None if lowest is None else self.messages[lowest]

    def replace(self, message: ReceivedMessage) -> None:
        """Swap a cached message for a new copy (e.g. with a higher reconsume count)."""
        if message.queue_offset in self.messages:
            self.messages[message.queue_offset] = message

    def remove(self, offset: int) -> int:
        """Take a consumed message out; returns the offset to commit now (``commit_offset``)."""
        messages = self.messages
        message = messages.pop(offset, None)
        if message is not None:
            self.size_bytes -= len(message.body)
            self.space.set()
        # commit_offset() inline, a copy of _lowest's loop: this runs for every message consumed,
        # and the two calls it saves are 2.4 % of the SDK's instructions per consumed message
        order = self._order
        while order and order[0] not in messages:
            order.popleft()
        return order[0] if order else self.next_offset

    def commit_offset(self) -> int:
        """The offset to commit: lowest cached, else the next to pull."""
        lowest = self._lowest()
        return self.next_offset if lowest is None else lowest

    # -- locks (orderly, clustering) ---------------------------------------------------------

    def set_locked(self, locked: bool, now: float) -> None:
        self.lock_expires_at = now + LOCK_MAX_LIVE_S if locked else 0.0
        if locked:
            self.last_lock_timestamp = int(time.time() * 1000)
        self.lock_changed.set()

    def lock_valid(self, now: float) -> bool:
        return now < self.lock_expires_at

    def drop(self) -> None:
        self.dropped = True
        for event in (self.space, self.arrived, self.lock_changed):
            event.set()
