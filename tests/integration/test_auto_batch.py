"""``Producer(auto_batch=True)`` against a real standalone broker: concurrent sends go as
batches, yet each has its own result and error, and each message is stored and consumed once,
with its own properties, in the order it was sent to its queue."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest

from pocketmq.client import (
    Admin,
    Message,
    MessageView,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SendResult,
    TransactionProducer,
    TransactionResolution,
)
from pocketmq.client.errors import MessageIllegalError
from tests.integration.cluster import Cluster

# the broker's batchSizeMax here: a batch over it is refused (the default batches, of 32 KiB
# of bodies, fit)
BATCH_SIZE_MAX = 64 * 1024
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("auto-batch")
    conf = root / "broker.conf"
    conf.write_text(f"batchSizeMax={BATCH_SIZE_MAX}\n")
    with Cluster(root) as running:
        process = running.start_standalone(extra_args=["-c", str(conf)])
        yield f"127.0.0.1:{process.extra['namesrv_port']}"


async def create_topic(namesrv: str, queues: int = 4) -> str:
    topic = unique("AutoBatch")
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, queues)
    return topic


async def consume(namesrv: str, topic: str, count: int) -> list[ReceivedMessage]:
    """Everything in ``topic`` from its first offset, until ``count`` messages came; then a
    short while longer, so that a duplicate would show."""
    consumer = PushConsumer(unique("auto-batch-c"), namesrv=namesrv, consume_from="first")
    consumer.subscribe(topic, "*")
    received: list[ReceivedMessage] = []
    async with consumer:

        async def read() -> None:
            async for message in consumer:
                received.append(message)
                await consumer.ack(message)

        reader = asyncio.create_task(read())
        try:
            async with asyncio.timeout(60):  # a guard against hanging
                while len(received) < count:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
    return received


async def test_each_send_has_its_own_result_and_each_message_is_consumed_once(
    namesrv: str,
) -> None:
    topic = await create_topic(namesrv)
    messages = [
        Message(
            topic=topic,
            body=f"body-{i}".encode() * 50,
            tags="A",
            keys=[f"key-{i}"],
            properties={"n": str(i)},
        )
        for i in range(300)
    ]
    async with Producer(unique("ab-p"), namesrv=namesrv, auto_batch=True) as producer:
        results = await asyncio.gather(*(producer.send(m) for m in messages))
        batcher = producer.auto_batch
        assert batcher is not None
        assert batcher.messages_sent == 300
        assert batcher.batches_sent < 300  # they did go together
    assert len({r.msg_id for r in results}) == 300
    assert len({r.offset_msg_id for r in results}) == 300
    assert len({(r.queue.queue_id, r.queue_offset) for r in results}) == 300
    received = await consume(namesrv, topic, 300)
    assert len(received) == 300  # once each
    by_id = {m.msg_id: m for m in received}
    for i, result in enumerate(results):
        got = by_id[result.msg_id]
        assert got.body == messages[i].body
        assert (got.tags, got.keys, got.properties["n"]) == ("A", (f"key-{i}",), str(i))
        assert (got.queue_id, got.queue_offset) == (result.queue.queue_id, result.queue_offset)
        assert got.offset_msg_id == result.offset_msg_id


async def test_order_within_a_queue_is_kept(namesrv: str) -> None:
    topic = await create_topic(namesrv)
    async with Producer(
        unique("ab-p"), namesrv=namesrv, auto_batch=True, batch_max_bytes=4096
    ) as producer:
        sends = [
            producer.send(
                Message(topic=topic, body=f"{key}:{i}".encode()), sharding_key=f"order-{key}"
            )
            for i in range(100)
            for key in range(3)
        ]
        results: list[SendResult] = await asyncio.gather(*sends)
        batcher = producer.auto_batch
        assert batcher is not None and batcher.batches_sent < 300
    offsets: dict[int, list[int]] = {}
    for result in results:
        offsets.setdefault(result.queue.queue_id, []).append(result.queue_offset)
    assert all(seen == sorted(seen) for seen in offsets.values())
    received = await consume(namesrv, topic, 300)
    by_key: dict[str, list[int]] = {}
    for message in sorted(received, key=lambda m: (m.queue_id, m.queue_offset)):
        key, i = message.body.decode().split(":")
        by_key.setdefault(key, []).append(int(i))
    assert by_key == {str(key): list(range(100)) for key in range(3)}


async def test_a_refused_batch_fails_each_of_its_sends_with_the_brokers_error(
    namesrv: str,
) -> None:
    topic = await create_topic(namesrv)
    async with Producer(
        unique("ab-p"),
        namesrv=namesrv,
        auto_batch=True,
        batch_max_bytes=256 * 1024,
        batch_max_delay_ms=200,
    ) as producer:
        # 80 KiB of bodies in one batch: over the broker's batchSizeMax of 64 KiB
        outcomes = await asyncio.gather(
            *(producer.send(Message(topic=topic, body=b"x" * 1024)) for _ in range(80)),
            return_exceptions=True,
        )
        assert all(isinstance(o, MessageIllegalError) for o in outcomes), outcomes
        assert "batchSizeMax" in str(outcomes[0]) or "batch_size_max" in str(outcomes[0])
        # the producer goes on: a lone send afterwards is stored
        alone = await producer.send(Message(topic=topic, body=b"after"))
    received = await consume(namesrv, topic, 1)
    assert [m.msg_id for m in received] == [alone.msg_id]


async def test_delayed_and_transactional_sends_go_alone(namesrv: str) -> None:
    topic = await create_topic(namesrv)

    async def check(message: MessageView) -> TransactionResolution:
        return TransactionResolution.COMMIT

    async with TransactionProducer(
        unique("ab-tx"), namesrv=namesrv, checker=check, auto_batch=True
    ) as producer:
        batcher = producer.auto_batch
        assert batcher is not None
        delayed = await producer.send(Message(topic=topic, body=b"later", delay_level=1))
        timed = await producer.send(
            Message(topic=topic, body=b"timed", properties={"TIMER_DELAY_SEC": "1"})
        )

        async def commit(message: Message) -> TransactionResolution:
            return TransactionResolution.COMMIT

        tx = await producer.send_in_transaction(Message(topic=topic, body=b"tx"), commit)
        assert batcher.messages_sent == 0  # none went through the accumulator
        plain = await producer.send(Message(topic=topic, body=b"plain"))
        assert batcher.messages_sent == 1
    received = await consume(namesrv, topic, 4)
    by_body = {m.body: m for m in received}
    assert set(by_body) == {b"later", b"timed", b"tx", b"plain"}
    assert by_body[b"later"].msg_id == delayed.msg_id
    assert by_body[b"timed"].msg_id == timed.msg_id
    assert by_body[b"plain"].msg_id == plain.msg_id
    assert by_body[b"tx"].msg_id == tx.msg_id


async def test_total_batch_max_bytes_bounds_what_the_producer_holds(namesrv: str) -> None:
    topic = await create_topic(namesrv)
    total = 8 * 1024
    async with Producer(
        unique("ab-p"),
        namesrv=namesrv,
        auto_batch=True,
        batch_max_bytes=2048,
        total_batch_max_bytes=total,
    ) as producer:
        batcher = producer.auto_batch
        assert batcher is not None
        tasks = [
            asyncio.ensure_future(producer.send(Message(topic=topic, body=b"y" * 1024)))
            for _ in range(400)
        ]
        high = 0
        async with asyncio.timeout(60):  # a guard against hanging
            while not all(t.done() for t in tasks):
                high = max(high, batcher.held_bytes)
                await asyncio.sleep(0)
        results = await asyncio.gather(*tasks)
        assert 0 < high <= total
        assert batcher.held_bytes == 0
    assert len({r.msg_id for r in results}) == 400
    assert len(await consume(namesrv, topic, 400)) == 400


async def test_close_sends_what_is_held(namesrv: str) -> None:
    topic = await create_topic(namesrv)
    producer = Producer(unique("ab-p"), namesrv=namesrv, auto_batch=True, batch_max_delay_ms=30_000)
    await producer.start()
    tasks = [
        asyncio.ensure_future(producer.send(Message(topic=topic, body=f"held-{i}".encode())))
        for i in range(20)
    ]
    async with asyncio.timeout(20):
        while producer.auto_batch is not None and producer.auto_batch.held_bytes < 20 * 6:
            await asyncio.sleep(0.01)
    assert not any(t.done() for t in tasks)  # 30 s of delay: held until close
    await producer.close()
    assert all(t.done() for t in tasks)
    results = await asyncio.gather(*tasks)
    received = await consume(namesrv, topic, 20)
    assert sorted(m.msg_id for m in received) == sorted(r.msg_id for r in results)


async def test_off_by_default(namesrv: str) -> None:
    topic = await create_topic(namesrv)
    async with Producer(unique("ab-p"), namesrv=namesrv) as producer:
        assert producer.auto_batch is None
        results = await asyncio.gather(
            *(producer.send(Message(topic=topic, body=b"z")) for _ in range(10))
        )
    assert len({r.msg_id for r in results}) == 10
