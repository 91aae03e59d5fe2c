"""A small pull API for tools and tests: read a queue from an offset, ask for queue offsets,
look messages up by key or by offset message id.

    async with PullConsumer(namesrv="127.0.0.1:9876") as puller:
        for mq in await puller.queues("T"):
            result = await puller.pull(mq, 0, 32)

Pulls carry their own subscription (PullSysFlag.SUBSCRIPTION), so no heartbeat is needed;
they commit nothing. The default group is ``TOOLS_CONSUMER``, one of RocketMQ's reserved
groups.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from pocketmq.broker.protocol import RequestCode, ResponseCode
from pocketmq.broker.protocol.codes import PullSysFlag
from pocketmq.broker.protocol.errors import RemoteProtocolError
from pocketmq.broker.protocol.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryMessageRequestHeader,
    ViewMessageRequestHeader,
)
from pocketmq.broker.protocol.message_codec import decode_message, decode_messages
from pocketmq.ids import InvalidMessageIdError, decode_offset_msg_id

from . import _queries
from ._core import ClientCore, CoreClient
from .connection import Credentials, check_response, make_request
from .errors import ClientUsageError, CorruptMessageError, UnknownBrokerError
from .filter import FilterExpression, filter_expression
from .message import MessageQueue, ReceivedMessage

if TYPE_CHECKING:
    from pocketmq.broker.protocol import RemotingCommand

__all__ = ["PullConsumer", "PullResult", "PullStatus", "pull_queue"]

TOOLS_GROUP = "TOOLS_CONSUMER"


class PullStatus(StrEnum):
    """RocketMQ's ``PullStatus`` for response codes 0, 19, 20, 21."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_STATUS_BY_CODE: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(frozen=True)
class PullResult:
    """``next_offset`` is where the next pull should start; ``max_offset`` is one past the
    queue's last message. ``messages`` are already filtered by the expression."""

    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[ReceivedMessage] = field(default_factory=list)


async def pull_queue(
    core: ClientCore,
    group: str,
    mq: MessageQueue,
    offset: int,
    max_messages: int,
    *,
    expression: str | FilterExpression = "*",
    expression_type: str = "TAG",
    suspend_ms: int = 0,
    timeout_ms: float | None = None,
    check_crc: bool = True,
) -> PullResult:
    """One PULL_MESSAGE with its own subscription; nothing is committed.

    A record that fails its BODYCRC (unless ``check_crc=False``) or does not decode raises
    ``CorruptMessageError`` with the good messages before it and the offset to read again.
    ``expression_type="SQL92"`` reads ``expression`` as SQL92 over the message properties,
    filtered by the broker (a bad one raises ``SubscriptionError``).
    """
    if max_messages < 1:
        raise ClientUsageError("max_messages must be >= 1")
    if offset < 0:
        raise ClientUsageError("offset must be >= 0")
    expr = filter_expression(expression, expression_type)
    sys_flag = PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if suspend_ms > 0 else 0)
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=mq.topic,
        queue_id=mq.queue_id,
        queue_offset=offset,
        max_msg_nums=max_messages,
        sys_flag=int(sys_flag),
        commit_offset=0,
        suspend_timeout_millis=suspend_ms,
        subscription=expr.expression,
        sub_version=int(time.time() * 1000),
        expression_type=expr.expression_type,
    )
    addr = await core.resolve_broker(mq.broker_name, mq.topic)
    if timeout_ms is None:
        timeout_ms = core.request_timeout_ms + suspend_ms
    response = await core.invoke(addr, make_request(RequestCode.PULL_MESSAGE, header), timeout_ms)
    status = _STATUS_BY_CODE.get(response.code)
    if status is None:
        check_response(response)  # raises the broker's error
        raise UnknownBrokerError(response.code, response.remark)
    try:
        h = PullMessageResponseHeader.from_ext_fields(response.ext_fields)
    except RemoteProtocolError as e:
        raise UnknownBrokerError(response.code, f"malformed pull response: {e}") from None
    messages: list[ReceivedMessage] = []
    if status is PullStatus.FOUND and response.body:
        try:
            views = ReceivedMessage.from_records(response.body, mq, check_crc=check_crc)
        except CorruptMessageError as error:
            at = offset if error.queue_offset is None else error.queue_offset
            good = expr.filter(error.messages, lambda m: m.tags)
            raise CorruptMessageError(
                error.reason, messages=good, queue=mq, queue_offset=at
            ) from None
        messages = expr.filter(views, lambda m: m.tags)
    return PullResult(status, h.next_begin_offset, h.min_offset, h.max_offset, messages)


class PullConsumer(CoreClient):
    """Reads queues on demand; an async context manager."""

    _kind = "pull consumer"

    def __init__(
        self,
        group: str = TOOLS_GROUP,
        *,
        namesrv: str | Sequence[str] | None = None,
        request_timeout_ms: float = 3000,
        instance_name: str | None = None,
        client_ip: str | None = None,
        credentials: Credentials | tuple[str, str] | None = None,
        tls: bool | None = None,
        tls_ca: str | os.PathLike[str] | None = None,
        check_crc: bool = True,
    ) -> None:
        self.group = group
        self.check_crc = check_crc  # see pull_queue
        super().__init__(
            namesrv,
            request_timeout_ms=request_timeout_ms,
            instance_name=instance_name,
            client_ip=client_ip,
            credentials=credentials,
            tls=tls,
            tls_ca=tls_ca,
        )

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues."""
        self._check_open()
        return list((await self._core.routes.get(topic)).subscribe_queues)

    async def pull(
        self,
        queue: MessageQueue,
        offset: int,
        max_messages: int = 32,
        *,
        expression: str | FilterExpression = "*",
        expression_type: str = "TAG",
        suspend_ms: int = 0,
    ) -> PullResult:
        """Read up to ``max_messages`` from ``offset`` matching ``expression`` (tags, or with
        ``expression_type="SQL92"`` SQL92 over the properties); ``suspend_ms`` > 0 long-polls."""
        self._check_open()
        return await pull_queue(
            self._core,
            self.group,
            queue,
            offset,
            max_messages,
            expression=expression,
            expression_type=expression_type,
            suspend_ms=suspend_ms,
            check_crc=self.check_crc,
        )

    async def min_offset(self, queue: MessageQueue) -> int:
        self._check_open()
        return await _queries.min_offset(self._core, queue)

    async def max_offset(self, queue: MessageQueue) -> int:
        """One past the queue's last message."""
        self._check_open()
        return await _queries.max_offset(self._core, queue)

    async def offset_for_timestamp(self, queue: MessageQueue, timestamp_ms: int) -> int:
        self._check_open()
        return await _queries.search_offset(self._core, queue, timestamp_ms)

    async def earliest_store_time(self, queue: MessageQueue) -> int:
        self._check_open()
        return await _queries.earliest_store_time(self._core, queue)

    async def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_messages: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
        unique_key: bool = False,
    ) -> list[ReceivedMessage]:
        """QUERY_MESSAGE on every master of ``topic``: messages whose ``KEYS`` hold ``key``
        (or, with ``unique_key``, whose ``UNIQ_KEY`` is ``key``), oldest first."""
        self._check_open()
        route = await self._core.routes.get(topic)
        header = QueryMessageRequestHeader(
            topic=topic,
            key=key,
            max_num=max_messages,
            begin_timestamp=begin_ms,
            end_timestamp=int(time.time() * 1000) if end_ms is None else end_ms,
        )
        found: list[ReceivedMessage] = []
        for broker_name, addr in sorted(route.master_addrs().items()):
            cmd = make_request(RequestCode.QUERY_MESSAGE, header)
            if unique_key:
                assert cmd.ext_fields is not None
                cmd.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
            response = await self._core.invoke(addr, cmd)
            if response.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            check_response(response)
            try:
                records = decode_messages(response.body or b"", check_crc=True, strict=True)
            except RemoteProtocolError as e:
                raise CorruptMessageError(str(e)) from None
            for record in records:
                mq = MessageQueue(record.topic, broker_name, record.queue_id)
                found.append(ReceivedMessage.from_ext(record, mq))
        if unique_key:
            found = [m for m in found if m.msg_id == key]
        else:
            found = [m for m in found if key in m.keys]
        found.sort(key=lambda m: (m.store_timestamp, m.queue.broker_name, m.commitlog_offset))
        return found[:max_messages]

    async def view(self, offset_msg_id: str) -> ReceivedMessage:
        """VIEW_MESSAGE_BY_ID: the message an offset message id points at (its broker and
        commitlog offset are inside the id)."""
        self._check_open()
        try:
            decoded = decode_offset_msg_id(offset_msg_id)
        except InvalidMessageIdError as e:
            raise ClientUsageError(f"not an offset message id: {e}") from None
        addr = decoded.broker_addr
        header = ViewMessageRequestHeader(offset=decoded.physical_offset)
        response: RemotingCommand = check_response(
            await self._core.invoke(addr, make_request(RequestCode.VIEW_MESSAGE_BY_ID, header))
        )
        try:
            record = decode_message(response.body or b"", check_crc=True)
        except RemoteProtocolError as e:
            raise CorruptMessageError(str(e)) from None
        broker_name = self._broker_name_of(addr) or addr
        return ReceivedMessage.from_ext(
            record, MessageQueue(record.topic, broker_name, record.queue_id)
        )

    def _broker_name_of(self, addr: str) -> str | None:
        for topic in self._core.routes.cached_topics():
            route = self._core.routes.cached(topic)
            if route is None:
                continue
            for name, addrs in route.brokers.items():
                if addr in addrs.values():
                    return name
        return None
