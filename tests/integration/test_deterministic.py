"""Seeded runs repeat: the same scenario twice with the same seed gives the same message IDs,
queue choices, delivery (POP) order and timestamps; another seed gives other ones."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from pocketmq.broker.app import SEEDED_START_MS, Broker
from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import SendMessageRequestHeaderV2
from pocketmq.client import Message, Producer, PushConsumer, SimpleConsumer
from tests.integration.cluster import Cluster
from tests.integration.raw import call


async def _scenario(seed: int) -> dict[str, Any]:
    """Sends with both ID schemes, sends to queue -1 (the broker picks), advances the clock,
    pops everything back, and starts two push consumers of one group (their rebalance)."""
    async with Broker(seed=seed) as broker:
        assert broker.clock.now_ms() == SEEDED_START_MS  # a fixed start: fixed timestamps
        namesrv, now_ms = broker.namesrv_address, broker.clock.now_ms
        sent = []
        async with Producer("det-v5", namesrv=namesrv, seed=seed, clock_ms=now_ms) as v5:
            for i in range(10):
                sent.append(await v5.send(Message(topic="Det", body=b"v5-%d" % i)))
                await broker.advance("1s")  # timestamps move with the manual clock only
        async with Producer(
            "det-v4", namesrv=namesrv, seed=seed + 1, clock_ms=now_ms, unique_id_scheme="v4"
        ) as v4:
            for i in range(5):
                sent.append(await v4.send(Message(topic="Det", body=b"v4-%d" % i)))
        broker_choices = [await _send_to_any_queue(broker.address, i) for i in range(8)]
        popped = []
        consumer = SimpleConsumer(
            "det-pop",
            namesrv=namesrv,
            subscriptions={"Det": "*"},
            await_duration_s=0.5,
            seed=seed,
            clock_ms=now_ms,
        )
        async with consumer:
            while len(popped) < len(sent) + len(broker_choices):
                for message in await consumer.receive(max_messages=4):
                    popped.append(
                        (
                            message.msg_id,
                            message.queue.queue_id,
                            message.queue_offset,
                            message.born_timestamp,
                            message.store_timestamp,
                        )
                    )
                    await consumer.ack(message)
        first = PushConsumer("det-push", namesrv=namesrv, seed=seed)
        second = PushConsumer("det-push", namesrv=namesrv, seed=seed + 1)
        for consumer_ in (first, second):
            consumer_.subscribe("Det")
        async with first, second:
            assignments = await _settled_assignments(first, second)
        return {
            "ids": [result.msg_id for result in sent],
            "queues": [result.queue.queue_id for result in sent],
            "broker_queues": broker_choices,
            "popped": popped,
            "clients": [first.client_id, second.client_id],
            "rebalance": assignments,
        }


async def _send_to_any_queue(address: str, i: int) -> int:
    """A raw SEND_MESSAGE_V2 to queue -1: the broker chooses the queue (seeded)."""
    header = SendMessageRequestHeaderV2(
        producer_group="raw",
        topic="Det",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=-1,
        sys_flag=0,
        born_timestamp=0,
        flag=0,
        properties=f"UNIQ_KEY\x01RAW{i:04d}\x02",
    )
    response = await call(
        address,
        RemotingCommand(
            code=RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_ext_fields(), body=b"raw"
        ),
    )
    assert response.code == ResponseCode.SUCCESS, response.remark
    return int(response.ext_fields["queueId"])


async def _settled_assignments(*consumers: PushConsumer) -> list[list[int]]:
    import asyncio

    async with asyncio.timeout(30):
        while True:
            assigned = [
                sorted(q.queue_id for q in c.assigned_queues if q.topic == "Det") for c in consumers
            ]
            if sum(len(a) for a in assigned) == 4 and all(assigned):
                return assigned
            await asyncio.sleep(0.05)


async def test_the_same_seed_repeats_a_run_and_another_seed_differs() -> None:
    first = await _scenario(7)
    again = await _scenario(7)
    assert first == again
    assert len(set(first["ids"])) == 15  # unique within the run
    assert len(set(first["broker_queues"])) > 1  # chosen, not fixed
    other = await _scenario(8)
    assert other["ids"] != first["ids"]
    assert other["queues"] != first["queues"] or other["broker_queues"] != first["broker_queues"]
    assert other["clients"] != first["clients"]


def test_standalone_seed_starts_the_manual_clock_at_the_fixed_time(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        broker = cluster.start_standalone(
            extra_args=["--http-port", "0", "--clock", "manual", "--seed", "7"]
        )
        url = f"http://{broker.http_address}/api/clock"
        with urllib.request.urlopen(url, timeout=30) as response:
            clock = json.loads(response.read())
        assert clock["manual"] is True and clock["now_ms"] == SEEDED_START_MS
