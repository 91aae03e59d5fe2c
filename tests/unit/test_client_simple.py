"""SimpleConsumer against the fake cluster with scripted POP answers (receipt handles built as
RocketMQ's ExtraInfoUtil does, ack / change-invisible wire shape, stale handles), plus the
duration parser and the 604 error mapping."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ConsumerSendMsgBackRequestHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from pocketmq.broker.protocol.message_codec import MessageExt, encode_message_record
from pocketmq.client import (
    ClientUsageError,
    IllegalOperationError,
    MessageQueue,
    ReceiptHandle,
    SimpleConsumer,
    StaleReceiptHandleError,
)
from pocketmq.client._duration import duration_ms, seconds_to_ms
from pocketmq.client.errors import error_for_code
from pocketmq.client.simple import messages_from_pop

from .test_client_fake_server import FakeBroker, FakeCluster, FakeConn, fake_cluster


def consumer_for(cluster: FakeCluster, **kwargs: object) -> SimpleConsumer:
    kwargs.setdefault("subscriptions", {"T": "A || C"})
    kwargs.setdefault("await_duration_s", 0.5)
    return SimpleConsumer("CG", namesrv=cluster.brokers[0].addr, **kwargs)  # type: ignore[arg-type]


def record(topic: str, queue_id: int, offset: int, body: bytes, **props: str) -> bytes:
    return encode_message_record(
        MessageExt(
            topic=topic,
            body=body,
            queue_id=queue_id,
            queue_offset=offset,
            commitlog_offset=1000 + offset,
            properties={"UNIQ_KEY": body.decode(), **props},
            reconsume_times=1 if topic.startswith("%RETRY%") else 0,
        )
    )


def script(broker: FakeBroker) -> dict[str, list[RemotingCommand]]:
    """Scripted POP / ACK / CHANGE_INVISIBLE / SEND_BACK answers; returns the requests seen."""
    seen: dict[str, list[RemotingCommand]] = {"pop": [], "ack": [], "change": [], "back": []}
    acked: set[str] = set()

    async def pop(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
        seen["pop"].append(cmd)
        if len(seen["pop"]) > 1:
            return cmd.make_response(ResponseCode.POLLING_TIMEOUT, "no new message")
        body = (
            record("T", 1, 5, b"first", TAGS="A")
            + record("T", 1, 6, b"filtered", TAGS="B")
            + record("%RETRY%CG_T", 0, 2, b"again", TAGS="C", RETRY_TOPIC="T")
        )
        header = PopMessageResponseHeader(
            pop_time=1000,
            invisible_time=30_000,
            revive_qid=3,
            rest_num=0,
            start_offset_info="0 1 5;1 0 2",
            msg_offset_info="0 1 5,6;1 0 2",
        )
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=header.to_ext_fields(), body=body)

    async def ack(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
        seen["ack"].append(cmd)
        handle = AckMessageRequestHeader.from_ext_fields(cmd.ext_fields).extra_info
        if handle in acked or " 1000 30000 " not in handle and " 2000 " not in handle:
            return cmd.make_response(ResponseCode.ILLEGAL_OPERATION, "receipt handle is stale")
        acked.add(handle)
        return cmd.make_response(ResponseCode.SUCCESS)

    async def change(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
        seen["change"].append(cmd)
        header = ChangeInvisibleTimeResponseHeader(
            pop_time=2000, invisible_time=60_000, revive_qid=4
        )
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=header.to_ext_fields())

    async def back(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
        seen["back"].append(cmd)
        return cmd.make_response(ResponseCode.SUCCESS)

    broker.overrides[RequestCode.POP_MESSAGE] = pop
    broker.overrides[RequestCode.ACK_MESSAGE] = ack
    broker.overrides[RequestCode.CHANGE_MESSAGE_INVISIBLETIME] = change
    broker.overrides[RequestCode.CONSUMER_SEND_MSG_BACK] = back
    return seen


async def test_receive_builds_receipt_handles_and_acks() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 2)
        broker = cluster.brokers[0]
        seen = script(broker)
        async with consumer_for(cluster) as consumer:
            first, again = await consumer.receive(8, invisible_duration_s=30)
            assert await consumer.receive(8) == []  # POLLING_TIMEOUT: nothing new
            await consumer.ack(first)
            with pytest.raises(StaleReceiptHandleError):
                await consumer.ack(first)
    pop = PopMessageRequestHeader.from_ext_fields(seen["pop"][0].ext_fields)
    assert (pop.consumer_group, pop.topic, pop.queue_id, pop.max_msg_nums) == ("CG", "T", -1, 8)
    assert (pop.invisible_time, pop.poll_time, pop.exp_type, pop.exp) == (
        30_000,
        500,
        "TAG",
        "A || C",
    )
    assert pop.order is False
    # "<start offset> <popTime> <invisibleTime> <reviveQid> <retry> <broker> <queue> <offset>"
    assert first.receipt_handle == "5 1000 30000 3 0 broker-a 1 5"
    assert again.receipt_handle == "2 1000 30000 3 1 broker-a 0 2"
    assert again.topic == "T" and again.queue == MessageQueue("%RETRY%CG_T", "broker-a", 0)
    assert again.reconsume_times == 1
    # the message whose tag does not match was acknowledged, not returned
    acks = [AckMessageRequestHeader.from_ext_fields(r.ext_fields) for r in seen["ack"]]
    assert acks[0].extra_info == "5 1000 30000 3 0 broker-a 1 6"
    assert (acks[1].topic, acks[1].queue_id, acks[1].offset) == ("T", 1, 5)
    assert acks[1].extra_info == first.receipt_handle


async def test_change_invisible_duration_renews_the_handle_in_place() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 2)
        seen = script(cluster.brokers[0])
        async with consumer_for(cluster) as consumer:
            first, again = await consumer.receive(8)
            same = await consumer.change_invisible_duration(again, timedelta(minutes=1))
            assert same is again and again.receipt_handle == "2 2000 60000 4 1 broker-a 0 2"
            assert dataclasses.replace(again, receipt_handle="other") == again  # not compared
            await consumer.ack(again)
            await consumer.poison(first, "bad payload")
    change = ChangeInvisibleTimeRequestHeader.from_ext_fields(seen["change"][0].ext_fields)
    assert change.extra_info == "2 1000 30000 3 1 broker-a 0 2"
    assert (change.topic, change.queue_id, change.offset, change.invisible_time) == (
        "T",
        0,
        2,
        60_000,
    )
    back = ConsumerSendMsgBackRequestHeader.from_ext_fields(seen["back"][0].ext_fields)
    assert back.delay_level == -1 and back.group == "CG" and back.offset == first.commitlog_offset
    assert seen["back"][0].remark == "bad payload"
    last_ack = AckMessageRequestHeader.from_ext_fields(seen["ack"][-1].ext_fields)
    assert last_ack.extra_info == first.receipt_handle


async def test_usage_errors() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        script(cluster.brokers[0])
        consumer = consumer_for(cluster, subscriptions={})
        with pytest.raises(ClientUsageError, match="subscribe"):
            await consumer.start()
        consumer.subscribe("T")
        with pytest.raises(ClientUsageError):
            consumer.subscribe("%RETRY%CG")
        async with consumer:
            message, *_ = await consumer.receive(8)
            with pytest.raises(ClientUsageError, match="max_messages"):
                await consumer.receive(0)
            with pytest.raises(ClientUsageError, match="invisible_duration_s"):
                await consumer.receive(1, invisible_duration_s=0)
            with pytest.raises(ClientUsageError, match="receipt handle"):
                await consumer.ack(dataclasses.replace(message, receipt_handle=None))
        with pytest.raises(ClientUsageError, match="closed"):
            await consumer.receive(1)


def test_receipt_handle_round_trip() -> None:
    handle = ReceiptHandle.parse("5 1000 30000 3 1 broker-a 0 2")
    assert (handle.queue_id, handle.queue_offset, handle.deadline_ms) == (0, 2, 31_000)
    assert str(handle) == "5 1000 30000 3 1 broker-a 0 2"
    for bad in ("", "1 2 3", "a 1000 30000 3 1 broker-a 0 2", "5 1000 30000 3 1 b 0 2 9"):
        with pytest.raises(ClientUsageError):
            ReceiptHandle.parse(bad)


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("2h", 7_200_000),
        ("90s", 90_000),
        ("1h30m", 5_400_000),
        ("250ms", 250),
        ("1d", 86_400_000),
        ("1500", 1500),
        (1500, 1500),
        (timedelta(seconds=1.5), 1500),
    ],
)
def test_durations(value: object, ms: int) -> None:
    assert duration_ms(value) == ms  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["", "soon", "5x", "h2", "1h 30m", -1, 1.5, True, None])
def test_bad_durations(value: object) -> None:
    with pytest.raises(ClientUsageError):
        duration_ms(value)  # type: ignore[arg-type]


def test_seconds_to_ms() -> None:
    assert seconds_to_ms(1.5, "x") == 1500 and seconds_to_ms(timedelta(minutes=1), "x") == 60_000
    for bad in (0, -1, "1", True):
        with pytest.raises(ClientUsageError):
            seconds_to_ms(bad, "x")  # type: ignore[arg-type]


def test_illegal_operation_maps_to_its_class() -> None:
    error = error_for_code(604, "stale")
    assert type(error) is IllegalOperationError and not error.retriable
    assert issubclass(StaleReceiptHandleError, IllegalOperationError)


def test_a_popped_record_that_fails_its_crc_is_not_handed_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = bytearray(record("T", 1, 6, b"second"))
    bad[bytes(bad).index(b"second")] ^= 0x01
    body = record("T", 1, 5, b"first") + bytes(bad) + record("T", 1, 7, b"third")
    header = PopMessageResponseHeader(
        pop_time=1000, invisible_time=30_000, revive_qid=3, rest_num=0, start_offset_info="0 1 5"
    )
    response = RemotingCommand(
        code=ResponseCode.SUCCESS, ext_fields=header.to_ext_fields(), body=body
    )
    got = messages_from_pop(response, "broker-a")
    assert [m.body for m in got] == [b"first"]
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "body CRC" in warning.getMessage() and "invisible time" in warning.getMessage()
