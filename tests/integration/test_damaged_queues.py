"""A consume-queue entry swapped on a stopped store is not served by a real broker: after the
restart a push consumer of the SDK gets every message of its topic exactly once, and none of the
other topic's (issue 15)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pocketmq.broker.protocol import RequestCode
from pocketmq.broker.protocol.headers import (
    GetRouteInfoRequestHeader,
    TopicRouteData,
    decode_json_body,
)
from pocketmq.client import Admin, Message, Producer, PushConsumer, ReceivedMessage
from pocketmq.client.connection import Connection, make_request
from pocketmq.store import paths
from pocketmq.store.consume_queue import ENTRY, ENTRY_SIZE
from tests.integration.cluster import Cluster

COUNT = 30
SWAPPED = 11


async def wait_route(namesrv: str, topic: str) -> None:
    conn = await Connection.open(namesrv)
    try:
        async with asyncio.timeout(20):
            while True:
                cmd = make_request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic)
                )
                response = await conn.invoke(cmd, 5000)
                if response.code == 0:
                    route = decode_json_body(response.body or b"", TopicRouteData)
                    if route.queue_datas:
                        return
                await asyncio.sleep(0.02)
    finally:
        await conn.aclose()


def swap_entries(data: Path, logical: int) -> None:
    files = [data / paths.consume_queue_segment(topic, 0, 0) for topic in ("SmallT", "BigT")]
    raw = [bytearray(path.read_bytes()) for path in files]
    at = logical * ENTRY_SIZE
    small, big = (ENTRY.unpack_from(r, at) for r in raw)
    ENTRY.pack_into(raw[0], at, *big)
    ENTRY.pack_into(raw[1], at, *small)
    for path, content in zip(files, raw, strict=True):
        path.write_bytes(content)


async def test_swapped_entry_is_not_served_and_every_message_comes_once(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        broker = cluster.start_standalone(flush="sync")
        namesrv = f"127.0.0.1:{broker.extra['namesrv_port']}"
        async with Admin(namesrv) as admin:
            for topic in ("SmallT", "BigT"):
                await admin.create_topic(topic, 1)
        for topic in ("SmallT", "BigT"):
            await wait_route(namesrv, topic)
        async with Producer("damage-producer", namesrv=namesrv) as producer:
            for i in range(COUNT):
                await producer.send(Message(topic="SmallT", body=b"small-%d" % i))
                await producer.send(Message(topic="BigT", body=b"big-%d" % i * 20))
        broker.stop()
        swap_entries(Path(str(broker.extra["data"])), SWAPPED)
        broker.start()
        await wait_route(namesrv, "SmallT")

        got: list[ReceivedMessage] = []

        async def listener(message: ReceivedMessage) -> None:
            got.append(message)

        consumer = PushConsumer(
            "damage-group", namesrv=namesrv, consume_from="first", listener=listener
        )
        consumer.subscribe("SmallT")
        async with consumer:
            async with asyncio.timeout(30):  # a guard against hanging, not a timing assertion
                while len({m.body for m in got}) < COUNT:
                    await asyncio.sleep(0.02)
            # One more message after the restart's rebuild: it comes once, after the rest.
            async with Producer("damage-producer-2", namesrv=namesrv) as producer:
                await producer.send(Message(topic="SmallT", body=b"small-late"))
            async with asyncio.timeout(30):
                while not any(m.body == b"small-late" for m in got):
                    await asyncio.sleep(0.02)
        assert [m.body for m in got] == [b"small-%d" % i for i in range(COUNT)] + [b"small-late"]
        assert all(m.topic == "SmallT" for m in got)
        log = (tmp_path / "standalone.log").read_text(errors="replace")
        assert f"SmallT/0: entry {SWAPPED}" in log and "is not served" in log
        assert "rebuilt from the commitlog" in log
