"""Lite topic expiry (RocketMQ's LiteLifecycleManager) and the lite offset reset, on an embedded
broker with a manual clock: ``lite.topic.expiration`` minutes, never before minLiteTTl (15 min)
of inactivity nor in the broker's first 15 min, checked every 2 min."""

from __future__ import annotations

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.protocol.headers import SubscriptionGroupConfig
from pocketmq.broker.services.clock import ManualClock
from pocketmq.broker.services.lite import POLICY_MAX, POLICY_MIN, OffsetOption
from pocketmq.broker.services.lite_expiry import expiration_minutes, is_expired
from pocketmq.broker.services.lite_offsets import reset_offset
from pocketmq.store.message_store import PutMessage

MINUTE = 60_000


def put(broker: Broker, lmq: str, body: bytes) -> None:
    broker.writer.put_internal(
        PutMessage(topic=lmq, body=body, properties={"UNIQ_KEY": body.hex()})
    )


def test_the_ttl_rule() -> None:
    assert not is_expired(20, 0, 20 * MINUTE)  # not longer than the TTL yet
    assert is_expired(20, 0, 20 * MINUTE + 1)
    assert not is_expired(1, 0, 14 * MINUTE)  # never under minLiteTTl, whatever the TTL
    assert is_expired(1, 0, 15 * MINUTE + 1)
    assert not is_expired(-1, 0, 10**12) and not is_expired(0, 0, 10**12)


@pytest.mark.parametrize(
    ("text", "minutes"), [("20", 20), ("-1", -1), ("43200", 43200), ("43201", -1), ("x", -1)]
)
def test_the_attribute_range(text: str, minutes: int) -> None:
    assert expiration_minutes({"lite.topic.expiration": text}) == minutes
    assert expiration_minutes({}) == -1  # the default: never


async def test_an_idle_lite_topic_expires_and_comes_back_empty() -> None:
    async with Broker(port=0, store=None, clock=ManualClock(1_800_000_000_000)) as broker:
        parent = broker.topics.create(
            "parent", attributes={"message.type": "LITE", "lite.topic.expiration": "20"}
        )
        forever = broker.topics.create("forever", attributes={"message.type": "LITE"})
        broker.groups.put(
            SubscriptionGroupConfig(group_name="bound", attributes={"lite.bind.topic": "parent"})
        )
        expired: list[tuple[str, str]] = []
        broker.lite_expiry.listeners.append(lambda p, lite: expired.append((p, lite)))
        lmq = broker.send.lite_queue(parent, "x")
        kept = broker.send.lite_queue(forever, "x")
        for i in range(3):
            put(broker, lmq, f"old-{i}".encode())
            put(broker, kept, f"old-{i}".encode())
        # "seen" consumed one message; "bound" never consumed but is bound to the parent.
        (first,) = broker.pop.pop("seen", lmq, 0, 1, MINUTE, True, None)
        broker.pop.ack("seen", lmq, str(first.handle))

        await broker.advance("20m")  # inactive exactly 20 min: not more than the TTL
        assert broker.topics.get(lmq) is not None and expired == []
        await broker.advance("1m")  # the next check is 2 min after the last one
        assert broker.topics.get(lmq) is not None
        await broker.advance("1m")
        assert broker.topics.get(lmq) is None
        assert expired == [("parent", "x")]
        assert broker.topics.get(kept) is not None  # its parent has no TTL
        # Every group with an offset there, and every group bound to the parent, is at its end.
        for group in ("seen", "bound"):
            assert broker.offsets.query(group, lmq, 0) == 3

        # A new message makes the lite topic again; nobody is handed the expired ones.
        lmq = broker.send.lite_queue(parent, "x")
        put(broker, lmq, b"new")
        for group in ("seen", "bound"):
            popped = broker.pop.pop(group, lmq, 0, 32, MINUTE, True, None)
            assert [m.queue_offset for m in popped] == [3]


async def test_nothing_expires_in_the_first_minutes_of_a_broker() -> None:
    clock = ManualClock(1_800_000_000_000)
    async with Broker(port=0, store=None, clock=clock) as broker:
        parent = broker.topics.create(
            "parent", attributes={"message.type": "LITE", "lite.topic.expiration": "1"}
        )
        lmq = broker.send.lite_queue(parent, "x")
        put(broker, lmq, b"m")
        await broker.advance("14m")
        assert broker.lite_expiry.run_if_due() == []  # the restart protection
        await broker.advance("2m")
        assert broker.topics.get(lmq) is None


async def test_a_reset_moves_the_group_and_frees_what_it_held() -> None:
    async with Broker(port=0, store=None, clock=ManualClock(1_800_000_000_000)) as broker:
        parent = broker.topics.create("parent", attributes={"message.type": "LITE"})
        lmq = broker.send.lite_queue(parent, "x")
        for i in range(4):
            put(broker, lmq, f"m{i}".encode())
        held = broker.pop.pop("g", lmq, 0, 2, MINUTE, True, None)
        assert [m.queue_offset for m in held] == [0, 1]
        assert broker.pop.pop("g", lmq, 0, 2, MINUTE, True, None) == []  # in order: blocked
        assert reset_offset(broker.pop, "g", lmq, OffsetOption("policy", POLICY_MAX)) == 4
        assert broker.pop.pop("g", lmq, 0, 2, MINUTE, True, None) == []  # nothing new
        assert reset_offset(broker.pop, "g", lmq, OffsetOption("offset", 2)) == 2
        again = broker.pop.pop("g", lmq, 0, 8, MINUTE, True, None)
        assert [m.queue_offset for m in again] == [2, 3]
        assert reset_offset(broker.pop, "g", lmq, OffsetOption("policy", POLICY_MIN)) == 0
        assert reset_offset(broker.pop, "g", lmq, OffsetOption("policy", POLICY_MIN)) is None
