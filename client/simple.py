"""``SimpleConsumer``: POP consumption (RocketMQ 5.x), the application acknowledges each message.

    async with SimpleConsumer("workers", namesrv="127.0.0.1:9876",
                              subscriptions={"Jobs": "*"}) as consumer:
        for message in await consumer.receive(16, invisible_duration_s=60):
            try:
                await handle(message)
            except TemporaryError:
                continue                              # back after the invisible time
            await consumer.ack(message)

How it works (remoting.md §3.11, rocketmq-store.md §10.5):

* ``receive`` sends POP_MESSAGE (200050) with queue -1 (every queue of the topic, and the
  group's pop retry topic ``%RETRY%<group>_<topic>``) to the topic's brokers. The broker lends
  the messages for the invisible duration; with no message it holds the request for up to
  ``await_duration_s`` (long polling). Topics and brokers are taken in turn: each call first
  asks every (topic, broker) pair without waiting, then long-polls the next one in turn.
* every message carries its receipt handle (``message.receipt_handle``), built from the
  response header exactly as RocketMQ's ``ExtraInfoUtil`` does:
  ``"<start offset> <popTime> <invisibleTime> <reviveQid> <retry flag> <broker> <queue id>
  <queue offset>"``.
* ``ack`` (ACK_MESSAGE, 200051) ends the loan. A message not acknowledged in time is delivered
  again, from the retry topic, with ``reconsume_times`` raised; after the group's maximum
  (16 retries) it goes to ``%DLQ%<group>``.
* ``change_invisible_duration`` (CHANGE_MESSAGE_INVISIBLETIME, 200053) restarts the loan with
  a new duration, counted from now. The broker issues a new receipt handle; the SDK stores it
  on the message, so later calls with the same message object use it.
* a handle that no longer lends the message (acknowledged, expired, or replaced) is refused:
  ``StaleReceiptHandleError`` (pocketmq answers ILLEGAL_OPERATION 604; a real RocketMQ broker
  accepts stale acks silently). A handle that does not parse: ``InvalidParameterError`` (29).
* ``fifo=True`` pops in order mode: a queue (one message group, when producers route a group
  by sharding key) is lent again only once everything taken from it is acknowledged, and a
  message not acknowledged comes back in place, before the ones after it.
* ``poison(message, reason)`` sends the message to ``%DLQ%<group>`` at once
  (CONSUMER_SEND_MSG_BACK with delay level -1), then acknowledges it.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Final, NamedTuple

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.errors import MalformedBodyError, RemoteProtocolError
from pocketmq.broker.protocol.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ConsumerSendMsgBackRequestHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from pocketmq.broker.protocol.message_codec import MessageExt, decode_message_at

from ._core import CoreClient
from ._duration import seconds_to_ms
from .connection import Credentials, check_response, make_request
from .errors import (
    ClientClosedError,
    ClientError,
    ClientUsageError,
    ConnectionLostError,
    RequestTimeoutError,
    RouteNotFoundError,
    StaleReceiptHandleError,
    UnknownBrokerError,
)
from .filter import (
    FilterExpression,
    TagExpression,
    check_client_config_request,
    check_client_config_response,
    filter_expression,
)
from .message import RETRY_TOPIC_PREFIX, MessageQueue, ReceivedMessage, validate_topic

__all__ = ["ReceiptHandle", "SimpleConsumer"]

log = logging.getLogger("pocketmq.client.simple")

_EMPTY_CODES: Final = (ResponseCode.PULL_NOT_FOUND, ResponseCode.POLLING_TIMEOUT)
_RETRY_V2_SEPARATOR: Final = "+"  # %RETRY%<group>+<topic> (KeyBuilder.buildPopRetryTopicV2)


class ReceiptHandle(NamedTuple):
    """A POP receipt handle (RocketMQ's ``ExtraInfoUtil`` layout)."""

    start_offset: int  # ckQueueOffset: the first offset of the pop's batch on this queue
    pop_time: int
    invisible_ms: int
    revive_qid: int
    retry: str  # "0" normal topic, "1" pop retry topic (V1), "2" retry topic V2
    broker_name: str
    queue_id: int
    queue_offset: int

    def __str__(self) -> str:
        return " ".join(str(part) for part in self)

    @property
    def deadline_ms(self) -> int:
        """When the loan ends, on the broker's clock."""
        return self.pop_time + self.invisible_ms

    @classmethod
    def parse(cls, text: str) -> ReceiptHandle:
        parts = text.split(" ") if isinstance(text, str) else []
        if len(parts) != 8:
            raise ClientUsageError(f"not a receipt handle: {text!r}")
        try:
            return cls(
                int(parts[0]),
                int(parts[1]),
                int(parts[2]),
                int(parts[3]),
                parts[4],
                parts[5],
                int(parts[6]),
                int(parts[7]),
            )
        except ValueError:
            raise ClientUsageError(f"not a receipt handle: {text!r}") from None


def retry_flag(topic: str) -> str:
    """``ExtraInfoUtil.getRetry``: "2" for a V2 pop retry topic, "1" for V1, else "0"."""
    if not topic.startswith(RETRY_TOPIC_PREFIX):
        return "0"
    return "2" if _RETRY_V2_SEPARATOR in topic else "1"


def _start_offsets(text: str | None) -> dict[tuple[str, int], int]:
    """``startOffsetInfo``: "<retry flag> <queue id> <start offset>;..."."""
    starts: dict[tuple[str, int], int] = {}
    for part in (text or "").split(";"):
        if not part.strip():
            continue
        fields = part.split(" ")
        if len(fields) != 3:
            raise ValueError(f"bad startOffsetInfo entry {part!r}")
        starts[(fields[0], int(fields[1]))] = int(fields[2])
    return starts


def messages_from_pop(response: RemotingCommand, broker_name: str) -> list[ReceivedMessage]:
    """The messages of a successful POP_MESSAGE response, each with its receipt handle."""
    try:
        header = PopMessageResponseHeader.from_ext_fields(response.ext_fields)
        starts = _start_offsets(header.start_offset_info)
    except (RemoteProtocolError, ValueError) as e:
        raise UnknownBrokerError(response.code, f"malformed pop response: {e}") from None
    records, problem = _checked_records(response.body or b"")
    out = []
    for record in records:
        flag = retry_flag(record.topic)
        start = starts.get((flag, record.queue_id))
        if start is None:
            raise UnknownBrokerError(
                response.code,
                f"malformed pop response: no start offset for {record.topic}#{record.queue_id}",
            )
        handle = ReceiptHandle(
            start,
            header.pop_time,
            header.invisible_time,
            header.revive_qid,
            flag,
            broker_name,
            record.queue_id,
            record.queue_offset,
        )
        queue = MessageQueue(record.topic, broker_name, record.queue_id)
        out.append(ReceivedMessage.from_ext(record, queue, receipt_handle=str(handle)))
    if problem is not None:
        # What follows the bad record stays popped and invisible: the broker lends it again
        # when its invisible time ends, so nothing is lost, but it is said.
        log.warning(
            "POP from %s: %s; %d good message(s) before it handed over, the rest come back "
            "after their invisible time",
            broker_name,
            problem,
            len(out),
        )
    return out


def _checked_records(body: bytes) -> tuple[list[MessageExt], str | None]:
    """The records of a POP body that pass their BODYCRC, and what stopped the rest."""
    out: list[MessageExt] = []
    pos = 0
    while pos < len(body):
        try:
            record, pos = decode_message_at(body, pos, check_crc=True)
        except MalformedBodyError as error:
            return out, f"corrupt message: {error}"
        out.append(record)
    return out, None


class SimpleConsumer(CoreClient):
    """A POP consumer; an async context manager (``start()`` / ``close()``).

    Options (keyword-only):

    * ``namesrv``: "host:port[;host:port]", default env ``NAMESRV_ADDR``, else 127.0.0.1:9876
    * ``subscriptions``: ``{topic: tag expression}`` ("*" or "A || B", or a
      ``MessageSelector.by_sql("a > 5")``); or call ``subscribe``
    * ``await_duration_s`` (30): how long ``receive`` long-polls when nothing is there
    * ``invisible_duration_s`` (60, RocketMQ's default): ``receive``'s default loan
    * ``fifo`` (False): ordered POP (see the module docstring)
    * ``request_timeout_ms`` (3000): other requests; a receive may take ``await_duration_s``
      more
    """

    _kind = "consumer"

    def __init__(
        self,
        group: str,
        *,
        namesrv: str | Sequence[str] | None = None,
        subscriptions: Mapping[str, str | FilterExpression] | None = None,
        await_duration_s: float | timedelta = 30.0,
        invisible_duration_s: float | timedelta = 60.0,
        fifo: bool = False,
        request_timeout_ms: float = 3000,
        instance_name: str | None = None,
        client_ip: str | None = None,
        credentials: Credentials | tuple[str, str] | None = None,
        tls: bool | None = None,
        tls_ca: str | os.PathLike[str] | None = None,
        seed: int | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if not group:
            raise ClientUsageError("consumer group must not be empty")
        self.group = group
        self.fifo = fifo
        if isinstance(await_duration_s, timedelta):
            await_duration_s = await_duration_s.total_seconds()
        if await_duration_s < 0:
            raise ClientUsageError("await_duration_s must be >= 0")
        self.await_duration_ms = int(await_duration_s * 1000)
        self.invisible_duration_ms = seconds_to_ms(invisible_duration_s, "invisible_duration_s")
        super().__init__(
            namesrv,
            instance_name=instance_name,
            client_ip=client_ip,
            credentials=credentials,
            tls=tls,
            tls_ca=tls_ca,
            request_timeout_ms=request_timeout_ms,
            seed=seed,
            clock_ms=clock_ms,
        )
        self._subscriptions: dict[str, FilterExpression] = {}
        self._turn = itertools.count()
        for topic, expression in (subscriptions or {}).items():
            self.subscribe(topic, expression)

    @property
    def subscriptions(self) -> dict[str, str]:
        return {topic: expr.expression for topic, expr in self._subscriptions.items()}

    def subscribe(
        self, topic: str, expression: str | FilterExpression = "*", *, sql: str | None = None
    ) -> None:
        """Receive ``topic``'s messages whose tag matches ``expression`` or, with
        ``sql="a > 5"`` (or ``MessageSelector.by_sql``), whose properties match that SQL92
        expression (checked by the brokers at ``start()``)."""
        if self._closing:
            raise ClientClosedError("consumer is closed")
        validate_topic(topic)
        if topic.startswith(RETRY_TOPIC_PREFIX):
            raise ClientUsageError("retry topics are popped together with their topic")
        self._subscriptions[topic] = filter_expression(expression, sql=sql)

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)

    # -- life cycle (start, close, async with: CoreClient) -----------------------------------
    # close() only closes the connections: messages not acknowledged come back after their loan.

    def _check_start(self) -> None:
        if not self._subscriptions:
            raise ClientUsageError("subscribe to at least one topic before start()")

    async def _start(self) -> None:
        core = self._core
        await self._check_subscriptions()
        core.every(core.routes.refresh_interval_s, core.routes.refresh, name="simple-routes")

    async def _check_subscriptions(self) -> None:
        """CHECK_CLIENT_CONFIG for each SQL92 subscription with the brokers of its topic, so a
        bad expression fails ``start()`` rather than every ``receive``. A topic without a
        route yet is skipped: its POPs will answer for it."""
        for topic, expression in sorted(self._subscriptions.items()):
            if isinstance(expression, TagExpression):
                continue
            try:
                route = await self._core.routes.get(topic)
            except RouteNotFoundError as e:
                log.debug("no route for %s: SQL92 check left to the POPs (%s)", topic, e)
                continue
            data = expression.subscription_data(topic)
            addrs = sorted({a for a in map(route.any_addr, route.brokers) if a})
            for addr in addrs:
                request = check_client_config_request(self._core.client_id, self.group, data)
                response = await self._core.invoke(addr, request)
                check_client_config_response(response, addr, topic, expression)

    # -- receive -----------------------------------------------------------------------------

    async def _targets(self) -> list[tuple[str, str, str]]:
        """(topic, broker name, address) of every readable broker of every subscribed topic."""
        targets = []
        for topic in sorted(self._subscriptions):
            route = await self._core.routes.get(topic)
            brokers = sorted({mq.broker_name for mq in route.subscribe_queues})
            for name in brokers:
                addr = route.any_addr(name)
                if addr:
                    targets.append((topic, name, addr))
        return targets

    def _pop_request(
        self, topic: str, count: int, invisible_ms: int, poll_ms: int
    ) -> RemotingCommand:
        header = PopMessageRequestHeader(
            consumer_group=self.group,
            topic=topic,
            queue_id=-1,
            max_msg_nums=count,
            invisible_time=invisible_ms,
            poll_time=poll_ms,
            born_time=int(time.time() * 1000),
            init_mode=0,  # ConsumeInitMode.MIN: a new group starts at a queue's first message
            exp_type=self._subscriptions[topic].expression_type,
            exp=self._subscriptions[topic].expression,
            order=self.fifo,
        )
        return make_request(RequestCode.POP_MESSAGE, header)

    async def _pop(
        self, target: tuple[str, str, str], count: int, invisible_ms: int, poll_ms: int
    ) -> list[ReceivedMessage]:
        topic, broker_name, addr = target
        cmd = self._pop_request(topic, count, invisible_ms, poll_ms)
        timeout_ms = self._core.request_timeout_ms + poll_ms
        response = await self._core.invoke(addr, cmd, timeout_ms)
        if response.code in _EMPTY_CODES:
            return []
        check_response(response)
        messages = messages_from_pop(response, broker_name)
        expression = self._subscriptions.get(topic)
        if expression is None:
            return messages
        # the broker filters by tag hash code; the client checks the tag itself, as RocketMQ
        # (a SQL92 expression is the broker's alone: filter() keeps everything)
        kept = expression.filter(messages, lambda m: m.tags)
        kept_ids = {id(m) for m in kept}
        for dropped in (m for m in messages if id(m) not in kept_ids):
            await self._ack_quietly(dropped)
        return kept

    async def _ack_quietly(self, message: ReceivedMessage) -> None:
        try:
            await self.ack(message)
        except ClientError as e:
            log.debug("ack of filtered-out %s failed: %s", message.msg_id, e)

    async def receive(
        self,
        max_messages: int = 16,
        invisible_duration_s: float | timedelta | None = None,
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages, lent for ``invisible_duration_s`` (default: the
        consumer's ``invisible_duration_s``). Waits up to ``await_duration_s`` when there are
        none, then returns an empty list.
        """
        self._check_open()
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
            raise ClientUsageError(f"max_messages must be an int >= 1: {max_messages!r}")
        invisible_ms = (
            self.invisible_duration_ms
            if invisible_duration_s is None
            else seconds_to_ms(invisible_duration_s, "invisible_duration_s")
        )
        targets = await self._targets()
        if not targets:
            return []
        first = next(self._turn) % len(targets)
        ordered = targets[first:] + targets[:first]
        if len(ordered) == 1:
            return await self._pop(ordered[0], max_messages, invisible_ms, self.await_duration_ms)
        received: list[ReceivedMessage] = []
        errors: list[ClientError] = []
        for target in ordered:  # a sweep without waiting
            try:
                received += await self._pop(target, max_messages - len(received), invisible_ms, 0)
            except (ConnectionLostError, RequestTimeoutError) as e:
                log.debug("pop from %s failed: %s", target[1], e)
                errors.append(e)
            if len(received) >= max_messages:
                break
        if received or self.await_duration_ms <= 0:
            return received
        if len(errors) == len(ordered):
            raise errors[-1]
        return await self._pop(ordered[0], max_messages, invisible_ms, self.await_duration_ms)

    # -- settle ------------------------------------------------------------------------------

    def _handle_of(self, message: ReceivedMessage) -> ReceiptHandle:
        if not isinstance(message, ReceivedMessage):
            raise ClientUsageError(f"expected a received message, got {type(message).__name__}")
        if not message.receipt_handle:
            raise ClientUsageError(
                "the message has no receipt handle: only messages from SimpleConsumer.receive "
                "can be acknowledged this way"
            )
        return ReceiptHandle.parse(message.receipt_handle)

    async def _broker_addr(self, message: ReceivedMessage, handle: ReceiptHandle) -> str:
        return await self._core.resolve_broker(handle.broker_name, message.topic)

    @staticmethod
    def _raise_for(response: RemotingCommand, message: ReceivedMessage, what: str) -> None:
        if response.code == ResponseCode.ILLEGAL_OPERATION:
            raise StaleReceiptHandleError(
                response.code,
                f"{what} of {message.msg_id} refused: {response.remark or 'stale receipt handle'}",
            )
        check_response(response)

    async def ack(self, message: ReceivedMessage) -> None:
        """ACK_MESSAGE: the message is consumed and never delivered to this group again.

        ``StaleReceiptHandleError`` if the loan is over (acknowledged already, expired, or
        renewed with a handle this message object does not have).
        """
        self._check_open()
        handle = self._handle_of(message)
        header = AckMessageRequestHeader(
            consumer_group=self.group,
            topic=message.topic,
            queue_id=handle.queue_id,
            extra_info=str(handle),
            offset=handle.queue_offset,
        )
        addr = await self._broker_addr(message, handle)
        response = await self._core.invoke(addr, make_request(RequestCode.ACK_MESSAGE, header))
        self._raise_for(response, message, "ack")

    async def change_invisible_duration(
        self, message: ReceivedMessage, invisible_duration_s: float | timedelta
    ) -> ReceivedMessage:
        """Restart the message's loan: invisible for ``invisible_duration_s`` from now.

        The broker issues a new receipt handle (built from the response's popTime and
        invisibleTime); it replaces ``message.receipt_handle`` in place, and the message is
        returned. The old handle is stale from now on.
        """
        self._check_open()
        handle = self._handle_of(message)
        invisible_ms = seconds_to_ms(invisible_duration_s, "invisible_duration_s")
        header = ChangeInvisibleTimeRequestHeader(
            consumer_group=self.group,
            topic=message.topic,
            queue_id=handle.queue_id,
            extra_info=str(handle),
            offset=handle.queue_offset,
            invisible_time=invisible_ms,
        )
        addr = await self._broker_addr(message, handle)
        cmd = make_request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header)
        response = await self._core.invoke(addr, cmd)
        self._raise_for(response, message, "change of invisible duration")
        try:
            answer = ChangeInvisibleTimeResponseHeader.from_ext_fields(response.ext_fields)
        except RemoteProtocolError as e:
            raise UnknownBrokerError(response.code, f"malformed response: {e}") from None
        renewed = handle._replace(
            pop_time=answer.pop_time,
            invisible_ms=answer.invisible_time,
            revive_qid=answer.revive_qid,
        )
        # ReceivedMessage is frozen, but the handle is not part of its equality or hash.
        object.__setattr__(message, "receipt_handle", str(renewed))
        return message

    async def poison(self, message: ReceivedMessage, reason: str = "") -> None:
        """Send the message to ``%DLQ%<group>`` now (CONSUMER_SEND_MSG_BACK, delay level -1),
        then acknowledge it. If the ack finds the handle stale, the DLQ copy stays and
        ``StaleReceiptHandleError`` is raised (the message may be delivered again)."""
        self._check_open()
        handle = self._handle_of(message)
        header = ConsumerSendMsgBackRequestHeader(
            offset=message.commitlog_offset,
            group=self.group,
            delay_level=-1,
            origin_msg_id=message.msg_id,
            origin_topic=message.topic,
            unit_mode=False,
        )
        addr = await self._broker_addr(message, handle)
        cmd = make_request(RequestCode.CONSUMER_SEND_MSG_BACK, header)
        cmd.remark = reason or None
        check_response(await self._core.invoke(addr, cmd))
        log.info("%s sent to %%DLQ%%%s: %s", message.msg_id, self.group, reason)
        await self.ack(message)
