"""``Producer``: send messages to the brokers of a topic.

    async with Producer("my-group", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message(topic="T", body=b"hi", tags="A", keys=["k1"]))

Behaviour follows RocketMQ's ``DefaultMQProducer``:

* single sends are SEND_MESSAGE_V2 (310) with the one-letter header; the SDK sets the
  ``UNIQ_KEY`` (``SendResult.msg_id``), ``WAIT``, ``TAGS``, ``KEYS`` and ``DELAY`` properties;
* queues are chosen round robin; a failed attempt (a retriable broker code, or a lost
  connection) is retried up to ``retries`` times, preferring a queue on another broker, all
  within ``send_timeout_ms``;
* ordered messages: pass ``queue``, a ``selector(queues, message) -> queue``, or a
  ``sharding_key`` (``abs(key.hashCode() % n)``, RocketMQ's ``SelectMessageQueueByHash``);
  such sends retry on the same queue, never another, so order is kept;
* batches are SEND_BATCH_MESSAGE (320): one topic, no delay, each message its own
  ``UNIQ_KEY``, at most ``max_message_size`` bytes encoded;
* ``auto_batch=True`` (off by default, as ``DefaultMQProducer.autoBatch``): concurrent sends to
  one topic (or one queue, when given or chosen) go together as SEND_BATCH_MESSAGE, each with
  its own result or error (``_auto_batch.py``);
* HEART_BEAT (34) with the producer group goes to every master broker the producer talks to,
  before its first send there and every 30 s; UNREGISTER_CLIENT (35) on close;
* request-reply (RocketMQ 4.6+): ``request`` sends a message carrying ``CORRELATION_ID``,
  ``REPLY_TO_CLIENT`` and ``TTL`` and waits for the reply a broker pushes
  (PUSH_REPLY_MESSAGE_TO_CLIENT, 326); ``reply`` answers a received request with
  SEND_REPLY_MESSAGE_V2 (325) to ``<cluster>_REPLY_TOPIC``, as Java's
  ``MessageUtil.createReplyMessage`` and ``send`` do.

Sends are independent: any number can be in flight at once (each connection caps the
requests waiting for a response and makes further senders wait).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Final, Literal

from pocketmq.broker.protocol import RemotingCommand, RemotingHeader, RequestCode, ResponseCode
from pocketmq.broker.protocol.errors import LocalProtocolError, RemoteProtocolError
from pocketmq.broker.protocol.headers import (
    HeartbeatData,
    ProducerData,
    SendMessageRequestHeaderV2,
    UnregisterClientRequestHeader,
    encode_json_body,
    send_result_fields,
)
from pocketmq.broker.protocol.message_codec import encode_batch_texts, encode_properties
from pocketmq.ids import UniqIdGenerator, V5IdGenerator

from ._auto_batch import (
    BATCH_MAX_BYTES,
    BATCH_MAX_DELAY_MS,
    TOTAL_BATCH_MAX_BYTES,
    AutoBatchOptions,
    ProduceAccumulator,
    can_batch,
)
from ._core import ClientCore, CoreClient
from ._reply import PendingRequests, create_reply, new_correlation_id, request_properties
from .connection import CLIENT_LANGUAGE, CLIENT_VERSION, Credentials, check_response, make_request
from .errors import (
    BrokerError,
    ClientError,
    ClientUsageError,
    ConnectionLostError,
    MessageTooLargeError,
    RequestTimeoutError,
    UnknownBrokerError,
    error_for_code,
)
from .filter import queue_index_for_key
from .message import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    RETRY_TOPIC_PREFIX,
    Message,
    MessageQueue,
    ReceivedMessage,
    SendResult,
    SendStatus,
    validate_topic,
)
from .route import AUTO_CREATE_TOPIC, TopicRoute

__all__ = ["MAX_MESSAGE_SIZE", "Producer", "QueueSelector"]

log = logging.getLogger("pocketmq.client.producer")

MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024  # RocketMQ's maxMessageSize
_UNREGISTER_TIMEOUT_MS: Final = 1000
_new_object = object.__new__
_SEND_MESSAGE_V2: Final = RequestCode.SEND_MESSAGE_V2  # a global: cheaper, on every send
_VALID_TOPICS_MAX: Final = 1024
_BODY_TYPES: Final = (bytes, bytearray, memoryview)  # a tuple: isinstance of a union is slower
_SEND_TEMPLATES_MAX: Final = 4096

QueueSelector = Callable[[Sequence[MessageQueue], Message], MessageQueue]

_STATUS_BY_CODE: Final[dict[int, SendStatus]] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}

# Picks the queue of one attempt from the route and the broker that failed last.
_Pick = Callable[[TopicRoute, str | None], MessageQueue]


def _id_generator(scheme: str, core: ClientCore) -> UniqIdGenerator | V5IdGenerator:
    """The message-ID generator of a producer; seeded, its random parts (the 4.x
    discriminator, the pid and MAC parts) come from the client's seed and its sequence is its
    own, so a seeded run gives the same IDs every time (with ``clock_ms`` fixing the time)."""
    if core.seed is None:
        return V5IdGenerator() if scheme == "v5" else UniqIdGenerator(core.client_ip)
    rng = random.Random(core.seed)  # its own: IDs do not depend on other random choices
    now_ms = core.clock_ms or _wall_clock_ms
    pid = rng.getrandbits(16)
    if scheme == "v5":
        return V5IdGenerator(mac=rng.getrandbits(48), pid=pid, now_ms=now_ms, private=True)
    return UniqIdGenerator(core.client_ip, pid=pid, now_ms=now_ms, rng=rng)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Producer(CoreClient):
    """Sends messages; an async context manager (``start()`` / ``close()``).

    Options (keyword-only):

    * ``namesrv``: "host:port[;host:port]", default env ``NAMESRV_ADDR``, else 127.0.0.1:9876
    * ``unique_id_scheme``: ``"v5"`` (default, 5.x message ids) or ``"v4"`` (4.x UNIQ_KEY)
    * ``send_timeout_ms`` (3000): budget of one ``send`` including its retries
    * ``retries`` (2): further attempts after a retriable failure
    * ``max_message_size`` (4 MiB): body limit, and encoded limit of a batch
    * ``default_topic_queue_nums`` (4): queues per broker of a topic created on first send
    * ``heartbeat_interval_s`` (30), ``route_refresh_interval_s`` (30)
    * ``requests_inflight_max`` (1024): per connection, requests waiting for a response
    * ``instance_name``: the part after ``@`` of the client id (default ``pid#nanotime``)
    * ``auto_batch`` (False): gather concurrent sends into batches, flushed after
      ``batch_max_delay_ms`` (10) or past ``batch_max_bytes`` of bodies (32 KiB); sends wait
      while ``total_batch_max_bytes`` (32 MiB) of bodies are held (RocketMQ's
      ``autoBatch``, ``batchMaxDelayMs``, ``batchMaxBytes``, ``totalBatchMaxBytes``)
    * ``seed``: a repeatable run: the first queue of the round robin, the instance name
      (``seed-<seed>``) and the generated IDs' random parts from it; ``clock_ms`` (epoch ms,
      default the wall clock): the born timestamps and the time part of IDs, e.g. a manual
      clock's ``now_ms`` (docs/testing.md)
    """

    _kind = "producer"

    def __init__(
        self,
        group: str = "DEFAULT_PRODUCER",
        *,
        namesrv: str | Sequence[str] | None = None,
        unique_id_scheme: Literal["v5", "v4"] = "v5",
        send_timeout_ms: float = 3000,
        retries: int = 2,
        max_message_size: int = MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = 4,
        heartbeat_interval_s: float = 30.0,
        route_refresh_interval_s: float = 30.0,
        requests_inflight_max: int = 1024,
        instance_name: str | None = None,
        client_ip: str | None = None,
        credentials: Credentials | tuple[str, str] | None = None,
        tls: bool | None = None,
        tls_ca: str | os.PathLike[str] | None = None,
        auto_batch: bool = False,
        batch_max_delay_ms: float = BATCH_MAX_DELAY_MS,
        batch_max_bytes: int = BATCH_MAX_BYTES,
        total_batch_max_bytes: int = TOTAL_BATCH_MAX_BYTES,
        seed: int | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if not group:
            raise ClientUsageError("producer group must not be empty")
        # checked whether auto_batch is on or not, as RocketMQ's setters check them
        batch_options = AutoBatchOptions(batch_max_delay_ms, batch_max_bytes, total_batch_max_bytes)
        if retries < 0:
            raise ClientUsageError("retries must be >= 0")
        if unique_id_scheme not in ("v5", "v4"):
            raise ClientUsageError(f"unique_id_scheme must be 'v5' or 'v4': {unique_id_scheme!r}")
        self.group = group
        self.send_timeout_ms = send_timeout_ms
        self.retries = retries
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.heartbeat_interval_s = heartbeat_interval_s
        super().__init__(
            namesrv,
            instance_name=instance_name,
            client_ip=client_ip,
            credentials=credentials,
            tls=tls,
            tls_ca=tls_ca,
            request_timeout_ms=send_timeout_ms,
            requests_inflight_max=requests_inflight_max,
            route_refresh_interval_s=route_refresh_interval_s,
            default_topic_queue_nums=default_topic_queue_nums,
            seed=seed,
            clock_ms=clock_ms,
        )
        self._ids = _id_generator(unique_id_scheme, self._core)
        self._clock_ms = clock_ms  # None: the wall clock, read inline on every send
        self._counters: dict[str, itertools.count[int]] = {}
        self._valid_topics: set[str] = set()  # checked once, not on every send
        self._send_templates: dict[MessageQueue, tuple[tuple[str, int], dict[str, str]]] = {}
        self._heartbeats: dict[str, asyncio.Task[None]] = {}
        # requests waiting for their reply; brokers push replies over any of our connections
        self._requests = PendingRequests()
        self._core.pool.handlers[RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT] = self._requests.on_push
        self._batcher: ProduceAccumulator | None = None
        if auto_batch:
            self._batcher = ProduceAccumulator(
                batch_options,
                send_single=self._send_single,
                send_encoded_batch=self._send_encoded_batch,
                encoded_bytes_max=lambda: self.max_message_size,
                wait_timeout_ms=lambda: self.send_timeout_ms,
            )

    @property
    def auto_batch(self) -> ProduceAccumulator | None:
        """The accumulator when ``auto_batch`` is on (its options, ``held_bytes``,
        ``batches_sent``, ``messages_sent``), else None."""
        return self._batcher

    # -- life cycle (start, close, async with: CoreClient) -----------------------------------

    async def _start(self) -> None:
        core = self._core
        core.every(self.heartbeat_interval_s, self._heartbeat_all, name="producer-heartbeat")
        core.every(core.routes.refresh_interval_s, core.routes.refresh, name="producer-routes")

    async def _close(self) -> None:
        """Send what auto-batching holds, stop heartbeats, unregister from the brokers (then
        the connections close)."""
        if self._batcher is not None and self._started:
            await self._batcher.close()
        await self._core.stop_tasks()
        for task in self._heartbeats.values():
            task.cancel()
        await asyncio.gather(*self._heartbeats.values(), return_exceptions=True)
        if self._started:
            await self._unregister()

    # -- messages ----------------------------------------------------------------------------

    def new_unique_key(self) -> str:
        return self._ids.next_id()

    def _properties(self, message: Message) -> dict[str, str]:
        """Validate ``message`` and return its wire properties."""
        self._check_message(message)
        return self._build_properties(message)

    def _wire_properties(self, message: Message) -> tuple[str, str]:
        """Validate ``message``; return its properties as sent and its unique key."""
        self._check_message(message)
        if not (
            message.properties
            or message.tags
            or message.keys
            or message.delay_level
            or message.sharding_key
        ):
            # A message with a topic and a body only: the text encode_properties would give.
            key = self.new_unique_key()
            return f"WAIT\x01true\x02UNIQ_KEY\x01{key}\x02", key
        props = self._build_properties(message)
        return self._properties_text(props), props[PROPERTY_UNIQ_KEY]

    def _check_message(self, message: Message) -> None:
        if not isinstance(message, Message):
            raise ClientUsageError(f"expected a Message, got {type(message).__name__}")
        if message.topic not in self._valid_topics:
            validate_topic(message.topic, for_send=True)
            if len(self._valid_topics) >= _VALID_TOPICS_MAX:
                self._valid_topics.clear()
            self._valid_topics.add(message.topic)
        if not isinstance(message.body, _BODY_TYPES):
            raise ClientUsageError("message body must be bytes")
        if len(message.body) == 0:
            raise ClientUsageError("message body must not be empty")
        if len(message.body) > self.max_message_size:
            raise MessageTooLargeError(len(message.body), self.max_message_size)
        if message.delay_level < 0:
            raise ClientUsageError("delay_level must be >= 0")

    def _build_properties(self, message: Message) -> dict[str, str]:
        props = (
            {str(k): str(v) for k, v in message.properties.items()} if message.properties else {}
        )
        if message.tags:
            props[PROPERTY_TAGS] = message.tags
        if message.keys:
            props[PROPERTY_KEYS] = " ".join(message.keys)
        if message.delay_level > 0:
            props[PROPERTY_DELAY] = str(message.delay_level)
        if message.sharding_key:
            props[PROPERTY_SHARDING_KEY] = message.sharding_key
        props[PROPERTY_WAIT] = "true"
        props[PROPERTY_UNIQ_KEY] = props.get(PROPERTY_UNIQ_KEY) or self.new_unique_key()
        return props

    def _properties_text(self, props: dict[str, str]) -> str:
        try:
            return encode_properties(props)
        except LocalProtocolError as e:
            raise ClientUsageError(f"property cannot be sent: {e}") from None

    def _header(
        self,
        mq: MessageQueue,
        properties: str,
        *,
        flag: int = 0,
        batch: bool = False,
        sys_flag: int = 0,
    ) -> SendMessageRequestHeaderV2:
        return SendMessageRequestHeaderV2(
            producer_group=self.group,
            topic=mq.topic,
            default_topic=AUTO_CREATE_TOPIC,
            default_topic_queue_nums=self.default_topic_queue_nums,
            queue_id=mq.queue_id,
            sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000) if self._clock_ms is None else self._clock_ms(),
            flag=flag,
            properties=properties,
            reconsume_times=0,
            unit_mode=False,
            batch=batch,
            broker_name=mq.broker_name,
        )

    def _send_request(
        self, mq: MessageQueue, properties: str, body: bytes, flag: int
    ) -> RemotingCommand:
        """``make_request(SEND_MESSAGE_V2, self._header(mq, properties, flag=flag), body=body)``
        for the request of every send: the header's extFields are a copy of the queue's
        (what stays the same from send to send) with the born time, flag and properties set."""
        cached = self._send_templates.get(mq)
        # group and default_topic_queue_nums are public attributes: a change makes a new one
        if cached is None or cached[0] != (self.group, self.default_topic_queue_nums):
            if len(self._send_templates) >= _SEND_TEMPLATES_MAX:
                self._send_templates.clear()
            cached = (
                (self.group, self.default_topic_queue_nums),
                self._header(mq, "").to_ext_fields(),
            )
            self._send_templates[mq] = cached
        ext = cached[1].copy()  # the same keys in the same order: only values change
        ext["g"] = f"{int(time.time() * 1000) if self._clock_ms is None else self._clock_ms():d}"
        ext["h"] = f"{flag:d}"
        ext["i"] = properties
        return RemotingCommand(
            code=_SEND_MESSAGE_V2,
            language=CLIENT_LANGUAGE,
            version=CLIENT_VERSION,
            ext_fields=ext,
            body=body,
        )

    # -- queue choice ------------------------------------------------------------------------

    def _round_robin(self, route: TopicRoute, last_broker: str | None) -> MessageQueue:
        queues = route.publish_queues
        counter = self._counters.get(route.topic)
        if counter is None:  # a random start spreads many producers over the queues
            counter = self._counters[route.topic] = itertools.count(
                self._core.rng.randrange(1 << 16)
            )
        index = next(counter)
        if last_broker is not None:
            for step in range(len(queues)):
                mq = queues[(index + step) % len(queues)]
                if mq.broker_name != last_broker:
                    return mq
        return queues[index % len(queues)]

    def _pick_for(
        self,
        message: Message,
        queue: MessageQueue | None,
        selector: QueueSelector | None,
        sharding_key: str | None,
    ) -> tuple[_Pick, bool]:
        """The queue picker and whether it may move to another queue on retry."""
        if queue is None and selector is None and not sharding_key and not message.sharding_key:
            return self._round_robin, True  # the common case, without the checks below
        given = [x is not None for x in (queue, selector, sharding_key)]
        if sum(given) > 1:
            raise ClientUsageError("pass at most one of queue, selector and sharding_key")
        if queue is not None:
            if queue.topic != message.topic:
                raise ClientUsageError(f"queue {queue} is not a queue of {message.topic!r}")
            return (lambda route, last: queue), False
        if selector is not None:

            def by_selector(route: TopicRoute, last: str | None) -> MessageQueue:
                mq = selector(list(route.publish_queues), message)
                if not isinstance(mq, MessageQueue) or mq not in route.publish_queues:
                    raise ClientUsageError(f"selector returned an unknown queue: {mq!r}")
                return mq

            return by_selector, False
        key = sharding_key or message.sharding_key
        if key:

            def by_key(route: TopicRoute, last: str | None) -> MessageQueue:
                queues = route.publish_queues
                return queues[queue_index_for_key(key, len(queues))]

            return by_key, False
        return self._round_robin, True

    # -- sending -----------------------------------------------------------------------------

    async def send(
        self,
        message: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        sharding_key: str | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer.

        Raises ``ClientUsageError`` for a bad message, ``BrokerError`` for a refusal that is
        not retriable (or the last retriable one), ``ConnectionLostError`` or
        ``RequestTimeoutError`` when the brokers cannot be reached in time.
        """
        self._check_open()
        properties, unique_key = self._wire_properties(message)
        pick, may_move = self._pick_for(message, queue, selector, sharding_key)
        body = bytes(message.body)
        flag = message.flag
        batcher = self._batcher
        if batcher is not None and can_batch(message):
            fixed: MessageQueue | None = None
            if not may_move:  # a queue given or chosen: batched per queue, as RocketMQ's
                routes = self._core.routes
                fixed = pick(
                    routes.fresh(message.topic)
                    or await routes.get(message.topic, for_publish=True),
                    None,
                )
            tags = message.tags or None
            return await batcher.send(
                message.topic, fixed, tags, properties, unique_key, body, flag
            )

        def build(mq: MessageQueue) -> RemotingCommand:
            return self._send_request(mq, properties, body, flag)

        return await self._send_with_retries(
            message.topic, pick, build, unique_key, may_move=may_move
        )

    async def send_oneway(
        self,
        message: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        sharding_key: str | None = None,
    ) -> None:
        """Send without waiting for (or getting) an answer; one attempt, no retry."""
        self._check_open()
        properties, _ = self._wire_properties(message)
        pick, _ = self._pick_for(message, queue, selector, sharding_key)
        route = await self._core.routes.get(message.topic, for_publish=True)
        mq = pick(route, None)
        addr = self._master(route, mq)
        await self._ensure_heartbeat(addr)
        header = self._header(mq, properties, flag=message.flag)
        cmd = make_request(RequestCode.SEND_MESSAGE_V2, header, body=bytes(message.body))
        await self._core.invoke_oneway(addr, cmd)

    # -- request-reply -----------------------------------------------------------------------

    async def request(self, message: Message, timeout_s: float = 3.0) -> ReceivedMessage:
        """Send ``message`` as a request and wait for its reply (``DefaultMQProducer.request``).

        The message gets ``CORRELATION_ID`` (a new UUID), ``REPLY_TO_CLIENT`` (this client's
        id) and ``TTL`` (``timeout_s`` in ms); a consumer answers it with ``reply`` (or any
        RocketMQ client's ``MessageUtil.createReplyMessage``), and the broker pushes the reply
        here. ``RequestTimeoutError`` when no reply comes within ``timeout_s`` (sending
        included); the send's own errors as ``send`` raises them.
        """
        self._check_open()
        if timeout_s <= 0:
            raise ClientUsageError("timeout_s must be > 0")
        correlation_id = new_correlation_id(self._core.rng if self._core.seed is not None else None)
        timeout_ms = int(timeout_s * 1000)
        request = Message(
            topic=message.topic,
            body=message.body,
            tags=message.tags,
            keys=list(message.keys),
            properties=request_properties(
                message.properties, correlation_id, self._core.client_id, timeout_ms
            ),
            delay_level=message.delay_level,
            flag=message.flag,
            sharding_key=message.sharding_key,
        )
        waiter = self._requests.add(correlation_id)
        try:
            async with asyncio.timeout(timeout_s):
                # As prepareSendRequest: every broker of the topic knows this client first,
                # so whichever of them takes the reply can push it to this connection.
                route = await self._core.routes.get(message.topic, for_publish=True)
                await asyncio.gather(
                    *(self._ensure_heartbeat(addr) for addr in route.master_addrs().values())
                )
                await self.send(request)
                return await waiter
        except TimeoutError:
            raise RequestTimeoutError(
                message.topic, RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, timeout_ms
            ) from None
        finally:
            self._requests.discard(correlation_id)

    async def reply(
        self,
        request: ReceivedMessage,
        body: bytes,
        *,
        properties: dict[str, str] | None = None,
    ) -> SendResult:
        """Answer a received request: ``create_reply(request, body)`` sent as
        SEND_REPLY_MESSAGE_V2, in one attempt (a broker refuses a reply it cannot push, with
        SYSTEM_ERROR, when the requester is gone: another attempt would store another copy).
        ``ClientUsageError`` when ``request`` is not a stored request (no ``CLUSTER``)."""
        self._check_open()
        answer = create_reply(request, body, properties=properties)
        wire, unique_key = self._wire_properties(answer)
        route = await self._core.routes.get(answer.topic, for_publish=True)
        mq = self._round_robin(route, None)
        addr = self._master(route, mq)
        await self._ensure_heartbeat(addr)
        command = self._send_request(mq, wire, bytes(answer.body), answer.flag)
        command.code = RequestCode.SEND_REPLY_MESSAGE_V2
        response = await self._core.invoke(addr, command, self.send_timeout_ms)
        status = _STATUS_BY_CODE.get(response.code)
        if status is None:
            raise error_for_code(response.code, response.remark)
        return self._result(response, status, mq, unique_key)

    def encode_batch(self, messages: Sequence[Message]) -> tuple[bytes, list[str]]:
        """Validate a batch and return its SEND_BATCH_MESSAGE body and unique keys."""
        if isinstance(messages, Message) or not messages:
            raise ClientUsageError("a batch needs a non-empty sequence of messages")
        topic = messages[0].topic
        inner: list[tuple[bytes, int, str]] = []  # body, flag, properties string
        keys: list[str] = []
        for message in messages:
            if not isinstance(message, Message):
                raise ClientUsageError(f"expected a Message, got {type(message).__name__}")
            if message.topic != topic:
                raise ClientUsageError(f"a batch holds one topic: {topic!r} and {message.topic!r}")
            if topic.startswith(RETRY_TOPIC_PREFIX):
                raise ClientUsageError("a batch cannot go to a retry topic")
            if message.delay_level > 0:
                raise ClientUsageError("messages of a batch cannot have a delay level")
            # the string is encoded once (it fails early on separators) and goes in as it is
            properties, unique_key = self._wire_properties(message)
            keys.append(unique_key)
            inner.append((bytes(message.body), message.flag, properties))
        try:
            body = encode_batch_texts(inner)
        except LocalProtocolError as e:
            raise ClientUsageError(f"batch cannot be encoded: {e}") from None
        if len(body) > self.max_message_size:
            raise MessageTooLargeError(len(body), self.max_message_size, "encoded batch")
        return body, keys

    async def send_batch(
        self, messages: Sequence[Message], *, queue: MessageQueue | None = None
    ) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE to one queue.

        ``SendResult.msg_id`` / ``offset_msg_id`` are comma-joined, in message order.
        """
        self._check_open()
        body, keys = self.encode_batch(messages)
        topic = messages[0].topic
        if queue is not None and queue.topic != topic:
            raise ClientUsageError(f"queue {queue} is not a queue of {topic!r}")
        return await self._send_encoded_batch(topic, queue, body, keys)

    async def _send_encoded_batch(
        self, topic: str, queue: MessageQueue | None, body: bytes, keys: Sequence[str]
    ) -> SendResult:
        """SEND_BATCH_MESSAGE of an encoded batch, to ``queue`` or one picked round robin."""
        batch_props = self._properties_text(
            {PROPERTY_UNIQ_KEY: self.new_unique_key(), PROPERTY_WAIT: "true"}
        )

        def build(mq: MessageQueue) -> RemotingCommand:
            header = self._header(mq, batch_props, batch=True)
            return make_request(RequestCode.SEND_BATCH_MESSAGE, header, body=body)

        pick: _Pick = self._round_robin if queue is None else (lambda route, last: queue)
        return await self._send_with_retries(
            topic, pick, build, ",".join(keys), may_move=queue is None
        )

    async def _send_single(
        self,
        topic: str,
        queue: MessageQueue | None,
        properties: str,
        body: bytes,
        flag: int,
        unique_key: str,
    ) -> SendResult:
        """SEND_MESSAGE_V2 of one validated message (an auto-batch of one)."""

        def build(mq: MessageQueue) -> RemotingCommand:
            return self._send_request(mq, properties, body, flag)

        pick: _Pick = self._round_robin if queue is None else (lambda route, last: queue)
        return await self._send_with_retries(topic, pick, build, unique_key, may_move=queue is None)

    def _master(self, route: TopicRoute, mq: MessageQueue) -> str:
        addr = route.master_addr(mq.broker_name)
        if addr is None:
            raise ConnectionLostError(mq.broker_name, "broker has no master address")
        return addr

    async def _send_with_retries(
        self,
        topic: str,
        pick: _Pick,
        build: Callable[[MessageQueue], RemotingCommand],
        msg_id: str,
        *,
        may_move: bool,
    ) -> SendResult:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.send_timeout_ms / 1000
        last_error: ClientError | None = None
        last_broker: str | None = None
        routes = self._core.routes
        for attempt in range(1 + self.retries):
            if loop.time() >= deadline:
                break
            mq: MessageQueue | None = None
            try:
                # Cached route, heartbeat done: nothing to wait for (the path of every send).
                route = routes.fresh(topic) or await routes.get(topic, for_publish=True)
                mq = pick(route, last_broker if may_move else None)
                addr = self._master(route, mq)
                heartbeat = self._heartbeats.get(addr)
                if heartbeat is None or not heartbeat.done():
                    await self._ensure_heartbeat(addr)
                remaining_ms = max((deadline - loop.time()) * 1000, 1.0)
                response = await self._core.invoke(addr, build(mq), remaining_ms)
            except (ConnectionLostError, BrokerError) as e:
                if not e.retriable:
                    raise
                log.debug("send attempt %d to %s failed: %s", attempt + 1, topic, e)
                last_error = e
                if mq is not None:
                    last_broker = mq.broker_name
                routes.invalidate(topic)
                continue
            status = _STATUS_BY_CODE.get(response.code)
            if status is not None:
                return self._result(response, status, mq, msg_id)
            error = error_for_code(response.code, response.remark)
            if not error.retriable:
                raise error
            log.debug("send attempt %d to %s refused: %s", attempt + 1, mq, error)
            last_error = error
            last_broker = mq.broker_name
            if response.code == ResponseCode.TOPIC_NOT_EXIST:
                routes.invalidate(topic)
        if last_error is None or loop.time() >= deadline:
            raise RequestTimeoutError(topic, RequestCode.SEND_MESSAGE_V2, self.send_timeout_ms)
        raise last_error

    def _result(
        self, response: RemotingCommand, status: SendStatus, mq: MessageQueue, msg_id: str
    ) -> SendResult:
        try:
            offset_msg_id, queue_id, queue_offset, transaction_id, region = send_result_fields(
                response.ext_fields
            )
        except RemoteProtocolError as e:
            raise UnknownBrokerError(response.code, f"malformed send response: {e}") from None
        result = _new_object(SendResult)
        # SendResult(...) of every send: a frozen dataclass's __init__ sets each field through
        # object.__setattr__; filling the instance dict at once gives the same object.
        result.__dict__.update(
            status=status,
            msg_id=msg_id,
            offset_msg_id=offset_msg_id,
            queue=mq if mq.queue_id == queue_id else mq._replace(queue_id=queue_id),
            queue_offset=queue_offset,
            transaction_id=transaction_id,
            region_id=region,
        )
        return result

    # -- heartbeats --------------------------------------------------------------------------

    def _heartbeat_request(self) -> RemotingCommand:
        data = HeartbeatData(
            client_id=self._core.client_id, producer_data_set=[ProducerData(group_name=self.group)]
        )
        return make_request(RequestCode.HEART_BEAT, body=encode_json_body(data))

    async def _heartbeat(self, addr: str) -> None:
        check_response(await self._core.invoke(addr, self._heartbeat_request()))

    async def _ensure_heartbeat(self, addr: str) -> None:
        """The first send to a broker waits for one heartbeat (errors are only logged)."""
        task = self._heartbeats.get(addr)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._heartbeat_quietly(addr))
            self._heartbeats[addr] = task
        await asyncio.shield(task)

    async def _heartbeat_quietly(self, addr: str) -> None:
        try:
            await self._heartbeat(addr)
        except ClientError as e:
            log.warning("heartbeat to %s failed: %s", addr, e)

    async def _heartbeat_all(self) -> None:
        addrs = set(self._heartbeats)
        for topic in self._core.routes.cached_topics():
            route = self._core.routes.cached(topic)
            if route is not None:
                addrs |= set(route.master_addrs().values())
        for addr in addrs:
            await self._heartbeat_quietly(addr)

    async def _unregister(self) -> None:
        header: RemotingHeader = UnregisterClientRequestHeader(
            client_id=self._core.client_id, producer_group=self.group
        )
        for addr in list(self._heartbeats):
            try:
                cmd = make_request(RequestCode.UNREGISTER_CLIENT, header)
                await self._core.invoke(addr, cmd, _UNREGISTER_TIMEOUT_MS)
            except ClientError as e:
                log.debug("unregister from %s failed: %s", addr, e)
