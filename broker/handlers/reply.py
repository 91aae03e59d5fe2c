"""SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): a consumer's answer to a request.

As RocketMQ's ReplyMessageProcessor: the usual send checks (topic, permission, queue), then
the reply is pushed to the requester named by its ``REPLY_TO_CLIENT`` property as
PUSH_REPLY_MESSAGE_TO_CLIENT (326) over the requester's own connection, then stored (when the
broker stores replies). The answer says whether the push worked: SUCCESS, or SYSTEM_ERROR
with the reason (no ``REPLY_TO_CLIENT``, the requester is not connected, it refused or did not
answer), each also logged as a WARNING. A failed store is only logged, as in RocketMQ: the
requester already has its reply.
"""

from __future__ import annotations

import logging

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError
from pocketmq.broker.handlers.common import error_response
from pocketmq.broker.protocol import MalformedHeaderError, RemotingCommand, ResponseCode
from pocketmq.broker.protocol.codes import RequestCode
from pocketmq.broker.protocol.errors import ProtocolError
from pocketmq.broker.protocol.headers import (
    ReplyMessageRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from pocketmq.broker.protocol.message_codec import decode_properties
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.reply import PROPERTY_PUSH_REPLY_TIME, PROPERTY_REPLY_TO_CLIENT
from pocketmq.store.message_store import PutMessage
from pocketmq.store.record import Host, encode_properties

__all__ = ["PUSH_TIMEOUT_S", "handle_reply"]

log = logging.getLogger("pocketmq.broker")

# Broker2Client.callClient waits this long for the requester's answer to the push.
PUSH_TIMEOUT_S = 10.0


def _parse_header(request: RemotingCommand) -> SendMessageRequestHeader:
    if request.code == RequestCode.SEND_REPLY_MESSAGE_V2:
        return SendMessageRequestHeaderV2.from_ext_fields(request.ext_fields).to_v1()
    return SendMessageRequestHeader.from_ext_fields(request.ext_fields)


async def handle_reply(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = _parse_header(request)
    except MalformedHeaderError as error:
        return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad reply header: {error}")
    sender = broker.send
    try:
        config = sender.topic_for_send(header.topic, header.default_topic_queue_nums)
        queue_id = sender.queue_of(config, header.queue_id)
    except BrokerError as error:
        return error_response(request, error)
    body = request.body or b""
    properties = decode_properties(header.properties) if header.properties else {}
    failure = await _push(broker, connection, header, properties, body)
    ext = {"MSG_REGION": broker.config.region_id, "TRACE_ON": "true"}
    if failure is None:
        # what RocketMQ answers for a reply it pushed but has not (yet) stored
        ext.update(msgId="0", queueId=str(queue_id), queueOffset="0")
    if broker.reply.store_replies:
        born = (
            Host.parse(connection.remote_address)
            if connection.remote_address != "?"
            else Host(b"\0\0\0\0", 0)
        )
        message = PutMessage(
            topic=header.topic,
            body=body,
            queue_id=queue_id,
            flag=header.flag,
            properties=properties,
            properties_text=header.properties or "",  # stored as sent: no CLUSTER on replies
            sysflag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=born,
            reconsume_times=header.reconsume_times or 0,
        )
        try:
            result = sender.put_as_is(message, properties)
        except BrokerError as error:
            log.warning("reply to %s not stored: %s", header.topic, error)
        else:
            ext.update(
                msgId=broker.offset_msg_id(result.physical_offset),
                queueId=str(queue_id),
                queueOffset=str(result.queue_offset),
            )
    if failure is not None:
        return request.make_response(ResponseCode.SYSTEM_ERROR, failure, ext_fields=ext)
    return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)


async def _push(
    broker: BrokerCore,
    connection: Connection,
    header: SendMessageRequestHeader,
    properties: dict[str, str],
    body: bytes,
) -> str | None:
    """Push the reply to its requester; None when it took it, else why not (also logged)."""
    client_id = properties.get(PROPERTY_REPLY_TO_CLIENT)
    if client_id is None:
        failure = f"reply message properties[{PROPERTY_REPLY_TO_CLIENT}] is null"
        log.warning("%s, can not reply message (from %s)", failure, connection.remote_address)
        return failure
    channel = broker.reply.requester(client_id)
    if not isinstance(channel, Connection):  # not connected (or not over remoting)
        failure = f"push reply message fail, channel of <{client_id}> not found."
        log.warning(failure)
        return failure
    pushed = dict(properties)
    pushed[PROPERTY_PUSH_REPLY_TIME] = str(broker.now_ms())
    push_header = ReplyMessageRequestHeader(
        producer_group=header.producer_group,
        topic=header.topic,
        default_topic=header.default_topic,
        default_topic_queue_nums=header.default_topic_queue_nums,
        queue_id=header.queue_id,
        sys_flag=header.sys_flag,
        born_timestamp=header.born_timestamp,
        flag=header.flag,
        properties=encode_properties(pushed),
        reconsume_times=header.reconsume_times,
        unit_mode=header.unit_mode,
        born_host=connection.remote_address,
        store_host=broker.address,
        store_timestamp=broker.now_ms(),
    )
    command = RemotingCommand(
        code=RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT,
        ext_fields=push_header.to_ext_fields(),
        body=body,
    )
    try:
        answer = await channel.request(command, timeout_s=PUSH_TIMEOUT_S)
    except (TimeoutError, ConnectionError, ProtocolError) as error:
        log.warning("push reply message to <%s> fail: %r", client_id, error)
        return f"push reply message to {client_id} fail."
    if answer.code != ResponseCode.SUCCESS:
        log.warning(
            "push reply message to <%s> return fail, response remark: %s", client_id, answer.remark
        )
        return f"push reply message to {client_id} fail."
    return None
