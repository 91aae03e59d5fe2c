"""The admin requests that change a broker's groups or ask its consumers something:
DELETE_SUBSCRIPTIONGROUP (207), INVOKE_BROKER_TO_RESET_OFFSET (222, which sends each online
consumer RESET_CONSUMER_CLIENT_OFFSET, 220), INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223, which
asks each consumer GET_CONSUMER_STATUS_FROM_CLIENT, 221), GET_CONSUMER_RUNNING_INFO (307) and
CONSUME_MESSAGE_DIRECTLY (309) relayed to one consumer and its answer relayed back, and
DELETE_EXPIRED_COMMITLOG (329). Codes and remarks are RocketMQ's (``AdminBrokerProcessor``,
``Broker2Client``)."""

from __future__ import annotations

import asyncio
import logging

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError
from pocketmq.broker.handlers.common import bad_request, error_response
from pocketmq.broker.protocol import (
    LanguageCode,
    MalformedBodyError,
    MalformedHeaderError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)
from pocketmq.broker.protocol.admin_bodies import (
    ConsumeMessageDirectlyResultRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusBody,
    GetConsumerStatusRequestHeader,
    ResetOffsetRequestHeader,
    encode_fastjson_body,
)
from pocketmq.broker.protocol.errors import ProtocolError
from pocketmq.broker.protocol.headers import decode_json_body
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.group_admin import GroupAdmin, ResetRefusal
from pocketmq.ids import decode_offset_msg_id
from pocketmq.ids.errors import InvalidMessageIdError
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError

__all__ = [
    "handle_consume_message_directly",
    "handle_delete_expired_commitlog",
    "handle_delete_group",
    "handle_get_consumer_running_info",
    "handle_get_consumer_status",
    "handle_reset_offset",
]

log = logging.getLogger("pocketmq.broker")

# Broker2Client.callClient waits this long for a consumer's answer (invokeSync 10 s); the
# status question waits 5 s per consumer.
CALL_CLIENT_TIMEOUT_S = 10.0
CONSUMER_STATUS_TIMEOUT_S = 5.0
_MSG_ID_SHOWN_MAX = 64  # an offset message ID has at most 56 characters


def _admin(broker: BrokerCore) -> GroupAdmin:
    return broker.group_admin


def handle_delete_group(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = DeleteSubscriptionGroupRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    log.info("deleteSubscriptionGroup %s by %s", header.group_name, connection.remote_address)
    try:
        _admin(broker).delete_group(header.group_name, clean_offset=header.clean_offset)
    except BrokerError as error:  # the disk refused the save
        return error_response(request, error)
    return request.make_response(ResponseCode.SUCCESS)


def handle_reset_offset(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    """Broker2Client.resetOffset: the target offset of each write queue, sent to every online
    consumer of the group, which moves to them; the table is the answer."""
    try:
        header = ResetOffsetRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    topic, group, timestamp = header.topic, header.group, header.timestamp
    log.info(
        "[reset-offset] by %s: topic=%s group=%s timestamp=%d force=%s",
        connection.remote_address,
        topic,
        group,
        timestamp,
        header.is_force,
    )
    admin = _admin(broker)
    table = admin.reset_table(topic, group, timestamp, force=header.is_force)
    if isinstance(table, ResetRefusal):
        if table.what == "topic":
            return request.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}",
            )
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist"
        )
    if not admin.consumers(group):
        return request.make_response(
            ResponseCode.CONSUMER_NOT_ONLINE,
            f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
            f"Timestamp: {timestamp}",
        )
    told = admin.tell_reset(
        topic,
        group,
        timestamp,
        table,
        broker_name=broker.config.broker_name,
        cpp=request.language == LanguageCode.CPP,
    )
    return request.make_response(ResponseCode.SUCCESS, body=told.body)


async def handle_get_consumer_status(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    """Broker2Client.getConsumeStatus: each consumer's offsets of the topic (or only the one
    named by ``clientAddr``), by client id; a consumer that does not answer is left out."""
    try:
        header = GetConsumerStatusRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    consumers = _admin(broker).consumers(header.group)
    if not consumers:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR,
            f"No Any Consumer online in the consumer group: [{header.group}]",
        )
    ext = GetConsumerStatusRequestHeader(topic=header.topic, group=header.group).to_ext_fields()
    asked = [
        (client_id, channel)
        for client_id, channel in consumers
        if isinstance(channel, Connection)
        and (not header.client_addr or header.client_addr == client_id)
    ]

    async def status_of(client_id: str, channel: Connection) -> dict[str, int] | None:
        question = RemotingCommand(
            code=RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, ext_fields=dict(ext)
        )
        try:
            answer = await channel.request(question, timeout_s=CONSUMER_STATUS_TIMEOUT_S)
            if answer.code == ResponseCode.SUCCESS and answer.body:
                return decode_json_body(answer.body, GetConsumerStatusBody).message_queue_table
        except (TimeoutError, ConnectionError, ProtocolError, MalformedBodyError) as error:
            log.warning(
                "[get-consumer-status] %s of %s did not answer: %r", client_id, header.group, error
            )
        return None

    # All at once (RocketMQ asks one after the other, 5 s each): a group of silent consumers
    # costs 5 s, not 5 s apiece.
    answers = await asyncio.gather(*(status_of(cid, channel) for cid, channel in asked))
    table = {
        cid: offsets
        for (cid, _), offsets in zip(asked, answers, strict=True)
        if offsets is not None
    }
    body = encode_fastjson_body(GetConsumerStatusBody(consumer_table=table))
    return request.make_response(ResponseCode.SUCCESS, body=body)


async def handle_get_consumer_running_info(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetConsumerRunningInfoRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    return await _call_consumer(
        broker,
        request,
        RequestCode.GET_CONSUMER_RUNNING_INFO,
        header.consumer_group,
        header.client_id,
        dict(request.ext_fields or {}),
        request.body,
    )


async def handle_consume_message_directly(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    """The stored message named by ``msgId`` (an offset message ID), with ``brokerName`` and
    the topic's and group's sys flags added, relayed to the consumer ``clientId``."""
    try:
        header = ConsumeMessageDirectlyResultRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    ext = dict(request.ext_fields or {})
    ext["brokerName"] = broker.config.broker_name
    if header.topic:
        topic_config = broker.topics.get(header.topic)
        if topic_config is not None:
            ext["topicSysFlag"] = str(topic_config.topic_sys_flag)
    group_config = broker.groups.groups.get(header.consumer_group)
    if group_config is not None:
        ext["groupSysFlag"] = str(group_config.group_sys_flag)
    if not header.msg_id:  # RocketMQ fails decoding the missing ID: SYSTEM_ERROR
        return request.make_response(ResponseCode.SYSTEM_ERROR, "bad request: no msgId")
    shown = header.msg_id[:_MSG_ID_SHOWN_MAX]  # an ID from the network, echoed in a remark
    try:
        offset = decode_offset_msg_id(header.msg_id).physical_offset
        record = broker.store.read(offset)
        body = bytes(broker.store.commitlog.view_at(offset, record.total_size))
    except InvalidMessageIdError as error:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, f"msgId {shown!r} is not an offset message ID: {error}"
        )
    except (OffsetOutOfRangeError, CorruptRecordError) as error:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, f"can not find message by msgId {shown}: {error}"
        )
    return await _call_consumer(
        broker,
        request,
        RequestCode.CONSUME_MESSAGE_DIRECTLY,
        header.consumer_group,
        header.client_id or "",
        ext,
        body,
    )


async def _call_consumer(
    broker: BrokerCore,
    request: RemotingCommand,
    code: int,
    group: str,
    client_id: str,
    ext: dict[str, str],
    body: bytes | None,
) -> RemotingCommand:
    """AdminBrokerProcessor.callConsumer: the same request to the consumer's connection, its
    answer (code, remark, fields, body) back to the tool."""
    channel = _admin(broker).consumer(group, client_id)
    if not isinstance(channel, Connection):
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
        )
    relayed = RemotingCommand(code=code, ext_fields=ext, body=body)
    try:
        answer = await channel.request(relayed, timeout_s=CALL_CLIENT_TIMEOUT_S)
    except TimeoutError as error:
        return request.make_response(
            ResponseCode.CONSUME_MSG_TIMEOUT,
            f"consumer <{group}> <{client_id}> Timeout: {error!r}",
        )
    except (ConnectionError, ProtocolError) as error:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR,
            f"invoke consumer <{group}> <{client_id}> Exception: {error!r}",
        )
    return request.make_response(
        answer.code, answer.remark, ext_fields=answer.ext_fields, body=answer.body
    )


def handle_delete_expired_commitlog(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    """Delete the expired commit-log segments now, whatever ``deleteWhen`` says."""
    log.warning("deleteExpiredCommitLog by %s", connection.remote_address)
    policy = broker.retention.policy
    _admin(broker).delete_expired_commitlog(
        policy.file_reserved_time_ms, policy.delete_file_batch_max
    )
    return request.make_response(ResponseCode.SUCCESS)
