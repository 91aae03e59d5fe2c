"""The auto-batching accumulator (``client/_auto_batch.py``) with a recording sender in place of
the producer: how sends gather, split, fail, wait for room and flush on close."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from pocketmq.broker.protocol.message_codec import decode_batch_texts
from pocketmq.client import Message, MessageQueue, Producer, SendResult, SendStatus
from pocketmq.client._auto_batch import (
    AutoBatchOptions,
    ProduceAccumulator,
    can_batch,
    split_result,
)
from pocketmq.client.errors import (
    ClientUsageError,
    RequestTimeoutError,
    SystemBusyError,
    UnknownBrokerError,
)

QUEUE = MessageQueue("T", "broker-a", 2)


def result(
    msg_id: str,
    offset_msg_id: str,
    queue: MessageQueue,
    offset: int,
    status: SendStatus = SendStatus.SEND_OK,
    region: str | None = None,
) -> SendResult:
    return SendResult(
        status=status,
        msg_id=msg_id,
        offset_msg_id=offset_msg_id,
        queue=queue,
        queue_offset=offset,
        transaction_id=msg_id,
        region_id=region,
    )


class Recorder:
    """Stands for the producer: answers each batch (or lone message) as a broker would, once
    ``gate`` is set; or raises ``error``."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, MessageQueue | None, list[bytes], list[str]]] = []
        self.singles: list[tuple[str, MessageQueue | None, bytes, str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.error: Exception | None = None
        self.offset = 100
        self.bad_ids = False

    async def send_single(
        self,
        topic: str,
        queue: MessageQueue | None,
        properties: str,
        body: bytes,
        flag: int,
        key: str,
    ) -> SendResult:
        self.singles.append((topic, queue, body, key))
        await self.gate.wait()
        if self.error is not None:
            raise self.error
        self.offset += 1
        return result(key, "OID", queue or QUEUE, self.offset - 1)

    async def send_encoded_batch(
        self, topic: str, queue: MessageQueue | None, body: bytes, keys: Sequence[str]
    ) -> SendResult:
        bodies = [item[0] for item in decode_batch_texts(body)]
        self.batches.append((topic, queue, bodies, list(keys)))
        await self.gate.wait()
        if self.error is not None:
            raise self.error
        first = self.offset
        self.offset += len(keys)
        ids = [f"OID{first + i}" for i in range(len(keys) - self.bad_ids)]
        return result(",".join(keys), ",".join(ids), queue or QUEUE, first)


def accumulator(
    recorder: Recorder,
    *,
    delay_ms: float = 30_000,
    max_bytes: int = 32 * 1024,
    total: int = 32 * 1024 * 1024,
    encoded_max: int = 4 * 1024 * 1024,
    wait_timeout_ms: float = 3000,
) -> ProduceAccumulator:
    return ProduceAccumulator(
        AutoBatchOptions(delay_ms, max_bytes, total),
        send_single=recorder.send_single,
        send_encoded_batch=recorder.send_encoded_batch,
        encoded_bytes_max=lambda: encoded_max,
        wait_timeout_ms=lambda: wait_timeout_ms,
    )


def send(
    acc: ProduceAccumulator,
    i: int,
    *,
    size: int = 1000,
    queue: MessageQueue | None = None,
    tags: str | None = None,
) -> asyncio.Task[SendResult]:
    body = bytes([i % 256]) * size
    props = f"WAIT\x01true\x02UNIQ_KEY\x01K{i}\x02"
    return asyncio.ensure_future(acc.send("T", queue, tags, props, f"K{i}", body, 0))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("delay_ms", "max_bytes", "total"),
    [
        (0, 1024, 1024),
        (30_001, 1024, 1024),
        (10, 0, 1024),
        (10, 2 * 1024 * 1024 + 1, 1),
        (10, 1, 0),
    ],
)
def test_limits_checked_as_rocketmq_setters(delay_ms: float, max_bytes: int, total: int) -> None:
    with pytest.raises(ClientUsageError, match="batch_max|total_batch_max"):
        AutoBatchOptions(delay_ms, max_bytes, total)
    with pytest.raises(ClientUsageError):
        Producer(
            "g",
            auto_batch=True,
            batch_max_delay_ms=delay_ms,
            batch_max_bytes=max_bytes,
            total_batch_max_bytes=total,
        )


def test_defaults_are_rocketmqs() -> None:
    options = AutoBatchOptions()
    assert (options.max_delay_ms, options.max_bytes, options.total_max_bytes) == (
        10,
        32 * 1024,
        32 * 1024 * 1024,
    )
    assert Producer("g").auto_batch is None  # off by default
    assert Producer("g", auto_batch=True).auto_batch is not None


@pytest.mark.parametrize(
    "message",
    [
        Message(topic="T", body=b"x", delay_level=3),
        Message(topic="T", body=b"x", properties={"TIMER_DELIVER_MS": "1"}),
        Message(topic="T", body=b"x", properties={"TIMER_DELAY_SEC": "1"}),
        Message(topic="T", body=b"x", properties={"TIMER_DELAY_MS": "1"}),
        Message(topic="T", body=b"x", properties={"PGROUP": "g", "TRAN_MSG": "true"}),
        Message(topic="T", body=b"x", properties={"CORRELATION_ID": "c"}),
        Message(topic="T", body=b"x", properties={"__LITE_TOPIC": "l"}),
        Message(topic="%RETRY%g", body=b"x"),
    ],
)
def test_messages_that_go_alone(message: Message) -> None:
    assert not can_batch(message)


def test_plain_tagged_keyed_messages_batch() -> None:
    assert can_batch(Message(topic="T", body=b"x", tags="A", keys=["k"], properties={"a": "b"}))


async def test_concurrent_sends_make_one_batch_and_each_gets_its_own_result() -> None:
    recorder = Recorder()
    acc = accumulator(recorder, delay_ms=1)
    tasks = [send(acc, i, size=100) for i in range(10)]
    results = await asyncio.gather(*tasks)
    assert len(recorder.batches) == 1 and not recorder.singles
    _, queue, bodies, keys = recorder.batches[0]
    assert queue is None  # the producer picks (round robin) for the whole batch
    assert bodies == [bytes([i]) * 100 for i in range(10)]
    assert keys == [f"K{i}" for i in range(10)]
    assert [r.msg_id for r in results] == keys
    assert [r.offset_msg_id for r in results] == [f"OID{100 + i}" for i in range(10)]
    assert [r.queue_offset for r in results] == list(range(100, 110))
    assert all(r.queue == QUEUE and r.transaction_id == r.msg_id for r in results)
    assert (acc.batches_sent, acc.messages_sent, acc.held_bytes) == (1, 10, 0)


async def test_a_batch_goes_when_its_bodies_pass_batch_max_bytes() -> None:
    recorder = Recorder()
    acc = accumulator(recorder, max_bytes=2500)  # the delay (30 s) never comes
    tasks = [send(acc, i) for i in range(7)]
    await asyncio.gather(*tasks[:6])
    # past 2,500 bytes at the third body of 1,000 (RocketMQ: size > batchMaxBytes)
    assert [len(b[2]) for b in recorder.batches] == [3, 3]
    assert not tasks[6].done()  # the seventh waits for more, or the delay, or close
    await acc.close()
    assert (await tasks[6]).msg_id == "K6"
    assert recorder.singles[0][3] == "K6"  # a batch of one goes as a plain send


async def test_a_lone_send_goes_after_the_delay_as_a_plain_send() -> None:
    recorder = Recorder()
    acc = accumulator(recorder, delay_ms=1)
    result = await send(acc, 1)
    assert result.msg_id == "K1" and result.queue_offset == 100
    assert len(recorder.singles) == 1 and not recorder.batches


async def test_tags_and_queues_keep_separate_batches() -> None:
    recorder = Recorder()
    acc = accumulator(recorder, delay_ms=1)
    other = MessageQueue("T", "broker-a", 3)
    tasks = [
        send(acc, 0, tags="A"),
        send(acc, 1, tags="B"),
        send(acc, 2, tags="A"),
        send(acc, 3, queue=other),
        send(acc, 4, queue=other),
        send(acc, 5, tags="B"),
    ]
    results = await asyncio.gather(*tasks)
    grouped = sorted((b[1] is not None, b[3]) for b in recorder.batches)
    assert grouped == [(False, ["K0", "K2"]), (False, ["K1", "K5"]), (True, ["K3", "K4"])]
    assert results[3].queue == other and results[4].queue_offset == results[3].queue_offset + 1


async def test_a_failed_batch_fails_each_of_its_sends_with_its_error() -> None:
    recorder = Recorder()
    recorder.error = SystemBusyError(2, "busy")
    acc = accumulator(recorder, delay_ms=1)
    outcomes = await asyncio.gather(*(send(acc, i) for i in range(5)), return_exceptions=True)
    assert all(outcome is recorder.error for outcome in outcomes)
    assert acc.held_bytes == 0 and acc.messages_sent == 0


async def test_an_answer_with_too_few_ids_fails_each_send() -> None:
    recorder = Recorder()
    recorder.bad_ids = True
    acc = accumulator(recorder, delay_ms=1)
    outcomes = await asyncio.gather(*(send(acc, i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(o, UnknownBrokerError) for o in outcomes)
    assert "3 messages answered with 2 message ids" in str(outcomes[0])


async def test_total_batch_max_bytes_makes_sends_wait_and_bounds_what_is_held() -> None:
    recorder = Recorder()
    recorder.gate.clear()  # the "broker" does not answer yet
    acc = accumulator(recorder, max_bytes=1500, total=4000)
    tasks = [send(acc, i) for i in range(12)]
    await settle()
    # four bodies of 1,000 fit under 4,000; the rest wait, holding nothing
    assert acc.held_bytes == 4000
    assert sum(len(b[3]) for b in recorder.batches) == 4
    assert not any(t.done() for t in tasks)
    high = acc.held_bytes
    recorder.gate.set()
    async with asyncio.timeout(20):  # a guard against hanging
        while not all(t.done() for t in tasks):
            high = max(high, acc.held_bytes)
            await asyncio.sleep(0)
    assert high <= 4000
    assert all(len(b[3]) == 2 for b in recorder.batches)  # past 1,500 at the second
    assert sorted(r.msg_id for r in await asyncio.gather(*tasks)) == sorted(
        f"K{i}" for i in range(12)
    )
    assert acc.held_bytes == 0


async def test_a_message_bigger_than_the_total_goes_when_nothing_is_held() -> None:
    recorder = Recorder()
    acc = accumulator(recorder, delay_ms=1, max_bytes=1024, total=1000)
    result = await send(acc, 1, size=5000)
    assert result.msg_id == "K1" and acc.held_bytes == 0


async def test_waiting_for_room_is_bounded_by_the_send_timeout() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    acc = accumulator(recorder, max_bytes=500, total=1000, wait_timeout_ms=50)
    first = send(acc, 0)
    await settle()
    with pytest.raises(RequestTimeoutError):
        await send(acc, 1)
    assert acc.held_bytes == 1000
    recorder.gate.set()
    assert (await first).msg_id == "K0"
    assert acc.held_bytes == 0


async def test_a_send_cancelled_before_its_batch_goes_is_not_sent() -> None:
    recorder = Recorder()
    acc = accumulator(recorder, delay_ms=1)
    tasks = [send(acc, i) for i in range(3)]
    await settle()
    tasks[1].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[1], asyncio.CancelledError)
    assert recorder.batches[0][3] == ["K0", "K2"]
    assert acc.held_bytes == 0


async def test_close_sends_open_batches_and_waits_for_their_answers() -> None:
    recorder = Recorder()
    acc = accumulator(recorder)  # a 30 s delay: only close sends them
    tasks = [send(acc, i, tags=str(i % 2)) for i in range(6)]
    await settle()
    assert not recorder.batches
    await acc.close()
    assert all(t.done() for t in tasks)
    assert sorted(r.msg_id for r in await asyncio.gather(*tasks)) == [f"K{i}" for i in range(6)]
    # sends after close began go at once
    late = await send(acc, 9)
    assert late.msg_id == "K9"


async def test_a_batch_stays_within_the_encoded_size_limit() -> None:
    recorder = Recorder()
    acc = accumulator(recorder, delay_ms=1, max_bytes=1024 * 1024, encoded_max=3500)
    await asyncio.gather(*(send(acc, i) for i in range(7)))
    sizes = [len(b[2]) for b in recorder.batches]
    assert sum(sizes) + len(recorder.singles) == 7
    assert max(sizes) == 3  # 3 x (1,000 + properties + 22) fits 3,500; 4 would not


def test_split_result() -> None:
    batch = result("a,b", "X,Y", QUEUE, 7, SendStatus.FLUSH_DISK_TIMEOUT, "R")
    a, b = split_result(batch, ["a", "b"])
    assert (a.msg_id, a.offset_msg_id, a.queue_offset, a.status) == (
        "a",
        "X",
        7,
        SendStatus.FLUSH_DISK_TIMEOUT,
    )
    assert (b.msg_id, b.offset_msg_id, b.queue_offset, b.region_id) == ("b", "Y", 8, "R")
    assert a == result("a", "X", QUEUE, 7, SendStatus.FLUSH_DISK_TIMEOUT, "R")
