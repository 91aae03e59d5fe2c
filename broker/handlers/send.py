"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320)."""

from __future__ import annotations

import random
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from broker.protocol import MalformedBodyError, MalformedHeaderError, RemotingCommand, ResponseCode
from broker.protocol.codes import RequestCode
from broker.protocol.headers import (
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    parse_send_message_header,
)
from broker.protocol.message_codec import decode_batch
from broker.remoting.server import Connection
from broker.services.schedule import DelayError
from broker.services.timer import TimerError
from broker.services.topics import NOT_ALLOWED_SEND_TOPICS, PERM_WRITE, validate_topic_name
from store.errors import LimitExceededError, StoreError, StoreFullError
from store.message_store import PutMessage, PutResult
from store.record import Host, decode_properties, encode_properties

if TYPE_CHECKING:
    from broker.app import Broker

__all__ = ["handle_send"]


def _refuse(request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    return request.make_response(code, remark)


def _born_host(connection: Connection) -> Host:
    try:
        return connection.attributes["born_host"]
    except KeyError:
        host = (
            Host.parse(connection.remote_address)
            if connection.remote_address != "?"
            else Host(b"\0\0\0\0", 0)
        )
        connection.attributes["born_host"] = host
        return host


def handle_send(
    broker: Broker, request: RemotingCommand, connection: Connection
) -> RemotingCommand | Awaitable[RemotingCommand]:
    try:
        header = parse_send_message_header(request.code, request.ext_fields)
    except MalformedHeaderError as error:
        return _refuse(request, ResponseCode.SYSTEM_ERROR, f"bad send header: {error}")
    problem = _check_topic(broker, header)
    if problem is not None:
        return _refuse(request, *problem)
    config = broker.topics.create_on_send(header.topic, header.default_topic_queue_nums)
    if config is None:
        return _refuse(
            request,
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic[{header.topic}] not exist, apply first please! (auto-create is off)",
        )
    if not config.perm & PERM_WRITE:
        return _refuse(
            request, ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] sending is forbidden"
        )
    queue_id = header.queue_id
    if queue_id < 0:
        queue_id = random.randrange(config.write_queue_nums)
    elif queue_id >= config.write_queue_nums:
        return _refuse(
            request,
            ResponseCode.SYSTEM_ERROR,
            f"request queueId[{queue_id}] is illegal, topic {header.topic} has {config.write_queue_nums} write queues",
        )
    body = request.body or b""
    born_host = _born_host(connection)
    if request.code == RequestCode.SEND_BATCH_MESSAGE or header.batch:
        return _send_batch(broker, request, header, queue_id, body, born_host)
    properties = decode_properties(header.properties) if header.properties else {}
    topic = header.topic
    if topic.startswith("%RETRY%"):
        # A consumer's own retry copy (its fallback when CONSUMER_SEND_MSG_BACK failed): past the
        # maximum reconsume times it goes to the group's DLQ (SendMessageProcessor).
        topic, queue_id = _retry_or_dlq(broker, header, properties, queue_id)
    message = PutMessage(
        topic=topic,
        body=body,
        queue_id=queue_id,
        flag=header.flag,
        properties=properties,
        properties_text=(header.properties or "")
        if topic == header.topic
        else encode_properties(properties),
        sysflag=header.sys_flag,
        born_timestamp=header.born_timestamp,
        born_host=born_host,
        reconsume_times=header.reconsume_times or 0,
    )
    try:
        result = broker.put_message(message, properties)
    except (DelayError, TimerError) as error:
        return _refuse(request, ResponseCode.MESSAGE_ILLEGAL, str(error))
    except LimitExceededError as error:
        return _refuse(request, ResponseCode.MESSAGE_ILLEGAL, str(error))
    except StoreFullError as error:
        return _refuse(
            request,
            ResponseCode.SERVICE_NOT_AVAILABLE,
            f"service not available now: disk full ({error})",
        )
    except StoreError as error:
        return _refuse(request, ResponseCode.SYSTEM_ERROR, f"store refused the message: {error}")
    response_header = SendMessageResponseHeader(
        msg_id=broker.offset_msg_id(result.physical_offset),
        queue_id=queue_id,
        queue_offset=result.queue_offset,
        transaction_id=properties.get("UNIQ_KEY"),
        msg_region=broker.config.region_id,
        trace_on=True,
    )
    return _maybe_wait(broker, request, result, response_header, properties.get("WAIT") != "false")


def _send_batch(
    broker: Broker,
    request: RemotingCommand,
    header: SendMessageRequestHeader,
    queue_id: int,
    body: bytes,
    born_host: Host,
) -> RemotingCommand | Awaitable[RemotingCommand]:
    if header.topic.startswith("%RETRY%"):
        return _refuse(
            request, ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group"
        )
    if len(body) > broker.config.batch_size_max:
        return _refuse(
            request,
            ResponseCode.MESSAGE_ILLEGAL,
            f"batch of {len(body)} bytes is over batch_size_max {broker.config.batch_size_max}",
        )
    try:
        inner = decode_batch(body)
    except MalformedBodyError as error:
        return _refuse(request, ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {error}")
    if not inner:
        return _refuse(request, ResponseCode.MESSAGE_ILLEGAL, "empty batch")
    messages = [
        PutMessage(
            topic=header.topic,
            body=item.body,
            queue_id=queue_id,
            flag=item.flag,
            properties=dict(item.properties),
            properties_text=encode_properties(item.properties),
            sysflag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=born_host,
        )
        for item in inner
    ]
    try:
        results = broker.store.put_many(messages)
    except LimitExceededError as error:
        return _refuse(request, ResponseCode.MESSAGE_ILLEGAL, f"a message of the batch: {error}")
    except StoreFullError as error:
        return _refuse(
            request,
            ResponseCode.SERVICE_NOT_AVAILABLE,
            f"service not available now: disk full ({error})",
        )
    except StoreError as error:
        return _refuse(request, ResponseCode.SYSTEM_ERROR, f"store refused the batch: {error}")
    broker.message_arrived(header.topic, queue_id)
    unique_keys = [item.properties.get("UNIQ_KEY", "") for item in inner]
    response_header = SendMessageResponseHeader(
        msg_id=",".join(broker.offset_msg_id(r.physical_offset) for r in results),
        queue_id=queue_id,
        queue_offset=results[0].queue_offset,
        transaction_id=",".join(unique_keys),
        msg_region=broker.config.region_id,
        trace_on=True,
    )
    properties = decode_properties(header.properties) if header.properties else {}
    return _maybe_wait(
        broker, request, results[-1], response_header, properties.get("WAIT") != "false"
    )


def _maybe_wait(
    broker: Broker,
    request: RemotingCommand,
    result: PutResult,
    response_header: SendMessageResponseHeader,
    wait_store: bool,
) -> RemotingCommand | Awaitable[RemotingCommand]:
    ext = _response_ext(response_header)
    if not broker.flush.sync or not wait_store:
        return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)

    async def durable() -> RemotingCommand:
        if await broker.flush.wait_durable(result.end_offset):
            return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)
        return request.make_response(
            ResponseCode.FLUSH_DISK_TIMEOUT, "flush to disk timed out", ext_fields=ext
        )

    return durable()


def _retry_or_dlq(
    broker: Broker, header: SendMessageRequestHeader, properties: dict[str, str], queue_id: int
) -> tuple[str, int]:
    group_name = header.topic[len("%RETRY%") :]
    group = broker.groups.find_or_create(group_name)
    max_times = header.max_reconsume_times
    if max_times is None and group is not None:
        max_times = group.retry_max_times
    if max_times is not None and (header.reconsume_times or 0) > max_times:
        properties.pop("DELAY", None)
        topic = f"%DLQ%{group_name}"
        broker.topics.create_on_send(topic, 1)
        return topic, 0
    return header.topic, queue_id


def _response_ext(header: SendMessageResponseHeader) -> dict[str, str]:
    # Built by hand: this runs for every send (the generic to_ext_fields is several times slower).
    ext = {
        "msgId": header.msg_id,
        "queueId": str(header.queue_id),
        "queueOffset": str(header.queue_offset),
    }
    if header.transaction_id is not None:
        ext["transactionId"] = header.transaction_id
    if header.msg_region is not None:
        ext["MSG_REGION"] = header.msg_region
    if header.trace_on is not None:
        ext["TRACE_ON"] = "true" if header.trace_on else "false"
    return ext


def _check_topic(broker: Broker, header: SendMessageRequestHeader) -> tuple[int, str] | None:
    problem = validate_topic_name(header.topic)
    if problem:
        return ResponseCode.SYSTEM_ERROR, problem  # RocketMQ's TopicValidator answers SYSTEM_ERROR
    if header.topic in NOT_ALLOWED_SEND_TOPICS:
        return ResponseCode.NO_PERMISSION, f"sending message to topic[{header.topic}] is forbidden"
    if not broker.config.broker_permission & PERM_WRITE:
        return (
            ResponseCode.NO_PERMISSION,
            f"the broker[{broker.config.address}] sending message is forbidden",
        )
    return None
