"""Pull API, admin client and the CLI helpers against the fake cluster."""

from __future__ import annotations

import pytest

from pocketmq.broker.protocol import RequestCode
from pocketmq.broker.protocol.headers import CreateTopicRequestHeader
from pocketmq.client import Admin, MessageQueue, PullConsumer, PullStatus
from pocketmq.client.cli import (
    cmd_consume,
    cmd_send,
    cmd_topic_create,
    cmd_topic_list,
    cmd_topic_status,
)
from pocketmq.client.errors import ClientClosedError, ClientUsageError, CorruptMessageError

from .test_client_fake_server import fake_cluster

T0 = MessageQueue("T", "broker-a", 0)


async def test_pull_statuses_and_filtering() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 2)
        broker = cluster.brokers[0]
        for i, tag in enumerate(["A", "B", "A", "C"]):
            await broker.put("T", 0, b"m%d" % i, {"TAGS": tag, "UNIQ_KEY": f"U{i}"})
        async with PullConsumer(namesrv=broker.addr, client_ip="127.0.0.1") as puller:
            assert await puller.queues("T") == [T0, MessageQueue("T", "broker-a", 1)]
            found = await puller.pull(T0, 0, 3)
            assert found.status is PullStatus.FOUND
            assert [m.body for m in found.messages] == [b"m0", b"m1", b"m2"]
            assert (found.next_offset, found.min_offset, found.max_offset) == (3, 0, 4)
            assert [m.queue_offset for m in found.messages] == [0, 1, 2]
            assert found.messages[0].msg_id == "U0" and found.messages[0].queue == T0
            tagged = await puller.pull(T0, 0, 32, expression="A")
            assert [m.body for m in tagged.messages] == [b"m0", b"m2"]
            nothing = await puller.pull(T0, 3, 32, expression="A")
            assert nothing.status is PullStatus.NO_MATCHED_MSG and nothing.next_offset == 4
            assert (await puller.pull(T0, 4, 32)).status is PullStatus.NO_NEW_MSG
            moved = await puller.pull(T0, 99, 32)
            assert moved.status is PullStatus.OFFSET_ILLEGAL and moved.next_offset == 4
            assert await puller.min_offset(T0) == 0
            assert await puller.max_offset(T0) == 4
            with pytest.raises(ClientUsageError):
                await puller.pull(T0, -1, 32)
        # pulls carry their own subscription and commit nothing
        request = broker.requests_of(RequestCode.PULL_MESSAGE)[0].ext_fields or {}
        assert request["consumerGroup"] == "TOOLS_CONSUMER" and request["sysFlag"] == "4"
        assert not cluster.offsets


async def test_lookups_by_time_key_and_offset_id() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        a = await broker.put(
            "T", 0, b"a", {"KEYS": "order-1 x", "UNIQ_KEY": "UA"}, store_timestamp=1000
        )
        await broker.put("T", 0, b"b", {"KEYS": "order-2", "UNIQ_KEY": "UB"}, store_timestamp=2000)
        async with PullConsumer(namesrv=broker.addr, client_ip="127.0.0.1") as puller:
            assert await puller.offset_for_timestamp(T0, 1500) == 1
            by_key = await puller.query_by_key("T", "order-1")
            assert [m.body for m in by_key] == [b"a"] and by_key[0].keys == ("order-1", "x")
            by_uniq = await puller.query_by_key("T", "UB", unique_key=True)
            assert [m.body for m in by_uniq] == [b"b"]
            assert await puller.query_by_key("T", "missing") == []
            offset_id = by_key[0].offset_msg_id
            viewed = await puller.view(offset_id)
            assert viewed.body == b"a" and viewed.commitlog_offset == a.commitlog_offset
            assert viewed.queue == T0
            with pytest.raises(ClientUsageError):
                await puller.view("not-an-id")
        with pytest.raises(ClientClosedError):
            await puller.queues("T")


async def test_admin_create_list_and_status() -> None:
    async with fake_cluster("broker-a", "broker-b") as cluster:
        a, b = cluster.brokers
        async with Admin(a.addr, client_ip="127.0.0.1") as admin:
            brokers = await admin.create_topic("Orders", 3, order=True)
            assert brokers == ["broker-a", "broker-b"]
            for broker in (a, b):
                header = CreateTopicRequestHeader.from_ext_fields(
                    broker.requests_of(RequestCode.UPDATE_AND_CREATE_TOPIC)[0].ext_fields
                )
                assert (header.read_queue_nums, header.write_queue_nums, header.perm) == (3, 3, 6)
                assert header.order and header.default_topic == "TBW102"
            assert "Orders" in await admin.list_topics()
            await a.put("Orders", 1, b"x", store_timestamp=5000)
            status = await admin.topic_status("Orders")
            assert len(status) == 6
            first = {(s.queue.broker_name, s.queue.queue_id): s for s in status}
            assert first["broker-a", 1].max_offset == 1
            assert first["broker-a", 1].last_update_ms == 5000
            assert first["broker-b", 0].max_offset == 0
            assert first["broker-b", 0].last_update_ms is None
            with pytest.raises(ClientUsageError):
                await admin.create_topic("bad topic")


async def test_admin_status_from_the_stats_table() -> None:
    async with fake_cluster(stats_supported=True) as cluster:
        cluster.add_topic("T", 2)
        broker = cluster.brokers[0]
        await broker.put("T", 0, b"x", store_timestamp=7000)
        async with Admin(broker.addr, client_ip="127.0.0.1") as admin:
            status = await admin.topic_status("T")
        assert [(s.queue, s.max_offset, s.last_update_ms) for s in status] == [
            (T0, 1, 7000),
            (MessageQueue("T", "broker-a", 1), 0, None),
        ]
        assert RequestCode.GET_MAX_OFFSET not in broker.codes()


async def test_cli_helpers() -> None:
    async with fake_cluster() as cluster:
        broker = cluster.brokers[0]
        created = await cmd_topic_create(broker.addr, "CliTopic", 2)
        assert created == {"topic": "CliTopic", "queues": 2, "brokers": ["broker-a"]}
        assert "CliTopic" in await cmd_topic_list(broker.addr)
        sent = [r async for r in cmd_send(broker.addr, "CliTopic", "A", "k1,k2", b"hi", 3)]
        assert len(sent) == 3 and {r["status"] for r in sent} == {"SEND_OK"}
        assert len({r["msg_id"] for r in sent}) == 3
        consumed = [m async for m in cmd_consume(broker.addr, "CliTopic", "cli-g", 3, "first", "A")]
        assert sorted(m["msg_id"] for m in consumed) == sorted(r["msg_id"] for r in sent)
        assert all(m["body"] == "hi" and m["keys"] == ["k1", "k2"] for m in consumed)
        status = await cmd_topic_status(broker.addr, "CliTopic")
        assert sum(s["max_offset"] for s in status) == 3


async def test_pull_of_a_damaged_body_raises_with_the_good_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from .test_client_consumer import _corrupting

    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        for i in range(4):
            await broker.put("T", 0, b"m%d" % i, {"UNIQ_KEY": f"U{i}"})
        _corrupting(monkeypatch, b"m2", times=None)
        async with PullConsumer(namesrv=broker.addr, client_ip="127.0.0.1") as puller:
            with pytest.raises(CorruptMessageError, match="body CRC") as caught:
                await puller.pull(T0, 0, 32)
            assert [m.body for m in caught.value.messages] == [b"m0", b"m1"]
            assert caught.value.queue_offset == 2 and caught.value.retriable
            with pytest.raises(CorruptMessageError) as first:
                await puller.pull(T0, 2, 32)
            assert first.value.messages == [] and first.value.queue_offset == 2
        async with PullConsumer(
            namesrv=broker.addr, client_ip="127.0.0.1", check_crc=False
        ) as puller:
            assert len((await puller.pull(T0, 0, 32)).messages) == 4
