"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361), with long polling.

The response body is the stored records, byte for byte, as RocketMQ sends them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from time import perf_counter

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError
from pocketmq.broker.handlers.common import error_response
from pocketmq.broker.protocol import MalformedHeaderError, RemotingCommand, ResponseCode
from pocketmq.broker.protocol.codes import PullSysFlag
from pocketmq.broker.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.pull import MessageFilter
from pocketmq.store.message_store import GetResult, GetStatus

__all__ = ["handle_pull"]

# Plain ints: ``int & IntFlag`` runs the flag's Python ``__rand__``, several times per pull.
_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
_COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)
_SUSPEND = int(PullSysFlag.SUSPEND)


def _status_code(result: GetResult, requested_offset: int) -> int:
    status = result.status
    if status is GetStatus.FOUND:
        return ResponseCode.SUCCESS
    if status is GetStatus.NO_MATCHED_MESSAGE:
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
        return (
            ResponseCode.PULL_OFFSET_MOVED if requested_offset != 0 else ResponseCode.PULL_NOT_FOUND
        )
    if status is GetStatus.OFFSET_OVERFLOW_ONE:
        return ResponseCode.PULL_NOT_FOUND
    return ResponseCode.PULL_OFFSET_MOVED  # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL


def handle_pull(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand | Awaitable[RemotingCommand]:
    try:
        header = PullMessageRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad pull header: {error}")
    pulls = broker.pulls
    try:
        pulls.readable_queue(header.consumer_group, header.topic, header.queue_id)
        selector = (
            pulls.filter_of(header.subscription, header.expression_type)
            if header.sys_flag & _SUBSCRIPTION
            else pulls.filter_of_subscription(header.consumer_group, header.topic)
        )
    except BrokerError as error:
        return error_response(request, error)
    if header.sys_flag & _COMMIT_OFFSET and header.commit_offset >= 0:
        broker.offsets.commit(
            header.consumer_group, header.topic, header.queue_id, header.commit_offset
        )
    max_count = max(1, min(header.max_msg_nums, broker.config.pull_batch_max))
    max_bytes = min(
        header.max_msg_bytes or broker.config.pull_bytes_max, broker.config.pull_bytes_max
    )
    if broker.faults.pulls:  # planned faults (broker.faults): nothing planned, one test
        delay_ms = broker.faults.take_pull(header.topic, header.queue_id)
        if delay_ms is not None:
            return _held_by_fault(broker, request, header, selector, max_count, max_bytes, delay_ms)
    response = _read(broker, request, header, selector, max_count, max_bytes)
    suspend = header.sys_flag & _SUSPEND
    if response.code != ResponseCode.PULL_NOT_FOUND or not suspend or not broker.holds.can_hold():
        return response
    if broker.config.long_polling:
        timeout_s = max(0, header.suspend_timeout_millis) / 1000
    else:
        timeout_s = broker.config.short_polling_ms / 1000
    return _hold(broker, request, header, selector, max_count, max_bytes, timeout_s)


async def _held_by_fault(
    broker: BrokerCore,
    request: RemotingCommand,
    header: PullMessageRequestHeader,
    selector: MessageFilter,
    max_count: int,
    max_bytes: int,
    delay_ms: int,
) -> RemotingCommand:
    """A pull a planned fault delays: read and answered once the broker's clock has moved
    ``delay_ms`` (a manual clock: when advanced that far)."""
    await broker.faults.after(delay_ms)
    return _read(broker, request, header, selector, max_count, max_bytes)


async def _hold(
    broker: BrokerCore,
    request: RemotingCommand,
    header: PullMessageRequestHeader,
    selector: MessageFilter,
    max_count: int,
    max_bytes: int,
    timeout_s: float,
) -> RemotingCommand:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        # Read again right before waiting, with no await in between: a message that arrived
        # after the handler's first read, but before this task ran, is not missed.
        response = _read(broker, request, header, selector, max_count, max_bytes)
        # Woken by a message the filter drops: keep waiting until the deadline.
        if (
            response.code != ResponseCode.PULL_NOT_FOUND
            and response.code != ResponseCode.PULL_RETRY_IMMEDIATELY
        ):
            return response
        remaining = deadline - loop.time()
        if remaining <= 0:
            return response
        await broker.holds.wait(header.topic, header.queue_id, remaining)


def _read(
    broker: BrokerCore,
    request: RemotingCommand,
    header: PullMessageRequestHeader,
    selector: MessageFilter,
    max_count: int,
    max_bytes: int,
) -> RemotingCommand:
    started = perf_counter()
    result = broker.store.get_messages(
        header.topic,
        header.queue_id,
        header.queue_offset,
        max_count,
        tags_codes=selector.tags,
        max_bytes=max_bytes,
        group=header.consumer_group,
    )
    result = selector.apply(result)
    stats = broker.stats
    stats.read((perf_counter() - started) * 1000.0)
    code = _status_code(result, header.queue_offset)
    response_header = PullMessageResponseHeader(
        suggest_which_broker_id=0,
        next_begin_offset=result.next_offset,
        min_offset=result.min_offset,
        max_offset=result.max_offset,
    )
    body = None
    if result.messages:
        body = b"".join([view for _, _, view in result.messages])
        stats.got(header.consumer_group, header.topic, len(result.messages), len(body))
    else:
        stats.missed()
    return request.make_response(code, None, ext_fields=response_header.to_ext_fields(), body=body)
