"""CONSUMER_SEND_MSG_BACK (36): a consumer gives a message back for a later retry, or the DLQ.

RocketMQ's rules (AbstractSendMessageProcessor.consumerSendMsgBack): the copy goes to
``%RETRY%<group>`` with delay level ``3 + reconsumeTimes`` (or the level the consumer asked for)
and reconsume times + 1; once reconsume times reach the maximum (16 by default, the group's
``retryMaxTimes`` unless the request says otherwise) or the level asked for is negative, it goes
to ``%DLQ%<group>`` instead, and the message becomes poisoned (state 20).

The state's reason says which of the two happened: ``dead-lettered to %DLQ%<group> by the
consumer: <remark>`` when the consumer asked (a negative level; ``PushConsumer.poison`` and
``SimpleConsumer.poison`` put their reason in the request's remark, cut to
``MAX_REMARK_CHARS``), ``dead-lettered to %DLQ%<group>: consumption failed N times (retry limit
M)`` when the retries ran out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.broker.handlers.common import bad_request
from pocketmq.broker.protocol import MalformedHeaderError, RemotingCommand, ResponseCode
from pocketmq.broker.protocol.headers import ConsumerSendMsgBackRequestHeader
from pocketmq.broker.remoting.server import Connection
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError
from pocketmq.store.message_store import copy_of
from pocketmq.store.state import MessageState

if TYPE_CHECKING:
    from pocketmq.broker.app import Broker

__all__ = [
    "MAX_REMARK_CHARS",
    "dead_letter",
    "dlq_topic",
    "first_delivery",
    "handle_consumer_send_back",
    "retry_topic",
]

# A consumer's reason for poisoning a message is stored in the state record: a client may not
# make that record (kept for as long as the message) arbitrarily large.
MAX_REMARK_CHARS = 512


def retry_topic(group: str) -> str:
    return f"%RETRY%{group}"


def dlq_topic(group: str) -> str:
    return f"%DLQ%{group}"


def handle_consumer_send_back(
    broker: Broker, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error)
    group = broker.groups.find_or_create(header.group)
    if group is None:
        return request.make_response(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group not exist, {header.group}",
        )
    try:
        record = broker.store.read(header.offset)
    except (OffsetOutOfRangeError, CorruptRecordError) as error:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}: {error}"
        )
    properties = dict(record.properties)
    properties.setdefault("RETRY_TOPIC", record.topic)
    origin = (
        header.origin_msg_id
        or properties.get("ORIGIN_MESSAGE_ID")
        or properties.get("UNIQ_KEY")
        or ""
    )
    properties["ORIGIN_MESSAGE_ID"] = origin
    max_times = (
        header.max_reconsume_times
        if header.max_reconsume_times is not None
        else group.retry_max_times
    )
    if max_times < 0:
        max_times = group.retry_max_times
    reconsume = record.reconsume_times
    if header.delay_level < 0:  # the consumer asks for the DLQ (PushConsumer.poison ...)
        remark = _capped(request.remark)
        if remark:
            dead_letter(broker, record, properties, header.group, by="the consumer", reason=remark)
        else:
            by = f"the consumer (delay level {header.delay_level})"
            dead_letter(broker, record, properties, header.group, by=by)
        return request.make_response(ResponseCode.SUCCESS)
    if reconsume >= max_times:
        failed = reconsume + 1  # the first delivery and every retry
        reason = f"consumption failed {_times(failed)} (retry limit {max_times})"
        dead_letter(broker, record, properties, header.group, reason=reason)
        return request.make_response(ResponseCode.SUCCESS)
    level = header.delay_level or 3 + reconsume
    properties["DELAY"] = str(level)
    properties["RECONSUME_TIME"] = str(reconsume + 1)
    properties.pop("WAIT", None)
    topic = retry_topic(header.group)
    broker.topics.create_on_send(topic, 1)
    result = broker.put_from_client(
        copy_of(
            record, topic=topic, queue_id=0, properties=properties, reconsume_times=reconsume + 1
        )
    )
    if result is None:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, "the retry message could not be stored"
        )
    return request.make_response(ResponseCode.SUCCESS)


def _capped(remark: str | None) -> str:
    if not remark:
        return ""
    if len(remark) > MAX_REMARK_CHARS:
        return remark[:MAX_REMARK_CHARS] + " [cut]"
    return remark


def _times(count: int) -> str:
    return "1 time" if count == 1 else f"{count} times"


def dead_letter(
    broker: Broker,
    record,  # noqa: ANN001
    properties: dict[str, str],
    group: str,
    *,
    by: str = "",
    reason: str = "",
) -> None:
    """Write ``record`` to the group's DLQ and mark it (and its first delivery) poisoned.

    The state's reason is ``dead-lettered to %DLQ%<group>[ by <by>][: <reason>]``: ``by`` names
    who asked when it was not the broker's own rule, ``reason`` says why.
    """
    topic = dlq_topic(group)
    text = f"dead-lettered to {topic}"
    if by:
        text += f" by {by}"
    if reason:
        text += f": {reason}"
    broker.topics.create_on_send(topic, 1)
    properties = dict(properties)
    for name in ("DELAY", "WAIT"):
        properties.pop(name, None)
    properties["RECONSUME_TIME"] = str(record.reconsume_times + 1)
    properties.setdefault("ORIGIN_MESSAGE_ID", properties.get("UNIQ_KEY", ""))
    broker.put_internal(
        copy_of(
            record,
            topic=topic,
            queue_id=0,
            properties=properties,
            reconsume_times=record.reconsume_times + 1,
        )
    )
    # Poisoned for this group only: other groups that consume the topic still get the message.
    broker.store.set_state(
        record.physical_offset,
        MessageState.POISONED,
        text,
        group=group,
    )
    original = first_delivery(broker, properties)
    if original is not None and original != record.physical_offset:
        broker.store.set_state(original, MessageState.POISONED, text, group=group)


def first_delivery(broker: Broker, properties: dict[str, str]) -> int | None:
    """The commitlog offset of the message as first sent, found by its unique key."""
    topic, key = properties.get("RETRY_TOPIC"), properties.get("ORIGIN_MESSAGE_ID")
    if not topic or not key:
        return None
    for record in broker.store.query_by_key(topic, key, max_results=4):
        if record.unique_key == key and not record.topic.startswith("%"):
            return record.physical_offset
    return None
