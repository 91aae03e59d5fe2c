"""POP_MESSAGE (200050), ACK_MESSAGE (200051, also a lite consumer's), PEEK_MESSAGE (200052),
CHANGE_MESSAGE_INVISIBLETIME (200053), NOTIFICATION (200054) and BATCH_ACK_MESSAGE (200151)."""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError
from pocketmq.broker.handlers.common import bad_request, error_response
from pocketmq.broker.handlers.pop_lite import ack_lite_problem
from pocketmq.broker.protocol import MalformedHeaderError, RemotingCommand, ResponseCode
from pocketmq.broker.protocol.errors import MalformedBodyError
from pocketmq.broker.protocol.headers import (
    AckMessageRequestHeader,
    BatchAck,
    BatchAckMessageRequestBody,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    NotificationRequestHeader,
    NotificationResponseHeader,
    PeekMessageRequestHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    decode_json_body,
)
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.lite import lmq_name
from pocketmq.broker.services.pop import PopError, PoppedMessage

__all__ = [
    "handle_ack",
    "handle_batch_ack",
    "handle_change_invisible",
    "handle_notification",
    "handle_peek",
    "handle_pop",
]


def _missing_group(
    broker: BrokerCore, request: RemotingCommand, group: str
) -> RemotingCommand | None:
    """SUBSCRIPTION_GROUP_NOT_EXIST when ``group`` neither exists nor may be made (the check
    every POP-family request starts with, with RocketMQ's remark)."""
    if broker.groups.find_or_create(group) is None:
        return request.make_response(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group [{group}] does not exist",
        )
    return None


async def _popped_late(
    broker: BrokerCore,
    request: RemotingCommand,
    header: PopMessageRequestHeader,
    attempt: Callable[[], list[PoppedMessage]],
    delay_ms: int,
) -> RemotingCommand:
    """A POP a planned ``delay_pull`` holds: popped and answered once the broker's clock has
    moved ``delay_ms`` (its invisible time counts from then)."""
    await broker.faults.after(delay_ms)
    try:
        popped = attempt()
    except PopError as error:
        return error_response(request, error)
    return _response(broker, request, header, popped, ResponseCode.PULL_NOT_FOUND)


def handle_pop(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand | Awaitable[RemotingCommand]:
    try:
        header = PopMessageRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    if (missing := _missing_group(broker, request, header.consumer_group)) is not None:
        return missing
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

    if broker.faults.pulls:  # planned faults (broker.faults): nothing planned, one test
        delay_ms = broker.faults.take_pull(header.topic, header.queue_id)
        if delay_ms is not None:
            return _popped_late(broker, request, header, attempt, delay_ms)
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
    topic = _lite_source(broker, request, header)
    if isinstance(topic, RemotingCommand):
        return topic
    try:
        broker.pop.ack(header.consumer_group, topic, header.extra_info)
    except PopError as error:
        return error_response(request, error)
    return request.make_response(ResponseCode.SUCCESS)


def _lite_source(
    broker: BrokerCore,
    request: RemotingCommand,
    header: AckMessageRequestHeader | ChangeInvisibleTimeRequestHeader,
) -> str | RemotingCommand:
    """The topic a message is held in: for a lite consumer's request (``liteTopic`` set, as
    AckMessageProcessor.ackLite takes it) its lite topic's LMQ, after ackLite's checks (their
    refusal is returned); else the header's topic."""
    lite = (request.ext_fields or {}).get("liteTopic", "").strip()
    if not lite:
        return header.topic
    problem = ack_lite_problem(
        broker,
        header.consumer_group,
        header.topic,
        lite,
        header.queue_id,
        header.offset,
        header.extra_info,
    )
    if problem is not None:
        return request.make_response(*problem)
    return lmq_name(header.topic, lite)


def handle_change_invisible(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = ChangeInvisibleTimeRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    topic = _lite_source(broker, request, header)
    if isinstance(topic, RemotingCommand):
        return topic
    try:
        handle = broker.pop.change_invisible(
            header.consumer_group, topic, header.extra_info, header.invisible_time
        )
    except PopError as error:
        return error_response(request, error)
    ext = ChangeInvisibleTimeResponseHeader(
        pop_time=handle.pop_time, invisible_time=handle.invisible_ms, revive_qid=handle.revive_qid
    ).to_ext_fields()
    return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)


def handle_peek(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    """PeekMessageProcessor: the messages a POP would take next, none of them lent."""
    try:
        header = PeekMessageRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    if (missing := _missing_group(broker, request, header.consumer_group)) is not None:
        return missing
    max_count = max(1, min(header.max_msg_nums, broker.config.pull_batch_max))
    try:
        raws, rest = broker.pop.peek(
            header.consumer_group, header.topic, header.queue_id, max_count
        )
    except PopError as error:
        return error_response(request, error)
    # PopMessageResponseHeader with only restNum meaningful (Java's unset longs are 0).
    ext = PopMessageResponseHeader(
        pop_time=0, invisible_time=0, revive_qid=0, rest_num=rest
    ).to_ext_fields()
    if not raws:
        return request.make_response(
            ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", ext_fields=ext
        )
    return request.make_response(ResponseCode.SUCCESS, "FOUND", ext_fields=ext, body=b"".join(raws))


def handle_notification(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand | Awaitable[RemotingCommand]:
    """NotificationProcessor: SUCCESS with ``hasMsg``; when there is nothing, held until a
    message arrives or ``pollTime`` runs out (then ``hasMsg`` false)."""
    try:
        header = NotificationRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    if (missing := _missing_group(broker, request, header.consumer_group)) is not None:
        return missing
    group, topic, queue_id, order = (
        header.consumer_group,
        header.topic,
        header.queue_id,
        bool(header.order),
    )

    def answer(has_msg: bool, polling_full: bool = False) -> RemotingCommand:
        ext = NotificationResponseHeader(has_msg=has_msg, polling_full=polling_full).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)

    try:
        found = broker.pop.has_message(group, topic, queue_id, order)
        keys = broker.pop.queues_for(group, topic, queue_id)
    except PopError as error:
        return error_response(request, error)
    if found or header.poll_time <= 0:
        return answer(found)
    if not broker.holds.can_hold():
        return answer(False, polling_full=True)

    async def hold() -> RemotingCommand:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + header.poll_time / 1000
        while True:
            try:
                if broker.pop.has_message(group, topic, queue_id, order):
                    return answer(True)
            except PopError as error:
                return error_response(request, error)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return answer(False)
            await broker.holds.wait_any(keys, remaining)

    return hold()


def _set_bits(encoded: str) -> list[int]:
    # java.util.BitSet.toByteArray: little-endian bytes, bit i of byte k is index 8k + i.
    data = base64.b64decode(encoded, validate=True)
    return [8 * k + i for k, byte in enumerate(data) for i in range(8) if byte >> i & 1]


_AckEntry = tuple[str, str, bool, int, list[int], int, int]


def _entry(ack: BatchAck) -> _AckEntry:
    """(group, topic, retry, queue, offsets, pop time, invisible ms); MalformedBodyError."""
    group = ack.c if ack.c is not None else ack.consumerGroup
    topic = ack.t if ack.t is not None else ack.topic
    start = ack.so if ack.so is not None else ack.startOffset
    queue_id = ack.q if ack.q is not None else ack.queueId
    pop_time = ack.pt if ack.pt is not None else ack.popTime
    invisible = ack.it if ack.it is not None else ack.invisibleTime
    bits = ack.b if ack.b is not None else ack.bitSet
    if (
        group is None
        or topic is None
        or start is None
        or queue_id is None
        or pop_time is None
        or invisible is None
    ):
        raise MalformedBodyError("a batch ack entry misses a field", offset=None)
    retry = (ack.r if ack.r is not None else ack.retry) == "1"
    offsets = [start + i for i in _set_bits(bits)] if bits else []
    return group, topic, retry, queue_id, offsets, pop_time, invisible


def handle_batch_ack(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    """AckMessageProcessor's batch path: every set bit of each entry acknowledges one offset of
    that POP; NO_MESSAGE when the body holds no entry."""
    try:
        body = decode_json_body(request.body or b"{}", BatchAckMessageRequestBody)
        entries = [_entry(ack) for ack in body.acks or []]
    except (MalformedBodyError, binascii.Error, ValueError) as error:
        return bad_request(request, error, connection)
    if not entries:
        return request.make_response(ResponseCode.NO_MESSAGE, "no ack in the body")
    for group, topic, retry, queue_id, offsets, pop_time, invisible in entries:
        broker.pop.batch_ack(group, topic, retry, queue_id, offsets, pop_time, invisible)
    return request.make_response(ResponseCode.SUCCESS)
