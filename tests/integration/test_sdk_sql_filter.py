"""The SDK's SQL92 subscriptions through an embedded broker: push, pull and POP get exactly the
messages whose properties match, and a bad expression (or a broker without property filters)
fails ``start()`` with the broker's answer (CHECK_CLIENT_CONFIG)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.client import (
    Admin,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    ReceivedMessage,
    SimpleConsumer,
)
from pocketmq.client.errors import BrokerSystemError, SubscriptionError
from pocketmq.client.filter import MessageSelector

TOPIC = "SqlOrders"
# (body, tag, properties): "a" a number (or not), "region" missing on one message.
MESSAGES = [
    (b"m0", "x", {"a": "1", "region": "eu"}),
    (b"m1", "y", {"a": "7", "region": "us"}),
    (b"m2", "x", {"a": "12"}),
    (b"m3", "x", {"a": "many", "region": "eu"}),  # not a number: never matches "a > 5"
    (b"m4", "z", {"a": "9", "region": "eu"}),
    (b"m5", "y", {"a": "3", "region": "eu"}),
]
EXPRESSION = "a > 5"
MATCHING = [b"m1", b"m2", b"m4"]
# A SQL expression with TAGS: a client that re-filtered by tags would drop these (their tag is
# not the expression's text).
TAGGED_EXPRESSION = "TAGS IN ('x', 'z') AND region = 'eu'"
TAGGED_MATCHING = [b"m0", b"m3", b"m4"]


async def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 15.0) -> None:
    """A guard against hanging, not a timing assertion."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.02)


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker(port=0, store=None) as running:
        assert running.namesrv_address is not None
        async with Admin(namesrv=running.namesrv_address) as admin:
            await admin.create_topic(TOPIC, 2)
        async with Producer("sql-producers", namesrv=running.namesrv_address) as producer:
            for body, tag, properties in MESSAGES:
                await producer.send(
                    Message(topic=TOPIC, body=body, tags=tag, properties=dict(properties))
                )
        yield running


def namesrv_of(broker: Broker) -> str:
    assert broker.namesrv_address is not None
    return broker.namesrv_address


@pytest.mark.parametrize(
    ("how", "expected"),
    [("sql", MATCHING), ("selector", TAGGED_MATCHING)],
)
async def test_push_consumer_gets_exactly_the_matching_messages(
    broker: Broker, how: str, expected: list[bytes]
) -> None:
    received: list[bytes] = []

    async def listener(message: ReceivedMessage) -> None:
        received.append(message.body)

    consumer = PushConsumer(
        f"sql-push-{how}", namesrv=namesrv_of(broker), consume_from="first", listener=listener
    )
    if how == "sql":
        consumer.subscribe(TOPIC, sql=EXPRESSION)
    else:
        consumer.subscribe(TOPIC, MessageSelector.by_sql(TAGGED_EXPRESSION))
    async with consumer:
        queues = [mq for mq in consumer.assigned_queues if mq.topic == TOPIC]
        assert len(queues) == 2

        def read_everything() -> bool:
            # every queue consumed or skipped to its end: nothing more can arrive
            ends = [broker.store.max_offset(TOPIC, mq.queue_id) for mq in queues]
            offsets = [consumer.committed_offset(mq) for mq in queues]
            return offsets == ends and len(received) >= len(expected)

        await wait_until(read_everything)
    assert sorted(received) == expected


async def test_pull_consumer_filters_by_sql(broker: Broker) -> None:
    async with PullConsumer(namesrv=namesrv_of(broker)) as puller:
        pulled: list[bytes] = []
        for mq in await puller.queues(TOPIC):
            result = await puller.pull(mq, 0, 32, expression=EXPRESSION, expression_type="SQL92")
            assert result.status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG)
            assert result.next_offset == result.max_offset  # non-matching ones skipped past
            pulled.extend(m.body for m in result.messages)
        assert sorted(pulled) == MATCHING

        tagged: list[bytes] = []
        for mq in await puller.queues(TOPIC):
            selector = MessageSelector.by_sql(TAGGED_EXPRESSION)
            result = await puller.pull(mq, 0, 32, expression=selector)
            tagged.extend(m.body for m in result.messages)
        assert sorted(tagged) == TAGGED_MATCHING

        mq = (await puller.queues(TOPIC))[0]
        with pytest.raises(SubscriptionError, match="SUBSCRIPTION_PARSE_FAILED"):
            await puller.pull(mq, 0, 32, expression="a >", expression_type="sql92")


async def test_simple_consumer_pops_by_sql(broker: Broker) -> None:
    async with SimpleConsumer(
        "sql-pop",
        namesrv=namesrv_of(broker),
        subscriptions={TOPIC: MessageSelector.by_sql(EXPRESSION)},
        await_duration_s=0.2,
    ) as consumer:
        assert consumer.subscriptions == {TOPIC: EXPRESSION}
        popped: list[bytes] = []
        while len(popped) < len(MATCHING):
            batch = await asyncio.wait_for(consumer.receive(16, invisible_duration_s=60), 15)
            for message in batch:
                popped.append(message.body)
                await consumer.ack(message)
        assert sorted(popped) == MATCHING
        assert await consumer.receive(16) == []  # the others never come: the broker refused them


async def test_a_bad_expression_fails_start(broker: Broker) -> None:
    push = PushConsumer("sql-bad", namesrv=namesrv_of(broker))
    push.subscribe(TOPIC, sql="a > 'x'")
    with pytest.raises(SubscriptionError, match=r"SqlOrders.*a > 'x'.*cannot be compared"):
        await push.start()
    await push.close()

    simple = SimpleConsumer("sql-bad-pop", namesrv=namesrv_of(broker))
    simple.subscribe(TOPIC, sql="region =")
    with pytest.raises(SubscriptionError, match="SUBSCRIPTION_PARSE_FAILED"):
        await simple.start()
    await simple.close()


async def test_a_broker_without_property_filters_fails_start() -> None:
    config = BrokerConfig(port=0, data_dir=None, property_filter=False)
    async with Broker(config, namesrv=True) as running:
        namesrv = namesrv_of(running)
        async with Admin(namesrv=namesrv) as admin:
            await admin.create_topic(TOPIC, 1)
        consumer = PushConsumer("sql-off", namesrv=namesrv)
        consumer.subscribe(TOPIC, sql=EXPRESSION)
        with pytest.raises(BrokerSystemError, match="does not support consumer to filter"):
            await consumer.start()
        await consumer.close()
        tags_only = PushConsumer("tags-on", namesrv=namesrv)
        tags_only.subscribe(TOPIC, "x || y")
        async with tags_only:  # TAG subscriptions need no check
            assert tags_only.assigned_queues
