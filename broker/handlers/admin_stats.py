"""Read-only admin requests about traffic, consume progress and clients, answered as RocketMQ's
AdminBrokerProcessor answers them, from the stats and progress services:

GET_CONSUME_STATS (208), GET_TOPIC_STATS_INFO (202), GET_BROKER_RUNTIME_INFO (28),
GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204), GET_ALL_CONSUMER_OFFSET
(43), QUERY_TOPIC_CONSUME_BY_WHO (300), QUERY_TOPICS_BY_CONSUMER (343), GET_BROKER_CONSUME_STATS
(317), VIEW_BROKER_STATS_DATA (315), GET_TOPIC_CONFIG (351), GET_SUBSCRIPTIONGROUP_CONFIG (352),
GET_ALL_PRODUCER_INFO (328), QUERY_CONSUME_TIME_SPAN (303).

Bodies are in ``broker/protocol/admin_stats.py``; lag and the rest of a group's progress come
from ``ProgressService`` only, so every view shows the same numbers.
"""

from __future__ import annotations

import asyncio

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.handlers.common import bad_request
from pocketmq.broker.protocol import MalformedHeaderError, RemotingCommand, ResponseCode
from pocketmq.broker.protocol.admin_stats import (
    AllConsumerOffsets,
    ConsumerConnection,
    ConsumeStats,
    ConsumeStatsList,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetSubscriptionGroupConfigRequestHeader,
    GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader,
    GroupList,
    KVTable,
    OffsetWrapper,
    ProducerConnection,
    ProducerInfo,
    ProducerTableInfo,
    QueryConsumeTimeSpanBody,
    QueryConsumeTimeSpanRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    QueryTopicsByConsumerRequestHeader,
    QueueTimeSpan,
    RemoteConnection,
    TopicConfigAndQueueMapping,
    TopicList,
    TopicOffset,
    TopicStatsTable,
    ViewBrokerStatsDataRequestHeader,
    encode_fastjson,
    queue_key,
)
from pocketmq.broker.protocol.headers import MessageQueue, encode_json_body
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.clients import ConsumerInfo
from pocketmq.broker.services.progress import GroupProgress
from pocketmq.broker.services.runtime_info import runtime_info

__all__ = [
    "consume_stats_of",
    "handle_get_all_consumer_offset",
    "handle_get_all_producer_info",
    "handle_get_broker_consume_stats",
    "handle_get_broker_runtime_info",
    "handle_get_consume_stats",
    "handle_get_consumer_connection_list",
    "handle_get_producer_connection_list",
    "handle_get_subscription_group_config",
    "handle_get_topic_config",
    "handle_get_topic_stats_info",
    "handle_query_consume_time_span",
    "handle_query_topic_consume_by_who",
    "handle_query_topics_by_consumer",
    "handle_view_broker_stats_data",
]


def consume_stats_of(progress: GroupProgress, broker_name: str) -> dict[str, ConsumeStats]:
    """One ConsumeStats per topic of ``progress`` (GET_BROKER_CONSUME_STATS lists them so);
    GET_CONSUME_STATS merges them into one."""
    by_topic: dict[str, ConsumeStats] = {}
    for queue in progress.queues:
        stats = by_topic.setdefault(queue.topic, ConsumeStats())
        stats.offset_table[queue_key(queue.topic, broker_name, queue.queue_id)] = OffsetWrapper(
            broker_offset=queue.broker_offset,
            consumer_offset=queue.consumer_offset,
            pull_offset=queue.pull_offset,
            last_timestamp=queue.last_timestamp,
        )
    return by_topic


def handle_get_consume_stats(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetConsumeStatsRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    listed = header.topics()
    if listed:
        topics = listed  # a topic list is reported whether subscribed or not (5.x)
    else:
        topics = (
            [header.topic]
            if header.topic
            else broker.progress.topics_of_offsets(header.consumer_group)
        )
        topics = broker.progress.subscribed(header.consumer_group, topics)
    progress = broker.progress.group(header.consumer_group, topics)
    body = ConsumeStats(consume_tps=progress.consume_tps)
    for stats in consume_stats_of(progress, broker.config.broker_name).values():
        body.offset_table.update(stats.offset_table)
    return request.make_response(ResponseCode.SUCCESS, body=encode_fastjson(body))


def _no_such_topic(request: RemotingCommand, topic: str) -> RemotingCommand:
    """RocketMQ's answer to a stats request for a topic this broker does not have."""
    return request.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")


def handle_get_topic_stats_info(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetTopicStatsInfoRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    topic = header.topic
    config = broker.topics.get(topic)
    if config is None:
        return _no_such_topic(request, topic)
    table = TopicStatsTable(topic_put_tps=broker.stats.topic_put_tps(topic))
    broker_name = broker.config.broker_name
    for queue_id in range(max(config.write_queue_nums, config.read_queue_nums)):
        low = max(broker.store.min_offset(topic, queue_id), 0)
        high = max(broker.store.max_offset(topic, queue_id), 0)
        last = broker.progress.queue_time(topic, queue_id, high - 1) if high > 0 else 0
        table.offset_table[queue_key(topic, broker_name, queue_id)] = TopicOffset(
            min_offset=low, max_offset=high, last_update_timestamp=last
        )
    return request.make_response(ResponseCode.SUCCESS, body=encode_fastjson(table))


def handle_get_broker_runtime_info(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    table = runtime_info(
        stats=broker.stats,
        store=broker.store,
        schedule=broker.schedule,
        data_dir=broker.config.data_dir,
        now_ms=broker.now_ms(),
    )
    return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(KVTable(table=table)))


def _connection(info: ConsumerInfo) -> RemoteConnection:
    return RemoteConnection(
        client_id=info.client_id,
        client_addr=info.address,
        language=info.language,
        version=info.version,
    )


def handle_get_consumer_connection_list(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetConsumerConnectionListRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    group = broker.clients.group(header.consumer_group)
    if group is None:
        return request.make_response(
            ResponseCode.CONSUMER_NOT_ONLINE,
            f"the consumer group[{header.consumer_group}] not online",
        )
    body = ConsumerConnection(
        connection_set=[_connection(c) for _, c in sorted(group.consumers.items())],
        subscription_table=dict(group.subscriptions),
        consume_type=group.consume_type,
        message_model=group.message_model,
        consume_from_where=group.consume_from_where,
    )
    return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(body))


def handle_get_producer_connection_list(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetProducerConnectionListRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    producers = broker.clients.producer_groups.get(header.producer_group)
    if producers is None:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, f"the producer group[{header.producer_group}] not exist"
        )
    body = ProducerConnection(connection_set=[_connection(p) for _, p in sorted(producers.items())])
    return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(body))


def handle_get_all_producer_info(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    # heartbeats are noted on the loop's clock; RocketMQ sends epoch ms
    loop_now, now_ms = asyncio.get_running_loop().time(), broker.now_ms()

    def epoch_ms(loop_time: float) -> int:
        return now_ms - int((loop_now - loop_time) * 1000)

    data = {
        group: [
            ProducerInfo(
                client_id=p.client_id,
                remote_ip=p.address,
                language=p.language,
                version=p.version,
                last_update_timestamp=epoch_ms(p.last_heartbeat),
            )
            for _, p in sorted(producers.items())
        ]
        for group, producers in sorted(broker.clients.producer_groups.items())
        if producers
    }
    return request.make_response(
        ResponseCode.SUCCESS, body=encode_json_body(ProducerTableInfo(data=data))
    )


def handle_get_all_consumer_offset(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    table = broker.offsets.table
    if not table:
        return request.make_response(ResponseCode.SYSTEM_ERROR, "No consumer offset in this broker")
    body = AllConsumerOffsets(offset_table={key: dict(queues) for key, queues in table.items()})
    return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(body))


def handle_query_topic_consume_by_who(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = QueryTopicConsumeByWhoRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    body = GroupList(group_list=broker.progress.groups_of_topic(header.topic))
    return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(body))


def handle_query_topics_by_consumer(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = QueryTopicsByConsumerRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    body = TopicList(
        topic_list=broker.progress.topics_of_offsets(header.group), broker_addr=broker.address
    )
    return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(body))


def handle_get_broker_consume_stats(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetConsumeStatsInBrokerHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    body = ConsumeStatsList(broker_addr=broker.address)
    broker_name = broker.config.broker_name
    for group in sorted(broker.groups.groups):
        topics = broker.progress.topics_of_offsets(group)
        if header.is_order:
            topics = [t for t in topics if (c := broker.topics.get(t)) is not None and c.order]
        progress = broker.progress.group(group, broker.progress.subscribed(group, topics))
        per_topic = consume_stats_of(progress, broker_name)
        for topic, stats in per_topic.items():
            stats.consume_tps = broker.stats.group_get_tps(group, topic)
        body.total_diff += progress.lag
        body.total_inflight_diff += progress.inflight
        body.consume_stats_list.append({group: list(per_topic.values())})
    return request.make_response(ResponseCode.SUCCESS, body=encode_fastjson(body))


def handle_view_broker_stats_data(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = ViewBrokerStatsDataRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    data = broker.stats.stats_data(header.stats_name, header.stats_key)
    if data is None:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR,
            f"The stats <{header.stats_name}> <{header.stats_key}> not exist",
        )
    return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(data))


def handle_get_topic_config(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetTopicConfigRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    config = broker.topics.get(header.topic)
    if config is None:
        return request.make_response(
            ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {header.topic}"
        )
    body = TopicConfigAndQueueMapping(
        topic_name=config.topic_name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        topic_filter_type=config.topic_filter_type,
        topic_sys_flag=config.topic_sys_flag,
        order=config.order,
        attributes=dict(config.attributes),
    )
    return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(body))


def handle_get_subscription_group_config(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetSubscriptionGroupConfigRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    config = broker.groups.groups.get(header.group)
    if config is None:
        return request.make_response(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker"
        )
    return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(config))


def handle_query_consume_time_span(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = QueryConsumeTimeSpanRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    topic = header.topic
    config = broker.topics.get(topic)
    if config is None:
        return _no_such_topic(request, topic)
    progress = broker.progress
    now = broker.now_ms()
    spans = []
    for queue_id in range(config.write_queue_nums):
        low = broker.store.min_offset(topic, queue_id)
        high = broker.store.max_offset(topic, queue_id)
        min_time = progress.queue_time(topic, queue_id, low) if high > low else 0
        consumed = broker.offsets.query(header.group, topic, queue_id) or 0
        consume_time = (
            progress.queue_time(topic, queue_id, consumed - 1) if consumed > 0 else min_time
        )
        next_time = progress.queue_time(topic, queue_id, consumed) if consumed < high else 0
        spans.append(
            QueueTimeSpan(
                message_queue=MessageQueue(
                    topic=topic, broker_name=broker.config.broker_name, queue_id=queue_id
                ),
                min_time_stamp=min_time,
                max_time_stamp=progress.queue_time(topic, queue_id, high - 1),
                consume_time_stamp=consume_time,
                delay_time=now - next_time if next_time else 0,
            )
        )
    body = QueryConsumeTimeSpanBody(consume_time_span_set=spans)
    return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(body))
