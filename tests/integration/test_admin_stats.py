"""The read-only admin requests about traffic, consume progress and clients: raw frames with
RocketMQ's bodies against an embedded broker, and the SDK's ``Admin`` against a standalone
broker process. The numbers are checked against what was sent and consumed: after N messages
sent to a queue and M consumed, its lag is N - M."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol._json import loads_lenient
from pocketmq.broker.protocol.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeaderV2,
    UpdateConsumerOffsetRequestHeader,
)
from pocketmq.client import (
    Admin,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SimpleConsumer,
)
from pocketmq.client.errors import ConsumerNotOnlineError, TopicNotExistError
from tests.integration.cluster import Cluster, Process
from tests.integration.raw import call

TOPIC = "Lagging"
GROUP = "lag-readers"


def send_request(topic: str, queue_id: int, body: bytes) -> RemotingCommand:
    header = SendMessageRequestHeaderV2(
        producer_group="raw-producer",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=2,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=0,
    )
    return RemotingCommand(
        code=RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_ext_fields(), body=body
    )


def pull_request(topic: str, queue_id: int, offset: int, count: int) -> RemotingCommand:
    header = PullMessageRequestHeader(
        consumer_group=GROUP,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=count,
        sys_flag=0x4,  # the subscription is in the request
        commit_offset=0,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
    )
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=header.to_ext_fields())


def commit_request(topic: str, queue_id: int, offset: int) -> RemotingCommand:
    header = UpdateConsumerOffsetRequestHeader(
        consumer_group=GROUP, topic=topic, queue_id=queue_id, commit_offset=offset
    )
    return RemotingCommand(
        code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=header.to_ext_fields()
    )


def request(code: int, **fields: str) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields=fields)


async def ok(broker: Broker, command: RemotingCommand) -> RemotingCommand:
    response = await call(broker.address, command)
    assert response.code == ResponseCode.SUCCESS, (command.code, response.code, response.remark)
    return response


def queue_entries(body: bytes | None) -> dict[tuple[str, str, int], dict[str, object]]:
    """A MessageQueue-keyed offsetTable as fastjson writes it, read back by queue."""
    table = loads_lenient((body or b"{}").decode())["offsetTable"]
    out = {}
    for key, value in table.items():
        mq = json.loads(key)
        out[(mq["topic"], mq["brokerName"], mq["queueId"])] = value
    return out


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker(port=0, store=None) as running:
        running.topics.create(TOPIC, read_queue_nums=2, write_queue_nums=2)
        # N = 5 on queue 0, 3 on queue 1; M = 2 consumed of queue 0, none of queue 1
        for queue_id, count in ((0, 5), (1, 3)):
            for i in range(count):
                await ok(running, send_request(TOPIC, queue_id, b"m%d" % i))
        pulled = await ok(running, pull_request(TOPIC, 0, 0, 2))
        assert pulled.body
        await ok(running, commit_request(TOPIC, 0, 2))
        yield running


async def test_consume_stats_is_sent_minus_consumed_per_queue(broker: Broker) -> None:
    response = await ok(broker, request(RequestCode.GET_CONSUME_STATS, consumerGroup=GROUP))
    # fastjson's shape: the queue itself as the key, not a string
    assert (response.body or b"").startswith(b'{"offsetTable":{{"brokerName":')
    entries = queue_entries(response.body)
    name = broker.config.broker_name
    first, second = entries[(TOPIC, name, 0)], entries[(TOPIC, name, 1)]
    assert (first["brokerOffset"], first["consumerOffset"]) == (5, 2)
    assert (second["brokerOffset"], second["consumerOffset"]) == (3, 0)
    assert first["lastTimestamp"] == broker.progress.queue_time(TOPIC, 0, 1) > 0
    assert second["lastTimestamp"] == 0
    # a topic list is reported whatever the subscriptions (5.x topicList)
    listed = await ok(
        broker,
        request(RequestCode.GET_CONSUME_STATS, consumerGroup=GROUP, topicList=f"{TOPIC};Nope"),
    )
    assert set(queue_entries(listed.body)) == set(entries)


async def test_topic_stats_and_topic_config(broker: Broker) -> None:
    response = await ok(broker, request(RequestCode.GET_TOPIC_STATS_INFO, topic=TOPIC))
    entries = queue_entries(response.body)
    name = broker.config.broker_name
    assert entries[(TOPIC, name, 0)]["maxOffset"] == 5
    assert entries[(TOPIC, name, 1)]["maxOffset"] == 3
    assert entries[(TOPIC, name, 1)]["minOffset"] == 0
    assert entries[(TOPIC, name, 1)]["lastUpdateTimestamp"] > 0
    assert loads_lenient((response.body or b"").decode())["topicPutTps"] > 0
    missing = await call(broker.address, request(RequestCode.GET_TOPIC_STATS_INFO, topic="Nope"))
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    assert missing.remark == "topic[Nope] not exist"

    config = json.loads((await ok(broker, request(RequestCode.GET_TOPIC_CONFIG, topic=TOPIC))).body)
    assert (config["topicName"], config["readQueueNums"], config["writeQueueNums"]) == (TOPIC, 2, 2)
    absent = await call(broker.address, request(RequestCode.GET_TOPIC_CONFIG, topic="Nope"))
    assert absent.code == ResponseCode.TOPIC_NOT_EXIST


async def test_runtime_info_has_the_keys_the_exporter_parses(broker: Broker) -> None:
    response = await ok(broker, request(RequestCode.GET_BROKER_RUNTIME_INFO))
    table = json.loads(response.body or b"{}")["table"]
    assert table["msgPutTotalTodayNow"] == "8"
    assert table["msgGetTotalTodayNow"] == "2"
    assert table["putMessageTimesTotal"] == "8"
    assert table["brokerVersionDesc"] == "V4_9_8"
    assert table["brokerActive"] == "true"
    assert table["runtime"].startswith("[ 0 days, 0 hours, ")
    # rocketmq-exporter's BrokerRuntimeStats reads these with Long/Double.parse*: all numbers
    for key in [
        "msgPutTotalYesterdayMorning",
        "msgPutTotalTodayMorning",
        "msgGetTotalYesterdayMorning",
        "msgGetTotalTodayMorning",
        "sendThreadPoolQueueHeadWaitTimeMills",
        "queryThreadPoolQueueSize",
        "queryThreadPoolQueueHeadWaitTimeMills",
        "pullThreadPoolQueueSize",
        "bootTimestamp",
        "commitLogMinOffset",
        "pullThreadPoolQueueHeadWaitTimeMills",
        "dispatchMaxBuffer",
        "brokerVersion",
        "consumeQueueDiskRatio",
        "pageCacheLockTimeMills",
        "commitLogDiskRatio",
        "commitLogMaxOffset",
        "getMessageEntireTimeMax",
        "sendThreadPoolQueueSize",
        "startAcceptSendRequestTimeStamp",
        "putMessageEntireTimeMax",
        "earliestMessageTimeStamp",
        "remainTransientStoreBufferNumbs",
        "queryThreadPoolQueueCapacity",
        "putMessageAverageSize",
        "dispatchBehindBytes",
        "putMessageSizeTotal",
        "sendThreadPoolQueueCapacity",
        "pullThreadPoolQueueCapacity",
        "putLatency99",
        "putLatency999",
        # and mqadmin clusterList's
        "timerReadBehind",
        "timerOffsetBehind",
        "timerCongestNum",
        "timerEnqueueTps",
        "timerDequeueTps",
    ]:
        float(table[key])
    for key in ("putTps", "getMissTps", "getTransferredTps", "getTotalTps", "getFoundTps"):
        assert len(table[key].split(" ")) == 3, key
    distribution = dict(part.split(":") for part in table["putMessageDistributeTime"].split())
    assert sum(int(v) for v in distribution.values()) == 8
    assert list(distribution)[0] == "[<=0ms]"
    total, free = table["commitLogDirCapacity"].split(", ")
    assert total.startswith("Total : ") and free.startswith("Free : ") and free.endswith(".")
    assert float(table["remainHowManyDataToFlush"].split(" ")[0]) >= 0


async def test_groups_topics_and_offsets(broker: Broker) -> None:
    who = await ok(broker, request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, topic=TOPIC))
    assert json.loads(who.body)["groupList"] == [GROUP]
    topics = await ok(broker, request(RequestCode.QUERY_TOPICS_BY_CONSUMER, group=GROUP))
    body = json.loads(topics.body)
    assert body["topicList"] == [TOPIC] and body["brokerAddr"] == broker.address
    offsets = await ok(broker, request(RequestCode.GET_ALL_CONSUMER_OFFSET))
    assert json.loads(offsets.body)["offsetTable"][f"{TOPIC}@{GROUP}"] == {"0": 2}

    whole = await ok(broker, request(RequestCode.GET_BROKER_CONSUME_STATS, isOrder="false"))
    text = (whole.body or b"").decode()
    data = loads_lenient(text)
    assert data["brokerAddr"] == broker.address
    assert data["totalDiff"] == 3 + 3  # (5 - 2) + (3 - 0)
    groups = {name: stats for entry in data["consumeStatsList"] for name, stats in entry.items()}
    assert len(groups[GROUP]) == 1  # one ConsumeStats per topic
    ordered = await ok(broker, request(RequestCode.GET_BROKER_CONSUME_STATS, isOrder="true"))
    assert loads_lenient(ordered.body.decode())["totalDiff"] == 0  # no ordered topic

    group = await ok(broker, request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, group=GROUP))
    assert json.loads(group.body)["groupName"] == GROUP
    unknown = await call(
        broker.address, request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, group="nobody")
    )
    assert unknown.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


async def test_broker_stats_data_counts_what_went_in_and_out(broker: Broker) -> None:
    put = await ok(
        broker,
        request(RequestCode.VIEW_BROKER_STATS_DATA, statsName="TOPIC_PUT_NUMS", statsKey=TOPIC),
    )
    data = json.loads(put.body)
    assert set(data) == {"statsMinute", "statsHour", "statsDay"}
    assert data["statsMinute"]["sum"] == 8 and data["statsDay"]["sum"] == 8
    got = await ok(
        broker,
        request(
            RequestCode.VIEW_BROKER_STATS_DATA,
            statsName="GROUP_GET_NUMS",
            statsKey=f"{TOPIC}@{GROUP}",
        ),
    )
    assert json.loads(got.body)["statsMinute"]["sum"] == 2
    missing = await call(
        broker.address,
        request(RequestCode.VIEW_BROKER_STATS_DATA, statsName="TOPIC_PUT_NUMS", statsKey="Nope"),
    )
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert missing.remark == "The stats <TOPIC_PUT_NUMS> <Nope> not exist"


async def test_time_span_and_bad_requests(broker: Broker) -> None:
    span = await ok(broker, request(RequestCode.QUERY_CONSUME_TIME_SPAN, topic=TOPIC, group=GROUP))
    spans = json.loads(span.body)["consumeTimeSpanSet"]
    assert [s["messageQueue"]["queueId"] for s in spans] == [0, 1]
    assert spans[0]["consumeTimeStamp"] == broker.progress.queue_time(TOPIC, 0, 1)
    assert spans[1]["consumeTimeStamp"] == spans[1]["minTimeStamp"] > 0  # nothing consumed
    assert spans[0]["delayTime"] >= 0
    # a missing required field is a clear refusal, and the broker keeps serving
    for code in (
        RequestCode.GET_CONSUME_STATS,
        RequestCode.GET_TOPIC_STATS_INFO,
        RequestCode.GET_CONSUMER_CONNECTION_LIST,
        RequestCode.VIEW_BROKER_STATS_DATA,
        RequestCode.QUERY_CONSUME_TIME_SPAN,
    ):
        refused = await call(broker.address, request(code))
        assert refused.code == ResponseCode.SYSTEM_ERROR, code
        assert (refused.remark or "").startswith("bad request"), refused.remark
    offline = await call(
        broker.address, request(RequestCode.GET_CONSUMER_CONNECTION_LIST, consumerGroup="nobody")
    )
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert offline.remark == "the consumer group[nobody] not online"
    no_producer = await call(
        broker.address, request(RequestCode.GET_PRODUCER_CONNECTION_LIST, producerGroup="nobody")
    )
    assert no_producer.code == ResponseCode.SYSTEM_ERROR
    assert no_producer.remark == "the producer group[nobody] not exist"
    await ok(broker, request(RequestCode.GET_BROKER_RUNTIME_INFO))


# -- the SDK against a broker process -----------------------------------------------------


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(Path(tmp_path_factory.mktemp("admin-stats"))) as cluster:
        yield cluster.start_standalone()


async def wait_for(predicate_async: object, *, timeout_s: float = 30.0) -> None:
    """A guard against hanging, not a timing assertion."""
    async with asyncio.timeout(timeout_s):
        while not await predicate_async():  # type: ignore[operator]
            await asyncio.sleep(0.05)


async def test_sdk_progress_connections_and_stats(standalone: Process) -> None:
    namesrv = f"127.0.0.1:{standalone.extra['namesrv_port']}"
    topic, group, pop_group = "SdkLag", "sdk-readers", "sdk-poppers"
    async with Admin(namesrv) as admin:
        (broker_name,) = await admin.create_topic(topic, 2)
        await admin.create_group(group)
        await admin.create_group(pop_group)
        async with Producer("sdk-producers", namesrv=namesrv) as producer:
            for i in range(10):
                queue = MessageQueue(topic, broker_name, i % 2)
                await producer.send(Message(topic=topic, body=b"%d" % i), queue=queue)
            # N = 5 per queue. A push consumer takes all of them.
            got: list[ReceivedMessage] = []

            async def listener(message: ReceivedMessage) -> None:
                got.append(message)

            consumer = PushConsumer(group, namesrv=namesrv, consume_from="first", listener=listener)
            consumer.subscribe(topic)
            async with consumer:

                async def consumed() -> bool:
                    # the consumer commits its offsets now and then
                    progress = await admin.consumer_progress(group, topic=topic)
                    return len(got) == 10 and len(progress.queues) == 2 and progress.lag == 0

                await wait_for(consumed)
                progress = await admin.consumer_progress(group)
                # its retry topic too, as mqadmin consumerProgress shows it
                assert {q.queue.topic for q in progress.queues} == {topic, f"%RETRY%{group}"}
                progress = await admin.consumer_progress(group, topic=topic)
                assert [
                    (q.queue.queue_id, q.broker_offset, q.consumer_offset) for q in progress.queues
                ] == [
                    (0, 5, 5),
                    (1, 5, 5),
                ]
                assert all(q.last_timestamp_ms for q in progress.queues)
                connections = await admin.consumer_connections(group)
                assert [c.client_id for c in connections.connections] == [consumer.client_id]
                assert connections.subscriptions == {topic: "*", f"%RETRY%{group}": "*"}
                assert connections.message_model == "CLUSTERING"
                assert connections.connections[0].language == "PYTHON"
                assert await admin.topic_consumers(topic) == [group]
                assert topic in await admin.group_topics(group)
                producers = await admin.producer_connections("sdk-producers")
                assert [c.client_id for c in producers] == [producer.client_id]
                everyone = await admin.producers()
                assert [p.client_id for b in everyone.values() for p in b["sdk-producers"]] == [
                    producer.client_id
                ]
            # M = 3 more sent after the consumer left: lag 3, shown the same way everywhere
            for _ in range(3):
                queue = MessageQueue(topic, broker_name, 0)
                await producer.send(Message(topic=topic, body=b"late"), queue=queue)
        progress = await admin.consumer_progress(group, topic=topic)
        assert [(q.queue.queue_id, q.lag) for q in progress.queues] == [(0, 3), (1, 0)]
        assert progress.lag == 3
        whole = await admin.broker_consume_stats()
        assert [b.groups[group].lag for b in whole.values()] == [3]

        # POP: lent and not acknowledged is inflight, not lag
        async with SimpleConsumer(pop_group, namesrv=namesrv, subscriptions={topic: "*"}) as simple:
            lent = await simple.receive(4, invisible_duration_s=300)
            assert lent
            popped = await admin.consumer_progress(pop_group, topic=topic)
            assert popped.inflight == len(lent)
            assert popped.lag == 13 - len(lent)
            await simple.ack(lent[0])
            assert (await admin.consumer_progress(pop_group, topic=topic)).inflight == len(lent) - 1

        stats = await admin.topic_stats(topic)
        assert [(q.queue.queue_id, q.max_offset) for q in stats.queues] == [(0, 8), (1, 5)]
        with pytest.raises(TopicNotExistError):
            await admin.topic_stats("NoSuchTopic")
        with pytest.raises(ConsumerNotOnlineError):
            await admin.consumer_connections("nobody-here")
        (info,) = (await admin.broker_runtime_info()).values()
        assert int(info["msgPutTotalTodayNow"]) == 13
        assert int(info["msgGetTotalTodayNow"]) >= 10 + len(lent)
        (data,) = (await admin.broker_stats("TOPIC_PUT_NUMS", topic)).values()
        assert data.stats_minute.sum == 13
        offsets = await admin.consumer_offsets()
        assert [o[f"{topic}@{group}"] for o in offsets.values()] == [{0: 5, 1: 5}]
        spans = await admin.consume_time_span(topic, group)
        assert [s.queue.queue_id for s in spans] == [0, 1]
        assert spans[0].delay_ms >= 0 and spans[1].delay_ms == 0
