"""POP_MESSAGE (200050), ACK_MESSAGE (200051) and CHANGE_MESSAGE_INVISIBLETIME (200053)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError
from pocketmq.broker.handlers.common import bad_request, error_response
from pocketmq.broker.protocol import MalformedHeaderError, RemotingCommand, ResponseCode
from pocketmq.broker.protocol.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.pop import PopError, PoppedMessage

__all__ = ["handle_ack", "handle_change_invisible", "handle_pop"]


def handle_pop(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand | Awaitable[RemotingCommand]:
    try:
        header = PopMessageRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    if broker.groups.find_or_create(header.consumer_group) is None:
        return request.make_response(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"group {header.consumer_group} does not exist",
        )
    try:
        selector = broker.pulls.filter_of(header.exp, header.exp_type)
    except BrokerError as error:
        return error_response(request, error)
    order = bool(header.order)
    max_count = max(1, min(header.max_msg_nums, broker.config.pull_batch_max))

    def attempt() -> list[PoppedMessage]:
        return broker.pop.pop(
            header.consumer_group,
            header.topic,
            header.queue_id,
            max_count,
            header.invisible_time,
            order,
            selector.tags,
            sql=selector.sql,
        )

    try:
        popped = attempt()
    except PopError as error:
        return error_response(request, error)
    if popped or header.poll_time <= 0:
        return _response(broker, request, header, popped, ResponseCode.PULL_NOT_FOUND)
    if not broker.holds.can_hold():
        return request.make_response(ResponseCode.POLLING_FULL, "too many pop requests are waiting")
    keys = [
        (topic, queue)
        for topic, queue in broker.pop.queues_for(
            header.consumer_group, header.topic, header.queue_id
        )
    ]

    async def hold() -> RemotingCommand:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + header.poll_time / 1000
        while True:
            # Try again right before waiting (no await in between), so no arrival is missed.
            try:
                found = attempt()
            except PopError as error:
                return error_response(request, error)
            if found:
                return _response(broker, request, header, found, ResponseCode.POLLING_TIMEOUT)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return _response(broker, request, header, [], ResponseCode.POLLING_TIMEOUT)
            await broker.holds.wait_any(keys, remaining)

    return hold()


def _response(
    broker: BrokerCore,
    request: RemotingCommand,
    header: PopMessageRequestHeader,
    popped: list[PoppedMessage],
    empty_code: int,
) -> RemotingCommand:
    now = broker.now_ms()
    if not popped:
        ext = PopMessageResponseHeader(
            pop_time=now, invisible_time=header.invisible_time, revive_qid=0, rest_num=0
        ).to_ext_fields()
        return request.make_response(empty_code, "no new message", ext_fields=ext)
    # RocketMQ's ExtraInfoUtil formats: "<retry flag> <queue id> <start offset>" per queue, and
    # "<retry flag> <queue id> <offset>,<offset>,..." for the message offsets.
    starts: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], list[int]] = {}
    for message in popped:
        key = ("1" if message.handle.retry else "0", message.queue_id)
        starts.setdefault(key, message.handle.start_offset)
        offsets.setdefault(key, []).append(message.queue_offset)
    start_info = ";".join(f"{retry} {queue} {start}" for (retry, queue), start in starts.items())
    offset_info = ";".join(
        f"{retry} {queue} {','.join(map(str, o))}" for (retry, queue), o in offsets.items()
    )
    ext = PopMessageResponseHeader(
        pop_time=popped[0].handle.pop_time,
        invisible_time=header.invisible_time,
        revive_qid=0,
        rest_num=0,
        start_offset_info=start_info,
        msg_offset_info=offset_info,
    ).to_ext_fields()
    return request.make_response(
        ResponseCode.SUCCESS, ext_fields=ext, body=b"".join(m.raw for m in popped)
    )


def handle_ack(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = AckMessageRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    try:
        broker.pop.ack(header.consumer_group, header.topic, header.extra_info)
    except PopError as error:
        return error_response(request, error)
    return request.make_response(ResponseCode.SUCCESS)


def handle_change_invisible(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = ChangeInvisibleTimeRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    try:
        handle = broker.pop.change_invisible(
            header.consumer_group, header.topic, header.extra_info, header.invisible_time
        )
    except PopError as error:
        return error_response(request, error)
    ext = ChangeInvisibleTimeResponseHeader(
        pop_time=handle.pop_time, invisible_time=handle.invisible_ms, revive_qid=handle.revive_qid
    ).to_ext_fields()
    return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)
