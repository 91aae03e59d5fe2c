"""TransactionProducer against the fake cluster: the half message, END_TRANSACTION after the
local transaction, answers to CHECK_TRANSACTION_STATE, heartbeats, and misuse."""

from __future__ import annotations

import pytest

from pocketmq.broker.protocol import RPC_ONEWAY, RemotingCommand, RequestCode
from pocketmq.broker.protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    HeartbeatData,
    decode_json_body,
    parse_send_message_header,
)
from pocketmq.broker.protocol.message_codec import (
    MessageExt,
    decode_properties,
    encode_message_record,
)
from pocketmq.client import (
    ClientClosedError,
    ClientUsageError,
    Message,
    MessageView,
    TransactionProducer,
    TransactionResolution,
)
from pocketmq.ids import decode_offset_msg_id

from .test_client_fake_server import FakeBroker, FakeCluster, fake_cluster, wait_until


def producer_for(cluster: FakeCluster, **kwargs: object) -> TransactionProducer:
    kwargs.setdefault("checker", answer(TransactionResolution.COMMIT))
    return TransactionProducer(
        "TXG",
        namesrv=cluster.brokers[0].addr,
        client_ip="127.0.0.1",
        **kwargs,  # type: ignore[arg-type]
    )


def answer(resolution: TransactionResolution):  # noqa: ANN201
    async def fn(message: object) -> TransactionResolution:
        return resolution

    return fn


def ends(broker: FakeBroker) -> list[tuple[RemotingCommand, EndTransactionRequestHeader]]:
    return [
        (r, EndTransactionRequestHeader.from_ext_fields(r.ext_fields))
        for r in broker.requests_of(RequestCode.END_TRANSACTION)
    ]


@pytest.mark.parametrize(
    ("resolution", "wire"),
    [
        (TransactionResolution.COMMIT, 8),
        (TransactionResolution.ROLLBACK, 12),
        (TransactionResolution.UNKNOWN, 0),
    ],
)
async def test_half_message_then_end_transaction(
    resolution: TransactionResolution, wire: int
) -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 2)
        broker = cluster.brokers[0]
        ran: list[Message] = []

        async def local(message: Message) -> TransactionResolution:
            ran.append(message)
            return resolution

        async with producer_for(cluster) as producer:
            message = Message(topic="T", body=b"pay", keys=["order-1"])
            result = await producer.send_in_transaction(message, local)
            await wait_until(lambda: len(ends(broker)) == 1)
        [send] = broker.requests_of(RequestCode.SEND_MESSAGE_V2)
        header = parse_send_message_header(send.code, send.ext_fields)
        props = decode_properties(header.properties or "")
        assert header.sys_flag == 0x4 and header.producer_group == "TXG"
        assert props["TRAN_MSG"] == "true" and props["PGROUP"] == "TXG"
        assert ran == [message]
        [(request, end)] = ends(broker)
    assert request.flag & RPC_ONEWAY and request.remark is None
    assert end.commit_or_rollback == wire and not end.from_transaction_check
    assert end.producer_group == "TXG" and end.msg_id == props["UNIQ_KEY"]
    assert end.transaction_id == result.transaction_id == props["UNIQ_KEY"]
    assert end.tran_state_table_offset == result.queue_offset
    assert end.commit_log_offset == decode_offset_msg_id(result.offset_msg_id).physical_offset
    assert end.broker_name == "broker-a"
    assert result.resolution is resolution and result.local_error is None and result.end_sent


async def test_a_raising_local_transaction_is_unknown_with_the_exception_as_remark() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]

        async def local(message: Message) -> TransactionResolution:
            raise RuntimeError("database is down")

        async def returns_none(message: Message) -> None:
            return None

        async with producer_for(cluster) as producer:
            failed = await producer.send_in_transaction(Message(topic="T", body=b"x"), local)
            vague = await producer.send_in_transaction(
                Message(topic="T", body=b"y"),
                returns_none,  # type: ignore[arg-type]
            )
            await wait_until(lambda: len(ends(broker)) == 2)
        (first, first_end), (second, second_end) = ends(broker)
    assert failed.resolution is TransactionResolution.UNKNOWN
    assert isinstance(failed.local_error, RuntimeError)
    assert first_end.commit_or_rollback == 0 and "database is down" in (first.remark or "")
    assert vague.resolution is TransactionResolution.UNKNOWN and vague.local_error is None
    assert second_end.commit_or_rollback == 0 and second.remark is None


def check_request(
    group: str, *, body: bytes = b"pay", topic: str = "T", txid: str = "TX1"
) -> RemotingCommand:
    half = MessageExt(
        topic=topic,
        body=body,
        queue_id=1,
        properties={
            "TRAN_MSG": "true",
            "PGROUP": group,
            "UNIQ_KEY": txid,
            "REAL_TOPIC": topic,
            "REAL_QID": "1",
            "__transactionId__": txid,
            "TRANSACTION_CHECK_TIMES": "1",
        },
        commitlog_offset=4242,
        queue_offset=17,
    )
    header = CheckTransactionStateRequestHeader(
        tran_state_table_offset=17,
        commit_log_offset=4242,
        msg_id=txid,
        transaction_id=txid,
        offset_msg_id="7F00000100002A9F0000000000001092",
        broker_name="broker-a",
    )
    return RemotingCommand(
        code=RequestCode.CHECK_TRANSACTION_STATE,
        flag=RPC_ONEWAY,
        ext_fields=header.to_ext_fields(),
        body=encode_message_record(half),
    )


async def test_checks_are_answered_over_the_same_connection() -> None:
    async with fake_cluster() as cluster:
        broker = cluster.brokers[0]
        checked: list[MessageView] = []

        async def checker(message: MessageView) -> TransactionResolution:
            checked.append(message)
            if message.body == b"explode":
                raise ValueError("cannot tell")
            return TransactionResolution.ROLLBACK

        async with producer_for(cluster, checker=checker):
            # start() heartbeats the group to every broker before any send
            [beat] = broker.requests_of(RequestCode.HEART_BEAT)
            data = decode_json_body(beat.body or b"", HeartbeatData)
            assert [p.group_name for p in data.producer_data_set] == ["TXG"]
            [conn] = broker.conns
            conn.send_request(check_request("TXG"))
            await wait_until(lambda: len(ends(broker)) == 1)
            conn.send_request(check_request("OTHER", txid="TX2"))  # not ours: ignored
            conn.send_request(check_request("TXG", body=b"explode", txid="TX3"))
            await wait_until(lambda: len(ends(broker)) == 2)
        (request, end), (failed, failed_end) = ends(broker)
    assert [m.msg_id for m in checked] == ["TX1", "TX3"]
    assert checked[0].topic == "T" and checked[0].body == b"pay"
    assert request.flag & RPC_ONEWAY
    assert end.from_transaction_check and end.commit_or_rollback == 12
    assert (end.commit_log_offset, end.tran_state_table_offset) == (4242, 17)
    assert (end.msg_id, end.transaction_id, end.producer_group) == ("TX1", "TX1", "TXG")
    assert failed_end.commit_or_rollback == 0 and failed_end.transaction_id == "TX3"
    assert "cannot tell" in (failed.remark or "")


async def test_misuse() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        with pytest.raises(ClientUsageError, match="checker"):
            await TransactionProducer("TXG", namesrv=cluster.brokers[0].addr).start()
        producer = producer_for(cluster)
        commit = answer(TransactionResolution.COMMIT)
        with pytest.raises(ClientClosedError):
            await producer.send_in_transaction(Message(topic="T", body=b"x"), commit)
        async with producer:
            with pytest.raises(ClientUsageError, match="batch"):
                await producer.send_in_transaction([Message(topic="T", body=b"x")], commit)  # type: ignore[arg-type]
            with pytest.raises(ClientUsageError, match="delay level"):
                await producer.send_in_transaction(
                    Message(topic="T", body=b"x", delay_level=2), commit
                )
            with pytest.raises(ClientUsageError, match="callable"):
                await producer.send_in_transaction(Message(topic="T", body=b"x"), "commit")  # type: ignore[arg-type]
            tx = await producer.send_half(Message(topic="T", body=b"x"))
            await tx.rollback()
            assert tx.ended and tx.resolution is TransactionResolution.ROLLBACK
            with pytest.raises(ClientUsageError, match="already ended with ROLLBACK"):
                await tx.commit()
            with pytest.raises(ClientUsageError, match="TransactionResolution"):
                await (await producer.send_half(Message(topic="T", body=b"y"))).end("COMMIT")  # type: ignore[arg-type]
        assert cluster.brokers[0].requests_of(RequestCode.SEND_MESSAGE_V2)  # the halves went out
