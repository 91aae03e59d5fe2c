"""The push consumer's dispatcher: hands pulled messages to the application and settles what it
made of them (RocketMQ's ``ConsumeMessageConcurrentlyService`` and
``ConsumeMessageOrderlyService``).

* listener, concurrent: ``consume_concurrency`` worker tasks take the pulled messages in order
  from one deque (``submit``) and call the listener.
* iterator (no listener at ``start``), concurrent: pulled messages wait in an inbox for
  ``receive_nowait``/``wait_for_message`` (``PushConsumer.__anext__`` / ``receive``); each one
  handed out holds one of ``consume_concurrency`` slots until ``ack``.
* orderly, either way: one loop per queue (``start_orderly``) consumes its messages one at a
  time, in offset order, at most ``consume_concurrency`` queues at once; in iterator mode each
  message goes through the inbox and the loop waits for its ``ack``.
* settling: a consumed message leaves its process queue and the offset to commit moves up to
  the lowest message still cached. RECONSUME_LATER, clustering: concurrently, the message goes
  back to the broker (CONSUMER_SEND_MSG_BACK, delay level 0; retried locally after
  ``local_retry_delay_ms`` if the broker refuses); orderly, it is retried in place after
  ``orderly_retry_delay_ms``, and sent to the DLQ once it has been retried
  ``max_reconsume_times`` times. Broadcasting: failures are logged and dropped.
* poison: CONSUMER_SEND_MSG_BACK with delay level -1 (the DLQ), and the message counts as
  consumed whatever its listener returns.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import inspect
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from pocketmq.broker.protocol import RequestCode
from pocketmq.broker.protocol.headers import ConsumerSendMsgBackRequestHeader

from ._consumer_stats import ConsumerStats
from ._core import ClientCore
from ._process_queue import ProcessQueue
from ._push_common import ConsumeResult, PushOptions, cancel_all, need_lock, wait_event
from .connection import check_response, make_request
from .errors import ClientClosedError, ClientError, ClientUsageError
from .message import MessageQueue, ReceivedMessage
from .offset_store import OffsetStore

__all__ = ["Dispatcher"]

log = logging.getLogger("pocketmq.client.consumer")

_SUCCESS: Final = ConsumeResult.SUCCESS  # a global: an enum attribute costs more, per message

# a message handed out: its queue, and (orderly) the future its queue's loop waits on
_Awaiting = tuple[ProcessQueue, "asyncio.Future[Any] | None"]


class Dispatcher:
    """Listener workers, the iterator's inbox, orderly loops, and settling."""

    def __init__(self, core: ClientCore, options: PushOptions, offsets: OffsetStore) -> None:
        self._core = core
        self._options = options
        self._offsets = offsets
        # listener mode, concurrent: pulled messages wait here for one of the workers. A deque
        # and a list of idle workers: this hand-off runs for every message.
        self._work: collections.deque[tuple[ProcessQueue, ReceivedMessage]] = collections.deque()
        self._idle_workers: list[asyncio.Future[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._slots = asyncio.Semaphore(options.consume_concurrency)
        self._retry_tasks: set[asyncio.Task[None]] = set()
        # iterator mode: messages waiting for receive(). Concurrent consumption puts pulled
        # messages here directly (future None: ack settles them itself); orderly consumption
        # puts each message with a future its queue's loop waits on.
        self.iterating = False
        self._inbox: collections.deque[
            tuple[ProcessQueue, ReceivedMessage, asyncio.Future[Any] | None]
        ] = collections.deque()
        self._inbox_closed = False
        self._receivers: list[asyncio.Future[None]] = []  # receive() calls waiting
        self._awaiting_ack: dict[tuple[MessageQueue, int], _Awaiting] = {}
        self._handed_out = 0  # concurrent messages received and not acknowledged yet
        self._settling: set[asyncio.Task[None]] = set()  # send-backs of acked messages
        # listener mode: messages poison()ed while their listener runs
        self._poisoned: set[tuple[MessageQueue, int]] = set()
        self.closing = False
        self.stats: ConsumerStats | None = None  # the facade's, for GET_CONSUMER_RUNNING_INFO

    # -- life cycle --------------------------------------------------------------------------

    def start(self, *, iterating: bool) -> None:
        """Iterator mode, or listener mode (with its workers, when consuming concurrently)."""
        self.iterating = iterating
        options = self._options
        if not options.orderly and not iterating:  # the iterator needs no workers
            loop = asyncio.get_running_loop()
            self._workers = [
                loop.create_task(self._worker(), name=f"consume-{i}")
                for i in range(options.consume_concurrency)
            ]

    def start_orderly(self, pq: ProcessQueue) -> None:
        """Start consuming ``pq`` in order (its queue was just taken)."""
        loop = asyncio.get_running_loop()
        pq.consume_task = loop.create_task(self._orderly_loop(pq), name=f"orderly-{pq.mq}")

    async def close(self, pqs: Sequence[ProcessQueue]) -> None:
        """No more local retries; messages not handed out yet, or not acknowledged, are given
        back; messages being consumed may finish within ``close_timeout_ms``."""
        self.closing = True
        await cancel_all(list(self._retry_tasks))
        self._inbox_closed = True
        for _, _, waiter in self._inbox:
            if waiter is not None:
                waiter.cancel()
        self._inbox.clear()
        for _, waiter in self._awaiting_ack.values():
            if waiter is not None:
                waiter.cancel()
        self._awaiting_ack.clear()
        self._wake(self._receivers)  # every pending receive sees the consumer closed
        for pq in pqs:
            pq.arrived.set()  # orderly loops see closing and stop
        consumers = [
            *self._workers,
            *(pq.consume_task for pq in pqs if pq.consume_task),
            *self._settling,
        ]
        self._wake(self._idle_workers)  # idle workers see closing and stop
        if consumers:
            timeout_s = self._options.close_timeout_ms / 1000
            _, still_running = await asyncio.wait(consumers, timeout=timeout_s)
            await cancel_all(list(still_running))
        await cancel_all(consumers)

    # -- iterator mode -----------------------------------------------------------------------

    def receive_nowait(self) -> ReceivedMessage | None:
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
                if self._handed_out >= self._options.consume_concurrency:
                    return None
                inbox.popleft()
                if pq.dropped or self.closing:
                    continue
                self._handed_out += 1
            else:
                inbox.popleft()
                if waiter.done():  # given back meanwhile
                    continue
            self._awaiting_ack[(message.queue, message.queue_offset)] = (pq, waiter)
            return message

    async def wait_for_message(self) -> ReceivedMessage:
        """The next message, once there is one."""
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
            message = self.receive_nowait()
            if message is not None:
                return message

    @staticmethod
    def _wake(waiters: list[asyncio.Future[None]]) -> None:
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        waiters.clear()

    def _settled(self, key: tuple[MessageQueue, int]) -> _Awaiting | None:
        """Take a message out of the awaiting-ack table (frees its consume slot)."""
        entry = self._awaiting_ack.pop(key, None)
        if entry is not None and entry[1] is None:
            self._handed_out -= 1
            if self._inbox and self._receivers:
                self._wake(self._receivers)
        return entry

    def ack(self, message: ReceivedMessage, result: ConsumeResult) -> None:
        """Settle a message from the iterator: consumed, or ``RECONSUME_LATER``."""
        entry = self._awaiting_ack.pop((message.queue, message.queue_offset), None)
        if entry is None:
            raise ClientUsageError(
                f"message at {message.queue}:{message.queue_offset} is not awaiting an ack"
            )
        pq, waiter = entry
        if waiter is None:  # concurrent: the message frees its consume slot
            self._handed_out -= 1
            if self._inbox and self._receivers:
                self._wake(self._receivers)
            if result is _SUCCESS and not pq.dropped:
                # the common case, _done inline (this runs for every message)
                commit = pq.remove(message.queue_offset)
                self._offsets.update(pq.mq, commit, increase_only=not self._options.orderly)
                return
        if result is not _SUCCESS:
            result = ConsumeResult(result)
        if waiter is not None:  # orderly: its queue's loop does the rest
            if not waiter.done():
                waiter.set_result(result)
            return
        if result is _SUCCESS or not self._options.clustering or pq.dropped:
            self._after_listener(pq, message, result)
            return
        # The send-back is a request to the broker: ack returns at once, as it did when a
        # worker task waited on it.
        task = asyncio.get_running_loop().create_task(self._after_listener_async(pq, message))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def poison(
        self,
        message: ReceivedMessage,
        reason: str,
        queue_of: Callable[[MessageQueue], ProcessQueue | None],
    ) -> None:
        """Send ``message`` to the DLQ, then settle it as consumed (``queue_of``: the process
        queue now owning a queue, if any)."""
        await self._send_back_request(message, delay_level=-1, remark=reason or None)
        log.info("%s sent to %s: %s", message.msg_id, self._options.dlq_topic, reason or "poisoned")
        key = (message.queue, message.queue_offset)
        entry = self._settled(key)
        if entry is not None:
            pq, waiter = entry
            if waiter is None:
                self._after_listener(pq, message, ConsumeResult.SUCCESS)
            elif not waiter.done():
                waiter.set_result(ConsumeResult.SUCCESS)
            return
        owner = queue_of(message.queue)
        if owner is not None and message.queue_offset in owner.messages and not self.iterating:
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
            if self.iterating:
                result: Any = self._inbox_listener(pq, message)
            else:
                listener = self._options.listener
                assert listener is not None
                result = listener(message)
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

    def _count(self, pq: ProcessQueue, began: float, result: ConsumeResult) -> None:
        """A message consumed: the queue's last consume time and the consumer's figures."""
        now = time.monotonic()
        pq.last_consume_timestamp = int(time.time() * 1000)
        if self.stats is not None:
            self.stats.consumed(pq.mq.topic, (now - began) * 1000, ok=result is _SUCCESS)

    def submit(self, pq: ProcessQueue, messages: Sequence[ReceivedMessage]) -> None:
        """Concurrent mode: hand messages to the workers (listener) or to receive()."""
        if self.iterating:
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
        while not self.closing:
            if not work:
                idle: asyncio.Future[None] = loop.create_future()
                self._idle_workers.append(idle)
                await idle
                continue
            pq, message = work.popleft()
            if pq.dropped:
                continue
            began = time.monotonic()
            result = await self._call_listener(pq, message)
            self._count(pq, began, result)
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
        if result is ConsumeResult.RECONSUME_LATER and not self._options.clustering:
            log.warning("broadcasting: message %s failed and is dropped", message.msg_id)
        self._done(pq, message)

    async def _after_listener_async(
        self,
        pq: ProcessQueue,
        message: ReceivedMessage,
        result: ConsumeResult = ConsumeResult.RECONSUME_LATER,
    ) -> None:
        """A concurrent message's result; RECONSUME_LATER in clustering mode sends it back."""
        if pq.dropped or result is ConsumeResult.SUCCESS or not self._options.clustering:
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
        self._offsets.update(pq.mq, commit, increase_only=not self._options.orderly)

    def _retry_later(self, pq: ProcessQueue, message: ReceivedMessage) -> None:
        async def later() -> None:
            await asyncio.sleep(self._options.local_retry_delay_ms / 1000)
            if not pq.dropped and not self.closing:
                self.submit(pq, [message])

        task = asyncio.get_running_loop().create_task(later())
        self._retry_tasks.add(task)
        task.add_done_callback(self._retry_tasks.discard)

    async def _orderly_loop(self, pq: ProcessQueue) -> None:
        """Orderly mode: this queue's messages, one at a time, in offset order."""
        loop = asyncio.get_running_loop()
        options = self._options
        while not pq.dropped and not self.closing:
            if need_lock(options) and not pq.lock_valid(loop.time()):
                pq.lock_changed.clear()
                await wait_event(pq.lock_changed, options.lock_interval_s)
                continue
            message = pq.first()
            if message is None:
                pq.arrived.clear()
                await pq.arrived.wait()
                continue
            async with self._slots:
                if pq.dropped or self.closing:
                    return
                began = time.monotonic()
                result = await self._call_listener(pq, message)
                self._count(pq, began, result)
            if pq.dropped:
                return
            if result is ConsumeResult.SUCCESS or not options.clustering:
                if result is not ConsumeResult.SUCCESS:
                    log.warning("broadcasting: message %s failed and is dropped", message.msg_id)
                self._done(pq, message)
                continue
            # ConsumeMessageOrderlyService.checkReconsumeTimes: reconsumeTimes >= max -> DLQ
            max_reconsume_times = options.max_reconsume_times
            if max_reconsume_times is not None and message.reconsume_times >= max_reconsume_times:
                # delay level -1: the broker moves it straight to %DLQ%<group>
                failed = message.reconsume_times + 1
                remark = (
                    f"orderly consumption failed {failed} time{'s' if failed != 1 else ''} "
                    f"(max_reconsume_times {max_reconsume_times})"
                )
                if await self._send_back(message, delay_level=-1, remark=remark):
                    self._done(pq, message)
                    continue
            retry = dataclasses.replace(message, reconsume_times=message.reconsume_times + 1)
            pq.replace(retry)
            await asyncio.sleep(options.orderly_retry_delay_ms / 1000)

    # -- send-back ---------------------------------------------------------------------------

    async def _send_back_request(
        self, message: ReceivedMessage, *, delay_level: int, remark: str | None = None
    ) -> None:
        """CONSUMER_SEND_MSG_BACK to the broker the message came from; raises if refused."""
        header = ConsumerSendMsgBackRequestHeader(
            offset=message.commitlog_offset,
            group=self._options.group,
            delay_level=delay_level,
            origin_msg_id=message.msg_id,
            origin_topic=message.topic,
            unit_mode=False,
            max_reconsume_times=self._options.max_reconsume_times,
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
