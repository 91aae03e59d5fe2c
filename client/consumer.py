"""``PushConsumer``: RocketMQ's push consumer over long-polling pulls.

Two ways to consume, one model underneath (RocketMQ's listener):

* **listener**: ``consumer.listener = async def fn(message) -> ConsumeResult | None``.
  Returning ``None`` or ``ConsumeResult.SUCCESS`` consumes the message; returning
  ``ConsumeResult.RECONSUME_LATER`` or raising asks for a redelivery.
* **iterator** (when no listener is set at ``start()``)::

      async for message in consumer:
          ...
          await consumer.ack(message)          # or ack(message, ConsumeResult.RECONSUME_LATER)

  Each message must be acknowledged; until it is, it counts as being consumed: it holds
  the committed offset back, uses one of ``consume_concurrency`` slots, and in orderly mode
  holds back the rest of its queue. Messages not acknowledged when the consumer closes are
  redelivered later.

Behaviour (RocketMQ ``DefaultMQPushConsumer``; remoting.md §5.3, rocketmq-store.md §7, §10):

* clustering: each message goes to one consumer of the group. Queues are shared out by
  ``allocate`` (``AllocateMessageQueueAveragely``) every ``rebalance_interval_s`` (20 s) and at
  once on NOTIFY_CONSUMER_IDS_CHANGED; offsets live on the broker. Failed messages go back
  through CONSUMER_SEND_MSG_BACK (delay level 0: the broker picks 3 + reconsume times) and
  arrive again from ``%RETRY%<group>`` (subscribed automatically); after
  ``max_reconsume_times`` retries (16: 17 deliveries) the broker moves the message to
  ``%DLQ%<group>``. If the broker refuses the send-back, the message is retried locally after
  ``local_retry_delay_ms``.
* broadcasting: every consumer gets every queue; offsets live in a local JSON file; failed
  messages are logged and never retried.
* concurrent: up to ``consume_concurrency`` messages at once; the committed offset stays at
  the lowest message still being processed.
* orderly: one message at a time per queue, in queue order. In clustering mode a queue is
  consumed only while this client holds its broker lock (LOCK_BATCH_MQ before the first
  pull and every ``lock_interval_s``; UNLOCK_BATCH_MQ when the queue is given up). A
  failed message is retried in place after ``orderly_retry_delay_ms`` (1 s), holding back
  the rest of its queue; once it has been retried ``max_reconsume_times`` times (default
  unlimited, RocketMQ's ``Integer.MAX_VALUE``) its next failure sends it to
  ``%DLQ%<group>`` (delay level -1) and the queue moves on. Broadcasting: never retried.
* poison: ``await consumer.poison(message, reason)`` (from the listener, or in iterator mode
  instead of ``ack``) sends the message straight to ``%DLQ%<group>`` (CONSUMER_SEND_MSG_BACK
  with delay level -1) and counts it as consumed, whatever the listener returns afterwards.
* back-pressure: a queue is not pulled while it caches ``max_cached_messages_per_queue``
  messages or ``max_cached_bytes_per_queue`` bytes (or, concurrently, spans more than
  ``max_offset_span`` offsets).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from os import PathLike
from typing import Final, Literal

from ._admin_requests import ConsumerAdminRequests
from ._consumer_stats import ConsumerStats
from ._coordinator import Coordinator
from ._core import CoreClient
from ._dispatcher import Dispatcher
from ._fetcher import Fetcher
from ._process_queue import ProcessQueue
from ._push_common import (
    FROM_WHERE,
    MODELS,
    ConsumeResult,
    Listener,
    Subscription,
    Subscriptions,
)
from .connection import Credentials
from .errors import ClientClosedError, ClientUsageError
from .filter import FilterExpression, filter_expression
from .message import (
    DLQ_TOPIC_PREFIX,
    RETRY_TOPIC_PREFIX,
    MessageQueue,
    ReceivedMessage,
    validate_topic,
)
from .offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore, default_offsets_dir
from .rebalance import AllocateStrategy, allocate_averagely

__all__ = ["ConsumeResult", "Listener", "PushConsumer"]

_MAX_RECONSUME_CONCURRENT: Final = 16  # -1 in RocketMQ means 16 for concurrent consumers
_CONSUME_TIMESTAMP_DEFAULT_MS: Final = 30 * 60 * 1000  # consume_from="timestamp": 30 min ago


class PushConsumer(CoreClient):
    """A push consumer; an async context manager (``start()`` / ``close()``).

    A facade over three rooms: the fetcher (``_fetcher.py``: pull loops, process queues), the
    coordinator (``_coordinator.py``: heartbeats, rebalance, locks, offset commits) and the
    dispatcher (``_dispatcher.py``: listener workers, the iterator, orderly loops, settling).
    The rooms read the options below from the consumer when they use them.

    Options (keyword-only; defaults are RocketMQ's):

    * ``namesrv``: "host:port[;host:port]", default env ``NAMESRV_ADDR``, else 127.0.0.1:9876
    * ``message_model``: ``"clustering"`` (default) or ``"broadcasting"``
    * ``consume_from``: where a queue with no committed offset starts: ``"last"`` (default;
      retry queues start at 0), ``"first"``, or ``"timestamp"`` (``consume_timestamp_ms``,
      default 30 minutes ago). As in RocketMQ, a broker may answer offset 0 instead of "no
      offset" for a queue that still holds its first message, so a new group can start
      at the beginning of a young queue even with ``"last"``
    * ``orderly`` (False): one message at a time per queue (see the module docstring)
    * ``listener``: the async consume function (or set ``consumer.listener``)
    * ``consume_concurrency`` (20): messages consumed at once
    * ``pull_batch_size`` (32), ``max_cached_messages_per_queue`` (1000),
      ``max_cached_bytes_per_queue`` (100 MiB), ``max_offset_span`` (2000)
    * ``max_reconsume_times``: retries before a failed message goes to ``%DLQ%<group>``
      instead (RocketMQ's rule ``reconsumeTimes >= max``; so 16 gives 17 deliveries).
      Default: 16 for concurrent consumers, unlimited (None) for orderly ones, as RocketMQ's
      -1. Broadcasting consumers never retry
    * ``allocate`` (``allocate_averagely``): the queue allocation strategy
    * ``offsets_dir``: broadcasting offset file folder
      (default ``~/.rocketmq_offsets/<clientId>/<group>``; set ``instance_name`` to keep
      the same client id, and so the same file, across restarts)
    * intervals: ``rebalance_interval_s`` (20), ``heartbeat_interval_s`` (30),
      ``persist_interval_s`` (5), ``route_refresh_interval_s`` (30), ``lock_interval_s`` (20)
    * pulls: ``pull_suspend_ms`` (15000, broker long-poll), ``pull_timeout_ms`` (30000),
      ``pull_delay_on_error_ms`` (1000)
    * retries: ``orderly_retry_delay_ms`` (1000), ``local_retry_delay_ms`` (5000)
    * ``close_timeout_ms`` (5000): how long ``close()`` waits for messages being consumed
    * ``check_crc`` (True): check each pulled body against its BODYCRC; a record that fails
      is not handed over but pulled again after ``pull_delay_on_error_ms``, with a WARNING
    """

    _kind = "consumer"

    def __init__(
        self,
        group: str,
        *,
        namesrv: str | Sequence[str] | None = None,
        message_model: Literal["clustering", "broadcasting"] = "clustering",
        consume_from: Literal["last", "first", "timestamp"] = "last",
        consume_timestamp_ms: int | None = None,
        orderly: bool = False,
        listener: Listener | None = None,
        consume_concurrency: int = 20,
        pull_batch_size: int = 32,
        max_cached_messages_per_queue: int = 1000,
        max_cached_bytes_per_queue: int = 100 * 1024 * 1024,
        max_offset_span: int = 2000,
        max_reconsume_times: int | None = None,
        allocate: AllocateStrategy = allocate_averagely,
        offsets_dir: str | PathLike[str] | None = None,
        instance_name: str | None = None,
        client_ip: str | None = None,
        credentials: Credentials | tuple[str, str] | None = None,
        tls: bool | None = None,
        tls_ca: str | os.PathLike[str] | None = None,
        rebalance_interval_s: float = 20.0,
        heartbeat_interval_s: float = 30.0,
        persist_interval_s: float = 5.0,
        route_refresh_interval_s: float = 30.0,
        lock_interval_s: float = 20.0,
        pull_suspend_ms: int = 15000,
        pull_timeout_ms: float = 30000,
        pull_delay_on_error_ms: float = 1000,
        orderly_retry_delay_ms: float = 1000,
        local_retry_delay_ms: float = 5000,
        request_timeout_ms: float = 3000,
        close_timeout_ms: float = 5000,
        check_crc: bool = True,
        seed: int | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if not group:
            raise ClientUsageError("consumer group must not be empty")
        if message_model not in MODELS:
            raise ClientUsageError(f"message_model must be one of {sorted(MODELS)}")
        if consume_from not in FROM_WHERE:
            raise ClientUsageError(f"consume_from must be one of {sorted(FROM_WHERE)}")
        if consume_concurrency < 1 or pull_batch_size < 1 or max_cached_messages_per_queue < 1:
            raise ClientUsageError(
                "consume_concurrency, pull_batch_size and max_cached_* must be >= 1"
            )
        self.group = group
        self.message_model = message_model
        self.consume_from = consume_from
        self.consume_timestamp_ms = consume_timestamp_ms
        self.orderly = orderly
        self.listener = listener
        self.consume_concurrency = consume_concurrency
        self.pull_batch_size = pull_batch_size
        self.max_cached_messages_per_queue = max_cached_messages_per_queue
        self.max_cached_bytes_per_queue = max_cached_bytes_per_queue
        self.max_offset_span = max_offset_span
        if max_reconsume_times is None:
            max_reconsume_times = None if orderly else _MAX_RECONSUME_CONCURRENT
        self.max_reconsume_times = max_reconsume_times
        self.allocate = allocate
        self.rebalance_interval_s = rebalance_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.persist_interval_s = persist_interval_s
        self.lock_interval_s = lock_interval_s
        self.pull_suspend_ms = pull_suspend_ms
        self.pull_timeout_ms = pull_timeout_ms
        self.pull_delay_on_error_ms = pull_delay_on_error_ms
        self.orderly_retry_delay_ms = orderly_retry_delay_ms
        self.local_retry_delay_ms = local_retry_delay_ms
        self.close_timeout_ms = close_timeout_ms
        self.check_crc = check_crc

        super().__init__(
            namesrv,
            instance_name=instance_name,
            client_ip=client_ip,
            credentials=credentials,
            tls=tls,
            tls_ca=tls_ca,
            request_timeout_ms=request_timeout_ms,
            route_refresh_interval_s=route_refresh_interval_s,
            seed=seed,
            clock_ms=clock_ms,
        )
        core = self._core
        self._offsets: OffsetStore
        if self.clustering:
            self._offsets = RemoteOffsetStore(core, group)
        else:
            directory = offsets_dir or default_offsets_dir(core.client_id, group)
            self._offsets = LocalFileOffsetStore(directory)
        self._subscriptions = Subscriptions(self, int(time.time() * 1000))
        # the rooms; the facade wires what the fetcher reports to the other two
        self._dispatcher = Dispatcher(core, self, self._offsets)
        self._fetcher = Fetcher(
            core,
            self,
            self._offsets,
            self._subscriptions,
            on_messages=self._dispatcher.submit,
            on_stale_subscription=self._subscription_stale,
            on_offset_moved=self._offset_moved,
        )
        self._coordinator = Coordinator(
            core, self, self._offsets, self._subscriptions, self._fetcher, self._dispatcher
        )
        # what a broker asks for an administrator (running info, reset, direct consumption)
        self._stats = self._fetcher.stats = self._dispatcher.stats = ConsumerStats()
        self._started_ms = 0
        self._admin_requests = ConsumerAdminRequests(
            core,
            self,
            offsets=self._offsets,
            subscriptions=self._subscriptions,
            fetcher=self._fetcher,
            coordinator=self._coordinator,
            stats=self._stats,
            started_ms=lambda: self._started_ms,
        )

    # -- properties --------------------------------------------------------------------------

    @property
    def clustering(self) -> bool:
        return self.message_model == "clustering"

    @property
    def retry_topic(self) -> str:
        return RETRY_TOPIC_PREFIX + self.group

    @property
    def dlq_topic(self) -> str:
        return DLQ_TOPIC_PREFIX + self.group

    @property
    def assigned_queues(self) -> list[MessageQueue]:
        """Queues this consumer currently owns (and pulls), sorted."""
        return sorted(self._fetcher.queues)

    @property
    def _pqs(self) -> dict[MessageQueue, ProcessQueue]:
        """The process queue of each owned queue (the fetcher's)."""
        return self._fetcher.queues

    def committed_offset(self, mq: MessageQueue) -> int | None:
        """The offset held in memory for ``mq`` (what the next commit sends)."""
        return self._offsets.read(mq)

    # -- subscriptions -----------------------------------------------------------------------

    def subscribe(
        self, topic: str, expression: str | FilterExpression = "*", *, sql: str | None = None
    ) -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` ("*" or "A || B"),
        or, with ``sql="a > 5"`` (or ``MessageSelector.by_sql("a > 5")``), whose properties
        match that SQL92 expression; the broker checks it at ``start()``."""
        if self._closing:
            raise ClientClosedError("consumer is closed")
        validate_topic(topic)
        if topic.startswith(RETRY_TOPIC_PREFIX):
            raise ClientUsageError("retry topics are subscribed automatically")
        sub = Subscription(filter_expression(expression, sql=sql), int(time.time() * 1000))
        self._subscriptions.topics[topic] = sub
        if self._started:  # tell the brokers, then take queues
            self._core.spawn(self._coordinator.resubscribe(), name="consumer-resubscribe")

    def unsubscribe(self, topic: str) -> None:
        if self._subscriptions.topics.pop(topic, None) is not None and self._started:
            self._core.spawn(self._coordinator.resubscribe(), name="consumer-resubscribe")

    # -- life cycle (start, close, async with: CoreClient) -----------------------------------

    def _check_start(self) -> None:
        if not self._subscriptions.topics:
            raise ClientUsageError("subscribe to at least one topic before start()")

    async def _start(self) -> None:
        """Register with the brokers, take queues and start pulling."""
        if self.consume_timestamp_ms is None:
            self.consume_timestamp_ms = int(time.time() * 1000) - _CONSUME_TIMESTAMP_DEFAULT_MS
        self._started_ms = int(time.time() * 1000)
        self._dispatcher.start(iterating=self.listener is None)
        self._admin_requests.install()
        await self._offsets.load()
        await self._coordinator.start()

    async def _close(self) -> None:
        """Stop pulling, let messages being consumed finish (up to ``close_timeout_ms``),
        commit offsets, release orderly locks and unregister."""
        self._coordinator.closing = self._fetcher.closing = self._dispatcher.closing = True
        await self._core.stop_tasks()  # no more rebalances, heartbeats or commits in the background
        pqs = await self._fetcher.stop()
        await self._dispatcher.close(pqs)
        for pq in pqs:
            pq.drop()
        if self._started:
            await self._coordinator.leave([pq.mq for pq in pqs])
        self._fetcher.queues.clear()

    # what the fetcher reports, for the coordinator

    def _subscription_stale(self) -> None:
        self._coordinator.heartbeat_soon()

    async def _offset_moved(self, pq: ProcessQueue, next_offset: int) -> None:
        await self._coordinator.offset_moved(pq, next_offset)

    # -- iterator mode -----------------------------------------------------------------------

    def __aiter__(self) -> PushConsumer:
        return self

    async def __anext__(self) -> ReceivedMessage:
        try:
            dispatcher = self._dispatcher
            if self._started and dispatcher.iterating:  # a message at hand: no second coroutine
                message = dispatcher.receive_nowait()
                if message is not None:
                    return message
            return await self.receive()
        except ClientClosedError:
            raise StopAsyncIteration from None

    async def receive(self, timeout_ms: float | None = None) -> ReceivedMessage:
        """The next message (iterator mode); acknowledge it with ``ack``.

        Raises ``ClientClosedError`` once the consumer is closed, ``TimeoutError`` after
        ``timeout_ms``.
        """
        if not self._started:
            raise ClientClosedError("consumer is not started")
        dispatcher = self._dispatcher
        if not dispatcher.iterating:
            raise ClientUsageError("a listener is set: messages go to the listener")
        message = dispatcher.receive_nowait()
        if message is not None:
            return message
        if timeout_ms is None:
            return await dispatcher.wait_for_message()
        async with asyncio.timeout(timeout_ms / 1000):
            return await dispatcher.wait_for_message()

    async def ack(
        self, message: ReceivedMessage, result: ConsumeResult = ConsumeResult.SUCCESS
    ) -> None:
        """Settle a message from the iterator: consumed, or ``RECONSUME_LATER``."""
        self._dispatcher.ack(message, result)

    async def poison(self, message: ReceivedMessage, reason: str = "") -> None:
        """Send ``message`` straight to ``%DLQ%<group>`` and count it as consumed.

        CONSUMER_SEND_MSG_BACK with delay level -1 (the broker writes the DLQ copy and marks
        the message poisoned), then the message is settled locally: in iterator mode this
        replaces ``ack``; called from a listener, the listener's result no longer matters.
        Raises the broker's error if it refuses (the message is then not settled).
        """
        if not self._started or self._closed:
            raise ClientClosedError("consumer is not running")
        if not isinstance(message, ReceivedMessage):
            raise ClientUsageError(f"expected a received message, got {type(message).__name__}")
        await self._dispatcher.poison(message, reason, self._fetcher.queues.get)
