"""The SDK on uvloop (whose transports are not asyncio.Transport subclasses): a connection
round trip, then producer -> push consumer end to end against the fake cluster."""

from __future__ import annotations

import asyncio

import uvloop

from pocketmq.broker.protocol import RequestCode
from pocketmq.broker.protocol.headers import GetRouteInfoRequestHeader
from pocketmq.client import Message, Producer, PushConsumer, ReceivedMessage
from pocketmq.client.connection import Connection, make_request

from .test_client_fake_server import fake_cluster, wait_until


async def _scenario() -> tuple[int, int, set[str]]:
    async with fake_cluster("broker-a", "broker-b") as cluster:
        cluster.add_topic("T", 2)
        addr = cluster.brokers[0].addr
        conn = await Connection.open(addr)
        try:
            route = make_request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic="T")
            )
            assert (await conn.invoke(route, 2000)).code == 0
        finally:
            await conn.aclose()
        got: list[ReceivedMessage] = []

        async def listener(message: ReceivedMessage) -> None:
            got.append(message)

        consumer = PushConsumer("G", namesrv=addr, client_ip="127.0.0.1", listener=listener)
        consumer.subscribe("T")
        async with consumer, Producer("P", namesrv=addr, client_ip="127.0.0.1") as producer:
            results = await asyncio.gather(
                *(producer.send(Message(topic="T", body=b"%d" % i)) for i in range(100))
            )
            await wait_until(lambda: len(got) == 100)
        return len(results), len({m.msg_id for m in got}), {r.queue.broker_name for r in results}


def test_sdk_runs_on_uvloop() -> None:
    sent, received, brokers = uvloop.run(_scenario())
    assert (sent, received) == (100, 100)
    assert brokers == {"broker-a", "broker-b"}
