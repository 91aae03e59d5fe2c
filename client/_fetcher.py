"""The push consumer's fetcher: one long-polling pull loop per owned queue, each filling the
queue's ``ProcessQueue`` (RocketMQ's ``PullMessageService`` and
``DefaultMQPushConsumerImpl.pullMessage``).

* the queues: the coordinator gives a queue to the fetcher (``take``) with the offset to start
  from and takes it back (``forget``, after ``ProcessQueue.drop``); ``queues`` holds them.
* a pull asks for ``pull_batch_size`` messages from the queue's next offset, suspended on the
  broker for up to ``pull_suspend_ms`` when there is none (long polling), and carries the
  committed offset (clustering: PullSysFlag.COMMIT_OFFSET).
* back-pressure: a queue is not pulled while it caches ``max_cached_messages_per_queue``
  messages or ``max_cached_bytes_per_queue`` bytes or, consumed concurrently, spans more than
  ``max_offset_span`` offsets; orderly clustering queues only while their broker lock holds.
* what comes back is filtered on its tags (the broker filters on hash codes; a SQL92
  subscription is the broker's alone to filter) and cached; messages to consume concurrently go on to the dispatcher (``on_messages``; the orderly loops
  read their process queue themselves). FLOW_CONTROL waits 20 ms, other errors
  ``pull_delay_on_error_ms``; a subscription the broker lost calls ``on_stale_subscription``
  (heartbeat now); PULL_OFFSET_MOVED hands the queue to ``on_offset_moved``.

Imports nothing of the other rooms: the facade wires the callbacks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.codes import PullSysFlag
from pocketmq.broker.protocol.errors import RemoteProtocolError
from pocketmq.broker.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader

from ._consumer_stats import ConsumerStats
from ._core import ClientCore
from ._process_queue import ProcessQueue
from ._push_common import (
    PushOptions,
    Subscription,
    Subscriptions,
    cancel_all,
    need_lock,
    wait_event,
)
from .connection import make_request
from .errors import ClientError, CorruptMessageError
from .message import MessageQueue, ReceivedMessage
from .offset_store import OffsetStore

__all__ = ["Fetcher"]

log = logging.getLogger("pocketmq.client.consumer")

_FLOW_CONTROL_DELAY_S: Final = 0.02  # RocketMQ waits 20 ms after FLOW_CONTROL (215)
_PULLED_CODES: Final = (
    ResponseCode.SUCCESS,
    ResponseCode.PULL_NOT_FOUND,
    ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED,
)
_STALE_SUBSCRIPTION_CODES: Final = (
    ResponseCode.SUBSCRIPTION_NOT_EXIST,
    ResponseCode.SUBSCRIPTION_NOT_LATEST,
)


def _tags_of(message: ReceivedMessage) -> str | None:
    return message.tags


class Fetcher:
    """The pull loops of one push consumer and the process queues they fill."""

    def __init__(
        self,
        core: ClientCore,
        options: PushOptions,
        offsets: OffsetStore,
        subscriptions: Subscriptions,
        *,
        on_messages: Callable[[ProcessQueue, Sequence[ReceivedMessage]], None],
        on_stale_subscription: Callable[[], None],
        on_offset_moved: Callable[[ProcessQueue, int], Coroutine[Any, Any, None]],
    ) -> None:
        self._core = core
        self._options = options
        self._offsets = offsets
        self._subscriptions = subscriptions
        self._on_messages = on_messages
        self._on_stale_subscription = on_stale_subscription
        self._on_offset_moved = on_offset_moved
        self.queues: dict[MessageQueue, ProcessQueue] = {}
        self.closing = False
        self.stats: ConsumerStats | None = None  # the facade's, for GET_CONSUMER_RUNNING_INFO

    def take(self, mq: MessageQueue, offset: int, *, locked: bool = False) -> ProcessQueue:
        """Own ``mq`` from ``offset`` and start pulling it."""
        loop = asyncio.get_running_loop()
        pq = ProcessQueue(mq, offset)
        if locked:
            pq.set_locked(True, loop.time())
        self.queues[mq] = pq
        pq.pull_task = loop.create_task(self._pull_loop(pq), name=f"pull-{mq}")
        return pq

    def forget(self, pq: ProcessQueue) -> None:
        """No longer own ``pq``'s queue (its pull task is the caller's to stop)."""
        if self.queues.get(pq.mq) is pq:
            del self.queues[pq.mq]

    async def stop(self) -> list[ProcessQueue]:
        """Stop every pull loop (the consumer closes); returns the queues owned."""
        self.closing = True
        pqs = list(self.queues.values())
        await cancel_all([pq.pull_task for pq in pqs if pq.pull_task])
        return pqs

    # -- pulling -----------------------------------------------------------------------------

    async def _wait_for_room(self, pq: ProcessQueue) -> None:
        options = self._options
        while not pq.dropped and not self.closing:
            full = (
                pq.count >= options.max_cached_messages_per_queue
                or pq.size_bytes >= options.max_cached_bytes_per_queue
                or (not options.orderly and pq.span > options.max_offset_span)
            )
            if not full:
                return
            pq.space.clear()
            await pq.space.wait()

    def _pull_request(self, pq: ProcessQueue, sub: Subscription) -> RemotingCommand:
        options = self._options
        commit = self._offsets.read(pq.mq) if options.clustering else None
        sys_flag = PullSysFlag.SUSPEND
        if commit is not None and commit > 0:
            sys_flag |= PullSysFlag.COMMIT_OFFSET
        header = PullMessageRequestHeader(
            consumer_group=options.group,
            topic=pq.mq.topic,
            queue_id=pq.mq.queue_id,
            queue_offset=pq.next_offset,
            max_msg_nums=options.pull_batch_size,
            sys_flag=int(sys_flag),
            commit_offset=commit if commit is not None and commit > 0 else 0,
            suspend_timeout_millis=options.pull_suspend_ms,
            sub_version=sub.sub_version,
            # the broker filters by the subscription the heartbeat registered, of this type
            expression_type=sub.expression.expression_type,
        )
        return make_request(RequestCode.PULL_MESSAGE, header)

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        loop = asyncio.get_running_loop()
        options = self._options
        mq = pq.mq
        error_delay = options.pull_delay_on_error_ms / 1000
        while not pq.dropped and not self.closing:
            await self._wait_for_room(pq)
            if pq.dropped or self.closing:
                return
            if need_lock(options) and not pq.lock_valid(loop.time()):
                pq.lock_changed.clear()
                await wait_event(pq.lock_changed, options.lock_interval_s)
                continue
            sub = self._subscriptions.of(mq.topic)
            if sub is None:  # unsubscribed; the next rebalance drops the queue
                await asyncio.sleep(error_delay)
                continue
            try:
                addr = self._core.broker_addr(mq.broker_name)
                pq.last_pull_timestamp = int(time.time() * 1000)
                began = loop.time()
                response = await self._core.invoke(
                    addr, self._pull_request(pq, sub), options.pull_timeout_ms
                )
                delay = self._on_pull_response(
                    pq, sub, response, rt_ms=(loop.time() - began) * 1000
                )
            except (ClientError, RemoteProtocolError) as e:
                log.debug("pull from %s failed: %s", mq, e)
                delay = error_delay
            if delay is None:
                return
            if delay:
                await asyncio.sleep(delay)

    def _on_pull_response(
        self,
        pq: ProcessQueue,
        sub: Subscription,
        response: RemotingCommand,
        *,
        rt_ms: float = 0.0,
    ) -> float | None:
        """Apply a pull response; returns the delay before the next pull (None: stop)."""
        if pq.dropped:
            return None
        code = response.code
        options = self._options
        if code == ResponseCode.FLOW_CONTROL:
            return _FLOW_CONTROL_DELAY_S
        if code in _STALE_SUBSCRIPTION_CODES:
            self._on_stale_subscription()
            return options.pull_delay_on_error_ms / 1000
        if code not in _PULLED_CODES:
            log.debug("pull from %s: code %d %s", pq.mq, code, response.remark)
            return options.pull_delay_on_error_ms / 1000
        header = PullMessageResponseHeader.from_ext_fields(response.ext_fields)
        if code == ResponseCode.PULL_OFFSET_MOVED:
            moved = self._on_offset_moved(pq, header.next_begin_offset)
            self._core.spawn(moved, name="offset-moved")
            return None
        next_offset = header.next_begin_offset
        delay = 0.0
        messages: list[ReceivedMessage] = []
        if code == ResponseCode.SUCCESS and response.body:
            try:
                views = ReceivedMessage.from_records(
                    response.body, pq.mq, check_crc=options.check_crc
                )
            except CorruptMessageError as error:
                # The good ones before the bad record go on; the bad one is pulled again
                # after a pause (the damage may have been in transit), never skipped.
                views = error.messages
                if error.queue_offset is not None:
                    next_offset = error.queue_offset
                else:
                    next_offset = pq.next_offset
                delay = options.pull_delay_on_error_ms / 1000
                log.warning(
                    "%s: %s; not handed over, pulling again from offset %d",
                    self._core.client_id,
                    error,
                    next_offset,
                )
            messages = sub.expression.filter(views, _tags_of)
            if self.stats is not None:
                self.stats.pulled(pq.mq.topic, rt_ms, len(messages))
        pq.next_offset = next_offset
        added = pq.add(messages)
        orderly = options.orderly
        if not pq.count:
            # nothing to consume (filtered out, or no new message): the offset may move on
            self._offsets.update(pq.mq, pq.next_offset, increase_only=not orderly)
        if added and not orderly:
            self._on_messages(pq, added)
        return delay
