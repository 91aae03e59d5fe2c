"""Auto-batching for ``Producer(auto_batch=True)``: RocketMQ 5.x's ``ProduceAccumulator``.

Concurrent sends with the same (topic, queue given or chosen by a selector, tags) gather in an
open batch; the batch goes as one SEND_BATCH_MESSAGE when its bodies pass ``max_bytes``
(``batchMaxBytes``, 32 KiB) or ``max_delay_ms`` (``batchMaxDelayMs``, 10 ms) after its first
message, whichever comes first, and at ``close()``. Every send still gets its own
``SendResult`` (its own ``UNIQ_KEY``, offset message id and queue offset, the batch's first
offset plus its place) or its own exception (a failed batch raises its error in each of its
sends). Bodies held, from the moment a send joins a batch until the batch is answered, are
capped by ``total_max_bytes`` (``totalBatchMaxBytes``, 32 MiB): a send that would pass the cap
waits for room (RocketMQ sends it alone instead, which does not bound memory), at most the
producer's send timeout.

As RocketMQ's ``DefaultMQProducer.canBatch``, a message goes alone (SEND_MESSAGE_V2, not
through the accumulator) when it has a delay (level, ``TIMER_*``), is a retry topic's, or
carries a producer group (transactional half messages); here also a request (its
``CORRELATION_ID``: RocketMQ's ``request`` does not go through the accumulator) and a message for a lite topic (the broker stores it in its own queue, so
the batch's offsets would not be its own). A batch holding one message is sent as a plain
send: same message, cheaper to encode and store.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from pocketmq.broker.protocol import RequestCode
from pocketmq.broker.protocol.errors import LocalProtocolError
from pocketmq.broker.protocol.message_codec import encode_batch_texts

from .errors import ClientUsageError, RequestTimeoutError, UnknownBrokerError
from .message import (
    PROPERTY_DELAY,
    RETRY_TOPIC_PREFIX,
    Message,
    MessageQueue,
    SendResult,
)

__all__ = [
    "BATCH_MAX_BYTES",
    "BATCH_MAX_BYTES_LIMIT",
    "BATCH_MAX_DELAY_MS",
    "TOTAL_BATCH_MAX_BYTES",
    "AutoBatchOptions",
    "SendEncodedBatch",
    "SendSingle",
    "ProduceAccumulator",
    "can_batch",
]

# RocketMQ ProduceAccumulator's defaults (holdMs, holdSize, totalHoldSize) and limits.
BATCH_MAX_DELAY_MS: Final = 10
BATCH_MAX_BYTES: Final = 32 * 1024
TOTAL_BATCH_MAX_BYTES: Final = 32 * 1024 * 1024
BATCH_MAX_DELAY_MS_LIMIT: Final = 30_000
BATCH_MAX_BYTES_LIMIT: Final = 2 * 1024 * 1024

# Properties that keep a message out of a batch (DefaultMQProducer.canBatch, plus lite).
_ALONE_PROPERTIES: Final = frozenset(
    {
        PROPERTY_DELAY,
        "TIMER_DELIVER_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "PGROUP",  # PROPERTY_PRODUCER_GROUP: transactional half messages
        "TRAN_MSG",
        "__LITE_TOPIC",
        "CORRELATION_ID",  # a request: request() sends it directly, as RocketMQ's
    }
)
# One message of a SEND_BATCH_MESSAGE body: TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODY length
# (5 ints) and the properties length (a short), besides the body and properties.
_ITEM_OVERHEAD: Final = 22

_new_object = object.__new__


def can_batch(message: Message) -> bool:
    """Whether ``message`` may go through the accumulator (``canBatch`` without the
    fullness check: a full accumulator makes the send wait here)."""
    if message.delay_level > 0 or message.topic.startswith(RETRY_TOPIC_PREFIX):
        return False
    properties = message.properties
    return not properties or _ALONE_PROPERTIES.isdisjoint(properties)


@dataclass(frozen=True, slots=True)
class AutoBatchOptions:
    """The accumulator's limits, checked as RocketMQ's setters check them."""

    max_delay_ms: float = BATCH_MAX_DELAY_MS
    max_bytes: int = BATCH_MAX_BYTES
    total_max_bytes: int = TOTAL_BATCH_MAX_BYTES

    def __post_init__(self) -> None:
        if not 0 < self.max_delay_ms <= BATCH_MAX_DELAY_MS_LIMIT:
            raise ClientUsageError(
                f"batch_max_delay_ms must be > 0 and <= {BATCH_MAX_DELAY_MS_LIMIT}: "
                f"{self.max_delay_ms!r}"
            )
        if not 0 < self.max_bytes <= BATCH_MAX_BYTES_LIMIT:
            raise ClientUsageError(
                f"batch_max_bytes must be > 0 and <= {BATCH_MAX_BYTES_LIMIT}: {self.max_bytes!r}"
            )
        if self.total_max_bytes <= 0:
            raise ClientUsageError(f"total_batch_max_bytes must be > 0: {self.total_max_bytes!r}")


# What the accumulator needs from the producer: the two ways a batch goes out, each with the
# producer's retries and send timeout; a queue of None lets the producer pick one.
# (topic, queue, properties, body, flag, unique key): one message, SEND_MESSAGE_V2
SendSingle = Callable[[str, MessageQueue | None, str, bytes, int, str], Awaitable[SendResult]]
# (topic, queue, encoded batch body, unique keys): SEND_BATCH_MESSAGE
SendEncodedBatch = Callable[[str, MessageQueue | None, bytes, Sequence[str]], Awaitable[SendResult]]


_Key = tuple[str, MessageQueue | None, str | None]  # topic, queue, tags (AggregateKey)


class _Entry:
    """One send waiting in a batch."""

    __slots__ = ("body", "flag", "future", "key", "properties")

    def __init__(
        self, properties: str, key: str, body: bytes, flag: int, future: asyncio.Future[SendResult]
    ) -> None:
        self.properties = properties
        self.key = key
        self.body = body
        self.flag = flag
        self.future = future


class _Batch:
    __slots__ = ("body_bytes", "encoded_bytes", "entries", "key", "timer")

    def __init__(self, key: _Key) -> None:
        self.key = key
        self.entries: list[_Entry] = []
        self.body_bytes = 0  # what max_bytes and total_max_bytes count, as RocketMQ
        self.encoded_bytes = 0  # what the broker's message size limit counts
        self.timer: asyncio.TimerHandle | None = None


class ProduceAccumulator:
    """Open batches by key, the batches being sent, and the bytes they hold."""

    def __init__(
        self,
        options: AutoBatchOptions,
        *,
        send_single: SendSingle,
        send_encoded_batch: SendEncodedBatch,
        encoded_bytes_max: Callable[[], int],
        wait_timeout_ms: Callable[[], float],
    ) -> None:
        self.options = options
        self._send_single = send_single
        self._send_encoded_batch = send_encoded_batch
        self._encoded_bytes_max = encoded_bytes_max  # the producer's max_message_size
        self._wait_timeout_ms = wait_timeout_ms  # the producer's send_timeout_ms
        self._open: dict[_Key, _Batch] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._held = 0  # body bytes of every message in an open or unanswered batch
        self._closing = False
        # The loop of the first send: asyncio.get_running_loop() costs a getpid() system call
        # on Python 3.11, and a producer's connections bind it to one loop anyway.
        self._loop: asyncio.AbstractEventLoop | None = None
        self.batches_sent = 0  # requests, a batch of one included
        self.messages_sent = 0

    @property
    def held_bytes(self) -> int:
        return self._held

    # -- sending -----------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        queue: MessageQueue | None,
        tags: str | None,
        properties: str,
        unique_key: str,
        body: bytes,
        flag: int,
    ) -> SendResult:
        """Add one validated message (its wire properties, unique key, body and flag) to the
        batch of its key and wait for that batch's answer."""
        size = len(body)
        if self._held and (self._waiters or self._held + size > self.options.total_max_bytes):
            await self._wait_for_room(topic, size)
        else:
            self._held += size
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[SendResult] = loop.create_future()
        entry = _Entry(properties, unique_key, body, flag, future)
        encoded = (
            _ITEM_OVERHEAD
            + size
            + (len(properties) if properties.isascii() else len(properties.encode()))
        )
        key = (topic, queue, tags)
        batch = self._open.get(key)
        if batch is not None and batch.encoded_bytes + encoded > self._encoded_bytes_max():
            self._flush(batch)  # keeps a batch within the broker's message size
            batch = None
        if batch is None:
            batch = self._open[key] = _Batch(key)
            if not self._closing:
                batch.timer = loop.call_later(
                    self.options.max_delay_ms / 1000, self._flush_due, batch
                )
        batch.entries.append(entry)
        batch.body_bytes += size
        batch.encoded_bytes += encoded
        if batch.body_bytes > self.options.max_bytes or self._closing:
            self._flush(batch)
        return await future

    def _flush_due(self, batch: _Batch) -> None:
        batch.timer = None
        if self._open.get(batch.key) is batch:
            self._flush(batch)

    def _flush(self, batch: _Batch) -> None:
        """Close ``batch`` and send it in a task of its own (tasks start in the order they are
        made, so batches of one key go out in the order they were closed)."""
        del self._open[batch.key]
        if batch.timer is not None:
            batch.timer.cancel()
            batch.timer = None
        assert self._loop is not None  # set by the first send
        task = self._loop.create_task(self._send_batch(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_batch(self, batch: _Batch) -> None:
        # A send cancelled while its batch was open is not sent (as if it had never come).
        entries = [entry for entry in batch.entries if not entry.future.done()]
        try:
            if entries:
                await self._deliver(batch.key, entries)
        finally:
            self._release(batch.body_bytes)

    async def _deliver(self, key: _Key, entries: list[_Entry]) -> None:
        topic, queue, _ = key
        try:
            if len(entries) == 1:
                one = entries[0]
                result = await self._send_single(
                    topic, queue, one.properties, one.body, one.flag, one.key
                )
                results = [result]
            else:
                try:
                    body = encode_batch_texts([(e.body, e.flag, e.properties) for e in entries])
                except LocalProtocolError as e:  # checked per message already: not expected
                    raise ClientUsageError(f"batch cannot be encoded: {e}") from None
                keys = [entry.key for entry in entries]
                result = await self._send_encoded_batch(topic, queue, body, keys)
                results = split_result(result, keys)
            self.batches_sent += 1
            self.messages_sent += len(entries)
        except asyncio.CancelledError:
            for entry in entries:
                entry.future.cancel()
            raise
        except Exception as error:  # each send of the batch raises what the batch met
            for entry in entries:
                if not entry.future.done():
                    entry.future.set_exception(error)
            return
        for entry, one_result in zip(entries, results, strict=True):
            if not entry.future.done():
                entry.future.set_result(one_result)

    # -- total bytes: back-pressure ----------------------------------------------------------

    async def _wait_for_room(self, topic: str, size: int) -> None:
        """Wait, first come first served, until ``size`` more bytes fit under
        ``total_max_bytes`` (or nothing is held: a message bigger than the cap goes alone)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        item = (size, waiter)
        self._waiters.append(item)
        timeout_ms = self._wait_timeout_ms()
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await waiter  # _release counted the bytes in before setting it
        except BaseException as error:
            if waiter.done() and not waiter.cancelled():
                self._release(size)  # let in, but the send is not going on
            else:
                waiter.cancel()
            if isinstance(error, TimeoutError):
                raise RequestTimeoutError(
                    topic, RequestCode.SEND_BATCH_MESSAGE, timeout_ms
                ) from None
            raise
        finally:
            self._waiters.remove(item)  # only ever removed here

    def _release(self, size: int) -> None:
        self._held -= size
        cap = self.options.total_max_bytes
        for item in self._waiters:
            waiting, waiter = item
            if waiter.done():
                continue
            if self._held and self._held + waiting > cap:
                break  # first come, first served: the ones behind wait too
            self._held += waiting
            waiter.set_result(None)

    # -- close -------------------------------------------------------------------------------

    async def close(self) -> None:
        """Send every open batch now and wait until each send has its answer; sends that
        come meanwhile go at once."""
        self._closing = True
        while True:
            for batch in list(self._open.values()):
                self._flush(batch)
            if self._sending:
                await asyncio.gather(*self._sending, return_exceptions=True)
            elif self._held or self._waiters:
                await asyncio.sleep(0)  # a send let in has yet to join its batch
            else:
                return


def split_result(result: SendResult, keys: Sequence[str]) -> list[SendResult]:
    """One ``SendResult`` per message of a batch's (``ProduceAccumulator.splitSendResults``):
    its own unique key and offset message id, the batch's first offset plus its place."""
    offset_ids = result.offset_msg_id.split(",")
    if len(offset_ids) != len(keys):
        raise UnknownBrokerError(
            0,
            f"batch of {len(keys)} messages answered with {len(offset_ids)} message ids",
        )
    base = result.queue_offset
    results = []
    for i, (key, offset_id) in enumerate(zip(keys, offset_ids, strict=True)):
        one = _new_object(SendResult)
        # SendResult(...) per message: a frozen dataclass's __init__ goes through
        # object.__setattr__ field by field; filling the dict at once gives the same object.
        one.__dict__.update(
            status=result.status,
            msg_id=key,
            offset_msg_id=offset_id,
            queue=result.queue,
            queue_offset=base + i,
            transaction_id=key,
            region_id=result.region_id,
        )
        results.append(one)
    return results
