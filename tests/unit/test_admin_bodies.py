"""The admin bodies and headers of issue 17's group and consumer control, byte for byte as
RocketMQ's Java side writes and reads them; the push consumer's figures and direct consumption."""

from __future__ import annotations

import msgspec
import pytest

from pocketmq.broker.protocol.admin_bodies import (
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ConsumeStatus,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerStatusBody,
    ProcessQueueInfo,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    decode_mq_table,
    encode_fastjson_body,
    mq_key,
    parse_mq_key,
)
from pocketmq.broker.protocol.errors import MalformedBodyError
from pocketmq.broker.protocol.headers import MessageQueue, SubscriptionData, decode_json_body
from pocketmq.client._admin_requests import consume_directly
from pocketmq.client._consumer_stats import ConsumerStats
from pocketmq.client._push_common import ConsumeResult

MQ = MessageQueue(topic="Orders", broker_name="broker-a", queue_id=3)


def test_reset_body_is_written_with_bare_queue_keys() -> None:
    body = encode_fastjson_body(ResetOffsetBody(offset_table={mq_key(MQ): 42}))
    assert body == b'{"offsetTable":{{"brokerName":"broker-a","queueId":3,"topic":"Orders"}:42}}'
    decoded = decode_json_body(body, ResetOffsetBody)
    assert decode_mq_table(decoded.offset_table) == {MQ: 42}


def test_fastjson_field_order_in_a_key_does_not_matter() -> None:
    # fastjson may write a key's fields in declaration order; the key names the same queue
    body = b'{"offsetTable":{{"topic":"Orders","brokerName":"broker-a","queueId":3}:7}}'
    assert decode_mq_table(decode_json_body(body, ResetOffsetBody).offset_table) == {MQ: 7}


def test_a_bad_queue_key_is_named() -> None:
    with pytest.raises(MalformedBodyError, match="not a MessageQueue map key"):
        parse_mq_key('{"topic":"T"}')
    with pytest.raises(MalformedBodyError, match="not a MessageQueue map key"):
        parse_mq_key("Orders")


def test_consumer_status_body_nests_queue_keyed_maps() -> None:
    body = encode_fastjson_body(
        GetConsumerStatusBody(consumer_table={"10.0.0.1@a": {mq_key(MQ): 5}})
    )
    assert body == (
        b'{"messageQueueTable":{},"consumerTable":{"10.0.0.1@a":'
        b'{{"brokerName":"broker-a","queueId":3,"topic":"Orders"}:5}}}'
    )
    decoded = decode_json_body(body, GetConsumerStatusBody)
    assert decode_mq_table(decoded.consumer_table["10.0.0.1@a"]) == {MQ: 5}


def test_running_info_has_javas_field_names_and_round_trips() -> None:
    info = ConsumerRunningInfo(
        properties={"consumerGroup": "g", "PROP_CONSUMEORDERLY": "false"},
        subscription_set=[SubscriptionData(topic="Orders", sub_string="*")],
        mq_table={mq_key(MQ): ProcessQueueInfo(commit_offset=9, dropped=True)},
        status_table={"Orders": ConsumeStatus(pull_rt=1.5, consume_ok_tps=2.0)},
    )
    body = encode_fastjson_body(info)
    raw = body.decode()
    for name in ('"droped":true', '"pullRT":1.5', '"consumeOKTPS":2.0', '"cachedMsgSizeInMiB":0'):
        assert name in raw, name
    assert '"mqTable":{{"brokerName":"broker-a","queueId":3,"topic":"Orders"}:{' in raw
    decoded = ConsumerRunningInfo.decode(body)
    assert decoded == info


def test_running_info_as_a_java_consumer_writes_it() -> None:
    # shape of fastjson's output from DefaultMQPushConsumerImpl.consumerRunningInfo
    java = (
        b'{"jstack":"","mqPopTable":{},"mqTable":{{"brokerName":"broker-a","queueId":3,'
        b'"topic":"Orders"}:{"cachedMsgCount":0,"cachedMsgMaxOffset":0,"cachedMsgMinOffset":0,'
        b'"cachedMsgSizeInMiB":0,"commitOffset":12,"droped":false,"lastConsumeTimestamp":1,'
        b'"lastLockTimestamp":0,"lastPullTimestamp":2,"locked":false,"transactionMsgCount":0,'
        b'"transactionMsgMaxOffset":0,"transactionMsgMinOffset":0,"tryUnlockTimes":0}},'
        b'"properties":{"consumerGroup":"g"},"statusTable":{"Orders":{"consumeFailedMsgs":0,'
        b'"consumeFailedTPS":0.0,"consumeOKTPS":0.0,"consumeRT":0.0,"pullRT":3.0,"pullTPS":0.0}},'
        b'"subscriptionSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG",'
        b'"subString":"*","subVersion":1700000000000,"tagsSet":[],"topic":"Orders"}],'
        b'"userConsumerInfo":{}}'
    )
    info = ConsumerRunningInfo.decode(java)
    assert decode_mq_table(info.mq_table)[MQ].commit_offset == 12
    assert info.status_table["Orders"].pull_rt == 3.0
    assert info.subscription_set[0].sub_version == 1700000000000


def test_headers_use_javas_keys() -> None:
    reset = ResetOffsetRequestHeader(topic="T", group="g", timestamp=-1, is_force=True)
    assert reset.to_ext_fields() == {
        "topic": "T",
        "group": "g",
        "queueId": "-1",
        "timestamp": "-1",
        "isForce": "true",
    }
    parsed = ResetOffsetRequestHeader.from_ext_fields(
        {"topic": "T", "group": "g", "timestamp": "5", "isForce": "TRUE", "offset": "9"}
    )
    assert parsed.is_force and parsed.offset == 9 and parsed.queue_id == -1
    delete = DeleteSubscriptionGroupRequestHeader.from_ext_fields({"groupName": "g"})
    assert delete == DeleteSubscriptionGroupRequestHeader(group_name="g", clean_offset=False)


def test_consumer_figures_over_the_last_minute_and_hour() -> None:
    now = [1000.0]
    stats = ConsumerStats(clock_s=lambda: now[0])
    stats.pulled("T", 10.0, 30)
    stats.pulled("T", 30.0, 0)
    for _ in range(6):
        stats.consumed("T", 5.0, ok=True)
    stats.consumed("T", 20.0, ok=False)
    status = stats.status("T")
    assert status.pull_rt == 20.0
    assert status.pull_tps == 30 / 60
    assert status.consume_rt == 50.0 / 7
    assert status.consume_ok_tps == 6 / 60
    assert status.consume_failed_tps == 1 / 60
    assert status.consume_failed_msgs == 1
    now[0] += 120  # past the minute, within the hour
    later = stats.status("T")
    assert later.pull_tps == 0 and later.consume_rt == 0 and later.consume_failed_msgs == 1
    now[0] += 3600
    assert stats.status("T").consume_failed_msgs == 0
    assert stats.status("unknown") == ConsumeStatus()


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        (None, "CR_SUCCESS"),
        (ConsumeResult.SUCCESS, "CR_SUCCESS"),
        (ConsumeResult.RECONSUME_LATER, "CR_LATER"),
    ],
)
async def test_direct_consumption_results(returned: object, expected: str) -> None:
    seen: list[object] = []

    async def listener(message: object) -> object:
        seen.append(message)
        return returned

    result = await consume_directly(listener, "m", orderly=True)  # type: ignore[arg-type]
    assert seen == ["m"]
    assert result.consume_result == expected and result.order and result.auto_commit


async def test_direct_consumption_that_raises() -> None:
    def listener(message: object) -> None:
        raise ValueError("bad order")

    result = await consume_directly(listener, "m", orderly=False)  # type: ignore[arg-type]
    assert result == ConsumeMessageDirectlyResult(
        order=False,
        consume_result="CR_THROW_EXCEPTION",
        remark="ValueError: bad order",
        spent_time_mills=result.spent_time_mills,
    )
    assert (
        msgspec.json.decode(encode_fastjson_body(result))["consumeResult"] == "CR_THROW_EXCEPTION"
    )


def test_a_consumer_reads_both_reset_bodies() -> None:
    from pocketmq.client._admin_requests import _reset_table
    from pocketmq.client.message import MessageQueue as ClientQueue

    java = b'{"offsetTable":{{"brokerName":"broker-a","queueId":3,"topic":"Orders"}:4}}'
    cpp = b'{"offsetTable":[{"topic":"Orders","brokerName":"broker-a","queueId":3,"offset":4}]}'
    expected = {ClientQueue("Orders", "broker-a", 3): 4}
    assert _reset_table(java) == expected
    assert _reset_table(cpp) == expected
    with pytest.raises(MalformedBodyError):
        _reset_table(b'{"offsetTable":"nonsense"}')
