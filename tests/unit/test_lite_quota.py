"""The lite-topic quota: RocketMQ's HandleLmqQuota counts the broker's LMQs
(maxLmqConsumeQueueNum) and refuses a message that would make one more."""

from __future__ import annotations

import pytest

from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.grpc.errors import STATUS_CODES
from pocketmq.broker.grpc.stubs import definition_pb2
from pocketmq.broker.handlers.common import RESPONSE_CODES
from pocketmq.broker.services.send import SendService
from pocketmq.broker.services.topics import TopicManager


def sender(quota: int) -> SendService:
    topics = TopicManager(None, default_queue_nums=4, auto_create=False)
    for parent in ("parent-a", "parent-b"):
        topics.create(parent, attributes={"message.type": "LITE"})
    config = BrokerConfig(max_lmq_consume_queue_num=quota)
    # lite_queue reads only the topics and the config: no store, writer or disk needed
    return SendService(None, topics=topics, writer=None, retry=None, config=config, disk=object())  # type: ignore[arg-type]


def test_a_new_lite_topic_past_the_quota_is_refused() -> None:
    send = sender(quota=2)
    parent_a = send.topics.get("parent-a")
    parent_b = send.topics.get("parent-b")
    assert parent_a is not None and parent_b is not None
    assert send.lite_queue(parent_a, "one") == "%LMQ%parent-a|one"
    assert send.lite_queue(parent_b, "two") == "%LMQ%parent-b|two"
    # The count is the broker's, whatever the parent: a third LMQ anywhere is refused.
    for parent, lite in ((parent_a, "three"), (parent_b, "three")):
        with pytest.raises(BrokerError) as refused:
            send.lite_queue(parent, lite)
        assert refused.value.kind is Kind.LITE_TOPIC_QUOTA_EXCEEDED
        assert "max_lmq_consume_queue_num 2" in str(refused.value)
    assert send.topics.get("%LMQ%parent-a|three") is None
    # Lite topics that exist still take messages.
    assert send.lite_queue(parent_a, "one") == "%LMQ%parent-a|one"
    assert send.lite_queue(parent_b, "two") == "%LMQ%parent-b|two"


def test_an_illegal_lite_topic_is_refused_before_the_quota() -> None:
    send = sender(quota=0)
    parent = send.topics.get("parent-a")
    assert parent is not None
    with pytest.raises(BrokerError) as refused:
        send.lite_queue(parent, "bad.name")
    assert refused.value.kind is Kind.ILLEGAL_LITE_TOPIC


def test_the_quota_refusal_in_each_fronts_codes() -> None:
    assert RESPONSE_CODES[Kind.LITE_TOPIC_QUOTA_EXCEEDED] == 2017  # LMQ_QUOTA_EXCEEDED
    # RocketMQ's proxy maps LMQ_QUOTA_EXCEEDED to LITE_TOPIC_QUOTA_EXCEEDED (ResponseBuilder)
    assert (
        STATUS_CODES[Kind.LITE_TOPIC_QUOTA_EXCEEDED]
        == definition_pb2.Code.LITE_TOPIC_QUOTA_EXCEEDED
    )
    assert BrokerConfig().max_lmq_consume_queue_num == 20_000
