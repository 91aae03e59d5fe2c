"""The admin codes that change groups and steer running consumers, against a real broker with
the SDK's consumers: DELETE_SUBSCRIPTIONGROUP (207), INVOKE_BROKER_TO_RESET_OFFSET (222) with
RESET_CONSUMER_CLIENT_OFFSET (220) and mqadmin's fallback, INVOKE_BROKER_TO_GET_CONSUMER_STATUS
(223) with GET_CONSUMER_STATUS_FROM_CLIENT (221), GET_CONSUMER_RUNNING_INFO (307),
CONSUME_MESSAGE_DIRECTLY (309) and DELETE_EXPIRED_COMMITLOG (329); raw frames where the Java
tools' bytes matter."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.protocol import (
    FrameDecoder,
    LanguageCode,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    encode_frame,
)
from pocketmq.broker.protocol.admin_bodies import (
    ConsumeMessageDirectlyResultRequestHeader,
    ResetOffsetRequestHeader,
    decode_mq_table,
)
from pocketmq.broker.protocol.headers import (
    ConsumerData,
    HeartbeatData,
    RemotingHeader,
    SubscriptionData,
    encode_json_body,
)
from pocketmq.broker.services.clock import ManualClock
from pocketmq.client import Admin, Message, Producer, PushConsumer, ReceivedMessage
from pocketmq.client.errors import BrokerSystemError, ConsumerNotOnlineError, TopicNotExistError
from pocketmq.client.message import MessageQueue
from pocketmq.ids import encode_offset_msg_id
from pocketmq.store.config import RecordLimits, StoreConfig
from tests.integration.cluster import Cluster

WAIT_S = 30.0


async def until(condition: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.05)
    assert condition(), what


def committed_all(broker: Broker, group: str, topic: str, queues: int) -> bool:
    return all(
        broker.offsets.query(group, topic, q) == broker.store.max_offset(topic, q)
        and broker.store.max_offset(topic, q) > 0
        for q in range(queues)
    )


def consumer(group: str, namesrv: str, topic: str, received: list[ReceivedMessage]) -> PushConsumer:
    async def listener(message: ReceivedMessage) -> None:
        received.append(message)

    push = PushConsumer(
        group,
        namesrv=namesrv,
        consume_from="first",
        listener=listener,
        persist_interval_s=0.2,
        rebalance_interval_s=2.0,
    )
    push.subscribe(topic, "*")
    return push


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker(port=0, store=None, clock=ManualClock()) as running:
        yield running


async def send_all(namesrv: str, topic: str, bodies: list[bytes]) -> list[str]:
    ids = []
    async with Producer("admin-control-producer", namesrv=namesrv) as producer:
        for body in bodies:
            result = await producer.send(Message(topic=topic, body=body))
            ids.append(result.offset_msg_id)
    return ids


async def test_reset_by_time_moves_a_running_consumer_back(broker: Broker) -> None:
    namesrv = broker.namesrv_address
    assert namesrv is not None
    topic, group = "ResetT", "reset-group"
    received: list[ReceivedMessage] = []
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 2)
        await send_all(namesrv, topic, [b"old-%d" % i for i in range(4)])
        await broker.advance("1m")  # the later messages are stored a minute after the first
        reset_to = broker.clock.now_ms()
        await send_all(namesrv, topic, [b"new-%d" % i for i in range(4)])
        async with consumer(group, namesrv, topic, received):
            await until(lambda: len(received) >= 8, "all 8 messages consumed")
            await until(lambda: committed_all(broker, group, topic, 2), "offsets committed")
            before = len(received)

            result = await admin.reset_offset_by_time(group, topic, reset_to)

            assert result.rollback is None  # the consumer was online: the broker path
            name = broker.config.broker_name
            assert result.offsets == {
                MessageQueue(topic, name, q): broker.store.offset_by_time(topic, q, reset_to)
                for q in range(2)
            }
            await until(lambda: len(received) >= before + 4, "the newer messages again")
            await asyncio.sleep(0.5)  # nothing older follows
            again = sorted(m.body for m in received[before:])
            assert again == [b"new-0", b"new-1", b"new-2", b"new-3"]
            await until(lambda: committed_all(broker, group, topic, 2), "offsets committed again")


async def test_reset_with_no_consumer_online_and_the_fallback(broker: Broker) -> None:
    namesrv = broker.namesrv_address
    assert namesrv is not None
    topic, group = "ResetOffline", "offline-group"
    received: list[ReceivedMessage] = []
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 2)
        await send_all(namesrv, topic, [b"m-%d" % i for i in range(4)])
        async with consumer(group, namesrv, topic, received):
            await until(lambda: len(received) == 4, "consumed")
            await until(lambda: committed_all(broker, group, topic, 2), "offsets committed")
        with pytest.raises(ConsumerNotOnlineError, match="Consumer not online, so can not"):
            await admin.reset_offset_by_time(group, topic, 0, fallback=False)
        result = await admin.reset_offset_by_time(group, topic, 0)
        assert result.rollback is not None and len(result.rollback) == 2
        for stats in result.rollback:
            assert stats.consumer_offset == 2 and stats.broker_offset == 2
            assert stats.timestamp_offset == 0 and stats.rollback_offset == 0
        assert all(broker.offsets.query(group, topic, q) == 0 for q in range(2))


async def test_reset_refusals_with_rocketmqs_codes(broker: Broker) -> None:
    namesrv = broker.namesrv_address
    assert namesrv is not None
    async with Admin(namesrv) as admin:
        await admin.create_topic("Known", 1)
        header = ResetOffsetRequestHeader(topic="Nowhere", group="g", timestamp=0, is_force=True)
        response = await call(broker.address, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
        assert response.code == ResponseCode.TOPIC_NOT_EXIST
        assert response.remark == (
            "[reset-offset] reset offset failed, no topic in this broker. topic=Nowhere"
        )
        header = ResetOffsetRequestHeader(topic="Known", group="never", timestamp=0)
        response = await call(broker.address, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert response.remark == "THe consumer group <never> not exist"
        with pytest.raises(TopicNotExistError):
            await admin.reset_offset_by_time("g", "Nowhere", 0)


async def call(
    address: str,
    code: int,
    header: RemotingHeader,
    *,
    language: LanguageCode = LanguageCode.JAVA,
) -> RemotingCommand:
    """One request on a connection of its own, as a Java tool (or another language) sends it."""
    reader, writer = await asyncio.open_connection(*address.rsplit(":", 1))
    try:
        ext = header.to_ext_fields()
        command = RemotingCommand(code=code, opaque=7, ext_fields=ext, language=language)
        writer.write(encode_frame(command))
        decoder = FrameDecoder()
        async with asyncio.timeout(WAIT_S):
            while True:
                for frame in decoder.feed(await reader.read(65536)):
                    if frame.is_response and frame.opaque == 7:
                        return frame
    finally:
        writer.close()


@pytest.mark.parametrize("language", [LanguageCode.JAVA, LanguageCode.CPP])
async def test_the_reset_request_a_consumer_gets_in_raw_bytes(
    broker: Broker, language: LanguageCode
) -> None:
    """A consumer connection as a Java client sees it: heartbeat, then the broker's oneway
    RESET_CONSUMER_CLIENT_OFFSET with ResetOffsetBody's fastjson map of MessageQueue keys;
    the list form (ResetOffsetBodyForC) when the tool's request says CPP."""
    broker.topics.create("RawReset", read_queue_nums=1, write_queue_nums=1, perm=6)
    broker.offsets.commit("raw-group", "RawReset", 0, 0)
    reader, writer = await asyncio.open_connection(*broker.address.rsplit(":", 1))
    try:
        heartbeat = HeartbeatData(
            client_id="10.0.0.9@raw",
            consumer_data_set=[
                ConsumerData(
                    group_name="raw-group",
                    consume_type="CONSUME_PASSIVELY",
                    message_model="CLUSTERING",
                    consume_from_where="CONSUME_FROM_LAST_OFFSET",
                    subscription_data_set=[SubscriptionData(topic="RawReset", sub_string="*")],
                )
            ],
        )
        writer.write(
            encode_frame(
                RemotingCommand(
                    code=RequestCode.HEART_BEAT, opaque=1, body=encode_json_body(heartbeat)
                )
            )
        )
        header = ResetOffsetRequestHeader(
            topic="RawReset", group="raw-group", timestamp=-1, is_force=True
        )
        answer = await call(
            broker.address, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header, language=language
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        name = broker.config.broker_name
        expected = b'{"offsetTable":{{"brokerName":"%s","queueId":0,"topic":"RawReset"}:0}}' % (
            name.encode()
        )
        assert answer.body == expected
        decoder = FrameDecoder()
        pushed: RemotingCommand | None = None
        async with asyncio.timeout(WAIT_S):
            while pushed is None:
                for frame in decoder.feed(await reader.read(65536)):
                    if not frame.is_response:
                        pushed = frame
        assert pushed.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET
        assert pushed.is_oneway
        assert pushed.ext_fields == {
            "topic": "RawReset",
            "group": "raw-group",
            "queueId": "-1",
            "timestamp": "-1",
            "isForce": "false",
        }
        if language == LanguageCode.CPP:
            assert json.loads(pushed.body or b"") == {
                "offsetTable": [
                    {"topic": "RawReset", "brokerName": name, "queueId": 0, "offset": 0}
                ]
            }
        else:
            assert pushed.body == expected
    finally:
        writer.close()


async def test_running_info_status_and_direct_consumption(broker: Broker) -> None:
    namesrv = broker.namesrv_address
    assert namesrv is not None
    topic, group = "InfoT", "info-group"
    received: list[ReceivedMessage] = []
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 2)
        ids = await send_all(namesrv, topic, [b"a", b"b", b"c", b"d"])
        push = consumer(group, namesrv, topic, received)
        async with push:
            await until(lambda: len(received) == 4, "consumed")
            await until(lambda: committed_all(broker, group, topic, 2), "offsets committed")
            cid = push.client_id

            info = await admin.consumer_running_info(group, cid)
            assert info.properties["consumerGroup"] == group
            assert info.properties["messageModel"] == "CLUSTERING"
            assert info.properties["PROP_CONSUMEORDERLY"] == "false"
            assert info.properties["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
            assert info.properties["PROP_NAMESERVER_ADDR"] == namesrv + ";"
            assert {s.topic for s in info.subscription_set} == {topic, "%RETRY%" + group}
            queues = decode_mq_table(info.mq_table)
            assert {MessageQueue(q.topic, q.broker_name, q.queue_id) for q in queues} == set(
                push.assigned_queues
            )
            for mq, pq in queues.items():
                if mq.topic == topic:
                    assert pq.commit_offset == 2 and pq.cached_msg_count == 0
                    assert not pq.dropped and pq.last_pull_timestamp > 0
            status = info.status_table[topic]
            assert status.consume_ok_tps > 0 and status.pull_tps > 0
            assert status.consume_failed_msgs == 0

            jstack = await admin.consumer_running_info(group, cid, jstack=True)
            assert jstack.jstack and "pull-" in jstack.jstack

            offsets = await admin.consumer_status(group, topic)
            assert offsets == {cid: {mq: 2 for mq in push.assigned_queues if mq.topic == topic}}
            assert await admin.consumer_status(group, topic, client_id=cid) == offsets
            assert await admin.consumer_status(group, topic, client_id="10.9.9.9@other") == {}

            direct = await admin.consume_message_directly(group, cid, ids[0])
            assert direct.consume_result == "CR_SUCCESS" and not direct.order
            assert direct.auto_commit
            assert received[-1].body == b"a" and len(received) == 5
            assert broker.offsets.query(group, topic, 0) == 2  # nothing was committed

            async def failing(message: ReceivedMessage) -> None:
                raise RuntimeError(f"cannot take {message.body!r}")

            push.listener = failing
            direct = await admin.consume_message_directly(group, cid, ids[1])
            assert direct.consume_result == "CR_THROW_EXCEPTION"
            assert direct.remark == "RuntimeError: cannot take b'b'"

            with pytest.raises(
                BrokerSystemError, match=f"The Consumer <{group}> <nobody> not online"
            ):
                await admin.consumer_running_info(group, "nobody")
            with pytest.raises(BrokerSystemError, match="not online"):
                await admin.consume_message_directly(group, "nobody", ids[0])
            with pytest.raises(BrokerSystemError, match="No Any Consumer online"):
                await admin.consumer_status("no-such-group", topic)


async def test_delete_group_with_and_without_its_offsets(broker: Broker) -> None:
    namesrv = broker.namesrv_address
    assert namesrv is not None
    topic, group = "DelT", "doomed"
    received: list[ReceivedMessage] = []
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 1)
        await admin.create_group(group)
        await send_all(namesrv, topic, [b"x"])
        async with consumer(group, namesrv, topic, received):
            await until(lambda: committed_all(broker, group, topic, 1), "offset committed")
        assert broker.topics.get("%RETRY%" + group) is not None

        assert await admin.delete_group(group) == [broker.config.broker_name]
        assert group not in broker.groups.groups
        assert broker.offsets.query(group, topic, 0) == 1  # kept without clean_offset
        assert broker.topics.get("%RETRY%" + group) is None  # as mqadmin -c deletes it

        await admin.create_group(group)
        await admin.delete_group(group, clean_offset=True, broker=broker.address)
        assert group not in broker.groups.groups
        assert broker.offsets.query(group, topic, 0) is None
        # a group that is not there: SUCCESS, as RocketMQ answers
        await admin.delete_group("never-was", broker=broker.address)


async def test_delete_group_is_saved(tmp_path: object) -> None:
    from pathlib import Path

    data = Path(str(tmp_path))
    async with Broker(port=0, store=data) as broker, Admin(broker.namesrv_address) as admin:
        await admin.create_group("kept")
        await admin.create_group("gone")
        await admin.delete_group("gone", broker=broker.address)
    saved = json.loads((data / "config" / "subscriptionGroup.json").read_text().split("\n")[0])
    assert set(saved["subscriptionGroupTable"]) >= {"kept"}
    assert "gone" not in saved["subscriptionGroupTable"]
    async with Broker(port=0, store=data) as again:
        assert "kept" in again.groups.groups and "gone" not in again.groups.groups


async def test_delete_expired_commitlog_deletes_now_what_waits_for_the_deletion_hour() -> None:
    # 09:00 local, so three days later it is 10:00, not deleteWhen's 04: the retention pass
    # after the clock moves marks the old segments expired and keeps them
    start_ms = int(time.mktime((2026, 1, 5, 9, 0, 0, 0, 0, -1)) * 1000)
    config = BrokerConfig(
        port=0,
        data_dir=None,
        store=StoreConfig(
            commitlog_segment_size=256 * 1024,
            limits=RecordLimits(body_size_max=64 * 1024, properties_size_max=4096),
        ),
    )
    async with Broker(config, clock=ManualClock(start_ms), namesrv=True) as broker:
        namesrv = broker.namesrv_address
        assert namesrv is not None
        async with Admin(namesrv) as admin:
            await admin.create_topic("Old", 1)
            await send_all(namesrv, "Old", [b"x" * 16 * 1024] * 40)
            segments = len(broker.store.segment_ages())
            assert segments >= 2 and broker.store.commitlog.min_offset == 0
            await broker.advance("73h")
            assert broker.store.commitlog.min_offset == 0  # not the deletion hour

            assert await admin.delete_expired_commitlog() == [broker.config.broker_name]

            assert broker.store.commitlog.min_offset > 0
            assert len(broker.store.segment_ages()) == 0  # only the newest is left
            assert broker.store.min_offset("Old", 0) > 0


async def test_reset_moves_two_orderly_consumers_of_a_group_back(broker: Broker) -> None:
    """Each consumer of the group moves the queues it owns (and holds the lock of) back."""
    namesrv = broker.namesrv_address
    assert namesrv is not None
    topic, group = "OrderlyReset", "orderly-group"
    first: list[ReceivedMessage] = []
    second: list[ReceivedMessage] = []
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 4)
        await send_all(namesrv, topic, [b"o-%d" % i for i in range(8)])
        one, two = consumer(group, namesrv, topic, first), consumer(group, namesrv, topic, second)
        one.orderly = two.orderly = True
        async with one, two:
            await until(
                lambda: (
                    [q.topic for q in one.assigned_queues].count(topic)
                    == [q.topic for q in two.assigned_queues].count(topic)
                    == 2
                ),
                "the queues shared out",
            )
            await until(lambda: len(first) + len(second) >= 8, "all consumed")
            await until(lambda: committed_all(broker, group, topic, 4), "offsets committed")
            seen = len(first), len(second)
            result = await admin.reset_offset_by_time(group, topic, 0)
            assert set(result.offsets.values()) == {0}
            await until(lambda: len(first) + len(second) >= sum(seen) + 8, "every message again")
            again = sorted(m.body for m in first[seen[0] :] + second[seen[1] :])
            assert again == sorted(b"o-%d" % i for i in range(8))
            for received in (first[seen[0] :], second[seen[1] :]):
                for queue in {m.queue for m in received}:
                    offsets = [m.queue_offset for m in received if m.queue == queue]
                    assert offsets == sorted(offsets)  # in queue order again


async def test_against_a_standalone_process(tmp_path: Path) -> None:
    """The same calls against ``pocketmq standalone`` run as its own process."""
    with Cluster(tmp_path) as cluster:
        standalone = cluster.start_standalone()
        namesrv = f"127.0.0.1:{standalone.extra['namesrv_port']}"
        topic, group = "ProcT", "proc-group"
        received: list[ReceivedMessage] = []
        async with Admin(namesrv) as admin:
            await admin.create_topic(topic, 2)
            await send_all(namesrv, topic, [b"p-%d" % i for i in range(4)])
            push = consumer(group, namesrv, topic, received)
            async with push:
                await until(lambda: len(received) == 4, "consumed")
                info = await admin.consumer_running_info(group, push.client_id)
                assert {s.topic for s in info.subscription_set} == {topic, "%RETRY%" + group}

                async def committed() -> bool:
                    status = await admin.consumer_status(group, topic)
                    held = status.get(push.client_id, {})
                    # what the broker has, as mqadmin's old path reads it
                    await admin._core.routes.get(topic)
                    stored = [await admin._group_offset(group, mq) for mq in held]
                    return sum(held.values()) == 4 and sum(o or 0 for o in stored) == 4

                async with asyncio.timeout(WAIT_S):
                    while not await committed():
                        await asyncio.sleep(0.1)
                result = await admin.reset_offset_by_time(group, topic, 0)
                assert result.rollback is None and set(result.offsets.values()) == {0}
                await until(lambda: len(received) == 8, "every message again")
                assert sorted(m.body for m in received[4:]) == [b"p-%d" % i for i in range(4)]
            await admin.delete_group(group, clean_offset=True)
            with pytest.raises(BrokerSystemError, match=f"THe consumer group <{group}> not exist"):
                await admin.reset_offset_by_time(group, topic, 0, fallback=False)


async def test_consume_directly_refuses_a_message_id_it_cannot_use(broker: Broker) -> None:
    async def ask(msg_id: str) -> RemotingCommand:
        header = ConsumeMessageDirectlyResultRequestHeader(
            consumer_group="g", client_id="10.0.0.1@x", msg_id=msg_id
        )
        return await call(broker.address, RequestCode.CONSUME_MESSAGE_DIRECTLY, header)

    for msg_id, remark in (
        ("", "bad request: no msgId"),
        ("zz", "msgId 'zz' is not an offset message ID: bad length 2"),
        ("A" * 400, "msgId '" + "A" * 64 + "' is not an offset message ID"),
        (encode_offset_msg_id("127.0.0.1", 1, 10**12), "can not find message by msgId"),
    ):
        response = await ask(msg_id)
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert (response.remark or "").startswith(remark), response.remark
    # a stored message: found, then the consumer is not online
    namesrv = broker.namesrv_address
    assert namesrv is not None
    (stored,) = await send_all(namesrv, "Direct", [b"d"])
    response = await ask(stored)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == "The Consumer <g> <10.0.0.1@x> not online"


async def test_the_http_reset_route_tells_a_running_consumer() -> None:
    """POST /api/groups/{group}/offsets/reset takes the same path as INVOKE_BROKER_TO_RESET_OFFSET:
    an online consumer is told and consumes the messages again; the broker does not write."""
    import aiohttp

    config = BrokerConfig(port=0, http_port=0)
    async with Broker(config, clock=ManualClock(), namesrv=True) as broker:
        namesrv = broker.namesrv_address
        assert namesrv is not None and broker.http_address is not None
        topic, group = "HttpResetT", "http-reset-group"
        received: list[ReceivedMessage] = []
        async with Admin(namesrv) as admin:
            await admin.create_topic(topic, 1)
        await send_all(namesrv, topic, [b"m-%d" % i for i in range(3)])
        async with consumer(group, namesrv, topic, received):
            await until(lambda: len(received) >= 3, "all 3 messages consumed")
            await until(lambda: committed_all(broker, group, topic, 1), "offsets committed")
            async with (
                aiohttp.ClientSession() as http,
                http.post(
                    f"http://{broker.http_address}/api/groups/{group}/offsets/reset",
                    json={"topic": topic, "timestamp": 0},
                ) as response,
            ):
                assert response.status == 200, await response.text()
                reset = await response.json()
            assert reset["written"] is False and len(reset["told"]) == 1
            assert [q["new_offset"] for q in reset["queues"]] == [0]
            await until(lambda: len(received) >= 6, "the 3 messages again")
            assert sorted(m.body for m in received[3:]) == [b"m-0", b"m-1", b"m-2"]
            await until(lambda: committed_all(broker, group, topic, 1), "committed again")
