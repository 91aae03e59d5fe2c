"""Client management and consumer offsets: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), QUERY/UPDATE_CONSUMER_OFFSET (14/15), LOCK/UNLOCK_BATCH_MQ (41/42)."""

from __future__ import annotations

import asyncio

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.handlers.common import bad_request
from pocketmq.broker.protocol import (
    MalformedBodyError,
    MalformedHeaderError,
    RemotingCommand,
    ResponseCode,
)
from pocketmq.broker.protocol.headers import (
    ConsumerListBody,
    GetConsumerListByGroupRequestHeader,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UnlockBatchRequestBody,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    decode_json_body,
    encode_json_body,
)
from pocketmq.broker.remoting.server import Connection

__all__ = [
    "handle_get_consumer_list",
    "handle_heartbeat",
    "handle_lock_batch",
    "handle_query_consumer_offset",
    "handle_unlock_batch",
    "handle_unregister_client",
    "handle_update_consumer_offset",
]


def handle_heartbeat(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        data = decode_json_body(request.body or b"{}", HeartbeatData)
    except MalformedBodyError as error:
        return bad_request(request, error, connection)
    now = asyncio.get_running_loop().time()
    # what GET_CONSUMER/PRODUCER_CONNECTION_LIST report of the client
    address, language, version = connection.remote_address, request.language.name, request.version
    for consumer in data.consumer_data_set:
        if broker.groups.find_or_create(consumer.group_name) is None:
            continue  # RocketMQ skips a group without a subscription-group config
        for subscription in consumer.subscription_data_set:
            if subscription.topic.startswith("%RETRY%"):
                broker.topics.create_on_send(subscription.topic, 1)
        broker.clients.register_consumer(
            consumer,
            data.client_id,
            connection,
            now,
            address=address,
            language=language,
            version=version,
        )
    for producer in data.producer_data_set:
        broker.clients.register_producer(
            producer.group_name,
            data.client_id,
            connection,
            now,
            address=address,
            language=language,
            version=version,
        )
    return request.make_response(
        ResponseCode.SUCCESS,
        ext_fields={"IS_SUPPORT_HEART_BEAT_V2": "false", "IS_SUB_CHANGE": "true"},
    )


def handle_unregister_client(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = UnregisterClientRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    broker.clients.unregister(
        header.client_id, consumer_group=header.consumer_group, producer_group=header.producer_group
    )
    return request.make_response(ResponseCode.SUCCESS)


def handle_get_consumer_list(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetConsumerListByGroupRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    group = broker.clients.group(header.consumer_group)
    if group is None or not group.consumers:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}"
        )
    body = encode_json_body(ConsumerListBody(consumer_id_list=group.client_ids()))
    return request.make_response(ResponseCode.SUCCESS, body=body)


def handle_query_consumer_offset(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = QueryConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    offset = broker.offsets.query(header.consumer_group, header.topic, header.queue_id)
    if offset is None:
        # RocketMQ: a queue whose first message is still there counts as offset 0.
        if (
            header.set_zero_if_not_found is not False
            and broker.store.min_offset(header.topic, header.queue_id) <= 0
        ):
            offset = 0
        else:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first"
            )
    ext = QueryConsumerOffsetResponseHeader(offset=offset).to_ext_fields()
    return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)


def handle_update_consumer_offset(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = UpdateConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    if broker.topics.get(header.topic) is None:
        return request.make_response(
            ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist"
        )
    broker.offsets.commit(
        header.consumer_group, header.topic, header.queue_id, header.commit_offset
    )
    return request.make_response(ResponseCode.SUCCESS)


def handle_lock_batch(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        body = decode_json_body(request.body or b"{}", LockBatchRequestBody)
    except MalformedBodyError as error:
        return bad_request(request, error, connection)
    mine = [q for q in body.mq_set if q.broker_name == broker.config.broker_name]
    locked = broker.locks.try_lock(body.consumer_group, mine, body.client_id, broker.now_ms())
    return request.make_response(
        ResponseCode.SUCCESS, body=encode_json_body(LockBatchResponseBody(lock_ok_mq_set=locked))
    )


def handle_unlock_batch(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        body = decode_json_body(request.body or b"{}", UnlockBatchRequestBody)
    except MalformedBodyError as error:
        return bad_request(request, error, connection)
    broker.locks.unlock(body.consumer_group, list(body.mq_set), body.client_id)
    return request.make_response(ResponseCode.SUCCESS)
