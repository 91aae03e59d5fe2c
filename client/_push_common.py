"""What the push consumer's rooms share (``PushConsumer`` in ``consumer.py`` is the facade over
``_fetcher.py``, ``_coordinator.py`` and ``_dispatcher.py``): the listener's result, the options
the rooms read, the subscriptions, and two asyncio helpers.

The rooms read the options from the consumer when they use them (``PushOptions`` lists what
they may read), so an option set on the consumer applies as it always did.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from typing import Any, Final, Literal, Protocol

from .filter import FilterExpression, TagExpression
from .message import ReceivedMessage
from .rebalance import AllocateStrategy

__all__ = [
    "FROM_WHERE",
    "MODELS",
    "ConsumeResult",
    "Listener",
    "PushOptions",
    "Subscription",
    "Subscriptions",
    "cancel_all",
    "need_lock",
    "wait_event",
]


class ConsumeResult(StrEnum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener = Callable[[ReceivedMessage], Awaitable[ConsumeResult | None]]

MODELS: Final = {"clustering": "CLUSTERING", "broadcasting": "BROADCASTING"}
FROM_WHERE: Final = {
    "last": "CONSUME_FROM_LAST_OFFSET",
    "first": "CONSUME_FROM_FIRST_OFFSET",
    "timestamp": "CONSUME_FROM_TIMESTAMP",
}


class PushOptions(Protocol):
    """The push consumer's options and names, as its rooms read them (``PushConsumer``'s
    documented attributes)."""

    group: str
    message_model: Literal["clustering", "broadcasting"]
    consume_from: Literal["last", "first", "timestamp"]
    consume_timestamp_ms: int | None
    orderly: bool
    listener: Listener | None
    consume_concurrency: int
    pull_batch_size: int
    max_cached_messages_per_queue: int
    max_cached_bytes_per_queue: int
    max_offset_span: int
    max_reconsume_times: int | None
    allocate: AllocateStrategy
    rebalance_interval_s: float
    heartbeat_interval_s: float
    persist_interval_s: float
    lock_interval_s: float
    pull_suspend_ms: int
    pull_timeout_ms: float
    pull_delay_on_error_ms: float
    orderly_retry_delay_ms: float
    local_retry_delay_ms: float
    close_timeout_ms: float
    check_crc: bool

    @property
    def clustering(self) -> bool: ...

    @property
    def client_id(self) -> str: ...

    @property
    def retry_topic(self) -> str: ...

    @property
    def dlq_topic(self) -> str: ...


def need_lock(options: PushOptions) -> bool:
    """Orderly clustering consumption holds a broker lock per queue."""
    return options.orderly and options.clustering


@dataclasses.dataclass
class Subscription:
    expression: FilterExpression
    sub_version: int


class Subscriptions:
    """The topics subscribed to, each with its tag or SQL92 expression and version, and, clustering,
    the group's retry topic (RocketMQ's ``copySubscription``: redeliveries come from
    ``%RETRY%<group>``, subscribed automatically with ``*`` once any topic is)."""

    def __init__(self, options: PushOptions, created_ms: int) -> None:
        self._options = options
        self.topics: dict[str, Subscription] = {}
        self._retry = Subscription(TagExpression.parse("*"), created_ms)

    def all(self) -> dict[str, Subscription]:
        subs = dict(self.topics)
        if subs and self._options.clustering:
            subs[self._options.retry_topic] = self._retry
        return subs

    def of(self, topic: str) -> Subscription | None:
        """The subscription of ``topic``; None once unsubscribed."""
        sub = self.topics.get(topic)
        if sub is None and self.topics and self._options.clustering:
            if topic == self._options.retry_topic:
                return self._retry
        return sub


async def cancel_all(tasks: Sequence[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def wait_event(event: asyncio.Event, timeout_s: float) -> None:
    """Wait for ``event``, at most ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        pass
