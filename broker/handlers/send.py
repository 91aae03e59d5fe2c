"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320)."""

from __future__ import annotations

import struct
from collections.abc import Awaitable

import msgspec

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.handlers.common import error_response
from pocketmq.broker.protocol import (
    MalformedBodyError,
    MalformedHeaderError,
    RemotingCommand,
    ResponseCode,
    encode_json_success,
)
from pocketmq.broker.protocol.codes import DEFAULT_VERSION, RequestCode, SerializeType
from pocketmq.broker.protocol.headers import SendMessageRequestHeader, parse_send_message_header
from pocketmq.broker.protocol.message_codec import (
    decode_batch_texts,
    decode_properties,
    is_canonical_properties,
)
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.faults import FaultKind
from pocketmq.broker.services.lite import LITE_PROPERTY, validate_lite_topic
from pocketmq.store.message_store import PutMessage, PutResult
from pocketmq.store.record import Host, encode_properties

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


def _offset_msg_id(broker: BrokerCore, connection: Connection, physical_offset: int) -> str:
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
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand | bytes | Awaitable[RemotingCommand]:
    try:
        header = parse_send_message_header(request.code, request.ext_fields)
    except MalformedHeaderError as error:
        return _refuse(request, ResponseCode.SYSTEM_ERROR, f"bad send header: {error}")
    sender = broker.send
    try:
        config = sender.topic_for_send(header.topic, header.default_topic_queue_nums)
        queue_id = sender.queue_of(config, header.queue_id)
        body = request.body or b""
        born_host = _born_host(connection)
        if request.code == _SEND_BATCH_MESSAGE or header.batch:
            return _send_batch(broker, request, connection, header, queue_id, body, born_host)
        properties = decode_properties(header.properties) if header.properties else {}
        topic = header.topic
        stored_as_sent = True  # the properties text as sent is the one stored
        lite = properties.get(LITE_PROPERTY)
        if lite is not None and sender.is_lite_parent(config):
            # As a gRPC send: a lite topic's message goes to its own LMQ, queue 0.
            topic, queue_id = sender.lite_queue(config, lite), 0
        elif topic.startswith("%RETRY%"):
            # A consumer's own retry copy (its fallback when CONSUMER_SEND_MSG_BACK failed):
            # past the maximum reconsume times it goes to the group's DLQ.
            topic, queue_id = broker.retry.retry_or_dlq(
                topic,
                properties,
                queue_id,
                reconsume_times=header.reconsume_times or 0,
                max_reconsume_times=header.max_reconsume_times,
            )
            stored_as_sent = topic == header.topic
        message = PutMessage(
            topic=topic,
            body=body,
            queue_id=queue_id,
            flag=header.flag,
            properties=properties,
            properties_text=(header.properties or "")
            if stored_as_sent
            else encode_properties(properties),
            sysflag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=born_host,
            reconsume_times=header.reconsume_times or 0,
        )
        if sender.faults.sends:  # planned faults (broker.faults): nothing planned, one test
            return _faulted(broker, request, connection, message, properties, queue_id)
        result = sender.put(message, properties)
    except BrokerError as error:
        return error_response(request, error)
    wait_store = properties.get("WAIT") != "false"
    if request.serialize_type == _JSON and (not wait_store or not broker.flush.sync):
        # Nearly every send: the answer's frame straight from its fields.
        frame = _success_frame(broker, connection, request.opaque, result, queue_id, properties)
        if frame is not None:
            return frame
    ext = _response_ext(
        _offset_msg_id(broker, connection, result.physical_offset),
        queue_id,
        result.queue_offset,
        properties.get("UNIQ_KEY"),
        broker.config.region_id,
    )
    return _maybe_wait(broker, request, result, ext, wait_store)


def _success_frame(
    broker: BrokerCore,
    connection: Connection,
    opaque: int,
    result: PutResult,
    queue_id: int,
    properties: dict[str, str],
) -> bytes | None:
    """``_maybe_wait``'s answer to a JSON request that need not wait for the disk, byte for
    byte (``encode_json_success`` of the ``_response_ext`` map), without the map, its JSON
    encoding and a second format: the send response header's fields written into one
    template, in the map's key order. None for an offset out of range (``_offset_msg_id``
    raises for it, on the general path)."""
    physical_offset = result.physical_offset
    if not 0 <= physical_offset <= _OFFSET_MAX:
        return None
    prefix = connection.attributes.get("offset_msg_id_prefix_bytes")
    if prefix is None:
        prefix = connection.attributes["offset_msg_id_prefix_bytes"] = broker.offset_msg_id(0)[
            :-16
        ].encode()
    transaction_id = properties.get("UNIQ_KEY")
    transaction = (
        b"" if transaction_id is None else b'"transactionId":%b,' % _encode_json(transaction_id)
    )
    region = broker.config.region_id
    region_json = _REGION_JSON.get(region)
    if region_json is None:
        region_json = b"" if region is None else b'"MSG_REGION":%b,' % _encode_json(region)
        if len(_REGION_JSON) < 16:  # one region per broker; a few if it is changed
            _REGION_JSON[region] = region_json
    header = (
        b'{"code":0,"extFields":{"msgId":"%b%016X","queueId":"%d","queueOffset":"%d",%b%b'
        b'"TRACE_ON":"true"},"flag":1,"language":"JAVA","opaque":%d,'
        b'"serializeTypeCurrentRPC":"JSON","version":%d}'
        % (
            prefix,
            physical_offset,
            queue_id,
            result.queue_offset,
            transaction,
            region_json,
            opaque,
            DEFAULT_VERSION,
        )
    )
    if len(header) > 0xFFFFFF:  # a huge UNIQ_KEY: the general path refuses it
        return None
    return _FRAME_PREFIX.pack(4 + len(header), len(header)) + header


# The ``"MSG_REGION":...,`` of each region seen (None: no such key).
_REGION_JSON: dict[str | None, bytes] = {}
# A JSON frame's length and type|header-length words (frames.py's layout).
_FRAME_PREFIX = struct.Struct(">II")


def _faulted(
    broker: BrokerCore,
    request: RemotingCommand,
    connection: Connection,
    message: PutMessage,
    properties: dict[str, str],
    queue_id: int,
) -> RemotingCommand | bytes | Awaitable[RemotingCommand]:
    """A single send while send faults are planned: answered with the fault's RocketMQ code
    (SYSTEM_BUSY: not stored; FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE: stored, with the send's
    fields, which RocketMQ's producers read into a SendResult of that status)."""
    result, fault = broker.send.faulted_put(message, properties)
    if result is None:
        return _refuse(request, ResponseCode.SYSTEM_BUSY, _BUSY_REMARK)
    ext = _response_ext(
        _offset_msg_id(broker, connection, result.physical_offset),
        queue_id,
        result.queue_offset,
        properties.get("UNIQ_KEY"),
        broker.config.region_id,
    )
    if fault is None:
        return _maybe_wait(broker, request, result, ext, properties.get("WAIT") != "false")
    return request.make_response(_FAULT_CODES[fault], _fault_remark(fault), ext_fields=ext)


# A send refused by a planned SYSTEM_BUSY: the remark of RocketMQ's request-queue refusal.
_BUSY_REMARK = "[REJECTREQUEST]system busy, start flow control for a while (a planned fault)"
# Stored, answered with the code of the planned fault (the producer reads it as its status).
_FAULT_CODES = {
    FaultKind.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    FaultKind.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}


def _fault_remark(fault: FaultKind) -> str:
    return f"{fault.value} (a planned fault)"


def _send_batch(
    broker: BrokerCore,
    request: RemotingCommand,
    connection: Connection,
    header: SendMessageRequestHeader,
    queue_id: int,
    body: bytes,
    born_host: Host,
) -> RemotingCommand | bytes | Awaitable[RemotingCommand]:
    """SEND_BATCH_MESSAGE: raises BrokerError for ``handle_send`` to answer."""
    broker.send.check_batch(header.topic, len(body))
    try:
        inner = decode_batch_texts(body)
    except MalformedBodyError as error:
        raise BrokerError(Kind.MESSAGE_ILLEGAL, f"bad batch body: {error}") from None
    if not inner:
        raise BrokerError(Kind.MESSAGE_ILLEGAL, "empty batch")
    unique_keys = [properties.get("UNIQ_KEY", "") for _, _, properties, _ in inner]
    sysflag, born_timestamp = header.sys_flag, header.born_timestamp
    destinations = _batch_destinations(broker, header.topic, queue_id, inner)
    messages = [
        PutMessage(
            topic=destination_topic,
            body=item_body,
            queue_id=destination_queue,
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
        for (item_body, flag, properties, text), (destination_topic, destination_queue) in zip(
            inner, destinations, strict=True
        )
    ]
    fault = None
    if broker.send.faults.sends:  # planned faults (broker.faults): nothing planned, one test
        faulted, fault = broker.send.faulted_put_batch(messages)
        if faulted is None:
            return _refuse(request, ResponseCode.SYSTEM_BUSY, _BUSY_REMARK)
        results = faulted
    else:
        results = broker.send.put_batch(messages)
    ext = _response_ext(
        ",".join([_offset_msg_id(broker, connection, r.physical_offset) for r in results]),
        messages[0].queue_id,
        results[0].queue_offset,
        ",".join(unique_keys),
        broker.config.region_id,
    )
    if fault is not None:
        return request.make_response(_FAULT_CODES[fault], _fault_remark(fault), ext_fields=ext)
    properties = decode_properties(header.properties) if header.properties else {}
    return _maybe_wait(broker, request, results[-1], ext, properties.get("WAIT") != "false")


def _batch_destinations(
    broker: BrokerCore,
    topic: str,
    queue_id: int,
    inner: list[tuple[bytes, int, dict[str, str], str]],
) -> list[tuple[str, int]]:
    """Where each message of a batch goes: the batch's queue, but to a LITE parent a message
    carrying ``__LITE_TOPIC`` goes to its lite topic's LMQ, queue 0, as a single send does
    (RocketMQ dispatches each message by its own properties). Every lite topic is checked, and
    its LMQ made, before anything is stored: a bad one refuses the whole batch."""
    if not any(LITE_PROPERTY in properties for _, _, properties, _ in inner):
        return [(topic, queue_id)] * len(inner)
    sender = broker.send
    config = broker.topics.get(topic)
    if config is None or not sender.is_lite_parent(config):
        return [(topic, queue_id)] * len(inner)
    lites = [properties.get(LITE_PROPERTY) for _, _, properties, _ in inner]
    for lite in lites:
        problem = None if lite is None else validate_lite_topic(topic, lite)
        if problem:
            raise BrokerError(Kind.ILLEGAL_LITE_TOPIC, problem)
    return [
        (topic, queue_id) if lite is None else (sender.lite_queue(config, lite), 0)
        for lite in lites
    ]


def _maybe_wait(
    broker: BrokerCore,
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
