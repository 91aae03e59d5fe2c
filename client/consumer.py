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
import collections
import contextlib
import dataclasses
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from os import PathLike
from typing import Any, Final, Literal

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.codes import PullSysFlag
from pocketmq.broker.protocol.errors import RemoteProtocolError
from pocketmq.broker.protocol.headers import (
    ConsumerData,
    ConsumerListBody,
    ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupRequestHeader,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    UnlockBatchRequestBody,
    UnregisterClientRequestHeader,
    decode_json_body,
    encode_json_body,
)

from . import _queries
from ._core import ClientCore
from ._process_queue import ProcessQueue
from .connection import Connection, check_response, make_request
from .errors import ClientClosedError, ClientError, ClientUsageError
from .filter import TagExpression
from .message import (
    DLQ_TOPIC_PREFIX,
    RETRY_TOPIC_PREFIX,
    MessageQueue,
    ReceivedMessage,
    validate_topic,
)
from .offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore, default_offsets_dir
from .rebalance import AllocateStrategy, allocate_averagely
from .route import TopicRoute

__all__ = ["ConsumeResult", "Listener", "PushConsumer"]

log = logging.getLogger("pocketmq.client.consumer")

_FLOW_CONTROL_DELAY_S: Final = 0.02  # RocketMQ waits 20 ms after FLOW_CONTROL (215)
_UNREGISTER_TIMEOUT_MS: Final = 1000
_MAX_RECONSUME_CONCURRENT: Final = 16  # -1 in RocketMQ means 16 for concurrent consumers


class ConsumeResult(StrEnum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener = Callable[[ReceivedMessage], Awaitable[ConsumeResult | None]]
_SUCCESS: Final = ConsumeResult.SUCCESS  # a global: an enum attribute costs more, per message

_MODELS: Final = {"clustering": "CLUSTERING", "broadcasting": "BROADCASTING"}
_FROM_WHERE: Final = {
    "last": "CONSUME_FROM_LAST_OFFSET",
    "first": "CONSUME_FROM_FIRST_OFFSET",
    "timestamp": "CONSUME_FROM_TIMESTAMP",
}


@dataclasses.dataclass
class _Subscription:
    expression: TagExpression
    sub_version: int


def _tags_of(message: ReceivedMessage) -> str | None:
    return message.tags


class PushConsumer:
    """A push consumer; an async context manager (``start()`` / ``close()``).

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
    """

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
    ) -> None:
        if not group:
            raise ClientUsageError("consumer group must not be empty")
        if message_model not in _MODELS:
            raise ClientUsageError(f"message_model must be one of {sorted(_MODELS)}")
        if consume_from not in _FROM_WHERE:
            raise ClientUsageError(f"consume_from must be one of {sorted(_FROM_WHERE)}")
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

        self._core = ClientCore(
            namesrv=namesrv,
            instance_name=instance_name,
            client_ip=client_ip,
            request_timeout_ms=request_timeout_ms,
            route_refresh_interval_s=route_refresh_interval_s,
        )
        self._offsets: OffsetStore
        if self.clustering:
            self._offsets = RemoteOffsetStore(self._core, group)
        else:
            directory = offsets_dir or default_offsets_dir(self._core.client_id, group)
            self._offsets = LocalFileOffsetStore(directory)
        self._subscriptions: dict[str, _Subscription] = {}
        self._created_ms = int(time.time() * 1000)
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._rebalance_lock = asyncio.Lock()
        self._rebalance_wake = asyncio.Event()
        self._rebalance_soon_pending = False
        # listener mode, concurrent: pulled messages wait here for one of the workers. A deque
        # and a list of idle workers: this hand-off runs for every message.
        self._work: collections.deque[tuple[ProcessQueue, ReceivedMessage]] = collections.deque()
        self._idle_workers: list[asyncio.Future[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._slots = asyncio.Semaphore(consume_concurrency)
        self._retry_tasks: set[asyncio.Task[None]] = set()
        # iterator mode: messages waiting for receive(). Concurrent consumption puts pulled
        # messages here directly (future None: ack settles them itself); orderly consumption
        # puts each message with a future its queue's loop waits on.
        self._iterating = False
        self._inbox: collections.deque[
            tuple[ProcessQueue, ReceivedMessage, asyncio.Future[Any] | None]
        ] = collections.deque()
        self._inbox_closed = False
        self._receivers: list[asyncio.Future[None]] = []  # receive() calls waiting
        self._awaiting_ack: dict[
            tuple[MessageQueue, int], tuple[ProcessQueue, asyncio.Future[Any] | None]
        ] = {}
        self._handed_out = 0  # concurrent messages received and not acknowledged yet
        self._settling: set[asyncio.Task[None]] = set()  # send-backs of acked messages
        # listener mode: messages poison()ed while their listener runs
        self._poisoned: set[tuple[MessageQueue, int]] = set()
        self._started = False
        self._closing = False
        self._closed = False

    # -- properties --------------------------------------------------------------------------

    @property
    def clustering(self) -> bool:
        return self.message_model == "clustering"

    @property
    def client_id(self) -> str:
        return self._core.client_id

    @property
    def retry_topic(self) -> str:
        return RETRY_TOPIC_PREFIX + self.group

    @property
    def dlq_topic(self) -> str:
        return DLQ_TOPIC_PREFIX + self.group

    @property
    def assigned_queues(self) -> list[MessageQueue]:
        """Queues this consumer currently owns (and pulls), sorted."""
        return sorted(self._pqs)

    def committed_offset(self, mq: MessageQueue) -> int | None:
        """The offset held in memory for ``mq`` (what the next commit sends)."""
        return self._offsets.read(mq)

    def _need_lock(self) -> bool:
        return self.orderly and self.clustering

    # -- subscriptions -----------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` ("*" or "A || B")."""
        if self._closed or self._closing:
            raise ClientClosedError("consumer is closed")
        validate_topic(topic)
        if topic.startswith(RETRY_TOPIC_PREFIX):
            raise ClientUsageError("retry topics are subscribed automatically")
        sub = _Subscription(TagExpression.parse(expression), int(time.time() * 1000))
        self._subscriptions[topic] = sub
        if self._started:  # tell the brokers, then take queues
            self._core.spawn(self._resubscribe(), name="consumer-resubscribe")

    def unsubscribe(self, topic: str) -> None:
        if self._subscriptions.pop(topic, None) is not None and self._started:
            self._core.spawn(self._resubscribe(), name="consumer-resubscribe")

    async def _resubscribe(self) -> None:
        await self._refresh_routes()
        await self._heartbeat_all()
        self._rebalance_wake.set()

    def _all_subscriptions(self) -> dict[str, _Subscription]:
        subs = dict(self._subscriptions)
        if self.clustering and subs:
            # RocketMQ's copySubscription: redeliveries come from %RETRY%<group>
            subs[self.retry_topic] = _Subscription(TagExpression.parse("*"), self._created_ms)
        return subs

    # -- life cycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Register with the brokers, take queues and start pulling."""
        if self._closed or self._closing:
            raise ClientClosedError("consumer is closed")
        if self._started:
            return
        if not self._subscriptions:
            raise ClientUsageError("subscribe to at least one topic before start()")
        if self.consume_timestamp_ms is None:
            self.consume_timestamp_ms = int(time.time() * 1000) - 30 * 60 * 1000
        self._iterating = self.listener is None
        await self._offsets.load()
        self._started = True
        core = self._core
        core.pool.handlers[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] = self._on_ids_changed
        if not self.orderly and not self._iterating:  # the iterator needs no workers
            self._workers = [
                asyncio.get_running_loop().create_task(self._worker(), name=f"consume-{i}")
                for i in range(self.consume_concurrency)
            ]
        await self._refresh_routes()
        await self._heartbeat_all()
        await self._rebalance()
        core.every(self.heartbeat_interval_s, self._heartbeat_all, name="consumer-heartbeat")
        core.every(core.routes.refresh_interval_s, self._refresh_routes, name="consumer-routes")
        core.every(self.persist_interval_s, self._persist_offsets, name="consumer-offsets")
        core.every(
            self.rebalance_interval_s,
            self._rebalance,
            name="consumer-rebalance",
            wake=self._rebalance_wake,
        )
        if self._need_lock():
            core.every(self.lock_interval_s, self._lock_all, name="consumer-lock")

    async def close(self) -> None:
        """Stop pulling, let messages being consumed finish (up to ``close_timeout_ms``),
        commit offsets, release orderly locks and unregister. Idempotent."""
        if self._closed or self._closing:
            return
        self._closing = True
        core = self._core
        await core.stop_tasks()  # no more rebalances, heartbeats or commits in the background
        pqs = list(self._pqs.values())
        await self._cancel_all([pq.pull_task for pq in pqs if pq.pull_task])
        await self._cancel_all(list(self._retry_tasks))
        # iterator mode: messages not handed out yet, or not acknowledged, are given back
        self._inbox_closed = True
        for _, _, waiter in self._inbox:
            if waiter is not None:
                waiter.cancel()
        self._inbox.clear()
        for _, waiter in self._awaiting_ack.values():
            if waiter is not None:
                waiter.cancel()
        self._awaiting_ack.clear()
        self._wake(self._receivers)  # every pending __anext__ sees the consumer closed
        for pq in pqs:
            pq.arrived.set()  # orderly loops see _closing and stop
        consumers = [
            *self._workers,
            *(pq.consume_task for pq in pqs if pq.consume_task),
            *self._settling,
        ]
        self._wake(self._idle_workers)  # idle workers see _closing and stop
        if consumers:
            _, still_running = await asyncio.wait(consumers, timeout=self.close_timeout_ms / 1000)
            await self._cancel_all(list(still_running))
        await self._cancel_all(consumers)
        for pq in pqs:
            pq.drop()
        if self._started:
            await self._offsets.persist_all([pq.mq for pq in pqs], oneway=False)
            if self._need_lock():
                await self._unlock([pq.mq for pq in pqs])
            await self._unregister()
        self._pqs.clear()
        self._closed = True
        await core.close()

    @staticmethod
    async def _cancel_all(tasks: Sequence[asyncio.Task[Any]]) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- iterator mode -----------------------------------------------------------------------

    def __aiter__(self) -> PushConsumer:
        return self

    async def __anext__(self) -> ReceivedMessage:
        try:
            if self._started and self._iterating:  # a message at hand: no second coroutine
                message = self._receive_nowait()
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
        if not self._iterating:
            raise ClientUsageError("a listener is set: messages go to the listener")
        message = self._receive_nowait()
        if message is not None:
            return message
        if timeout_ms is None:
            return await self._receive_wait()
        async with asyncio.timeout(timeout_ms / 1000):
            return await self._receive_wait()

    async def _receive_wait(self) -> ReceivedMessage:
        loop = asyncio.get_running_loop()
        while True:
            waiter: asyncio.Future[None] = loop.create_future()
            self._receivers.append(waiter)
            try:
                await waiter
            finally:
                if waiter.cancelled() or not waiter.done():  # a timeout, or the caller cancelled
                    waiter.cancel()
                    with contextlib.suppress(ValueError):
                        self._receivers.remove(waiter)
            message = self._receive_nowait()
            if message is not None:
                return message

    def _receive_nowait(self) -> ReceivedMessage | None:
        """The next message to hand out, None if there is none yet; ClientClosedError."""
        inbox = self._inbox
        while True:
            if self._inbox_closed:
                raise ClientClosedError("consumer is closed")
            if not inbox:
                return None
            pq, message, waiter = inbox[0]
            if waiter is None:
                # concurrent: a message received and not acknowledged holds a consume slot
                if self._handed_out >= self.consume_concurrency:
                    return None
                inbox.popleft()
                if pq.dropped or self._closing:
                    continue
                self._handed_out += 1
            else:
                inbox.popleft()
                if waiter.done():  # given back meanwhile
                    continue
            self._awaiting_ack[(message.queue, message.queue_offset)] = (pq, waiter)
            return message

    @staticmethod
    def _wake(waiters: list[asyncio.Future[None]]) -> None:
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        waiters.clear()

    def _settled(self, key: tuple[MessageQueue, int]) -> tuple[ProcessQueue, Any] | None:
        """Take a message out of the awaiting-ack table (frees its consume slot)."""
        entry = self._awaiting_ack.pop(key, None)
        if entry is not None and entry[1] is None:
            self._handed_out -= 1
            if self._inbox and self._receivers:
                self._wake(self._receivers)
        return entry

    async def ack(
        self, message: ReceivedMessage, result: ConsumeResult = ConsumeResult.SUCCESS
    ) -> None:
        """Settle a message from the iterator: consumed, or ``RECONSUME_LATER``."""
        entry = self._settled((message.queue, message.queue_offset))
        if entry is None:
            raise ClientUsageError(
                f"message at {message.queue}:{message.queue_offset} is not awaiting an ack"
            )
        pq, waiter = entry
        if result is _SUCCESS and waiter is None and not pq.dropped:
            self._done(pq, message)  # the common case, the rest spelled out below
            return
        if result is not _SUCCESS:
            result = ConsumeResult(result)
        if waiter is not None:  # orderly: its queue's loop does the rest
            if not waiter.done():
                waiter.set_result(result)
            return
        if result is _SUCCESS or not self.clustering or pq.dropped:
            self._after_listener(pq, message, result)
            return
        # The send-back is a request to the broker: ack returns at once, as it did when a
        # worker task waited on it.
        task = asyncio.get_running_loop().create_task(self._after_listener_async(pq, message))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

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
        await self._send_back_request(message, delay_level=-1, remark=reason or None)
        log.info("%s sent to %s: %s", message.msg_id, self.dlq_topic, reason or "poisoned")
        key = (message.queue, message.queue_offset)
        entry = self._settled(key)
        if entry is not None:
            pq, waiter = entry
            if waiter is None:
                self._after_listener(pq, message, ConsumeResult.SUCCESS)
            elif not waiter.done():
                waiter.set_result(ConsumeResult.SUCCESS)
            return
        pq = self._pqs.get(message.queue)
        if pq is not None and message.queue_offset in pq.messages and not self._iterating:
            self._poisoned.add(key)

    async def _inbox_listener(self, pq: ProcessQueue, message: ReceivedMessage) -> ConsumeResult:
        # orderly consumption in iterator mode: wait for the application's ack
        future: asyncio.Future[ConsumeResult] = asyncio.get_running_loop().create_future()
        self._inbox.append((pq, message, future))
        self._wake(self._receivers)
        return await future

    # -- consuming ---------------------------------------------------------------------------

    async def _call_listener(self, pq: ProcessQueue, message: ReceivedMessage) -> ConsumeResult:
        key = (message.queue, message.queue_offset)
        try:
            if self._iterating:
                result: Any = self._inbox_listener(pq, message)
            else:
                assert self.listener is not None
                result = self.listener(message)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            self._poisoned.discard(key)
            raise
        except Exception:
            if key in self._poisoned:
                self._poisoned.discard(key)
                return ConsumeResult.SUCCESS  # poisoned: it is in the DLQ already
            log.exception("listener failed on %s at %s", message.msg_id, message.queue)
            return ConsumeResult.RECONSUME_LATER
        if key in self._poisoned:
            self._poisoned.discard(key)
            return ConsumeResult.SUCCESS
        if result is None or result == ConsumeResult.SUCCESS:
            return ConsumeResult.SUCCESS
        if result != ConsumeResult.RECONSUME_LATER:
            log.warning("listener returned %r; treated as RECONSUME_LATER", result)
        return ConsumeResult.RECONSUME_LATER

    def _submit(self, pq: ProcessQueue, messages: Sequence[ReceivedMessage]) -> None:
        """Concurrent mode: hand messages to the workers (listener) or to receive()."""
        if self._iterating:
            self._inbox.extend([(pq, m, None) for m in messages])
            self._wake(self._receivers)
        else:
            self._work.extend([(pq, m) for m in messages])
            # one idle worker per message, not all of them for a single message
            idle, wanted = self._idle_workers, len(messages)
            while wanted and idle:
                worker = idle.pop()
                if not worker.done():  # a worker cancelled while idle left its future
                    worker.set_result(None)
                    wanted -= 1

    async def _worker(self) -> None:
        """Concurrent mode: consume queued messages one by one."""
        work = self._work
        loop = asyncio.get_running_loop()
        while not self._closing:
            if not work:
                idle: asyncio.Future[None] = loop.create_future()
                self._idle_workers.append(idle)
                await idle
                continue
            pq, message = work.popleft()
            if pq.dropped:
                continue
            result = await self._call_listener(pq, message)
            if result is _SUCCESS:
                self._after_listener(pq, message, result)
            else:
                await self._after_listener_async(pq, message, result)

    def _after_listener(
        self, pq: ProcessQueue, message: ReceivedMessage, result: ConsumeResult
    ) -> None:
        """A concurrent message's result, when it needs no send-back: done."""
        if pq.dropped:  # the queue went to another consumer: its result no longer counts
            return
        if result is ConsumeResult.RECONSUME_LATER and not self.clustering:
            log.warning("broadcasting: message %s failed and is dropped", message.msg_id)
        self._done(pq, message)

    async def _after_listener_async(
        self,
        pq: ProcessQueue,
        message: ReceivedMessage,
        result: ConsumeResult = ConsumeResult.RECONSUME_LATER,
    ) -> None:
        """A concurrent message's result; RECONSUME_LATER in clustering mode sends it back."""
        if pq.dropped or result is ConsumeResult.SUCCESS or not self.clustering:
            self._after_listener(pq, message, result)
            return
        if not await self._send_back(message, delay_level=0):
            retry = dataclasses.replace(message, reconsume_times=message.reconsume_times + 1)
            pq.replace(retry)
            self._retry_later(pq, retry)
            return
        self._after_listener(pq, message, ConsumeResult.SUCCESS)

    def _done(self, pq: ProcessQueue, message: ReceivedMessage) -> None:
        commit = pq.remove(message.queue_offset)
        self._offsets.update(pq.mq, commit, increase_only=not self.orderly)

    def _retry_later(self, pq: ProcessQueue, message: ReceivedMessage) -> None:
        async def later() -> None:
            await asyncio.sleep(self.local_retry_delay_ms / 1000)
            if not pq.dropped and not self._closing:
                self._submit(pq, [message])

        task = asyncio.get_running_loop().create_task(later())
        self._retry_tasks.add(task)
        task.add_done_callback(self._retry_tasks.discard)

    async def _orderly_loop(self, pq: ProcessQueue) -> None:
        """Orderly mode: this queue's messages, one at a time, in offset order."""
        loop = asyncio.get_running_loop()
        while not pq.dropped and not self._closing:
            if self._need_lock() and not pq.lock_valid(loop.time()):
                pq.lock_changed.clear()
                await self._wait_event(pq.lock_changed, self.lock_interval_s)
                continue
            message = pq.first()
            if message is None:
                pq.arrived.clear()
                await pq.arrived.wait()
                continue
            async with self._slots:
                if pq.dropped or self._closing:
                    return
                result = await self._call_listener(pq, message)
            if pq.dropped:
                return
            if result is ConsumeResult.SUCCESS or not self.clustering:
                if result is not ConsumeResult.SUCCESS:
                    log.warning("broadcasting: message %s failed and is dropped", message.msg_id)
                self._done(pq, message)
                continue
            # ConsumeMessageOrderlyService.checkReconsumeTimes: reconsumeTimes >= max -> DLQ
            if (
                self.max_reconsume_times is not None
                and message.reconsume_times >= self.max_reconsume_times
            ):
                # delay level -1: the broker moves it straight to %DLQ%<group>
                failed = message.reconsume_times + 1
                remark = (
                    f"orderly consumption failed {failed} time{'s' if failed != 1 else ''} "
                    f"(max_reconsume_times {self.max_reconsume_times})"
                )
                if await self._send_back(message, delay_level=-1, remark=remark):
                    self._done(pq, message)
                    continue
            retry = dataclasses.replace(message, reconsume_times=message.reconsume_times + 1)
            pq.replace(retry)
            await asyncio.sleep(self.orderly_retry_delay_ms / 1000)

    @staticmethod
    async def _wait_event(event: asyncio.Event, timeout_s: float) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass

    async def _send_back_request(
        self, message: ReceivedMessage, *, delay_level: int, remark: str | None = None
    ) -> None:
        """CONSUMER_SEND_MSG_BACK to the broker the message came from; raises if refused."""
        header = ConsumerSendMsgBackRequestHeader(
            offset=message.commitlog_offset,
            group=self.group,
            delay_level=delay_level,
            origin_msg_id=message.msg_id,
            origin_topic=message.topic,
            unit_mode=False,
            max_reconsume_times=self.max_reconsume_times,
        )
        addr = await self._core.resolve_broker(message.queue.broker_name, message.queue.topic)
        cmd = make_request(RequestCode.CONSUMER_SEND_MSG_BACK, header)
        cmd.remark = remark
        check_response(await self._core.invoke(addr, cmd))

    async def _send_back(
        self, message: ReceivedMessage, *, delay_level: int, remark: str | None = None
    ) -> bool:
        """CONSUMER_SEND_MSG_BACK; False (and logged) if the broker cannot take it."""
        try:
            await self._send_back_request(message, delay_level=delay_level, remark=remark)
        except ClientError as e:
            log.warning("send back of %s refused, retrying locally: %s", message.msg_id, e)
            return False
        return True

    # -- pulling -----------------------------------------------------------------------------

    async def _wait_for_room(self, pq: ProcessQueue) -> None:
        while not pq.dropped and not self._closing:
            full = (
                pq.count >= self.max_cached_messages_per_queue
                or pq.size_bytes >= self.max_cached_bytes_per_queue
                or (not self.orderly and pq.span > self.max_offset_span)
            )
            if not full:
                return
            pq.space.clear()
            await pq.space.wait()

    def _pull_request(self, pq: ProcessQueue, sub: _Subscription) -> RemotingCommand:
        commit = self._offsets.read(pq.mq) if self.clustering else None
        sys_flag = PullSysFlag.SUSPEND
        if commit is not None and commit > 0:
            sys_flag |= PullSysFlag.COMMIT_OFFSET
        header = PullMessageRequestHeader(
            consumer_group=self.group,
            topic=pq.mq.topic,
            queue_id=pq.mq.queue_id,
            queue_offset=pq.next_offset,
            max_msg_nums=self.pull_batch_size,
            sys_flag=int(sys_flag),
            commit_offset=commit if commit is not None and commit > 0 else 0,
            suspend_timeout_millis=self.pull_suspend_ms,
            sub_version=sub.sub_version,
            expression_type="TAG",
        )
        return make_request(RequestCode.PULL_MESSAGE, header)

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        loop = asyncio.get_running_loop()
        mq = pq.mq
        error_delay = self.pull_delay_on_error_ms / 1000
        while not pq.dropped and not self._closing:
            await self._wait_for_room(pq)
            if pq.dropped or self._closing:
                return
            if self._need_lock() and not pq.lock_valid(loop.time()):
                pq.lock_changed.clear()
                await self._wait_event(pq.lock_changed, self.lock_interval_s)
                continue
            sub = self._all_subscriptions().get(mq.topic)
            if sub is None:  # unsubscribed; the next rebalance drops the queue
                await asyncio.sleep(error_delay)
                continue
            try:
                addr = self._core.broker_addr(mq.broker_name)
                response = await self._core.invoke(
                    addr, self._pull_request(pq, sub), self.pull_timeout_ms
                )
                delay = self._on_pull_response(pq, sub, response)
            except (ClientError, RemoteProtocolError) as e:
                log.debug("pull from %s failed: %s", mq, e)
                delay = error_delay
            if delay is None:
                return
            if delay:
                await asyncio.sleep(delay)

    def _on_pull_response(
        self, pq: ProcessQueue, sub: _Subscription, response: RemotingCommand
    ) -> float | None:
        """Apply a pull response; returns the delay before the next pull (None: stop)."""
        if pq.dropped:
            return None
        code = response.code
        error_delay = self.pull_delay_on_error_ms / 1000
        if code == ResponseCode.FLOW_CONTROL:
            return _FLOW_CONTROL_DELAY_S
        if code in (ResponseCode.SUBSCRIPTION_NOT_EXIST, ResponseCode.SUBSCRIPTION_NOT_LATEST):
            self._core.spawn(self._heartbeat_all(), name="consumer-heartbeat-now")
            return error_delay
        if code not in (
            ResponseCode.SUCCESS,
            ResponseCode.PULL_NOT_FOUND,
            ResponseCode.PULL_RETRY_IMMEDIATELY,
            ResponseCode.PULL_OFFSET_MOVED,
        ):
            log.debug("pull from %s: code %d %s", pq.mq, code, response.remark)
            return error_delay
        header = PullMessageResponseHeader.from_ext_fields(response.ext_fields)
        if code == ResponseCode.PULL_OFFSET_MOVED:
            self._core.spawn(self._offset_moved(pq, header.next_begin_offset), name="offset-moved")
            return None
        pq.next_offset = header.next_begin_offset
        messages: list[ReceivedMessage] = []
        if code == ResponseCode.SUCCESS and response.body:
            views = ReceivedMessage.from_records(response.body, pq.mq)
            messages = sub.expression.filter(views, _tags_of)
        added = pq.add(messages)
        if not pq.count:
            # nothing to consume (filtered out, or no new message): the offset may move on
            self._offsets.update(pq.mq, pq.next_offset, increase_only=not self.orderly)
        if added and not self.orderly:
            self._submit(pq, added)
        return 0.0

    async def _offset_moved(self, pq: ProcessQueue, next_offset: int) -> None:
        """PULL_OFFSET_MOVED: the queue is dropped at the corrected offset and taken again."""
        log.warning("offset of %s moved to %d", pq.mq, next_offset)
        self._offsets.update(pq.mq, next_offset, increase_only=False)
        await self._drop(pq, persist_oneway=False)
        self._rebalance_wake.set()

    # -- rebalance ---------------------------------------------------------------------------

    async def _on_ids_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        log.debug("consumer ids of %s changed: rebalancing", self.group)
        self._rebalance_wake.set()
        return None

    async def _refresh_routes(self) -> None:
        for topic in self._all_subscriptions():
            try:
                self._core.routes.invalidate(topic)
                await self._core.routes.get(topic)
            except ClientError as e:
                log.debug("no route for %s yet: %s", topic, e)

    async def _consumer_ids(self, route: TopicRoute) -> list[str] | None:
        addrs = [a for a in (route.any_addr(n) for n in route.brokers) if a]
        if not addrs:
            return None
        header = GetConsumerListByGroupRequestHeader(consumer_group=self.group)
        try:
            response = await self._core.invoke(
                random.choice(addrs), make_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, header)
            )
            check_response(response)
            body = decode_json_body(response.body or b"{}", ConsumerListBody)
        except (ClientError, RemoteProtocolError) as e:
            log.debug("consumer list of %s unavailable: %s", self.group, e)
            return None
        return body.consumer_id_list

    async def _rebalance(self) -> None:
        """Work out which queues this consumer owns, then drop and take queues to match."""
        async with self._rebalance_lock:
            if self._closing:
                return
            wanted: dict[str, set[MessageQueue]] = {}
            for topic in self._all_subscriptions():
                current = {mq for mq in self._pqs if mq.topic == topic}
                try:
                    route = await self._core.routes.get(topic)
                except ClientError as e:
                    log.debug("rebalance of %s skipped: %s", topic, e)
                    wanted[topic] = current
                    # A topic created after the consumer started: look again in a second rather
                    # than at the next periodic rebalance (RocketMQ waits 20 s).
                    if not self._rebalance_soon_pending:
                        self._rebalance_soon_pending = True
                        self._core.spawn(self._rebalance_soon(), name="consumer-rebalance-soon")
                    continue
                queues = list(route.subscribe_queues)
                if not self.clustering:
                    wanted[topic] = set(queues)
                    continue
                cids = await self._consumer_ids(route)
                if cids is None:
                    # The broker does not know us yet (its route was not known at our last
                    # heartbeat): heartbeat it and try again shortly.
                    wanted[topic] = current
                    if not self._rebalance_soon_pending:
                        self._rebalance_soon_pending = True
                        self._core.spawn(self._rebalance_soon(), name="consumer-rebalance-soon")
                    continue
                wanted[topic] = set(self.allocate(self.group, self.client_id, queues, cids))
            await self._apply_allocation(wanted)

    async def _rebalance_soon(self) -> None:
        await asyncio.sleep(1.0)
        self._rebalance_soon_pending = False
        if not self._closing:
            await self._heartbeat_all()  # brokers whose routes just appeared learn about us
            self._rebalance_wake.set()

    async def _apply_allocation(self, wanted: dict[str, set[MessageQueue]]) -> None:
        for mq, pq in list(self._pqs.items()):
            if mq not in wanted.get(mq.topic, set()):
                await self._drop(pq)
        new = sorted(mq for mqs in wanted.values() for mq in mqs if mq not in self._pqs)
        if not new:
            return
        locked: set[MessageQueue] = set(new)
        if self._need_lock():
            locked, _ = await self._lock(new)
        loop = asyncio.get_running_loop()
        for mq in new:
            if mq not in locked or self._closing:
                continue  # RocketMQ skips a queue it cannot lock; the next rebalance retries
            try:
                offset = await self._start_offset(mq)
            except (ClientError, RemoteProtocolError) as e:
                log.warning("no start offset for %s, skipped: %s", mq, e)
                if self._need_lock():
                    await self._unlock([mq])
                continue
            pq = ProcessQueue(mq, offset)
            if self._need_lock():
                pq.set_locked(True, loop.time())
            self._pqs[mq] = pq
            pq.pull_task = loop.create_task(self._pull_loop(pq), name=f"pull-{mq}")
            if self.orderly:
                pq.consume_task = loop.create_task(self._orderly_loop(pq), name=f"orderly-{mq}")
            log.info("%s takes %s from offset %d", self.client_id, mq, offset)

    async def _start_offset(self, mq: MessageQueue) -> int:
        """The committed offset, else where ``consume_from`` says to start."""
        stored = await self._offsets.read_from_store(mq)
        if stored is not None and stored >= 0:
            return stored
        retry = mq.topic.startswith(RETRY_TOPIC_PREFIX)
        if self.consume_from == "first":
            return 0
        if self.consume_from == "last":
            return 0 if retry else await _queries.max_offset(self._core, mq)
        if retry:
            return await _queries.max_offset(self._core, mq)
        assert self.consume_timestamp_ms is not None
        return await _queries.search_offset(self._core, mq, self.consume_timestamp_ms)

    async def _drop(self, pq: ProcessQueue, *, persist_oneway: bool = True) -> None:
        """Give a queue up: stop pulling and consuming, commit its offset, release its lock."""
        pq.drop()
        if self._pqs.get(pq.mq) is pq:
            del self._pqs[pq.mq]
        current = asyncio.current_task()
        tasks = [t for t in (pq.pull_task, pq.consume_task) if t and t is not current]
        if pq.consume_task and pq.consume_task in tasks:
            # let the message being consumed finish so the next owner does not overlap it
            await asyncio.wait([pq.consume_task], timeout=self.close_timeout_ms / 1000)
        await self._cancel_all(tasks)
        try:
            await self._offsets.persist(pq.mq, oneway=persist_oneway)
        except ClientError as e:
            log.warning("offset of %s not committed: %s", pq.mq, e)
        if self.clustering:
            self._offsets.remove(pq.mq)
        if self._need_lock():
            await self._unlock([pq.mq])
        log.info("%s gives up %s", self.client_id, pq.mq)

    # -- locks -------------------------------------------------------------------------------

    def _by_broker(self, mqs: Sequence[MessageQueue]) -> dict[str, list[MessageQueue]]:
        groups: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            groups.setdefault(mq.broker_name, []).append(mq)
        return groups

    async def _lock(self, mqs: Sequence[MessageQueue]) -> tuple[set[MessageQueue], set[str]]:
        """LOCK_BATCH_MQ per broker; returns the queues granted and the brokers that answered."""
        granted: set[MessageQueue] = set()
        answered: set[str] = set()
        for broker_name, group in self._by_broker(mqs).items():
            body = LockBatchRequestBody(
                consumer_group=self.group,
                client_id=self.client_id,
                mq_set=[mq.to_wire() for mq in group],
            )
            try:
                addr = self._core.broker_addr(broker_name)
                cmd = make_request(RequestCode.LOCK_BATCH_MQ, body=encode_json_body(body))
                response = check_response(await self._core.invoke(addr, cmd))
                result = decode_json_body(response.body or b"{}", LockBatchResponseBody)
            except (ClientError, RemoteProtocolError) as e:
                log.warning("lock of %d queues on %s failed: %s", len(group), broker_name, e)
                continue
            answered.add(broker_name)
            granted |= {MessageQueue.from_wire(mq) for mq in result.lock_ok_mq_set}
        return granted, answered

    async def _unlock(self, mqs: Sequence[MessageQueue]) -> None:
        for broker_name, group in self._by_broker(mqs).items():
            body = UnlockBatchRequestBody(
                consumer_group=self.group,
                client_id=self.client_id,
                mq_set=[mq.to_wire() for mq in group],
            )
            try:
                addr = self._core.broker_addr(broker_name)
                cmd = make_request(RequestCode.UNLOCK_BATCH_MQ, body=encode_json_body(body))
                await self._core.invoke_oneway(addr, cmd)
            except ClientError as e:
                log.debug("unlock on %s failed: %s", broker_name, e)

    async def _lock_all(self) -> None:
        """Renew the locks of every owned queue; a queue the broker refuses stops consuming."""
        pqs = list(self._pqs.values())
        if not pqs:
            return
        granted, answered = await self._lock([pq.mq for pq in pqs])
        now = asyncio.get_running_loop().time()
        for pq in pqs:
            if pq.mq in granted:
                pq.set_locked(True, now)
            elif pq.mq.broker_name in answered:
                pq.set_locked(False, now)  # refused: another client holds it
            # a broker that did not answer: the lock runs until it expires

    # -- offsets and membership --------------------------------------------------------------

    async def _persist_offsets(self) -> None:
        await self._offsets.persist_all(list(self._pqs), oneway=True)

    def _heartbeat_request(self) -> RemotingCommand:
        subs = [
            sub.expression.subscription_data(topic, sub_version=sub.sub_version)
            for topic, sub in self._all_subscriptions().items()
        ]
        data = HeartbeatData(
            client_id=self.client_id,
            consumer_data_set=[
                ConsumerData(
                    group_name=self.group,
                    consume_type="CONSUME_PASSIVELY",
                    message_model=_MODELS[self.message_model],
                    consume_from_where=_FROM_WHERE[self.consume_from],
                    subscription_data_set=subs,
                    unit_mode=False,
                )
            ],
        )
        return make_request(RequestCode.HEART_BEAT, body=encode_json_body(data))

    async def _heartbeat_all(self) -> None:
        for addr in sorted(self._core.routes.all_broker_addrs()):
            try:
                check_response(await self._core.invoke(addr, self._heartbeat_request()))
            except ClientError as e:
                log.warning("heartbeat to %s failed: %s", addr, e)

    async def _unregister(self) -> None:
        header = UnregisterClientRequestHeader(client_id=self.client_id, consumer_group=self.group)
        for addr in sorted(self._core.routes.all_broker_addrs()):
            try:
                cmd = make_request(RequestCode.UNREGISTER_CLIENT, header)
                await self._core.invoke(addr, cmd, _UNREGISTER_TIMEOUT_MS)
            except ClientError as e:
                log.debug("unregister from %s failed: %s", addr, e)
