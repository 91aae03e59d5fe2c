"""PushConsumer against the fake cluster: offsets, long polling, filtering, retries,
back-pressure, rebalance, broadcasting, orderly consumption, the iterator."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pocketmq.broker.protocol import RequestCode
from pocketmq.broker.protocol.codes import PullSysFlag
from pocketmq.broker.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    HeartbeatData,
    PullMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    decode_json_body,
)
from pocketmq.client import ConsumeResult, MessageQueue, PushConsumer, ReceivedMessage
from pocketmq.client.errors import ClientUsageError

from .test_client_fake_server import FakeBroker, FakeCluster, fake_cluster, wait_until

T0 = MessageQueue("T", "broker-a", 0)


def consumer_for(cluster: FakeCluster, group: str = "CG", **kwargs: object) -> PushConsumer:
    kwargs.setdefault("client_ip", "127.0.0.1")
    return PushConsumer(group, namesrv=cluster.brokers[0].addr, **kwargs)  # type: ignore[arg-type]


class Collector:
    def __init__(self) -> None:
        self.messages: list[ReceivedMessage] = []

    async def __call__(self, message: ReceivedMessage) -> None:
        self.messages.append(message)

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


def pulls(broker: FakeBroker, topic: str = "T") -> list[PullMessageRequestHeader]:
    out = []
    for r in broker.requests_of(RequestCode.PULL_MESSAGE):
        h = PullMessageRequestHeader.from_ext_fields(r.ext_fields)
        if h.topic == topic:
            out.append(h)
    return out


async def fill(broker: FakeBroker, topic: str, queues: int, count: int, **props: str) -> None:
    for i in range(count):
        await broker.put(topic, i % queues, b"m%d" % i, {"UNIQ_KEY": f"U{i}", **props})


async def test_clustering_consumes_everything_and_commits() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 4)
        broker = cluster.brokers[0]
        await fill(broker, "T", 4, 20, TAGS="A")
        got = Collector()
        consumer = consumer_for(cluster, consume_from="first", listener=got)
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(got.messages) == 20)
            assert consumer.assigned_queues == [
                MessageQueue("%RETRY%CG", "broker-a", 0),
                *(MessageQueue("T", "broker-a", q) for q in range(4)),
            ]
        assert sorted(m.msg_id for m in got.messages) == sorted(f"U{i}" for i in range(20))
        for q in range(4):
            assert cluster.offsets[("CG", "T", "broker-a", q)] == 5
        beat = decode_json_body(broker.requests_of(34)[0].body or b"", HeartbeatData)
        data = beat.consumer_data_set[0]
        assert (data.group_name, data.consume_type, data.message_model) == (
            "CG",
            "CONSUME_PASSIVELY",
            "CLUSTERING",
        )
        assert data.consume_from_where == "CONSUME_FROM_FIRST_OFFSET"
        assert {s.topic: s.sub_string for s in data.subscription_data_set} == {
            "T": "*",
            "%RETRY%CG": "*",
        }
        first_pull = pulls(broker)[0]
        assert first_pull.sys_flag & PullSysFlag.SUSPEND
        assert first_pull.suspend_timeout_millis == 15000
        assert first_pull.max_msg_nums == 32 and first_pull.expression_type == "TAG"
        unregister = broker.requests_of(RequestCode.UNREGISTER_CLIENT)[-1].ext_fields or {}
        assert unregister == {"clientID": consumer.client_id, "consumerGroup": "CG"}


async def test_commit_offset_rides_on_pulls() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await fill(broker, "T", 1, 3)
        got = Collector()
        consumer = consumer_for(cluster, consume_from="first", listener=got)
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(got.messages) == 3)
            await broker.put("T", 0, b"late")
            await wait_until(lambda: len(got.messages) == 4)
            await wait_until(lambda: cluster.offsets.get(("CG", "T", "broker-a", 0)) == 3)
        committed = [p for p in pulls(broker) if p.sys_flag & PullSysFlag.COMMIT_OFFSET]
        assert committed and committed[0].commit_offset == 3


async def test_long_poll_delivers_a_new_message() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        got = Collector()
        consumer = consumer_for(cluster, listener=got)
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(pulls(broker)) >= 1)
            await broker.put("T", 0, b"now")
            await wait_until(lambda: got.bodies == [b"now"])
        assert len(pulls(broker)) >= 1


async def test_consume_from_last_skips_old_messages() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await fill(broker, "T", 1, 3)
        got = Collector()
        consumer = consumer_for(cluster, consume_from="last", listener=got)
        consumer.subscribe("T")
        async with consumer:
            await broker.put("T", 0, b"new")
            await wait_until(lambda: len(got.messages) == 1)
        assert got.bodies == [b"new"]
        assert RequestCode.GET_MAX_OFFSET in broker.codes()


async def test_consume_from_timestamp() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        for i, ts in enumerate((1000, 2000, 3000)):
            await broker.put("T", 0, b"m%d" % i, store_timestamp=ts)
        got = Collector()
        consumer = consumer_for(
            cluster, consume_from="timestamp", consume_timestamp_ms=2000, listener=got
        )
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(got.messages) == 2)
        assert got.bodies == [b"m1", b"m2"]
        assert RequestCode.SEARCH_OFFSET_BY_TIMESTAMP in broker.codes()


async def test_committed_offset_wins_over_consume_from() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await fill(broker, "T", 1, 4)
        cluster.offsets[("CG", "T", "broker-a", 0)] = 2
        got = Collector()
        consumer = consumer_for(cluster, consume_from="first", listener=got)
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(got.messages) == 2)
        assert got.bodies == [b"m2", b"m3"]


@pytest.mark.parametrize("broker_filters", [True, False])
async def test_tag_filter(broker_filters: bool) -> None:
    async with fake_cluster(broker_filters=broker_filters) as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        for tag in ("A", "BB", "C", None, "Aa", "B"):
            await broker.put("T", 0, (tag or "none").encode(), {"TAGS": tag} if tag else {})
        got = Collector()
        consumer = consumer_for(cluster, consume_from="first", listener=got)
        consumer.subscribe("T", "Aa || A || B")  # "BB" collides with "Aa"
        async with consumer:
            await wait_until(lambda: len(got.messages) == 3)
            await wait_until(lambda: consumer.committed_offset(T0) == 6)
        assert got.bodies == [b"A", b"Aa", b"B"]
        assert cluster.offsets[("CG", "T", "broker-a", 0)] == 6


async def test_failed_message_goes_back_and_returns_from_the_retry_topic() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        original = await broker.put("T", 0, b"x", {"UNIQ_KEY": "U1", "TAGS": "A"})
        got = Collector()

        async def fail_once(message: ReceivedMessage) -> ConsumeResult | None:
            await got(message)
            if message.reconsume_times == 0:
                raise RuntimeError("not yet")
            return ConsumeResult.SUCCESS

        consumer = consumer_for(cluster, consume_from="first", listener=fail_once)
        consumer.subscribe("T", "A")
        async with consumer:
            await wait_until(lambda: len(got.messages) == 2)
            await wait_until(lambda: consumer.committed_offset(T0) == 1)
        first, second = got.messages
        assert (first.topic, first.queue, first.reconsume_times) == ("T", T0, 0)
        assert second.topic == "T" and second.queue.topic == "%RETRY%CG"
        assert second.reconsume_times == 1 and second.msg_id == "U1"
        back = ConsumerSendMsgBackRequestHeader.from_ext_fields(
            broker.requests_of(RequestCode.CONSUMER_SEND_MSG_BACK)[0].ext_fields
        )
        assert back.offset == original.commitlog_offset and back.group == "CG"
        assert back.delay_level == 0 and back.origin_topic == "T" and back.origin_msg_id == "U1"
        assert back.max_reconsume_times == 16
        assert cluster.offsets[("CG", "T", "broker-a", 0)] == 1


async def test_refused_send_back_is_retried_locally() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        broker.refuse_send_back = True
        await broker.put("T", 0, b"x")
        await broker.put("T", 0, b"y")
        got = Collector()

        async def fail_x_once(message: ReceivedMessage) -> ConsumeResult:
            await got(message)
            if message.body == b"x" and message.reconsume_times == 0:
                return ConsumeResult.RECONSUME_LATER
            return ConsumeResult.SUCCESS

        consumer = consumer_for(
            cluster, consume_from="first", listener=fail_x_once, local_retry_delay_ms=10
        )
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(got.messages) == 3)
            await wait_until(lambda: consumer.committed_offset(T0) == 2)
        xs = [m.reconsume_times for m in got.messages if m.body == b"x"]
        assert xs == [0, 1]
        assert broker.messages("%RETRY%CG") == []


async def test_offset_stays_at_the_lowest_message_in_flight() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await fill(broker, "T", 1, 5)
        release = asyncio.Event()
        done: list[int] = []

        async def slow_first(message: ReceivedMessage) -> None:
            if message.queue_offset == 0:
                await release.wait()
            done.append(message.queue_offset)

        consumer = consumer_for(cluster, consume_from="first", listener=slow_first)
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(done) == 4)
            assert consumer.committed_offset(T0) == 0
            release.set()
            await wait_until(lambda: consumer.committed_offset(T0) == 5)


async def test_full_cache_stops_pulling() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await fill(broker, "T", 1, 12)
        release = asyncio.Event()
        started: list[int] = []

        async def blocked(message: ReceivedMessage) -> None:
            started.append(message.queue_offset)
            await release.wait()

        consumer = consumer_for(
            cluster,
            consume_from="first",
            listener=blocked,
            pull_batch_size=4,
            max_cached_messages_per_queue=4,
        )
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(started) == 4)
            for _ in range(50):
                await asyncio.sleep(0)
            assert len(pulls(broker)) == 1  # the cache is full: no further pull
            release.set()
            await wait_until(lambda: len(started) == 12)
        assert sorted(started) == list(range(12))


async def test_rebalance_shares_queues_and_follows_membership() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 4)
        broker = cluster.brokers[0]
        quiet = {"rebalance_interval_s": 3600.0}  # only NOTIFY_CONSUMER_IDS_CHANGED rebalances
        c1 = consumer_for(cluster, instance_name="one", listener=Collector(), **quiet)
        c2 = consumer_for(cluster, instance_name="two", listener=Collector(), **quiet)
        for c in (c1, c2):
            c.subscribe("T")
        all_t = {MessageQueue("T", "broker-a", q) for q in range(4)}

        def t_queues(c: PushConsumer) -> set[MessageQueue]:
            return {mq for mq in c.assigned_queues if mq.topic == "T"}

        async with c1:
            assert t_queues(c1) == all_t
            async with c2:
                await wait_until(
                    lambda: (
                        t_queues(c1) | t_queues(c2) == all_t
                        and not t_queues(c1) & t_queues(c2)
                        and len(t_queues(c1)) == 2
                    )
                )
                # 127.0.0.1@one < 127.0.0.1@two: c1 takes the first block
                assert t_queues(c1) == {MessageQueue("T", "broker-a", q) for q in (0, 1)}
                await broker.put("T", 3, b"for c2")
                await wait_until(lambda: c2.listener.bodies == [b"for c2"])  # type: ignore[union-attr]
            await wait_until(lambda: t_queues(c1) == all_t)
        assert RequestCode.GET_CONSUMER_LIST_BY_GROUP in broker.codes()


async def test_broadcasting(tmp_path: Path) -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 2)
        broker = cluster.brokers[0]
        await fill(broker, "T", 2, 6)

        async def fail_all(message: ReceivedMessage) -> ConsumeResult:
            seen[message.queue, message.queue_offset] = (
                seen.get((message.queue, message.queue_offset), 0) + 1
            )
            return ConsumeResult.RECONSUME_LATER

        seen: dict[tuple[MessageQueue, int], int] = {}
        got = Collector()
        options = {"message_model": "broadcasting", "consume_from": "first"}
        c1 = consumer_for(
            cluster, instance_name="one", listener=got, offsets_dir=tmp_path / "one", **options
        )
        c2 = consumer_for(
            cluster, instance_name="two", listener=fail_all, offsets_dir=tmp_path / "two", **options
        )
        for c in (c1, c2):
            c.subscribe("T")
        async with c1, c2:
            await wait_until(lambda: len(got.messages) == 6 and len(seen) == 6)
            await wait_until(lambda: c2.committed_offset(T0) == 3)
        assert set(seen.values()) == {1}  # broadcasting never retries
        assert RequestCode.CONSUMER_SEND_MSG_BACK not in broker.codes()
        assert not any(mq.topic.startswith("%RETRY%") for mq in c1.assigned_queues)
        beat = decode_json_body(broker.requests_of(34)[0].body or b"", HeartbeatData)
        data = beat.consumer_data_set[0]
        assert data.message_model == "BROADCASTING"
        assert [s.topic for s in data.subscription_data_set] == ["T"]
        assert (tmp_path / "one" / "offsets.json").exists()
        # a restart with the same folder resumes where it stopped
        await broker.put("T", 0, b"after restart")
        again = Collector()
        c3 = consumer_for(
            cluster, instance_name="one", listener=again, offsets_dir=tmp_path / "one", **options
        )
        c3.subscribe("T")
        async with c3:
            await wait_until(lambda: len(again.messages) == 1)
        assert again.bodies == [b"after restart"]


async def test_orderly_one_at_a_time_in_order_with_retry_in_place() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 2)
        broker = cluster.brokers[0]
        for i in range(12):
            await broker.put("T", i % 2, b"m%d" % i)
        active: set[MessageQueue] = set()
        calls: list[tuple[int, int, int]] = []
        overlaps: list[MessageQueue] = []

        async def listener(message: ReceivedMessage) -> ConsumeResult:
            if message.queue in active:
                overlaps.append(message.queue)
            active.add(message.queue)
            await asyncio.sleep(0)
            active.discard(message.queue)
            calls.append((message.queue.queue_id, message.queue_offset, message.reconsume_times))
            first_try = not message.reconsume_times
            if message.queue.queue_id == 0 and message.queue_offset == 3 and first_try:
                return ConsumeResult.RECONSUME_LATER
            return ConsumeResult.SUCCESS

        consumer = consumer_for(
            cluster,
            consume_from="first",
            orderly=True,
            listener=listener,
            orderly_retry_delay_ms=10,
        )
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(calls) == 13)
        assert overlaps == []
        q0 = [(offset, times) for q, offset, times in calls if q == 0]
        assert q0 == [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (4, 0), (5, 0)]
        assert [offset for q, offset, _ in calls if q == 1] == list(range(6))
        codes = broker.codes()
        assert codes.index(RequestCode.LOCK_BATCH_MQ) < codes.index(RequestCode.PULL_MESSAGE)
        assert RequestCode.CONSUMER_SEND_MSG_BACK not in codes
        await wait_until(lambda: RequestCode.UNLOCK_BATCH_MQ in broker.codes())
        await wait_until(lambda: not cluster.locks)
        assert cluster.offsets[("CG", "T", "broker-a", 0)] == 6


async def test_orderly_skips_a_queue_locked_by_another_client() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 2)
        broker = cluster.brokers[0]
        cluster.locks[("CG", "T", "broker-a", 0)] = "someone-else"
        await broker.put("T", 0, b"locked away")
        await broker.put("T", 1, b"mine")
        got = Collector()
        consumer = consumer_for(cluster, consume_from="first", orderly=True, listener=got)
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: got.bodies == [b"mine"])
            assert T0 not in consumer.assigned_queues
        assert cluster.locks == {("CG", "T", "broker-a", 0): "someone-else"}


async def test_orderly_gives_up_after_max_reconsume_times() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await broker.put("T", 0, b"poison")
        await broker.put("T", 0, b"fine")
        got = Collector()

        async def listener(message: ReceivedMessage) -> ConsumeResult:
            await got(message)
            return (
                ConsumeResult.RECONSUME_LATER
                if message.body == b"poison"
                else ConsumeResult.SUCCESS
            )

        consumer = consumer_for(
            cluster,
            consume_from="first",
            orderly=True,
            listener=listener,
            max_reconsume_times=2,
            orderly_retry_delay_ms=5,
        )
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: b"fine" in got.bodies)
        # RocketMQ's rule: reconsumeTimes >= max goes to the DLQ, so 2 retries, 3 deliveries
        assert got.bodies == [b"poison", b"poison", b"poison", b"fine"]
        assert [m.reconsume_times for m in got.messages[:3]] == [0, 1, 2]
        [request] = broker.requests_of(RequestCode.CONSUMER_SEND_MSG_BACK)
        back = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
        assert back.delay_level == -1
        # the broker stores the remark as the reason of the message's poisoned state
        assert request.remark == "orderly consumption failed 3 times (max_reconsume_times 2)"
        assert [m.body for m in broker.messages("%DLQ%CG")] == [b"poison"]


async def test_iterator_mode() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await fill(broker, "T", 1, 3)
        consumer = consumer_for(cluster, consume_from="first")
        consumer.subscribe("T")
        seen: list[tuple[bytes, int]] = []
        async with consumer:
            async for message in consumer:
                seen.append((message.body, message.reconsume_times))
                if message.body == b"m1" and message.reconsume_times == 0:
                    await consumer.ack(message, ConsumeResult.RECONSUME_LATER)
                else:
                    await consumer.ack(message)
                if len(seen) == 4:
                    break
            with pytest.raises(ClientUsageError):
                await consumer.ack(message)  # already settled
            await wait_until(lambda: consumer.committed_offset(T0) == 3)
        assert sorted(seen) == [(b"m0", 0), (b"m1", 0), (b"m1", 1), (b"m2", 0)]


async def test_iteration_ends_when_the_consumer_closes() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        consumer = consumer_for(cluster)
        consumer.subscribe("T")
        await consumer.start()
        received: list[ReceivedMessage] = []

        async def loop() -> None:
            async for message in consumer:
                received.append(message)

        task = asyncio.create_task(loop())
        await asyncio.sleep(0)
        await consumer.close()
        await task  # ends instead of waiting forever
        assert received == []


async def test_offset_moved_restarts_at_the_corrected_offset() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await fill(broker, "T", 1, 2)
        cluster.offsets[("CG", "T", "broker-a", 0)] = 100  # beyond the end of the queue
        got = Collector()
        consumer = consumer_for(cluster, consume_from="first", listener=got)
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: cluster.offsets[("CG", "T", "broker-a", 0)] == 2)
            await wait_until(lambda: T0 in consumer.assigned_queues)
            await broker.put("T", 0, b"next")
            await wait_until(lambda: got.bodies == [b"next"])
        updates = [
            UpdateConsumerOffsetRequestHeader.from_ext_fields(r.ext_fields)
            for r in broker.requests_of(RequestCode.UPDATE_CONSUMER_OFFSET)
        ]
        assert any(u.topic == "T" and u.commit_offset == 2 for u in updates)


async def test_subscribe_after_start() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        cluster.add_topic("U", 1)
        broker = cluster.brokers[0]
        got = Collector()
        consumer = consumer_for(cluster, listener=got)
        consumer.subscribe("T")
        async with consumer:
            consumer.subscribe("U")
            await wait_until(lambda: MessageQueue("U", "broker-a", 0) in consumer.assigned_queues)
            await broker.put("U", 0, b"u")
            await wait_until(lambda: got.bodies == [b"u"])


async def test_usage_errors() -> None:
    async with fake_cluster() as cluster:
        consumer = consumer_for(cluster, listener=Collector())
        with pytest.raises(ClientUsageError):
            await consumer.start()  # nothing subscribed
        with pytest.raises(ClientUsageError):
            consumer.subscribe("%RETRY%CG")
        with pytest.raises(ClientUsageError):
            consumer.subscribe("T", "||")
        with pytest.raises(ClientUsageError):
            PushConsumer("G", message_model="sideways")  # type: ignore[arg-type]
        await consumer.close()


async def test_orderly_stops_while_another_client_holds_the_lock() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        got = Collector()
        consumer = consumer_for(
            cluster, consume_from="first", orderly=True, listener=got, lock_interval_s=0.01
        )
        consumer.subscribe("T")
        key = ("CG", "T", "broker-a", 0)
        async with consumer:
            await wait_until(lambda: len(pulls(broker)) == 1)  # a long poll is waiting
            cluster.locks[key] = "someone-else"
            locks_before = len(broker.requests_of(RequestCode.LOCK_BATCH_MQ))
            await wait_until(
                lambda: len(broker.requests_of(RequestCode.LOCK_BATCH_MQ)) >= locks_before + 2
            )
            await broker.put("T", 0, b"held back")  # wakes the long poll
            await wait_until(lambda: consumer._pqs[T0].count == 1)
            await asyncio.sleep(0.05)
            assert got.messages == []  # not consumed without the lock
            assert len(pulls(broker)) == 1  # and not pulled further
            del cluster.locks[key]
            await wait_until(lambda: got.bodies == [b"held back"])


def _corrupting(monkeypatch: pytest.MonkeyPatch, body: bytes, times: int | None) -> list[int]:
    """Make the fake broker send ``body``'s record with one body byte flipped, ``times`` times
    (None: always), as damage in transit or on the broker's disk would; returns the count."""
    from . import test_client_fake_server as fake

    real = fake.encode_message_record
    sent = [0]

    def encode(message):  # type: ignore[no-untyped-def]
        record = real(message)
        if message.body != body or (times is not None and sent[0] >= times):
            return record
        sent[0] += 1
        damaged = bytearray(record)
        at = record.index(body)
        damaged[at] ^= 0x40
        return bytes(damaged)

    monkeypatch.setattr(fake, "encode_message_record", encode)
    return sent


async def test_a_body_damaged_in_transit_is_pulled_again_never_handed_over(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await fill(broker, "T", 1, 5)
        sent = _corrupting(monkeypatch, b"m2", times=1)
        got = Collector()
        consumer = consumer_for(
            cluster, consume_from="first", listener=got, pull_delay_on_error_ms=10
        )
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(got.messages) == 5)
        assert sent[0] == 1
        assert sorted(got.bodies) == [b"m0", b"m1", b"m2", b"m3", b"m4"]  # each once
        assert cluster.offsets[("CG", "T", "broker-a", 0)] == 5
    assert any("body CRC" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


async def test_a_body_that_stays_damaged_is_never_handed_over_nor_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await fill(broker, "T", 1, 5)
        _corrupting(monkeypatch, b"m2", times=None)
        got = Collector()
        consumer = consumer_for(
            cluster, consume_from="first", listener=got, pull_delay_on_error_ms=10
        )
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(pulls(broker)) >= 4)
        assert got.bodies == [b"m0", b"m1"]
        assert all(p.queue_offset == 2 for p in pulls(broker)[1:])  # the bad one, again
        assert cluster.offsets[("CG", "T", "broker-a", 0)] == 2


async def test_check_crc_off_hands_over_what_the_broker_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        await fill(broker, "T", 1, 5)
        _corrupting(monkeypatch, b"m2", times=None)
        got = Collector()
        consumer = consumer_for(cluster, consume_from="first", listener=got, check_crc=False)
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: len(got.messages) == 5)
        assert b"m2" not in got.bodies and len(set(got.bodies)) == 5
