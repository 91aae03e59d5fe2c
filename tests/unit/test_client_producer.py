"""Producer against the fake cluster: wire shape, results, queue choice, retries, TBW102,
ordered sends, batches, oneway, heartbeats."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import HeartbeatData, decode_json_body
from pocketmq.broker.protocol.message_codec import (
    decode_batch,
    decode_properties,
    encode_properties,
)
from pocketmq.client import Message, MessageQueue, Producer, SendStatus
from pocketmq.client.errors import (
    ClientUsageError,
    ConnectionLostError,
    MessageIllegalError,
    RouteNotFoundError,
    ServiceNotAvailableError,
)
from pocketmq.client.filter import queue_index_for_key
from pocketmq.ids import decode_offset_msg_id

from .test_client_fake_server import FakeBroker, FakeCluster, fake_cluster, wait_until


def producer_for(cluster: FakeCluster, **kwargs: object) -> Producer:
    return Producer("PG", namesrv=cluster.brokers[0].addr, client_ip="127.0.0.1", **kwargs)  # type: ignore[arg-type]


def sends(broker: FakeBroker) -> list[RemotingCommand]:
    return [r for r in broker.requests if r.code in (310, 320, 10)]


async def test_send_wire_shape_and_result() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 4)
        broker = cluster.brokers[0]
        async with producer_for(cluster) as producer:
            result = await producer.send(
                Message(topic="T", body=b"hello", tags="A", keys=["k1", "k2"], flag=3)
            )
        request = sends(broker)[0]
    assert request.code == RequestCode.SEND_MESSAGE_V2 and request.body == b"hello"
    ext = request.ext_fields or {}
    assert ext["a"] == "PG" and ext["b"] == "T" and ext["c"] == "TBW102" and ext["d"] == "4"
    assert ext["f"] == "0" and ext["h"] == "3" and ext["m"] == "false" and ext["n"] == "broker-a"
    props = decode_properties(ext["i"])
    assert props["TAGS"] == "A" and props["KEYS"] == "k1 k2" and props["WAIT"] == "true"
    assert result.status is SendStatus.SEND_OK
    assert result.msg_id == props["UNIQ_KEY"] == result.transaction_id
    stored = broker.messages("T", result.queue.queue_id)[0]
    assert result.queue == MessageQueue("T", "broker-a", stored.queue_id)
    assert result.queue_offset == 0
    decoded = decode_offset_msg_id(result.offset_msg_id)
    assert decoded.physical_offset == stored.commitlog_offset and decoded.port == broker.port
    # heartbeat with the producer group went first, unregister on close
    codes = broker.codes()
    assert codes.index(RequestCode.HEART_BEAT) < codes.index(RequestCode.SEND_MESSAGE_V2)
    beat = decode_json_body(broker.requests_of(34)[0].body or b"", HeartbeatData)
    assert [p.group_name for p in beat.producer_data_set] == ["PG"]
    assert beat.client_id == producer.client_id and beat.consumer_data_set == []
    unregister = broker.requests_of(RequestCode.UNREGISTER_CLIENT)[0].ext_fields or {}
    assert unregister["producerGroup"] == "PG" and unregister["clientID"] == producer.client_id


async def test_a_plain_message_sends_what_encode_properties_gives() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 4)
        async with producer_for(cluster) as producer:
            result = await producer.send(Message(topic="T", body=b"plain"))
            batch = await producer.send_batch([Message(topic="T", body=b"b")] * 2)
        texts = [(r.ext_fields or {})["i"] for r in sends(cluster.brokers[0])]
    assert texts[0] == encode_properties({"WAIT": "true", "UNIQ_KEY": result.msg_id})
    inner = decode_batch(sends(cluster.brokers[0])[1].body or b"")
    assert [m.properties for m in inner] == [
        {"WAIT": "true", "UNIQ_KEY": key} for key in batch.msg_id.split(",")
    ]


async def test_round_robin_and_many_sends_in_flight() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 4)
        broker = cluster.brokers[0]
        async with producer_for(cluster) as producer:
            results = await asyncio.gather(
                *(producer.send(Message(topic="T", body=b"%d" % i)) for i in range(200))
            )
        assert len({r.msg_id for r in results}) == 200
        per_queue = Counter(r.queue.queue_id for r in results)
        assert per_queue == {0: 50, 1: 50, 2: 50, 3: 50}
        assert sum(len(broker.messages("T", q)) for q in range(4)) == 200


async def test_retriable_code_is_retried() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 4)
        broker = cluster.brokers[0]
        broker.fail_codes[310] = [ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_BUSY]
        async with producer_for(cluster) as producer:
            result = await producer.send(Message(topic="T", body=b"x"))
        assert result.status is SendStatus.SEND_OK
        attempts = sends(broker)
        assert len(attempts) == 3
        # the same message (same unique key) each time
        assert len({decode_properties(a.ext_fields["i"])["UNIQ_KEY"] for a in attempts}) == 1  # type: ignore[index]


async def test_retries_run_out() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 4)
        broker = cluster.brokers[0]
        broker.fail_codes[310] = [14] * 10
        async with producer_for(cluster, retries=1) as producer:
            with pytest.raises(ServiceNotAvailableError):
                await producer.send(Message(topic="T", body=b"x"))
        assert len(sends(broker)) == 2


async def test_non_retriable_code_fails_at_once() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 4)
        broker = cluster.brokers[0]
        broker.fail_codes[310] = [ResponseCode.MESSAGE_ILLEGAL]
        async with producer_for(cluster) as producer:
            with pytest.raises(MessageIllegalError) as info:
                await producer.send(Message(topic="T", body=b"x"))
        assert info.value.code == 13 and len(sends(broker)) == 1


async def test_flush_timeout_is_a_status_not_an_error() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 4)
        broker = cluster.brokers[0]

        async def flush_timeout(
            b: FakeBroker, conn: object, cmd: RemotingCommand
        ) -> RemotingCommand:
            ext = {"msgId": "7F00000100002A9F0000000000000000", "queueId": "1", "queueOffset": "9"}
            return cmd.make_response(ResponseCode.FLUSH_DISK_TIMEOUT, ext_fields=ext)

        broker.overrides[310] = flush_timeout  # type: ignore[assignment]
        async with producer_for(cluster) as producer:
            result = await producer.send(Message(topic="T", body=b"x"))
        assert result.status is SendStatus.FLUSH_DISK_TIMEOUT and result.queue_offset == 9


async def test_retry_moves_to_another_broker() -> None:
    async with fake_cluster("broker-a", "broker-b") as cluster:
        cluster.add_topic("T", 2)
        a, b = cluster.brokers
        a.fail_codes[310] = [14] * 10
        b.fail_codes[310] = [14] * 10
        async with producer_for(cluster) as producer:
            with pytest.raises(ServiceNotAvailableError):
                await producer.send(Message(topic="T", body=b"x"))
        names = [name for name, r in cluster.log if r.code == RequestCode.SEND_MESSAGE_V2]
        assert len(names) == 3
        assert [(r.ext_fields or {})["n"] for _, r in cluster.log if r.code == 310] == names
        assert names[0] != names[1] and names[1] != names[2]


async def test_lost_connection_retries_on_the_other_broker() -> None:
    async with fake_cluster("broker-a", "broker-b") as cluster:
        cluster.add_topic("T", 2)
        a, b = cluster.brokers
        a.drop_connection_on.add(310)
        async with producer_for(cluster) as producer:
            results = [await producer.send(Message(topic="T", body=b"x")) for _ in range(4)]
        assert {r.queue.broker_name for r in results} == {"broker-b"}
        assert len(b.messages("T")) == 4


async def test_lost_connection_with_one_broker_fails() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 2)
        cluster.brokers[0].drop_connection_on.add(310)
        async with producer_for(cluster) as producer:
            with pytest.raises(ConnectionLostError):
                await producer.send(Message(topic="T", body=b"x"))


async def test_new_topic_uses_the_tbw102_route() -> None:
    async with fake_cluster() as cluster:
        broker = cluster.brokers[0]
        async with producer_for(cluster, default_topic_queue_nums=3) as producer:
            results = [await producer.send(Message(topic="Fresh", body=b"x")) for _ in range(6)]
        assert {r.queue.queue_id for r in results} == {0, 1, 2}
        assert cluster.topics["Fresh"] == {"broker-a": 3}  # created by the send
        assert all((r.ext_fields or {})["d"] == "3" for r in sends(broker))


async def test_no_route_and_no_auto_create() -> None:
    async with fake_cluster(auto_create=False) as cluster, producer_for(cluster) as producer:
        with pytest.raises(RouteNotFoundError):
            await producer.send(Message(topic="Nowhere", body=b"x"))


async def test_ordered_sends_stay_on_one_queue() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 8)
        async with producer_for(cluster) as producer:
            keyed = [
                await producer.send(Message(topic="T", body=b"%d" % i), sharding_key="order-7")
                for i in range(5)
            ]
            on_message = [
                await producer.send(Message(topic="T", body=b"x", sharding_key="order-9"))
                for _ in range(3)
            ]
            chosen = MessageQueue("T", "broker-a", 5)
            explicit = await producer.send(Message(topic="T", body=b"x"), queue=chosen)
            selected = await producer.send(
                Message(topic="T", body=b"x"), selector=lambda queues, message: queues[-1]
            )
            with pytest.raises(ClientUsageError):
                await producer.send(Message(topic="T", body=b"x"), queue=MessageQueue("U", "b", 0))
            with pytest.raises(ClientUsageError):
                await producer.send(
                    Message(topic="T", body=b"x"), selector=lambda q, m: MessageQueue("T", "x", 0)
                )
        assert {r.queue.queue_id for r in keyed} == {queue_index_for_key("order-7", 8)}
        assert [r.queue_offset for r in keyed] == sorted(r.queue_offset for r in keyed)
        assert {r.queue.queue_id for r in on_message} == {queue_index_for_key("order-9", 8)}
        assert explicit.queue == chosen
        assert selected.queue.queue_id == 7


async def test_batch_send() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 2)
        broker = cluster.brokers[0]
        async with producer_for(cluster) as producer:
            messages = [Message(topic="T", body=b"m%d" % i, keys=[f"k{i}"]) for i in range(3)]
            result = await producer.send_batch(messages, queue=MessageQueue("T", "broker-a", 1))
        request = sends(broker)[0]
        assert request.code == RequestCode.SEND_BATCH_MESSAGE
        assert (request.ext_fields or {})["m"] == "true"
        stored = broker.messages("T", 1)
        assert [m.body for m in stored] == [b"m0", b"m1", b"m2"]
        assert result.msg_id.split(",") == [m.properties["UNIQ_KEY"] for m in stored]
        assert len(result.offset_msg_id.split(",")) == 3 and result.queue_offset == 0


async def test_oneway_send() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 2)
        broker = cluster.brokers[0]
        async with producer_for(cluster) as producer:
            await producer.send_oneway(Message(topic="T", body=b"fire"))
            await wait_until(lambda: len(broker.messages("T")) == 1)
        request = sends(broker)[0]
        assert request.is_oneway


async def test_usage_errors_before_any_request() -> None:
    async with fake_cluster() as cluster:
        broker = cluster.brokers[0]
        async with producer_for(cluster, max_message_size=10) as producer:
            with pytest.raises(ClientUsageError):
                await producer.send(Message(topic="T", body=b"x" * 11))
            with pytest.raises(ClientUsageError):
                await producer.send(
                    Message(topic="T", body=b"x"), queue=MessageQueue("T", "a", 0), sharding_key="k"
                )
        assert sends(broker) == []
