"""Queue offset queries to a queue's broker: GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from pocketmq.broker.protocol import RemotingCommand, RequestCode
from pocketmq.broker.protocol.errors import RemoteProtocolError
from pocketmq.broker.protocol.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
)

from .connection import check_response, make_request
from .errors import UnknownBrokerError
from .message import MessageQueue

T = TypeVar("T")

if TYPE_CHECKING:
    from ._core import ClientCore

__all__ = ["earliest_store_time", "max_offset", "min_offset", "search_offset"]


async def _ask(core: ClientCore, mq: MessageQueue, cmd: RemotingCommand) -> RemotingCommand:
    addr = await core.resolve_broker(mq.broker_name, mq.topic)
    return check_response(await core.invoke(addr, cmd))


def _malformed(response: RemotingCommand, error: RemoteProtocolError) -> UnknownBrokerError:
    return UnknownBrokerError(response.code, f"malformed response: {error}")


async def _ask_header(
    core: ClientCore, mq: MessageQueue, code: int, header: Any, response_type: type[T]
) -> T:
    """Ask the queue's broker; the response's custom header decoded as ``response_type``."""
    response = await _ask(core, mq, make_request(code, header))
    try:
        return response_type.from_ext_fields(response.ext_fields)  # type: ignore[attr-defined]
    except RemoteProtocolError as e:
        raise _malformed(response, e) from None


async def max_offset(core: ClientCore, mq: MessageQueue) -> int:
    """One past the last message of the queue."""
    header = GetMaxOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id)
    return (
        await _ask_header(core, mq, RequestCode.GET_MAX_OFFSET, header, GetMaxOffsetResponseHeader)
    ).offset


async def min_offset(core: ClientCore, mq: MessageQueue) -> int:
    header = GetMinOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id)
    return (
        await _ask_header(core, mq, RequestCode.GET_MIN_OFFSET, header, GetMinOffsetResponseHeader)
    ).offset


async def search_offset(core: ClientCore, mq: MessageQueue, timestamp_ms: int) -> int:
    """The offset of the first message stored at or after ``timestamp_ms`` (broker's rule)."""
    header = SearchOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp_ms)
    return (
        await _ask_header(
            core, mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header, SearchOffsetResponseHeader
        )
    ).offset


async def earliest_store_time(core: ClientCore, mq: MessageQueue) -> int:
    header = GetEarliestMsgStoretimeRequestHeader(topic=mq.topic, queue_id=mq.queue_id)
    return (
        await _ask_header(
            core,
            mq,
            RequestCode.GET_EARLIEST_MSG_STORETIME,
            header,
            GetEarliestMsgStoretimeResponseHeader,
        )
    ).timestamp
