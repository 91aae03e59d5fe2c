"""The SDK's transactional producer, SimpleConsumer (POP), poison / retries / DLQ and clock
control, against a real standalone pocketmq process on a manual clock.

Every test gets its own broker, so what one test leaves scheduled never fires in another.
Time moves only through ``Admin.advance_clock``; waits below are guards against hanging
(``wait_until``), never timing assertions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
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
    ClientUsageError,
    ConsumeResult,
    Message,
    MessageQueue,
    MessageView,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    SimpleConsumer,
    StaleReceiptHandleError,
    TransactionProducer,
    TransactionResolution,
)
from pocketmq.client.connection import Connection, check_response, make_request
from pocketmq.client.errors import IllegalOperationError, InvalidParameterError
from tests.integration.cluster import Cluster, Process

ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


async def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 15.0) -> None:
    """A guard against hanging, not a timing assertion."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


@dataclasses.dataclass
class Env:
    broker: Process
    namesrv: str
    admin: Admin

    async def topic(self, prefix: str, queues: int = 4) -> str:
        """A new topic, once the name server knows its route (brokers tell it about a new
        topic with their next registration, as in RocketMQ)."""
        topic = unique(prefix)
        await self.admin.create_topic(topic, queues)
        async with asyncio.timeout(20):
            while True:
                response = await self.admin._core.routes.invoke_namesrv(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic)
                )
                if response.code == 0:
                    route = decode_json_body(response.body or b"", TopicRouteData)
                    if [q.write_queue_nums for q in route.queue_datas] == [queues]:
                        return topic
                await asyncio.sleep(0.02)

    async def pending(self) -> int:
        return sum(state.pending for state in (await self.admin.clock()).values())

    async def wait_pending(self, count: int = 1) -> None:
        """Until the broker has at least ``count`` items scheduled (a retry, a check ...)."""
        async with asyncio.timeout(15):
            while await self.pending() < count:
                await asyncio.sleep(0.01)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Process]:
    with Cluster(tmp_path) as running:
        yield running.start_standalone(extra_args=["--clock", "manual"])


@pytest.fixture
async def env(standalone: Process) -> AsyncIterator[Env]:
    namesrv = f"127.0.0.1:{standalone.extra['namesrv_port']}"
    async with Admin(namesrv) as admin:
        async with asyncio.timeout(20):  # "ready" comes before the first registration lands
            while not (await admin.cluster_info()).broker_addr_table:
                await asyncio.sleep(0.02)
        # Producers stamp messages with the wall clock: start the manual clock there too.
        [state] = (await admin.clock()).values()
        await admin.set_clock(max(state.now_ms, int(time.time() * 1000)))
        yield Env(standalone, namesrv, admin)


async def read_all(namesrv: str, topic: str, broker: str = "broker-a") -> list[ReceivedMessage]:
    """Every message stored in ``topic`` (all queues), read with plain pulls."""
    out: list[ReceivedMessage] = []
    async with PullConsumer(namesrv=namesrv) as puller:
        queues = await puller.queues(topic)
        for mq in queues:
            offset = await puller.min_offset(mq)
            while offset < await puller.max_offset(mq):
                result = await puller.pull(mq, offset, 32)
                out.extend(result.messages)
                offset = result.next_offset
    return out


async def read_queue(namesrv: str, via_topic: str, mq: MessageQueue) -> list[ReceivedMessage]:
    """All messages of one queue (e.g. a DLQ the name server may not list yet)."""
    async with PullConsumer(namesrv=namesrv) as puller:
        await puller.queues(via_topic)  # learn the broker's address from a known route
        try:
            high = await puller.max_offset(mq)
        except Exception:  # the queue does not exist (yet)
            return []
        if high == 0:
            return []
        return (await puller.pull(mq, 0, 32)).messages


# -- transactions ---------------------------------------------------------------------------------


class Checker:
    def __init__(self, answers: dict[bytes, TransactionResolution]) -> None:
        self.answers = answers
        self.checked: list[MessageView] = []

    async def __call__(self, message: MessageView) -> TransactionResolution:
        self.checked.append(message)
        return self.answers.get(message.body, TransactionResolution.UNKNOWN)


async def test_commit_rollback_and_unknown_resolved_by_the_checker(env: Env) -> None:
    topic = await env.topic("TxOrders")
    checker = Checker({b"unknown-then-commit": TransactionResolution.COMMIT})

    def decide(resolution: TransactionResolution | Exception):  # noqa: ANN202
        async def local(message: Message) -> TransactionResolution:
            if isinstance(resolution, Exception):
                raise resolution
            return resolution

        return local

    async with TransactionProducer(
        unique("TxPG"), namesrv=env.namesrv, checker=checker
    ) as producer:
        committed = await producer.send_in_transaction(
            Message(topic=topic, body=b"commit", keys=["k-commit"]),
            decide(TransactionResolution.COMMIT),
        )
        rolled = await producer.send_in_transaction(
            Message(topic=topic, body=b"rollback"), decide(TransactionResolution.ROLLBACK)
        )
        unknown = await producer.send_in_transaction(
            Message(topic=topic, body=b"unknown-then-commit"), decide(TransactionResolution.UNKNOWN)
        )
        failed = await producer.send_in_transaction(
            Message(topic=topic, body=b"raised-then-unknown"), decide(ValueError("db down"))
        )
        assert (committed.resolution, rolled.resolution, unknown.resolution) == (
            TransactionResolution.COMMIT,
            TransactionResolution.ROLLBACK,
            TransactionResolution.UNKNOWN,
        )
        assert failed.resolution is TransactionResolution.UNKNOWN
        assert isinstance(failed.local_error, ValueError)
        assert committed.transaction_id == committed.msg_id

        # END_TRANSACTION is oneway: the commit shows up soon after
        async def visible() -> list[bytes]:
            return sorted(m.body for m in await read_all(env.namesrv, topic))

        async with asyncio.timeout(15):
            while await visible() != [b"commit"]:
                await asyncio.sleep(0.02)
        assert checker.checked == []
        # transactionTimeOut is 6 s: both open transactions are checked once
        await env.admin.advance_clock("10s")
        await wait_until(lambda: len(checker.checked) == 2)
        assert sorted(m.body for m in checker.checked) == [
            b"raised-then-unknown",
            b"unknown-then-commit",
        ]
        view = next(m for m in checker.checked if m.body == b"unknown-then-commit")
        assert view.topic == topic and view.msg_id == unknown.transaction_id
        async with asyncio.timeout(15):
            while await visible() != [b"commit", b"unknown-then-commit"]:
                await asyncio.sleep(0.02)
        # The committed one is never checked again; the undecided one is, every 30 s.
        await env.admin.advance_clock("30s")
        await wait_until(lambda: len(checker.checked) == 3)
        assert checker.checked[-1].body == b"raised-then-unknown"
        assert checker.checked[-1].properties["TRANSACTION_CHECK_TIMES"] == "2"
        checker.answers[b"raised-then-unknown"] = TransactionResolution.ROLLBACK
        await env.admin.advance_clock("30s")
        await wait_until(lambda: len(checker.checked) == 4)
        await wait_all_ended(env)
        await env.admin.advance_clock("10m")
        await asyncio.sleep(0.1)  # a check would be on its way now (its absence is not timed)
        assert len(checker.checked) == 4  # never a check after a commit or rollback
    messages = await read_all(env.namesrv, topic)
    assert sorted(m.body for m in messages) == [b"commit", b"unknown-then-commit"]
    assert {m.msg_id for m in messages} == {committed.msg_id, unknown.msg_id}
    assert next(m for m in messages if m.body == b"commit").keys == ("k-commit",)


async def open_transactions(env: Env) -> list[dict[str, object]]:
    """The broker's pending transactions (pocketmq's POCKETMQ_TX list, what ``pocketmq tx list``
    prints)."""
    conn = await Connection.open(env.broker.address)
    try:
        cmd = make_request(RequestCode.POCKETMQ_TX, ext_fields={"action": "list"})
        response = check_response(await conn.invoke(cmd, 5000))
        return json.loads(response.body or b"[]")
    finally:
        await conn.aclose()


async def wait_all_ended(env: Env) -> None:
    """Until the broker has stored an end for every transaction (END_TRANSACTION is oneway)."""
    async with asyncio.timeout(15):
        while await open_transactions(env):
            await asyncio.sleep(0.01)


async def test_manual_ends_and_misuse(env: Env) -> None:
    topic = await env.topic("TxManual")
    with pytest.raises(ClientUsageError, match="checker"):
        async with TransactionProducer(unique("TxPG"), namesrv=env.namesrv):
            pass
    async with TransactionProducer(
        unique("TxPG"), namesrv=env.namesrv, checker=Checker({})
    ) as producer:

        async def commit(message: Message) -> TransactionResolution:
            return TransactionResolution.COMMIT

        with pytest.raises(ClientUsageError, match="batch"):
            await producer.send_in_transaction(
                [Message(topic=topic, body=b"a"), Message(topic=topic, body=b"b")],  # type: ignore[arg-type]
                commit,
            )
        with pytest.raises(ClientUsageError, match="delay level"):
            await producer.send_in_transaction(
                Message(topic=topic, body=b"late", delay_level=3), commit
            )
        with pytest.raises(ClientUsageError, match="delivery time"):
            await producer.send_half(
                Message(topic=topic, body=b"late", properties={"TIMER_DELAY_MS": "5000"})
            )
        tx = await producer.send_half(Message(topic=topic, body=b"by-hand"))
        await tx.end(TransactionResolution.UNKNOWN)  # not decided yet: may still be ended
        await tx.commit()
        with pytest.raises(ClientUsageError, match="already ended"):
            await tx.commit()
        with pytest.raises(ClientUsageError, match="already ended"):
            await tx.rollback()
        dropped = await producer.send_half(Message(topic=topic, body=b"dropped"))
        await dropped.rollback()
        ordinary = await producer.send(Message(topic=topic, body=b"ordinary"))
        assert ordinary.transaction_id is not None
        async with asyncio.timeout(15):
            while len(await read_all(env.namesrv, topic)) < 2:
                await asyncio.sleep(0.02)
    assert sorted(m.body for m in await read_all(env.namesrv, topic)) == [b"by-hand", b"ordinary"]


KILLED_PRODUCER = """
import asyncio, sys
from pocketmq.client import Message, TransactionProducer, TransactionResolution

async def never(message):
    return TransactionResolution.UNKNOWN

async def local(message):
    print("HALF SENT", flush=True)
    await asyncio.sleep(3600)  # killed here, between the half message and its commit

async def main():
    producer = TransactionProducer(sys.argv[1], namesrv=sys.argv[2], checker=never)
    await producer.start()
    await producer.send_in_transaction(Message(topic=sys.argv[3], body=b"paid-order"), local)

asyncio.run(main())
"""


async def test_a_producer_killed_between_half_and_commit_is_resolved_by_its_restart(
    env: Env,
) -> None:
    topic = await env.topic("TxKilled")
    group = unique("TxPG")
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_PRODUCER, group, env.namesrv, topic],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 30)
        assert line.strip() == b"HALF SENT", line
    finally:
        process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
    assert await read_all(env.namesrv, topic) == []
    # The restarted process: a new producer of the same group, with a checker.
    checker = Checker({b"paid-order": TransactionResolution.COMMIT})
    async with TransactionProducer(group, namesrv=env.namesrv, checker=checker):
        await env.admin.advance_clock("10s")
        await wait_until(lambda: len(checker.checked) == 1)
        assert checker.checked[0].topic == topic
        async with asyncio.timeout(15):
            while not await read_all(env.namesrv, topic):
                await asyncio.sleep(0.02)
        await wait_all_ended(env)
    [message] = await read_all(env.namesrv, topic)
    assert message.body == b"paid-order" and message.msg_id == checker.checked[0].msg_id


# -- SimpleConsumer (POP) ---------------------------------------------------------------------------


async def test_simple_consumer_receive_ack_change_invisible_and_redelivery(env: Env) -> None:
    topic = await env.topic("Jobs")
    group = unique("SimpleCG")
    async with Producer(unique("PG"), namesrv=env.namesrv) as producer:
        for i in range(4):
            await producer.send(Message(topic=topic, body=b"job-%d" % i))
    async with SimpleConsumer(
        group, namesrv=env.namesrv, subscriptions={topic: "*"}, await_duration_s=0.2
    ) as consumer:
        received = await consumer.receive(10, invisible_duration_s=30)
        assert sorted(m.body for m in received) == [b"job-0", b"job-1", b"job-2", b"job-3"]
        assert all(m.receipt_handle and m.reconsume_times == 0 for m in received)
        assert await consumer.receive(10) == []  # all of them are lent out
        by_body = {m.body: m for m in received}
        acked, renewed, expired, poisoned = (by_body[b"job-%d" % i] for i in range(4))

        await consumer.ack(acked)
        with pytest.raises(StaleReceiptHandleError):
            await consumer.ack(acked)

        old_handle = renewed.receipt_handle
        assert await consumer.change_invisible_duration(renewed, 120) is renewed
        assert renewed.receipt_handle != old_handle
        with pytest.raises(StaleReceiptHandleError):
            await consumer.ack(dataclasses.replace(renewed, receipt_handle=old_handle))

        await consumer.poison(poisoned, "cannot parse")

        with pytest.raises(ClientUsageError, match="receipt handle"):
            await consumer.ack(dataclasses.replace(expired, receipt_handle=None))
        with pytest.raises(ClientUsageError, match="receipt handle"):
            await consumer.ack(dataclasses.replace(expired, receipt_handle="garbage"))

        await env.admin.advance_clock("30s")  # the 30 s loan of job-2 ends; job-1 has 120 s
        [again] = await consumer.receive(10, invisible_duration_s=30)
        assert again.body == b"job-2" and again.msg_id == expired.msg_id
        assert again.reconsume_times == 1 and again.topic == topic
        assert again.queue.topic.startswith("%RETRY%")
        with pytest.raises(StaleReceiptHandleError):
            await consumer.ack(expired)  # the first loan is over
        await consumer.ack(again)

        await env.admin.advance_clock("90s")  # job-1's renewed loan ends
        [late] = await consumer.receive(10)
        assert late.body == b"job-1" and late.reconsume_times == 1
        await consumer.ack(late)
        await env.admin.advance_clock("1h")
        assert await consumer.receive(10) == []
    dlq = await read_queue(env.namesrv, topic, MessageQueue(f"%DLQ%{group}", "broker-a", 0))
    assert [m.body for m in dlq] == [b"job-3"]
    assert dlq[0].properties["RETRY_TOPIC"] == topic


async def test_simple_consumer_fifo_lends_a_group_one_message_at_a_time(env: Env) -> None:
    topic = await env.topic("FifoSteps", queues=2)
    async with Producer(unique("PG"), namesrv=env.namesrv) as producer:
        for i in range(4):
            await producer.send(Message(topic=topic, body=b"step-%d" % i, sharding_key="order-7"))
    async with SimpleConsumer(
        unique("FifoCG"),
        namesrv=env.namesrv,
        subscriptions={topic: "*"},
        fifo=True,
        await_duration_s=0.2,
        invisible_duration_s=20,
    ) as consumer:
        [first] = await consumer.receive(1)
        assert first.body == b"step-0"
        assert await consumer.receive(1) == []  # step-1 waits for step-0's ack
        await env.admin.advance_clock("20s")  # not acknowledged: step-0 again, in place
        [again] = await consumer.receive(1)
        assert again.body == b"step-0" and again.reconsume_times == 1
        await consumer.ack(again)
        [second] = await consumer.receive(1)
        assert second.body == b"step-1"
        await consumer.ack(second)
        rest = await consumer.receive(5)  # what is left of the group, in order
        assert [m.body for m in rest] == [b"step-2", b"step-3"]
        assert await consumer.receive(5) == []  # until both are acknowledged
        for message in reversed(rest):
            await consumer.ack(message)
        assert await consumer.receive(5) == []


# -- push consumer: retries, the DLQ, poison -------------------------------------------------------


async def test_sixteen_failures_give_seventeen_deliveries_then_the_dlq(env: Env) -> None:
    topic = await env.topic("Flaky")
    group = unique("FlakyCG")
    deliveries: list[ReceivedMessage] = []

    async def fail(message: ReceivedMessage) -> ConsumeResult:
        deliveries.append(message)
        if len(deliveries) % 2:
            raise RuntimeError("listener failure")  # raising counts as "retry later" too
        return ConsumeResult.RECONSUME_LATER

    consumer = PushConsumer(
        group, namesrv=env.namesrv, consume_from="first", listener=fail, rebalance_interval_s=0.2
    )
    consumer.subscribe(topic)
    async with Producer(unique("PG"), namesrv=env.namesrv) as producer:
        sent = await producer.send(Message(topic=topic, body=b"flaky"))
    scheduled = await env.pending()
    async with consumer:
        # %RETRY%<group> is subscribed automatically (the first heartbeat creates it)
        await wait_until(
            lambda: any(mq.topic == consumer.retry_topic for mq in consumer.assigned_queues)
        )
        for attempt in range(1, 17):
            await wait_until(lambda: len(deliveries) == attempt)  # noqa: B023
            # the send-back is scheduled on the broker at level 3 + reconsume times ...
            await env.wait_pending(scheduled + 1)
            # ... and due within 2 h (level 18); the broker delivers it before answering
            states = await env.admin.advance_clock("2h")
            scheduled = sum(state.pending for state in states.values())
        await wait_until(lambda: len(deliveries) == 17)
        dlq_queue = MessageQueue(consumer.dlq_topic, "broker-a", 0)
        async with asyncio.timeout(15):
            while not (dead := await read_queue(env.namesrv, topic, dlq_queue)):
                await asyncio.sleep(0.02)
        assert await env.pending() == 0  # no 18th delivery is scheduled
    assert [m.reconsume_times for m in deliveries] == list(range(17))
    assert {m.msg_id for m in deliveries} == {sent.msg_id}
    assert all(m.topic == topic and m.body == b"flaky" for m in deliveries)
    assert all(m.queue.topic == f"%RETRY%{group}" for m in deliveries[1:])
    [dead_message] = dead
    assert dead_message.body == b"flaky" and dead_message.properties["RETRY_TOPIC"] == topic
    assert dead_message.properties["ORIGIN_MESSAGE_ID"] == sent.msg_id


async def test_poison_sends_a_message_straight_to_the_dlq(env: Env) -> None:
    topic = await env.topic("Payloads", queues=1)
    group = unique("PoisonCG")
    seen: list[bytes] = []
    consumer: PushConsumer

    async def listener(message: ReceivedMessage) -> ConsumeResult:
        seen.append(message.body)
        if message.body.startswith(b"bad"):
            await consumer.poison(message, "unparsable payload")
            raise ValueError("what the listener does after poison() no longer matters")
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, namesrv=env.namesrv, consume_from="first", listener=listener)
    consumer.subscribe(topic)
    async with Producer(unique("PG"), namesrv=env.namesrv) as producer:
        for body in (b"good-1", b"bad-1", b"good-2"):
            await producer.send(Message(topic=topic, body=body))
    dlq_queue = MessageQueue(f"%DLQ%{group}", "broker-a", 0)
    async with consumer:
        await wait_until(lambda: len(seen) == 3)
        async with asyncio.timeout(15):
            while not (dead := await read_queue(env.namesrv, topic, dlq_queue)):
                await asyncio.sleep(0.02)
        assert await env.pending() == 0  # no retry was scheduled
        await env.admin.advance_clock("3h")
        [mq] = [mq for mq in consumer.assigned_queues if mq.topic == topic]
        await wait_until(lambda: consumer.committed_offset(mq) == 3)
    assert sorted(seen) == [b"bad-1", b"good-1", b"good-2"]  # each delivered once
    [dead_message] = dead
    assert dead_message.body == b"bad-1" and dead_message.properties["RETRY_TOPIC"] == topic


async def test_poison_in_iterator_mode_replaces_the_ack(env: Env) -> None:
    topic = await env.topic("Iterated", queues=1)
    group = unique("IterCG")
    async with Producer(unique("PG"), namesrv=env.namesrv) as producer:
        await producer.send(Message(topic=topic, body=b"broken"))
    consumer = PushConsumer(group, namesrv=env.namesrv, consume_from="first")
    consumer.subscribe(topic)
    async with consumer:
        message = await consumer.receive(timeout_ms=15_000)
        await consumer.poison(message, "broken")
        with pytest.raises(ClientUsageError, match="not awaiting an ack"):
            await consumer.ack(message)
        dlq_queue = MessageQueue(consumer.dlq_topic, "broker-a", 0)
        assert [m.body for m in await read_queue(env.namesrv, topic, dlq_queue)] == [b"broken"]
        await wait_until(lambda: consumer.committed_offset(message.queue) == 1)


async def message_info(env: Env, topic: str, msg_id: str) -> dict[str, object]:
    """The message ``msg_id`` as first sent to ``topic``, with its state (POCKETMQ_MESSAGE_INFO,
    what ``pocketmq msg show`` prints)."""
    conn = await Connection.open(env.broker.address)
    try:
        cmd = make_request(
            RequestCode.POCKETMQ_MESSAGE_INFO, ext_fields={"topic": topic, "key": msg_id}
        )
        response = check_response(await conn.invoke(cmd, 5000))
    finally:
        await conn.aclose()
    [row] = [row for row in json.loads(response.body or b"[]") if row["topic"] == topic]
    return row


async def dlq_list(env: Env, group: str) -> list[dict[str, object]]:
    """The group's dead-letter queue (POCKETMQ_DLQ list, what ``pocketmq dlq list`` prints)."""
    conn = await Connection.open(env.broker.address)
    try:
        cmd = make_request(RequestCode.POCKETMQ_DLQ, ext_fields={"action": "list", "group": group})
        response = check_response(await conn.invoke(cmd, 5000))
    finally:
        await conn.aclose()
    return json.loads(response.body or b"[]")


async def test_the_reason_given_to_poison_is_the_state_reason(env: Env) -> None:
    topic = await env.topic("Parsed", queues=1)
    push_group, simple_group = unique("PushPoisonCG"), unique("SimplePoisonCG")
    async with Producer(unique("PG"), namesrv=env.namesrv) as producer:
        sent = await producer.send(Message(topic=topic, body=b"{not json"))

    push = PushConsumer(push_group, namesrv=env.namesrv, consume_from="first")
    push.subscribe(topic)
    async with push:
        message = await push.receive(timeout_ms=15_000)
        await push.poison(message, "bad payload")
    info = await message_info(env, topic, sent.msg_id)
    assert info["state"] == "poisoned" and info["state_group"] == push_group
    assert (
        info["state_reason"] == f"dead-lettered to %DLQ%{push_group} by the consumer: bad payload"
    )

    async with SimpleConsumer(
        simple_group, namesrv=env.namesrv, subscriptions={topic: "*"}, await_duration_s=0.2
    ) as simple:
        [message] = await simple.receive(1, invisible_duration_s=30)
        await simple.poison(message, "bad payload")
    info = await message_info(env, topic, sent.msg_id)
    assert info["state"] == "poisoned" and info["state_group"] == simple_group
    assert info["state_reason"] == (
        f"dead-lettered to %DLQ%{simple_group} by the consumer: bad payload"
    )
    for group in (push_group, simple_group):
        [dead] = await dlq_list(env, group)
        assert (
            dead["body"] == "{not json" and dead["properties"]["ORIGIN_MESSAGE_ID"] == sent.msg_id
        )


async def test_a_poison_reason_is_cut_and_none_is_said_as_such(env: Env) -> None:
    topic = await env.topic("Poisoned", queues=1)
    async with Producer(unique("PG"), namesrv=env.namesrv) as producer:
        long_one = await producer.send(Message(topic=topic, body=b"long"))
        silent = await producer.send(Message(topic=topic, body=b"silent"))
    group = unique("CutCG")
    consumer = PushConsumer(group, namesrv=env.namesrv, consume_from="first")
    consumer.subscribe(topic)
    async with consumer:
        for _ in range(2):
            message = await consumer.receive(timeout_ms=15_000)
            await consumer.poison(message, "x" * 5000 if message.body == b"long" else "")
    cut = str((await message_info(env, topic, long_one.msg_id))["state_reason"])
    assert cut.startswith(f"dead-lettered to %DLQ%{group} by the consumer: xxx")
    assert cut.count("x") == 512 and len(cut) < 600
    none_given = await message_info(env, topic, silent.msg_id)
    assert none_given["state_reason"] == (
        f"dead-lettered to %DLQ%{group} by the consumer (delay level -1)"
    )


async def test_retries_run_out_the_state_says_how_many_failed(env: Env) -> None:
    topic = await env.topic("Failing", queues=1)
    group = unique("FewRetriesCG")
    deliveries: list[ReceivedMessage] = []

    async def fail(message: ReceivedMessage) -> ConsumeResult:
        deliveries.append(message)
        return ConsumeResult.RECONSUME_LATER

    consumer = PushConsumer(
        group,
        namesrv=env.namesrv,
        consume_from="first",
        listener=fail,
        max_reconsume_times=2,
        rebalance_interval_s=0.2,
    )
    consumer.subscribe(topic)
    async with Producer(unique("PG"), namesrv=env.namesrv) as producer:
        sent = await producer.send(Message(topic=topic, body=b"failing"))
    scheduled = await env.pending()
    async with consumer:
        for attempt in (1, 2):
            await wait_until(lambda: len(deliveries) == attempt)  # noqa: B023
            await env.wait_pending(scheduled + 1)
            states = await env.admin.advance_clock("2h")
            scheduled = sum(state.pending for state in states.values())
        await wait_until(lambda: len(deliveries) == 3)
        async with asyncio.timeout(15):
            while (await message_info(env, topic, sent.msg_id))["state"] != "poisoned":
                await asyncio.sleep(0.02)
    info = await message_info(env, topic, sent.msg_id)
    assert info["state_reason"] == (
        f"dead-lettered to %DLQ%{group}: consumption failed 3 times (retry limit 2)"
    )


async def test_pop_retries_run_out_the_state_says_how_many_were_not_acknowledged(
    env: Env,
) -> None:
    topic = await env.topic("Unacked", queues=1)
    group = unique("FewPopRetriesCG")
    await env.admin.create_group(group, retry_max_times=2)  # as test_create_an_orderly_group
    async with Producer(unique("PG"), namesrv=env.namesrv) as producer:
        sent = await producer.send(Message(topic=topic, body=b"ignored"))
    async with SimpleConsumer(
        group, namesrv=env.namesrv, subscriptions={topic: "*"}, await_duration_s=0.2
    ) as consumer:
        for attempt in range(3):
            [message] = await consumer.receive(1, invisible_duration_s=10)
            assert message.reconsume_times == attempt
            await env.admin.advance_clock("10s")  # never acknowledged
        assert await consumer.receive(1) == []
    info = await message_info(env, topic, sent.msg_id)
    assert info["state"] == "poisoned"
    assert info["state_reason"] == (
        f"dead-lettered to %DLQ%{group}: not acknowledged after 3 deliveries (retry limit 2)"
    )


# -- clock --------------------------------------------------------------------------------------------


async def test_clock_get_advance_and_set(env: Env) -> None:
    [(name, before)] = (await env.admin.clock()).items()
    assert name == "broker-a" and before.manual and before.addr == env.broker.address
    advanced = (await env.admin.advance_clock("1h30m"))[name]
    assert advanced.now_ms == before.now_ms + 90 * 60_000
    by_ms = (await env.admin.advance_clock(250, broker="broker-a"))[name]
    assert by_ms.now_ms == advanced.now_ms + 250
    by_addr = await env.admin.set_clock(by_ms.now_ms + 1000, broker=env.broker.address)
    assert by_addr[env.broker.address].now_ms == by_ms.now_ms + 1000
    with pytest.raises(InvalidParameterError):
        await env.admin.set_clock(by_ms.now_ms)  # never backwards
    with pytest.raises(ClientUsageError):
        await env.admin.advance_clock("soon")
    with pytest.raises(ClientUsageError, match="not registered"):
        await env.admin.clock(broker="broker-z")


async def test_advancing_a_system_clock_is_refused(tmp_path: Path) -> None:
    with Cluster(tmp_path) as running:
        broker = running.start_standalone()
        async with Admin(f"127.0.0.1:{broker.extra['namesrv_port']}") as admin:
            [state] = (await admin.clock(broker=broker.address)).values()
            assert not state.manual
            with pytest.raises(IllegalOperationError, match="manual"):
                await admin.advance_clock("1s", broker=broker.address)
