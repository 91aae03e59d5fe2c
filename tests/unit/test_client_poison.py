"""PushConsumer.poison against the fake cluster: straight to the DLQ (delay level -1), and the
message counts as consumed whatever the listener does next, concurrently and orderly."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketmq.broker.protocol import RequestCode
from pocketmq.broker.protocol.headers import ConsumerSendMsgBackRequestHeader
from pocketmq.client import ConsumeResult, MessageQueue, PushConsumer, ReceivedMessage
from pocketmq.client.errors import BrokerError, ClientClosedError

from .test_client_fake_server import FakeBroker, FakeCluster, fake_cluster, wait_until

T0 = MessageQueue("T", "broker-a", 0)


def consumer_for(cluster: FakeCluster, **kwargs: object) -> PushConsumer:
    kwargs.setdefault("client_ip", "127.0.0.1")
    kwargs.setdefault("consume_from", "first")
    return PushConsumer("CG", namesrv=cluster.brokers[0].addr, **kwargs)  # type: ignore[arg-type]


def send_backs(broker: FakeBroker) -> list[ConsumerSendMsgBackRequestHeader]:
    return [
        ConsumerSendMsgBackRequestHeader.from_ext_fields(r.ext_fields)
        for r in broker.requests_of(RequestCode.CONSUMER_SEND_MSG_BACK)
    ]


@pytest.mark.parametrize("orderly", [False, True])
async def test_poison_from_a_listener_wins_over_its_result(orderly: bool) -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        for body in (b"ok-1", b"bad", b"ok-2"):
            await broker.put("T", 0, body, {"UNIQ_KEY": body.decode()})
        seen: list[bytes] = []
        consumer: PushConsumer

        async def listener(message: ReceivedMessage) -> ConsumeResult:
            seen.append(message.body)
            if message.body == b"bad":
                await consumer.poison(message, "unparsable")
                if orderly:
                    return ConsumeResult.RECONSUME_LATER
                raise ValueError("after poison() the listener's result does not count")
            return ConsumeResult.SUCCESS

        consumer = consumer_for(cluster, listener=listener, orderly=orderly)
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: consumer.committed_offset(T0) == 3)
        [back] = send_backs(broker)
        assert seen == [b"ok-1", b"bad", b"ok-2"]  # delivered once, not retried
        assert back.delay_level == -1 and back.origin_msg_id == "bad"
        assert broker.requests_of(RequestCode.CONSUMER_SEND_MSG_BACK)[0].remark == "unparsable"
        assert [m.body for m in broker.messages("%DLQ%CG")] == [b"bad"]
        assert broker.messages("%RETRY%CG") == []


async def test_poison_in_iterator_mode_settles_the_message() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await broker.put("T", 0, b"bad", {"UNIQ_KEY": "U1"})
        consumer = consumer_for(cluster)
        consumer.subscribe("T")
        with pytest.raises(ClientClosedError):
            await consumer.poison(None, "x")  # type: ignore[arg-type]
        async with consumer:
            message = await consumer.receive(timeout_ms=5000)
            broker.refuse_send_back = True
            with pytest.raises(BrokerError):  # refused: the message stays unsettled
                await consumer.poison(message, "broken")
            broker.refuse_send_back = False
            await consumer.poison(message, "broken")
            await wait_until(lambda: consumer.committed_offset(T0) == 1)
        assert [m.body for m in broker.messages("%DLQ%CG")] == [b"bad"]


async def test_broadcasting_never_sends_back(tmp_path: Path) -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await broker.put("T", 0, b"fails", {"UNIQ_KEY": "U1"})
        calls: list[int] = []

        async def listener(message: ReceivedMessage) -> ConsumeResult:
            calls.append(message.reconsume_times)
            return ConsumeResult.RECONSUME_LATER

        consumer = consumer_for(
            cluster, listener=listener, message_model="broadcasting", offsets_dir=tmp_path
        )
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: consumer.committed_offset(T0) == 1)
        assert calls == [0] and send_backs(broker) == []
