"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320)."""

from __future__ import annotations

import random
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import msgspec

from pocketmq.broker.protocol import (
    MalformedBodyError,
    MalformedHeaderError,
    RemotingCommand,
    ResponseCode,
    encode_json_success,
)
from pocketmq.broker.protocol.codes import RequestCode, SerializeType
from pocketmq.broker.protocol.headers import SendMessageRequestHeader, parse_send_message_header
from pocketmq.broker.protocol.message_codec import (
    decode_batch_texts,
    decode_properties,
    is_canonical_properties,
)
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.schedule import DelayError
from pocketmq.broker.services.timer import TimerError
from pocketmq.broker.services.topics import NOT_ALLOWED_SEND_TOPICS, PERM_WRITE, validate_topic_name
from pocketmq.store.errors import LimitExceededError, StoreError, StoreFullError
from pocketmq.store.message_store import PutMessage, PutResult
from pocketmq.store.record import Host, encode_properties

if TYPE_CHECKING:
    from pocketmq.broker.app import Broker

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


def _offset_msg_id(broker: Broker, connection: Connection, physical_offset: int) -> str:
    """``broker.offset_msg_id``: store host and port (fixed for the broker's life, so kept per
    connection as hex text) + the offset as 16 hex digits. Every send answers one."""
    prefix = connection.attributes.get("offset_msg_id_prefix")
    if prefix is None:
        prefix = connection.attributes["offset_msg_id_prefix"] = broker.offset_msg_id(0)[:-16]
    if 0 <= physical_offset <= _OFFSET_MAX:
        return f"{prefix}{physical_offset:016X}"
    return broker.offset_msg_id(physical_offset)  # raises for an offset out of range


_OFFSET_MAX = 2**63 - 1
# Globals: an enum attribute lookup costs more, on the path of every send.
_SUCCESS = ResponseCode.SUCCESS
_JSON = SerializeType.JSON
_encode_json = msgspec.json.Encoder().encode
_SEND_BATCH_MESSAGE = RequestCode.SEND_BATCH_MESSAGE


def handle_send(
    broker: Broker, request: RemotingCommand, connection: Connection
) -> RemotingCommand | bytes | Awaitable[RemotingCommand]:
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
    if request.code == _SEND_BATCH_MESSAGE or header.batch:
        return _send_batch(broker, request, connection, header, queue_id, body, born_host)
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
    ext = _response_ext(
        _offset_msg_id(broker, connection, result.physical_offset),
        queue_id,
        result.queue_offset,
        properties.get("UNIQ_KEY"),
        broker.config.region_id,
    )
    return _maybe_wait(broker, request, result, ext, properties.get("WAIT") != "false")


def _send_batch(
    broker: Broker,
    request: RemotingCommand,
    connection: Connection,
    header: SendMessageRequestHeader,
    queue_id: int,
    body: bytes,
    born_host: Host,
) -> RemotingCommand | bytes | Awaitable[RemotingCommand]:
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
        inner = decode_batch_texts(body)
    except MalformedBodyError as error:
        return _refuse(request, ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {error}")
    if not inner:
        return _refuse(request, ResponseCode.MESSAGE_ILLEGAL, "empty batch")
    unique_keys = [properties.get("UNIQ_KEY", "") for _, _, properties, _ in inner]
    topic, sysflag, born_timestamp = header.topic, header.sys_flag, header.born_timestamp
    messages = [
        PutMessage(
            topic=topic,
            body=item_body,
            queue_id=queue_id,
            flag=flag,
            properties=properties,
            # what was sent when it is what re-encoding would give: most of the time
            properties_text=text
            if is_canonical_properties(text, properties)
            else encode_properties(properties),
            sysflag=sysflag,
            born_timestamp=born_timestamp,
            born_host=born_host,
        )
        for item_body, flag, properties, text in inner
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
    ext = _response_ext(
        ",".join([_offset_msg_id(broker, connection, r.physical_offset) for r in results]),
        queue_id,
        results[0].queue_offset,
        ",".join(unique_keys),
        broker.config.region_id,
    )
    properties = decode_properties(header.properties) if header.properties else {}
    return _maybe_wait(broker, request, results[-1], ext, properties.get("WAIT") != "false")


def _maybe_wait(
    broker: Broker,
    request: RemotingCommand,
    result: PutResult,
    ext: dict[str, str],
    wait_store: bool,
) -> RemotingCommand | bytes | Awaitable[RemotingCommand]:
    if not broker.flush.sync or not wait_store:
        if request.serialize_type == _JSON:  # nearly every send: the frame, with no command
            return encode_json_success(request.opaque, _encode_json(ext))
        return request.make_response(_SUCCESS, ext_fields=ext)
    response = request.make_response(_SUCCESS, ext_fields=ext)
    # A future, which the connection answers from when it is done: no task per send.
    return broker.flush.when_durable(
        result.end_offset,
        response,
        lambda: request.make_response(
            ResponseCode.FLUSH_DISK_TIMEOUT, "flush to disk timed out", ext_fields=ext
        ),
    )


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


def _response_ext(
    msg_id: str, queue_id: int, queue_offset: int, transaction_id: str | None, region: str | None
) -> dict[str, str]:
    """``SendMessageResponseHeader(..., trace_on=True).to_ext_fields()``, built by hand: this
    runs for every send, and a header struct per response is a measurable share of it."""
    ext = {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset)}
    if transaction_id is not None:
        ext["transactionId"] = transaction_id
    if region is not None:
        ext["MSG_REGION"] = region
    ext["TRACE_ON"] = "true"
    return ext


# Topic names already found valid and open to clients (pure functions of the name, so checked
# once per name instead of once per message).
_sendable_names: set[str] = set()
_SENDABLE_NAMES_MAX = 10_000


def _check_topic(broker: Broker, header: SendMessageRequestHeader) -> tuple[int, str] | None:
    topic = header.topic
    if topic not in _sendable_names:
        problem = validate_topic_name(topic)
        if problem:
            return ResponseCode.SYSTEM_ERROR, problem  # as RocketMQ's TopicValidator answers
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return ResponseCode.NO_PERMISSION, f"sending message to topic[{topic}] is forbidden"
        if len(_sendable_names) >= _SENDABLE_NAMES_MAX:
            _sendable_names.clear()
        _sendable_names.add(topic)
    if not broker.config.broker_permission & PERM_WRITE:
        return (
            ResponseCode.NO_PERMISSION,
            f"the broker[{broker.config.address}] sending message is forbidden",
        )
    return None
