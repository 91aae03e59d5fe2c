"""ProgressService: lag, inflight and last consumed time of a group, on an embedded broker's
services (in-memory store, manual clock)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.services.clock import ManualClock
from pocketmq.store.message_store import PutMessage

START_MS = 1_700_000_000_000


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker(port=0, store=None, clock=ManualClock(START_MS), namesrv=False) as running:
        running.topics.create("Orders", read_queue_nums=2, write_queue_nums=2)
        yield running


def send(broker: Broker, topic: str, queue_id: int, count: int) -> None:
    for i in range(count):
        broker.send.put(PutMessage(topic=topic, body=b"x" * 10, queue_id=queue_id), {"i": str(i)})


async def test_lag_is_sent_minus_committed_per_queue(broker: Broker) -> None:
    send(broker, "Orders", 0, 5)
    send(broker, "Orders", 1, 3)
    broker.offsets.commit("billing", "Orders", 0, 2)
    progress = broker.progress.group("billing")
    assert [(q.topic, q.queue_id) for q in progress.queues] == [("Orders", 0), ("Orders", 1)]
    first, second = progress.queues
    assert (first.broker_offset, first.consumer_offset, first.lag) == (5, 2, 3)
    # nothing committed on queue 1: RocketMQ counts the offset as 0
    assert (second.broker_offset, second.consumer_offset, second.lag) == (3, 0, 3)
    assert progress.lag == 6 and progress.inflight == 0
    # the store time of the last consumed message (offset 1), none on queue 1
    assert first.last_timestamp == START_MS
    assert second.last_timestamp == 0
    assert broker.progress.topics_of("billing") == ["Orders"]
    assert broker.progress.groups_of_topic("Orders") == ["billing"]
    assert "billing" in broker.progress.groups()


async def test_pop_lent_messages_are_inflight_not_lag(broker: Broker) -> None:
    send(broker, "Orders", 0, 4)
    broker.groups.find_or_create("poppers")
    popped = broker.pop.pop("poppers", "Orders", 0, 3, 60_000, False, None)
    assert len(popped) == 3
    queue = broker.progress.group("poppers", ["Orders"]).queues[0]
    assert (queue.broker_offset, queue.consumer_offset, queue.inflight) == (4, 3, 3)
    assert queue.lag == 1 and queue.pull_offset == 6
    broker.pop.ack("poppers", "Orders", str(popped[0].handle))
    assert broker.progress.group("poppers", ["Orders"]).queues[0].inflight == 2
    # the out-traffic counted for the group, the in-traffic for the topic
    assert broker.stats.group_get[("Orders", "poppers")].messages == 3
    assert broker.stats.topic_put["Orders"].messages == 4


async def test_topics_without_a_config_are_left_out(broker: Broker) -> None:
    broker.offsets.commit("billing", "Gone", 0, 7)
    assert broker.progress.topics_of("billing") == ["Gone"]
    assert broker.progress.group("billing").queues == []
    assert broker.progress.group("billing", ["Orders"]).lag == 0
