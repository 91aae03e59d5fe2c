"""Planned faults against a real broker: in-process with the SDK, and a standalone process
for the HTTP API, the CLI and the crash."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.services.clock import ManualClock
from pocketmq.client import Message, Producer, PushConsumer, SimpleConsumer
from pocketmq.client.errors import SystemBusyError
from pocketmq.client.message import SendStatus
from pocketmq.client.transaction import TransactionProducer, TransactionResolution
from tests.integration.cluster import Cluster

TIMEOUT_S = 20.0


def _first(queues: Any, message: Message) -> Any:
    return min(queues, key=lambda queue: queue.queue_id)  # queue 0: offsets to compare


def _embedded(**kwargs: Any) -> Broker:
    return Broker(port=0, store=kwargs.pop("store", None), clock=ManualClock(), **kwargs)


async def test_system_busy_is_retried_as_rocketmq_producers_do(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _embedded() as broker:
        async with Producer("busy-producer", namesrv=broker.namesrv_address) as producer:
            await producer.send(Message(topic="Busy", body=b"warm-up"))  # route and topic
            broker.faults.plan("system_busy", times=1, topic="Busy")
            with caplog.at_level(logging.WARNING, logger="pocketmq.broker.faults"):
                result = await producer.send(Message(topic="Busy", body=b"second try"))
            # Refused once (nothing stored), then the retry is stored: one copy only.
            assert result.status is SendStatus.SEND_OK
            assert sum(broker.store.max_offset("Busy", q) for q in range(8)) == 2
            assert [r.message for r in caplog.records if "SYSTEM_BUSY" in r.message]
        async with Producer(
            "busy-producer-2", namesrv=broker.namesrv_address, retries=0
        ) as no_retries:
            broker.faults.plan("SYSTEM_BUSY")  # any topic
            with pytest.raises(SystemBusyError):
                await no_retries.send(Message(topic="Busy", body=b"refused"))
        [first, second] = broker.faults.list()
        assert (first.kind, first.fired, first.left, first.topic) == ("system_busy", 1, 0, "Busy")
        assert (second.fired, second.topic) == (1, None)


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("flush_disk_timeout", SendStatus.FLUSH_DISK_TIMEOUT),
        ("slave_not_available", SendStatus.SLAVE_NOT_AVAILABLE),
    ],
)
async def test_stored_but_answered_with_a_status(kind: str, status: SendStatus) -> None:
    async with _embedded() as broker:
        async with Producer("status-producer", namesrv=broker.namesrv_address) as producer:
            broker.faults.plan(kind, times=2, topic="Statuses")
            first = await producer.send(Message(topic="Statuses", body=b"1"), selector=_first)
            second = await producer.send(Message(topic="Statuses", body=b"2"), selector=_first)
            third = await producer.send(Message(topic="Statuses", body=b"3"), selector=_first)
        # Not retried (RocketMQ returns the status in SendResult): each stored once.
        assert [first.status, second.status, third.status] == [status, status, SendStatus.SEND_OK]
        assert [first.queue_offset, second.queue_offset, third.queue_offset] == [0, 1, 2]
        assert broker.faults.list()[0].fired == 2


async def test_redelivered_message_arrives_twice() -> None:
    async with _embedded() as broker:
        async with Producer("dup-producer", namesrv=broker.namesrv_address) as producer:
            broker.faults.plan("redeliver", topic="Dups")
            sent = await producer.send(Message(topic="Dups", body=b"once"), selector=_first)
            await producer.send(Message(topic="Dups", body=b"after"), selector=_first)
        consumer = PushConsumer("dup-group", namesrv=broker.namesrv_address, consume_from="first")
        consumer.subscribe("Dups")
        async with consumer:
            got = []
            for _ in range(3):
                message = await consumer.receive(timeout_ms=TIMEOUT_S * 1000)
                got.append((message.msg_id, message.body))
                await consumer.ack(message)
        assert got == [(sent.msg_id, b"once"), (sent.msg_id, b"once"), (got[2][0], b"after")]


async def test_dropped_check_answer_leads_to_the_next_check() -> None:
    checks: list[str] = []

    async def checker(message: Any) -> TransactionResolution:
        checks.append(message.msg_id)
        return TransactionResolution.COMMIT

    async def unknown(message: Message) -> TransactionResolution:
        return TransactionResolution.UNKNOWN

    async with _embedded() as broker:
        async with TransactionProducer(
            "tx-producer", namesrv=broker.namesrv_address, checker=checker
        ) as producer:
            broker.faults.plan("drop_check", topic="Tx")
            await producer.send_in_transaction(Message(topic="Tx", body=b"order"), unknown)
            await broker.advance("6s")  # the first check: its answer is dropped
            await _until(lambda: len(checks) == 1 and broker.faults.list()[0].fired == 1)
            assert len(broker.transactions.pending) == 1
            await broker.advance("30s")  # the next check, answered: committed
            await _until(lambda: not broker.transactions.pending)
        assert len(checks) == 2
        assert broker.store.max_offset("Tx", 0) + broker.store.max_offset("Tx", 1) >= 0
        assert sum(broker.store.max_offset("Tx", q) for q in range(8)) == 1


async def test_delayed_check_answer_applies_later() -> None:
    async def checker(message: Any) -> TransactionResolution:
        return TransactionResolution.COMMIT

    async def unknown(message: Message) -> TransactionResolution:
        return TransactionResolution.UNKNOWN

    async with _embedded() as broker:
        async with TransactionProducer(
            "tx-delay", namesrv=broker.namesrv_address, checker=checker
        ) as producer:
            broker.faults.plan("delay_check", delay_ms=10_000)
            await producer.send_in_transaction(Message(topic="TxLate", body=b"x"), unknown)
            await broker.advance("6s")
            await _until(lambda: broker.faults.list()[0].fired == 1)
            assert len(broker.transactions.pending) == 1  # answered, but held
            await broker.advance("10s")
            await _until(lambda: not broker.transactions.pending)
        assert sum(broker.store.max_offset("TxLate", q) for q in range(8)) == 1


async def test_delayed_pull_is_answered_once_the_clock_moved() -> None:
    async with _embedded() as broker:
        async with Producer("pull-producer", namesrv=broker.namesrv_address) as producer:
            await producer.send(Message(topic="Slow", body=b"late"), selector=_first)
        broker.faults.plan("delay_pull", topic="Slow", times=8, delay_ms=60_000)
        consumer = PushConsumer("slow-group", namesrv=broker.namesrv_address, consume_from="first")
        consumer.subscribe("Slow")
        async with consumer:
            await _until(lambda: broker.faults.list()[0].fired >= 1)
            with pytest.raises(TimeoutError):  # held: the clock has not moved
                await consumer.receive(timeout_ms=300)
            await broker.advance("60s")
            message = await consumer.receive(timeout_ms=TIMEOUT_S * 1000)
            assert message.body == b"late"
            await consumer.ack(message)


async def test_closed_connection_reconnects() -> None:
    async with _embedded() as broker:
        async with Producer("cut-producer", namesrv=broker.namesrv_address) as producer:
            await producer.send(Message(topic="Cut", body=b"before"))
            fault = broker.faults.close_connection(producer.client_id)
            assert fault.kind == "close_connection" and "1 connection" in fault.detail
            result = await producer.send(Message(topic="Cut", body=b"after"))
            assert result.status is SendStatus.SEND_OK
        assert sum(broker.store.max_offset("Cut", q) for q in range(8)) == 2
        with pytest.raises(Exception, match="no connection of client"):
            broker.faults.close_connection("127.0.0.1@nobody")


async def test_crash_and_recover_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    config = BrokerConfig(port=0, data_dir=tmp_path / "data", flush="sync")
    async with Broker(config, clock=ManualClock(), namesrv=True) as broker:
        async with Producer("crash-producer", namesrv=broker.namesrv_address) as producer:
            sent = [
                await producer.send(Message(topic="Durable", body=b"m%d" % i), selector=_first)
                for i in range(20)
            ]
            assert all(r.status is SendStatus.SEND_OK for r in sent)
            broker.faults.crash()
            await broker.faults.crashed()
            report = broker.store.recovery_report
            assert report.abnormal  # the abort file was left: recovery ran as after a kill
            assert broker.store.max_offset("Durable", 0) == 20
            # The same address: the producer reconnects and goes on.
            after = await producer.send(Message(topic="Durable", body=b"after"), selector=_first)
            assert after.queue_offset == 20
        assert [f.kind for f in broker.faults.list()] == ["crash"]
        assert broker.faults.list()[0].detail == "crashed and recovered"


async def test_bad_plans_are_refused_with_the_reason() -> None:
    async with _embedded() as broker:
        with pytest.raises(Exception, match="no fault kind 'boom'"):
            broker.faults.plan("boom")
        with pytest.raises(Exception, match="needs delay_ms"):
            broker.faults.plan("delay_pull")
        with pytest.raises(Exception, match="times 0"):
            broker.faults.plan("system_busy", times=0)
        with pytest.raises(Exception, match="in-memory broker"):
            broker.faults.crash()
        assert broker.faults.list() == []


async def _until(condition: Any, timeout_s: float = TIMEOUT_S) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


# -- a standalone process: the HTTP API, the CLI, and a crash ----------------------------------


def _http(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_standalone_http_cli_and_crash(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        broker = cluster.start_standalone(
            flush="sync", extra_args=["--http-port", "0", "--clock", "manual"]
        )
        base = f"http://{broker.http_address}/api/faults"
        status, fault = _http("POST", base, {"kind": "system_busy", "times": 2, "topic": "T"})
        assert status == 201 and fault["kind"] == "system_busy" and fault["left"] == 2
        status, error = _http("POST", base, {"kind": "delay_pull"})
        assert status == 400 and "delay_ms" in error["error"]["message"]
        status, error = _http("POST", base, {"kind": "crash", "times": 2})
        assert status == 400 and "takes no ['times']" in error["error"]["message"]
        status, error = _http("POST", base, {"kind": "close_connection", "client_id": "a@b"})
        assert status == 404 and "no connection of client" in error["error"]["message"]
        http = ["--http", broker.http_address]
        made = _cli("fault", "inject", *http, "delay-check", "--delay", "30s", "--times", "3")
        assert made.returncode == 0, made.stderr
        listed = _cli("fault", "list", *http, "--json")
        assert listed.returncode == 0, listed.stderr
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        assert [(r["kind"], r["left"]) for r in rows] == [("system_busy", 2), ("delay_check", 3)]
        assert rows[1]["delay_ms"] == 30_000
        human = _cli("fault", "list", *http)
        assert "delay_check" in human.stdout and "system_busy" in human.stdout
        cleared = _cli("fault", "clear", *http, str(rows[0]["id"]))
        assert cleared.returncode == 0, cleared.stderr
        assert [r["kind"] for r in _http("GET", base)[1]["faults"]] == ["delay_check"]
        bad = _cli("fault", "inject", *http, "boom")
        assert bad.returncode != 0 and "no fault kind" in bad.stderr
        # A crash over HTTP: answered 202, then the process recovers its store in place.
        namesrv = f"127.0.0.1:{broker.extra['namesrv_port']}"
        send = _cli("send", "--namesrv", namesrv, "--topic", "Kept", "--body", "x")
        assert send.returncode == 0, send.stderr
        status, fault = _http("POST", base, {"kind": "crash"})
        assert status == 202 and fault["kind"] == "crash"
        rows = _wait_for(
            lambda: _try_list(base),
            lambda rows: rows and any(r["detail"] == "crashed and recovered" for r in rows),
        )
        assert [r["kind"] for r in rows if r["detail"] == "crashed and recovered"] == ["crash"]
        assert "recovered" in broker.log_tail(80)
        # The message sent before the crash (sync flush: acknowledged, so kept) is there.
        status, topic = _http("GET", f"http://{broker.http_address}/api/topics/Kept")
        assert status == 200 and sum(q["max_offset"] for q in topic["queues"]) == 1
        assert _http("DELETE", base)[1]["cleared"] == 2


def _try_list(base: str) -> list[dict[str, Any]] | None:
    try:
        return _http("GET", base)[1]["faults"]  # type: ignore[no-any-return]
    except OSError:  # the HTTP front is down while the broker restarts
        return None


def _wait_for(read: Any, done: Any, timeout_s: float = TIMEOUT_S) -> Any:
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


async def test_grpc_sends_get_the_proxys_codes_for_planned_faults() -> None:
    pytest.importorskip("grpc", reason="the grpc extra")
    from tests.integration.test_grpc_frontend import Code, _front, message

    async for front in _front(BrokerConfig(port=0, grpc_port=0), ManualClock()):
        front.broker.topics.create("GrpcFaults")
        plan = front.broker.faults
        plan.plan("system_busy", topic="GrpcFaults")
        plan.plan("flush_disk_timeout", topic="GrpcFaults")
        plan.plan("slave_not_available", topic="GrpcFaults")
        busy = await front.send(message("GrpcFaults"))
        assert busy.status.code == Code.TOO_MANY_REQUESTS
        assert front.broker.store.max_offset("GrpcFaults", 0) == 0  # not stored
        flush = await front.send(message("GrpcFaults"))
        assert flush.status.code == Code.MASTER_PERSISTENCE_TIMEOUT
        slave = await front.send(message("GrpcFaults"))
        assert slave.status.code == Code.HA_NOT_AVAILABLE
        ok = await front.send(message("GrpcFaults"))
        assert ok.status.code == Code.OK
        stored = sum(front.broker.store.max_offset("GrpcFaults", q) for q in range(8))
        assert stored == 3  # the two answered with a status were stored, as RocketMQ does
        assert [f.fired for f in plan.list()] == [1, 1, 1]


async def test_a_batch_is_one_send_for_the_send_faults() -> None:
    async with _embedded() as broker:
        async with Producer("batch-producer", namesrv=broker.namesrv_address) as producer:

            def batch(tag: str) -> list[Message]:
                return [
                    Message(topic="Batches", body=b"%s-%d" % (tag.encode(), i)) for i in range(3)
                ]

            broker.faults.plan("flush_disk_timeout", topic="Batches")
            flushed = await producer.send_batch(batch("a"))
            assert flushed.status is SendStatus.FLUSH_DISK_TIMEOUT
            broker.faults.plan("system_busy", topic="Batches")
            retried = await producer.send_batch(batch("b"))
            assert retried.status is SendStatus.SEND_OK
            broker.faults.plan("redeliver", topic="Batches")
            await producer.send_batch(batch("c"))
        stored = sum(broker.store.max_offset("Batches", q) for q in range(8))
        assert stored == 3 + 3 + 6  # the busy batch stored once (its retry), the redelivered twice
        assert [f.fired for f in broker.faults.list()] == [1, 1, 1]


async def test_a_delayed_pop_is_answered_once_the_clock_moved() -> None:
    async with _embedded() as broker:
        async with Producer("pop-producer", namesrv=broker.namesrv_address) as producer:
            await producer.send(Message(topic="SlowPop", body=b"popped late"))
        broker.faults.plan("delay_pull", topic="SlowPop", delay_ms=5_000)
        consumer = SimpleConsumer(
            "slow-pop", namesrv=broker.namesrv_address, subscriptions={"SlowPop": "*"}
        )
        async with consumer:
            receiving = asyncio.ensure_future(consumer.receive(max_messages=4))
            await _until(lambda: broker.faults.list()[0].fired == 1)
            await asyncio.sleep(0.2)
            assert not receiving.done()  # held: the clock has not moved
            await broker.advance("5s")
            [message] = await asyncio.wait_for(receiving, TIMEOUT_S)
            assert message.body == b"popped late"
            await consumer.ack(message)
