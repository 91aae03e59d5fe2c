"""JSON bodies read as leniently as fastjson reads them: what rocketmq-client-cpp and other
non-Java clients write (enum ordinals, longs as strings, nulls, unknown fields)."""

from __future__ import annotations

import pytest

from pocketmq.broker.protocol import MalformedBodyError
from pocketmq.broker.protocol.headers import (
    HeartbeatData,
    LockBatchRequestBody,
    RegisterBrokerBody,
    SubscriptionGroupConfig,
    TopicConfigSerializeWrapper,
    UnlockBatchRequestBody,
    decode_json_body,
)

# The body of issue 16, as rocketmq-client-cpp 2.x writes it (jsoncpp's FastWriter: a newline
# at the end, enums as their C++ ordinals, subVersion as a string, no tagsSet for "*").
CPP_HEARTBEAT = (
    b'{"clientID":"10.0.0.7@12345","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
    b'"groupName":"cpp-group","messageModel":1,"subscriptionDataSet":[{"subString":"*",'
    b'"subVersion":"1795513605824","topic":"TopicTest"}]}],'
    b'"producerDataSet":[{"groupName":"cpp-producer"}]}\n'
)


def test_cpp_heartbeat_reads_as_fastjson_does() -> None:
    data = decode_json_body(CPP_HEARTBEAT, HeartbeatData)
    (consumer,) = data.consumer_data_set
    assert consumer.consume_type == "CONSUME_PASSIVELY"
    assert consumer.message_model == "CLUSTERING"
    assert consumer.consume_from_where == "CONSUME_FROM_LAST_OFFSET"
    (sub,) = consumer.subscription_data_set
    assert sub.sub_version == 1795513605824
    assert sub.topic == "TopicTest" and sub.sub_string == "*"
    assert [p.group_name for p in data.producer_data_set] == ["cpp-producer"]


@pytest.mark.parametrize(
    ("ordinal", "name"),
    [
        (0, "CONSUME_FROM_LAST_OFFSET"),
        (1, "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"),
        (2, "CONSUME_FROM_MIN_OFFSET"),
        (3, "CONSUME_FROM_MAX_OFFSET"),
        (4, "CONSUME_FROM_FIRST_OFFSET"),
        (5, "CONSUME_FROM_TIMESTAMP"),
    ],
)
def test_consume_from_where_ordinals_follow_the_java_enum(ordinal: int, name: str) -> None:
    body = (
        b'{"clientID":"c","consumerDataSet":[{"groupName":"g","consumeType":0,'
        b'"messageModel":0,"consumeFromWhere":%d}]}' % ordinal
    )
    (consumer,) = decode_json_body(body, HeartbeatData).consumer_data_set
    assert consumer.consume_from_where == name
    assert consumer.consume_type == "CONSUME_ACTIVELY"
    assert consumer.message_model == "BROADCASTING"


def test_names_mixed_with_ordinals_and_pop() -> None:
    body = (
        b'{"clientID":"c","consumerDataSet":[{"groupName":"g","consumeType":2,'
        b'"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET"}]}'
    )
    (consumer,) = decode_json_body(body, HeartbeatData).consumer_data_set
    assert consumer.consume_type == "CONSUME_POP"
    assert consumer.consume_from_where == "CONSUME_FROM_FIRST_OFFSET"


def test_an_ordinal_past_the_enum_is_refused() -> None:
    body = (
        b'{"clientID":"c","consumerDataSet":[{"groupName":"g","consumeType":1,'
        b'"messageModel":7,"consumeFromWhere":0}]}'
    )
    with pytest.raises(MalformedBodyError, match="messageModel"):
        decode_json_body(body, HeartbeatData)


def test_nulls_keep_defaults_and_scalars_fill_strings() -> None:
    body = (
        b'{"clientID":"c","producerDataSet":null,"consumerDataSet":[{"groupName":"g",'
        b'"consumeType":"1","messageModel":1,"consumeFromWhere":0,"unitMode":"false",'
        b'"subscriptionDataSet":[{"topic":"T","subString":"a||b","tagsSet":["a",7],'
        b'"codeSet":["97",98],"subVersion":null,"classFilterMode":null,"extra":{"x":1}}]}],'
        b'"somethingNew":[1,2]}'
    )
    data = decode_json_body(body, HeartbeatData)
    assert data.producer_data_set == []
    (consumer,) = data.consumer_data_set
    # "1" is not an enum name: kept as sent (fastjson would read null), not an error
    assert consumer.consume_type == "1"
    (sub,) = consumer.subscription_data_set
    assert sub.tags_set == ["a", "7"]
    assert sub.code_set == [97, 98]
    assert sub.sub_version == 0 and sub.class_filter_mode is False


def test_a_required_field_still_required() -> None:
    with pytest.raises(MalformedBodyError, match="groupName"):
        decode_json_body(
            b'{"clientID":"c","consumerDataSet":[{"groupName":null,"consumeType":1,'
            b'"messageModel":1,"consumeFromWhere":0}]}',
            HeartbeatData,
        )


@pytest.mark.parametrize("type_", [LockBatchRequestBody, UnlockBatchRequestBody])
def test_lock_bodies_as_cpp_writes_them(type_: type[LockBatchRequestBody]) -> None:
    body = (
        b'{"clientId":"10.0.0.7@1","consumerGroup":"g","mqSet":[{"brokerName":"broker-a",'
        b'"queueId":"3","topic":"T"}]}\n'
    )
    decoded = decode_json_body(body, type_)
    assert decoded.mq_set[0].queue_id == 3
    assert decoded.only_this_broker is False


def test_register_broker_body_with_ordinals_and_string_numbers() -> None:
    body = (
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"topicName":"T",'
        b'"readQueueNums":"4","writeQueueNums":4,"perm":"6","topicFilterType":1,'
        b'"order":"true"}},"dataVersion":{"timestamp":"17","counter":2}},'
        b'"filterServerList":null}'
    )
    decoded = decode_json_body(body, RegisterBrokerBody)
    topic = decoded.topic_config_serialize_wrapper.topic_config_table["T"]
    assert topic.topic_filter_type == "MULTI_TAG"
    assert (topic.read_queue_nums, topic.perm, topic.order) == (4, 6, True)
    assert decoded.topic_config_serialize_wrapper.data_version.timestamp == 17
    assert decoded.filter_server_list == []
    wrapper = decode_json_body(
        b'{"topicConfigTable":{"U":{"topicName":"U","topicFilterType":"SINGLE_TAG"}}}',
        TopicConfigSerializeWrapper,
    )
    assert wrapper.topic_config_table["U"].topic_filter_type == "SINGLE_TAG"


def test_group_config_with_string_numbers() -> None:
    config = decode_json_body(
        b'{"groupName":"g","retryMaxTimes":"3","consumeMessageOrderly":"true","brokerId":null}',
        SubscriptionGroupConfig,
    )
    assert (config.retry_max_times, config.consume_message_orderly, config.broker_id) == (
        3,
        True,
        0,
    )
