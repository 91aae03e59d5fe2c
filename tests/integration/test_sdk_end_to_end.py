"""The SDK against real pocketmq processes: a name server and two brokers (shared by the
tests of this module, each test with its own topics and groups), plus a standalone broker on
a manual clock for redeliveries."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pocketmq.broker.protocol import RequestCode
from pocketmq.broker.protocol.headers import (
    GetRouteInfoRequestHeader,
    TopicRouteData,
    decode_json_body,
)
from pocketmq.client import (
    Admin,
    ConsumeResult,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    ReceivedMessage,
)
from pocketmq.client.cli import (
    cmd_consume,
    cmd_send,
    cmd_topic_create,
    cmd_topic_list,
    cmd_topic_status,
)
from pocketmq.client.connection import Connection, check_response, make_request
from tests.integration.cluster import Cluster, Process

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


async def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 20.0) -> None:
    """A guard against hanging, not a timing assertion."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


async def wait_registered(namesrv: str, brokers: int) -> None:
    """ "ready" is printed before the first registration with the name server lands."""
    async with Admin(namesrv) as admin, asyncio.timeout(20):
        while len((await admin.cluster_info()).broker_addr_table) < brokers:
            await asyncio.sleep(0.02)


class Collector:
    def __init__(self) -> None:
        self.messages: list[ReceivedMessage] = []

    async def __call__(self, message: ReceivedMessage) -> None:
        self.messages.append(message)

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Process, Process, Process]]:
    with Cluster(tmp_path_factory.mktemp("sdk")) as running:
        namesrv = running.start_namesrv()
        a = running.start_broker("broker-a")
        b = running.start_broker("broker-b")
        asyncio.run(wait_registered(namesrv.address, 2))
        yield namesrv, a, b


@pytest.fixture
def namesrv(cluster: tuple[Process, Process, Process]) -> str:
    return cluster[0].address


async def wait_route(namesrv: str, topic: str, brokers: int) -> None:
    """A broker tells the name server about a new topic with its next registration; until
    then clients see no (or a partial) route, as with RocketMQ."""
    conn = await Connection.open(namesrv)
    try:
        async with asyncio.timeout(20):
            while True:
                header = GetRouteInfoRequestHeader(topic=topic)
                cmd = make_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header)
                response = await conn.invoke(cmd, 5000)
                if response.code == 0:
                    route = decode_json_body(response.body or b"", TopicRouteData)
                    if len(route.queue_datas) >= brokers:
                        return
                await asyncio.sleep(0.02)
    finally:
        await conn.aclose()


async def make_topic(namesrv: str, queues: int = 4) -> str:
    topic = unique("SdkTopic")
    async with Admin(namesrv) as admin:
        assert await admin.create_topic(topic, queues) == ["broker-a", "broker-b"]
    await wait_route(namesrv, topic, 2)
    return topic


async def test_admin_producer_and_pull_round_trip(namesrv: str) -> None:
    topic = await make_topic(namesrv, 2)
    async with Admin(namesrv) as admin:
        assert topic in await admin.list_topics()
    async with Producer(unique("PG"), namesrv=namesrv) as producer:
        results = [
            await producer.send(Message(topic=topic, body=b"m%d" % i, tags="A", keys=[f"k{i}"]))
            for i in range(8)
        ]
    assert {r.queue.broker_name for r in results} == {"broker-a", "broker-b"}
    assert len({r.msg_id for r in results}) == 8
    async with PullConsumer(namesrv=namesrv) as puller:
        first = results[0]
        pulled = await puller.pull(first.queue, first.queue_offset, 1)
        assert pulled.status is PullStatus.FOUND
        message = pulled.messages[0]
        assert (message.body, message.msg_id, message.tags) == (b"m0", first.msg_id, "A")
        assert message.keys == ("k0",)
        assert message.offset_msg_id == first.offset_msg_id
        assert (await puller.view(first.offset_msg_id)).body == b"m0"
        assert [m.body for m in await puller.query_by_key(topic, "k3")] == [b"m3"]
        total = 0
        for mq in await puller.queues(topic):
            total += await puller.max_offset(mq) - await puller.min_offset(mq)
        assert total == 8
    async with Admin(namesrv) as admin:
        status = await admin.topic_status(topic)
    assert len(status) == 4 and sum(s.max_offset for s in status) == 8
    assert all(s.last_update_ms for s in status if s.max_offset)


async def test_send_to_a_new_topic_creates_it(namesrv: str) -> None:
    topic = unique("AutoTopic")
    async with Producer(unique("PG"), namesrv=namesrv) as producer:
        result = await producer.send(Message(topic=topic, body=b"first"))
    await wait_route(namesrv, topic, 1)
    async with PullConsumer(namesrv=namesrv) as puller:
        pulled = await puller.pull(result.queue, result.queue_offset, 1)
    assert [m.body for m in pulled.messages] == [b"first"]


async def test_push_consumer_gets_everything_and_resumes_from_committed_offsets(
    namesrv: str,
) -> None:
    topic = await make_topic(namesrv)
    group = unique("CG")
    async with Producer(unique("PG"), namesrv=namesrv) as producer:
        sent = {
            (await producer.send(Message(topic=topic, body=b"%d" % i))).msg_id for i in range(20)
        }
        got = Collector()
        consumer = PushConsumer(group, namesrv=namesrv, consume_from="first", listener=got)
        consumer.subscribe(topic)
        async with consumer:
            await wait_until(lambda: {m.msg_id for m in got.messages} == sent)
            late = await producer.send(Message(topic=topic, body=b"late"))  # long polling
            await wait_until(lambda: late.msg_id in {m.msg_id for m in got.messages})
        # the same group again: committed offsets, so only what is new
        again = Collector()
        consumer = PushConsumer(group, namesrv=namesrv, consume_from="first", listener=again)
        consumer.subscribe(topic)
        async with consumer:
            newest = await producer.send(Message(topic=topic, body=b"newest"))
            await wait_until(lambda: newest.msg_id in {m.msg_id for m in again.messages})
    assert [m.body for m in again.messages] == [b"newest"]


async def test_two_consumers_share_the_queues(namesrv: str) -> None:
    topic = await make_topic(namesrv)
    group = unique("CG")
    got1, got2 = Collector(), Collector()
    c1 = PushConsumer(group, namesrv=namesrv, consume_from="first", listener=got1)
    c2 = PushConsumer(group, namesrv=namesrv, consume_from="first", listener=got2)
    all_queues = {MessageQueue(topic, b, q) for b in ("broker-a", "broker-b") for q in range(4)}

    def owned(c: PushConsumer) -> set[MessageQueue]:
        return {mq for mq in c.assigned_queues if mq.topic == topic}

    for c in (c1, c2):
        c.subscribe(topic)
    async with c1, c2:
        await wait_until(
            lambda: (
                owned(c1) | owned(c2) == all_queues
                and not owned(c1) & owned(c2)
                and len(owned(c1)) == 4
            )
        )
        async with Producer(unique("PG"), namesrv=namesrv) as producer:
            sent = {
                (await producer.send(Message(topic=topic, body=b"%d" % i))).msg_id
                for i in range(16)
            }
        await wait_until(lambda: {m.msg_id for m in got1.messages + got2.messages} == sent)
    assert got1.messages and got2.messages


async def test_tag_filter(namesrv: str) -> None:
    topic = await make_topic(namesrv, 1)
    got = Collector()
    consumer = PushConsumer(unique("CG"), namesrv=namesrv, consume_from="first", listener=got)
    consumer.subscribe(topic, "A || B")
    async with Producer(unique("PG"), namesrv=namesrv) as producer, consumer:
        for tag in ("A", "C", None, "B", "A"):
            await producer.send(Message(topic=topic, body=(tag or "none").encode(), tags=tag))
        await wait_until(lambda: len(got.messages) == 3)
    assert sorted(got.bodies) == [b"A", b"A", b"B"]


async def test_orderly_consumption_keeps_key_order(namesrv: str) -> None:
    topic = await make_topic(namesrv)
    seen: dict[str, list[int]] = {}

    async def listener(message: ReceivedMessage) -> None:
        key, _, n = message.body.decode().partition(":")
        seen.setdefault(key, []).append(int(n))

    consumer = PushConsumer(
        unique("CG"), namesrv=namesrv, consume_from="first", orderly=True, listener=listener
    )
    consumer.subscribe(topic)
    async with Producer(unique("PG"), namesrv=namesrv) as producer, consumer:
        for n in range(10):
            for key in ("order-1", "order-2", "order-3"):
                body = f"{key}:{n}".encode()
                await producer.send(Message(topic=topic, body=body), sharding_key=key)
        await wait_until(lambda: sum(len(v) for v in seen.values()) == 30)
    assert seen == {k: list(range(10)) for k in ("order-1", "order-2", "order-3")}


async def test_broadcasting_delivers_to_every_consumer(namesrv: str, tmp_path: Path) -> None:
    topic = await make_topic(namesrv, 2)
    group = unique("BG")
    collectors = [Collector(), Collector()]
    consumers = [
        PushConsumer(
            group,
            namesrv=namesrv,
            message_model="broadcasting",
            consume_from="first",
            listener=collectors[i],
            offsets_dir=tmp_path / str(i),
        )
        for i in range(2)
    ]
    for c in consumers:
        c.subscribe(topic)
    async with consumers[0], consumers[1], Producer(unique("PG"), namesrv=namesrv) as producer:
        sent = {
            (await producer.send(Message(topic=topic, body=b"%d" % i))).msg_id for i in range(6)
        }
        for got in collectors:
            await wait_until(lambda got=got: {m.msg_id for m in got.messages} == sent)
    assert (tmp_path / "0" / "offsets.json").exists()


async def test_batch_send(namesrv: str) -> None:
    topic = await make_topic(namesrv, 1)
    async with Producer(unique("PG"), namesrv=namesrv, retries=0) as producer:
        result = await producer.send_batch(
            [Message(topic=topic, body=b"b%d" % i, keys=[f"k{i}"]) for i in range(3)]
        )
    async with PullConsumer(namesrv=namesrv) as puller:
        pulled = await puller.pull(result.queue, result.queue_offset, 3)
    assert [m.body for m in pulled.messages] == [b"b0", b"b1", b"b2"]
    assert [m.msg_id for m in pulled.messages] == result.msg_id.split(",")


async def test_cli_helpers(namesrv: str) -> None:
    topic = unique("CliTopic")
    created = await cmd_topic_create(namesrv, topic, 2)
    assert created["brokers"] == ["broker-a", "broker-b"]
    await wait_route(namesrv, topic, 2)
    assert topic in await cmd_topic_list(namesrv)
    sent = [r async for r in cmd_send(namesrv, topic, "A", "k1", b"hello", 3)]
    assert [r["status"] for r in sent] == ["SEND_OK"] * 3
    consumed = [m async for m in cmd_consume(namesrv, topic, unique("CliG"), 3, "first", "*")]
    assert sorted(m["msg_id"] for m in consumed) == sorted(r["msg_id"] for r in sent)
    assert {m["body"] for m in consumed} == {"hello"}
    status = await cmd_topic_status(namesrv, topic)
    assert sum(s["max_offset"] for s in status) == 3


# -- redelivery, on a manual clock ---------------------------------------------------------------


@pytest.fixture
def manual(tmp_path: Path) -> Iterator[Process]:
    with Cluster(tmp_path) as running:
        yield running.start_standalone(extra_args=["--clock", "manual"])


async def advance(broker_addr: str, duration: str) -> None:
    conn = await Connection.open(broker_addr)
    try:
        cmd = make_request(
            RequestCode.POCKETMQ_CLOCK, ext_fields={"action": "advance", "duration": duration}
        )
        check_response(await conn.invoke(cmd, 5000))
    finally:
        await conn.aclose()


async def test_failed_message_is_redelivered_from_the_retry_topic(manual: Process) -> None:
    namesrv = f"127.0.0.1:{manual.extra['namesrv_port']}"
    await wait_registered(namesrv, 1)
    topic = unique("RetryTopic")
    got = Collector()

    async def fail_first(message: ReceivedMessage) -> ConsumeResult:
        await got(message)
        return (
            ConsumeResult.RECONSUME_LATER if not message.reconsume_times else ConsumeResult.SUCCESS
        )

    # %RETRY%<group> reaches the name server only after the first heartbeat created it:
    # rebalance often so the consumer picks the retry queue up soon
    consumer = PushConsumer(
        unique("CG"),
        namesrv=namesrv,
        consume_from="first",
        listener=fail_first,
        rebalance_interval_s=0.2,
    )
    consumer.subscribe(topic)
    async with Producer(unique("PG"), namesrv=namesrv) as producer:
        sent = await producer.send(Message(topic=topic, body=b"again"))
        await wait_route(namesrv, topic, 1)
        async with consumer:
            await wait_until(lambda: len(got.messages) == 1)
            await wait_until(
                lambda: any(mq.topic.startswith("%RETRY%") for mq in consumer.assigned_queues)
            )
            await advance(manual.address, "11s")  # delay level 3 = 10 s
            await wait_until(lambda: len(got.messages) == 2)
    first, second = got.messages
    assert (first.reconsume_times, second.reconsume_times) == (0, 1)
    assert second.msg_id == sent.msg_id and second.topic == topic
    assert second.queue.topic.startswith("%RETRY%")


async def test_one_consumer_takes_over_when_the_other_leaves(namesrv: str) -> None:
    topic = await make_topic(namesrv)
    group = unique("CG")
    got1, got2 = Collector(), Collector()
    c1 = PushConsumer(group, namesrv=namesrv, consume_from="first", listener=got1)
    c2 = PushConsumer(group, namesrv=namesrv, consume_from="first", listener=got2)
    all_queues = {MessageQueue(topic, b, q) for b in ("broker-a", "broker-b") for q in range(4)}

    def owned(c: PushConsumer) -> set[MessageQueue]:
        return {mq for mq in c.assigned_queues if mq.topic == topic}

    for c in (c1, c2):
        c.subscribe(topic)
    async with c1:
        async with c2:
            await wait_until(lambda: len(owned(c1)) == 4 and len(owned(c2)) == 4)
        # c2 unregistered: the brokers tell c1, which takes every queue.
        await wait_until(lambda: owned(c1) == all_queues)
        async with Producer(unique("PG"), namesrv=namesrv) as producer:
            sent = {
                (await producer.send(Message(topic=topic, body=b"%d" % i))).msg_id
                for i in range(16)
            }
        await wait_until(lambda: {m.msg_id for m in got1.messages} >= sent)
