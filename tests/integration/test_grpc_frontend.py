"""The gRPC front-end's answers to bad and unusual requests, called with the protocol's own
stubs against an embedded broker: the statuses RocketMQ's proxy gives, nothing stored for a
refused send, and the features that are served or refused by name."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import AsyncIterator

import pytest

pytest.importorskip("grpc", reason="from a pocketmq checkout: python3 -m pip install -e '.[grpc]'")

import grpc  # noqa: E402
from google.protobuf.duration_pb2 import Duration  # noqa: E402

from pocketmq.broker.app import Broker  # noqa: E402
from pocketmq.broker.config import BrokerConfig  # noqa: E402
from pocketmq.broker.grpc.auth import sign  # noqa: E402
from pocketmq.broker.grpc.stubs import definition_pb2, service_pb2, service_pb2_grpc  # noqa: E402
from pocketmq.broker.services.clock import ManualClock  # noqa: E402

pb = service_pb2
Code = definition_pb2.Code
MessageType = definition_pb2.MessageType


def metadata(access_key: str = "", secret_key: str = "", *, upper: bool = False) -> list:
    now = datetime.datetime.now().strftime("%Y%m%dT%H%M%SZ")
    signature = sign(secret_key, now) if secret_key else ""
    if upper:
        signature = signature.upper()
    return [
        ("x-mq-client-id", "test-client@1@0@abc"),
        ("x-mq-date-time", now),
        ("x-mq-request-id", str(uuid.uuid4())),
        ("x-mq-language", "PYTHON"),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
            f"Signature={signature}",
        ),
    ]


def resource(name: str) -> definition_pb2.Resource:
    return definition_pb2.Resource(name=name)


def message(
    topic: str,
    body: bytes = b"hello",
    *,
    kind: int = MessageType.NORMAL,
    message_id: str | None = None,
    **system: object,
) -> definition_pb2.Message:
    properties = definition_pb2.SystemProperties(
        message_id=message_id or "01" + uuid.uuid4().hex[:32].upper(),
        message_type=kind,
        body_encoding=definition_pb2.Encoding.IDENTITY,
        **system,
    )
    return definition_pb2.Message(topic=resource(topic), body=body, system_properties=properties)


class Front:
    def __init__(self, broker: Broker, stub: service_pb2_grpc.MessagingServiceStub) -> None:
        self.broker = broker
        self.stub = stub

    async def send(self, *messages: definition_pb2.Message, md: list | None = None):
        return await self.stub.SendMessage(
            pb.SendMessageRequest(messages=list(messages)), metadata=md or metadata()
        )

    async def receive(self, topic: str, group: str, *, timeout: float = 3.0, **fields: object):
        request = pb.ReceiveMessageRequest(
            group=resource(group),
            message_queue=definition_pb2.MessageQueue(topic=resource(topic), id=-1),
            filter_expression=definition_pb2.FilterExpression(
                type=definition_pb2.FilterType.TAG, expression="*"
            ),
            batch_size=32,
            **fields,
        )
        if "invisible_duration" not in fields and not fields.get("auto_renew"):
            request.invisible_duration.FromSeconds(30)
        request.long_polling_timeout.FromSeconds(5)
        return [
            r async for r in self.stub.ReceiveMessage(request, metadata=metadata(), timeout=timeout)
        ]


async def _front(config: BrokerConfig, clock: ManualClock | None = None) -> AsyncIterator[Front]:
    async with (
        Broker(config, clock=clock, namesrv=True) as broker,
        grpc.aio.insecure_channel(broker.grpc_address) as channel,
    ):
        yield Front(broker, service_pb2_grpc.MessagingServiceStub(channel))


@pytest.fixture
async def front() -> AsyncIterator[Front]:
    async for f in _front(BrokerConfig(port=0, grpc_port=0), ManualClock()):
        for topic, kind in (("Normal", "NORMAL"), ("Mixed", "MIXED"), ("Fifo", "FIFO")):
            f.broker.topics.create(topic, attributes={"message.type": kind})
        yield f


async def test_route_of_an_unknown_topic_is_topic_not_found(front: Front) -> None:
    response = await front.stub.QueryRoute(
        pb.QueryRouteRequest(topic=resource("NoSuchTopic")), metadata=metadata()
    )
    assert response.status.code == Code.TOPIC_NOT_FOUND
    assert "NoSuchTopic" in response.status.message


async def test_route_lists_queues_with_the_topic_message_type(front: Front) -> None:
    endpoints = definition_pb2.Endpoints(
        scheme=definition_pb2.AddressScheme.DOMAIN_NAME,
        addresses=[definition_pb2.Address(host="localhost", port=front.broker.config.grpc_port)],
    )
    response = await front.stub.QueryRoute(
        pb.QueryRouteRequest(topic=resource("Fifo"), endpoints=endpoints), metadata=metadata()
    )
    assert response.status.code == Code.OK
    assert len(response.message_queues) == 8
    queue = response.message_queues[0]
    assert list(queue.accept_message_types) == [MessageType.FIFO]
    assert queue.permission == definition_pb2.Permission.READ_WRITE
    assert queue.broker.id == 0 and queue.broker.endpoints == endpoints  # the address dialled


async def test_send_to_an_unknown_topic_is_refused_and_nothing_stored(front: Front) -> None:
    before = front.broker.store.max_physical_offset
    response = await front.send(message("NoSuchTopic"))
    assert response.status.code == Code.TOPIC_NOT_FOUND
    assert front.broker.store.max_physical_offset == before


async def test_oversize_body_is_message_body_too_large(front: Front) -> None:
    before = front.broker.store.max_physical_offset
    response = await front.send(message("Normal", b"x" * (4 * 1024 * 1024 + 1)))
    assert response.status.code == Code.MESSAGE_BODY_TOO_LARGE
    assert str(4 * 1024 * 1024) in response.status.message
    assert front.broker.store.max_physical_offset == before
    empty = await front.send(message("Normal", b""))
    assert empty.status.code == Code.MESSAGE_BODY_EMPTY


async def test_message_type_must_match_the_topic(front: Front) -> None:
    response = await front.send(
        message("Normal", kind=MessageType.FIFO, message_group="g1"),
    )
    assert response.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    accepted = await front.send(message("Fifo", kind=MessageType.FIFO, message_group="g1"))
    assert accepted.status.code == Code.OK


async def test_system_property_names_are_refused_as_user_properties(front: Front) -> None:
    bad = message("Normal")
    bad.user_properties["UNIQ_KEY"] = "mine"
    response = await front.send(bad)
    assert response.status.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY


async def test_lite_is_refused_by_name_and_priority_needs_its_topic_type(front: Front) -> None:
    response = await front.send(message("Mixed", kind=MessageType.LITE))
    assert response.status.code == Code.UNSUPPORTED
    assert "not supported" in response.status.message
    mixed = await front.send(message("Mixed", kind=MessageType.PRIORITY))
    assert mixed.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    lite = await front.stub.SyncLiteSubscription(
        pb.SyncLiteSubscriptionRequest(topic=resource("Mixed"), group=resource("g")),
        metadata=metadata(),
    )
    assert lite.status.code == Code.UNSUPPORTED


async def test_fifo_messages_of_one_group_share_a_queue(front: Front) -> None:
    queues = set()
    for _ in range(5):
        response = await front.send(message("Fifo", kind=MessageType.FIFO, message_group="order-7"))
        assert response.status.code == Code.OK
    for queue_id in range(8):
        if front.broker.store.max_offset("Fifo", queue_id) > 0:
            queues.add(queue_id)
    assert len(queues) == 1


async def test_empty_receive_is_message_not_found(front: Front) -> None:
    responses = await front.receive("Normal", "g-empty", timeout=1.5)
    assert [r.WhichOneof("content") for r in responses] == ["status"]
    assert responses[0].status.code == Code.MESSAGE_NOT_FOUND


async def test_receive_ack_and_stale_handles(front: Front) -> None:
    sent = await front.send(message("Normal", b"one"))
    message_id = sent.entries[0].message_id
    responses = await front.receive("Normal", "g1")
    kinds = [r.WhichOneof("content") for r in responses]
    assert kinds == ["status", "message", "delivery_timestamp"]
    received = responses[1].message
    assert received.system_properties.message_id == message_id
    assert received.system_properties.body_encoding == definition_pb2.Encoding.IDENTITY
    assert received.system_properties.body_digest.type == definition_pb2.DigestType.MD5
    handle = received.system_properties.receipt_handle
    ack = pb.AckMessageRequest(
        group=resource("g1"),
        topic=resource("Normal"),
        entries=[pb.AckMessageEntry(message_id=message_id, receipt_handle=handle)],
    )
    assert (await front.stub.AckMessage(ack, metadata=metadata())).status.code == Code.OK
    again = await front.stub.AckMessage(ack, metadata=metadata())
    assert again.status.code == Code.INVALID_RECEIPT_HANDLE
    bogus = pb.AckMessageRequest(
        group=resource("g1"),
        topic=resource("Normal"),
        entries=[pb.AckMessageEntry(message_id=message_id, receipt_handle="not a handle")],
    )
    assert (
        await front.stub.AckMessage(bogus, metadata=metadata())
    ).status.code == Code.INVALID_RECEIPT_HANDLE


async def test_invisible_time_below_the_minimum_is_refused(front: Front) -> None:
    responses = await front.receive("Normal", "g1", invisible_duration=Duration(seconds=1))
    assert responses[0].status.code == Code.ILLEGAL_INVISIBLE_TIME


async def test_change_invisible_duration_gives_a_new_handle(front: Front) -> None:
    sent = await front.send(message("Normal", b"later"))
    message_id = sent.entries[0].message_id
    received = (await front.receive("Normal", "g2"))[1].message
    first = received.system_properties.receipt_handle
    request = pb.ChangeInvisibleDurationRequest(
        group=resource("g2"), topic=resource("Normal"), receipt_handle=first, message_id=message_id
    )
    request.invisible_duration.FromSeconds(5)
    changed = await front.stub.ChangeInvisibleDuration(request, metadata=metadata())
    assert changed.status.code == Code.OK and changed.receipt_handle != first
    await front.broker.advance("6s")
    again = await front.receive("Normal", "g2")
    assert again[1].message.system_properties.message_id == message_id
    assert again[1].message.system_properties.delivery_attempt == 2


async def test_forward_to_dead_letter_queue(front: Front) -> None:
    sent = await front.send(message("Normal", b"poison"))
    received = (await front.receive("Normal", "g3"))[1].message
    response = await front.stub.ForwardMessageToDeadLetterQueue(
        pb.ForwardMessageToDeadLetterQueueRequest(
            group=resource("g3"),
            topic=resource("Normal"),
            receipt_handle=received.system_properties.receipt_handle,
            message_id=sent.entries[0].message_id,
            delivery_attempt=1,
            max_delivery_attempts=1,
        ),
        metadata=metadata(),
    )
    assert response.status.code == Code.OK
    store = front.broker.store
    assert store.max_offset("%DLQ%g3", 0) == 1
    dead = store.get_messages("%DLQ%g3", 0, 0, 1)
    record = store.read(dead.messages[0][1])
    assert record.body == b"poison" and record.unique_key == sent.entries[0].message_id
    [original] = store.query_by_key("Normal", sent.entries[0].message_id, max_results=4)
    assert store.state_change_of(original.physical_offset).reason == (
        "dead-lettered to %DLQ%g3 by the consumer (ForwardMessageToDeadLetterQueue): "
        "gave up at delivery attempt 1 of 1"
    )


async def test_delayed_message_waits_and_can_be_recalled(front: Front) -> None:
    now_s = front.broker.now_ms() // 1000
    keep = message("Mixed", b"keep", kind=MessageType.DELAY)
    keep.system_properties.delivery_timestamp.FromSeconds(now_s + 60)
    recall = message("Mixed", b"recall", kind=MessageType.DELAY)
    recall.system_properties.delivery_timestamp.FromSeconds(now_s + 60)
    kept = await front.send(keep)
    recalled = await front.send(recall)
    handle = recalled.entries[0].recall_handle
    assert handle and kept.entries[0].recall_handle
    response = await front.stub.RecallMessage(
        pb.RecallMessageRequest(topic=resource("Mixed"), recall_handle=handle), metadata=metadata()
    )
    assert response.status.code == Code.OK
    assert response.message_id == recalled.entries[0].message_id
    assert (await front.receive("Mixed", "g4", timeout=1.5))[0].status.code == (
        Code.MESSAGE_NOT_FOUND
    )
    await front.broker.advance("61s")
    responses = await front.receive("Mixed", "g4")
    delivered = [r.message for r in responses if r.WhichOneof("content") == "message"]
    assert [m.body for m in delivered] == [b"keep"]
    # As RocketMQ: the delivered copy still reads as a DELAY message with its delivery time.
    assert delivered[0].system_properties.message_type == MessageType.DELAY
    assert delivered[0].system_properties.delivery_timestamp.seconds == now_s + 60
    twice = await front.stub.RecallMessage(
        pb.RecallMessageRequest(topic=resource("Mixed"), recall_handle=handle), metadata=metadata()
    )
    # Its time has passed: refused as RecallMessageProcessor does, before any look-up.
    assert twice.status.code == Code.BAD_REQUEST
    assert "timestamp invalid" in twice.status.message


async def test_transaction_rollback_and_unknown_transaction(front: Front) -> None:
    front.broker.topics.create("Tx", attributes={"message.type": "TRANSACTION"})
    sent = await front.send(message("Tx", b"half", kind=MessageType.TRANSACTION))
    entry = sent.entries[0]
    assert entry.transaction_id
    end = pb.EndTransactionRequest(
        topic=resource("Tx"),
        message_id=entry.message_id,
        transaction_id=entry.transaction_id,
        resolution=definition_pb2.TransactionResolution.ROLLBACK,
        source=definition_pb2.TransactionSource.SOURCE_CLIENT,
    )
    assert (await front.stub.EndTransaction(end, metadata=metadata())).status.code == Code.OK
    again = await front.stub.EndTransaction(end, metadata=metadata())
    assert again.status.code == Code.INVALID_TRANSACTION_ID
    assert (await front.receive("Tx", "g5", timeout=1.5))[0].status.code == Code.MESSAGE_NOT_FOUND


async def test_signatures_are_checked_when_access_keys_are_set() -> None:
    config = BrokerConfig(port=0, grpc_port=0, access_keys={"ak": "sk"})
    async for front in _front(config):
        front.broker.topics.create("Normal")
        request = pb.QueryRouteRequest(topic=resource("Normal"))
        for md in (metadata(), metadata("ak", "wrong"), metadata("other", "sk")):
            response = await front.stub.QueryRoute(request, metadata=md)
            assert response.status.code == Code.UNAUTHORIZED
        unsigned = await front.stub.QueryRoute(request, metadata=[("x-mq-client-id", "c")])
        assert unsigned.status.code == Code.UNAUTHORIZED
        assert "not signed" in unsigned.status.message
        refused = await front.send(message("Normal"), md=metadata("ak", "wrong"))
        assert refused.status.code == Code.UNAUTHORIZED
        assert front.broker.store.max_offset("Normal", 0) == 0
        for md in (metadata("ak", "sk"), metadata("ak", "sk", upper=True)):  # Node: upper case
            assert (await front.stub.QueryRoute(request, metadata=md)).status.code == Code.OK


async def test_auto_renew_keeps_a_push_consumer_message_invisible(front: Front) -> None:
    """Push consumers receive with auto_renew and no invisible time: the broker renews the
    message (60 s at a time) until it is acknowledged, and takes the handle first given."""
    sent = await front.send(message("Normal", b"slow"))
    message_id = sent.entries[0].message_id
    responses = await front.receive("Normal", "g-push", auto_renew=True)
    received = responses[1].message
    handle = received.system_properties.receipt_handle
    assert received.system_properties.invisible_duration.ToMilliseconds() == 60_000
    for _ in range(5):  # five minutes in steps: renewed each time before its deadline
        await front.broker.advance("60s")
    assert (await front.receive("Normal", "g-push", timeout=1.5))[0].status.code == (
        Code.MESSAGE_NOT_FOUND
    )
    ack = pb.AckMessageRequest(
        group=resource("g-push"),
        topic=resource("Normal"),
        entries=[pb.AckMessageEntry(message_id=message_id, receipt_handle=handle)],
    )
    assert (await front.stub.AckMessage(ack, metadata=metadata())).status.code == Code.OK
    await front.broker.advance("5m")
    assert (await front.receive("Normal", "g-push", timeout=1.5))[0].status.code == (
        Code.MESSAGE_NOT_FOUND
    )


async def test_a_departing_push_consumer_gives_its_messages_back_after_the_backoff(
    front: Front,
) -> None:
    sent = await front.send(message("Normal", b"held"))
    await front.receive("Normal", "g-leave", auto_renew=True)
    done = await front.stub.NotifyClientTermination(
        pb.NotifyClientTerminationRequest(group=resource("g-leave")), metadata=metadata()
    )
    assert done.status.code == Code.OK
    await front.broker.advance("1s")  # the first retry delay of the 5.x back-off
    again = await front.receive("Normal", "g-leave")
    assert again[1].message.system_properties.message_id == sent.entries[0].message_id
    assert again[1].message.system_properties.delivery_attempt == 2


async def test_bad_group_and_topic_names_are_illegal(front: Front) -> None:
    responses = await front.receive("Normal", "bad group!")
    assert responses[0].status.code == Code.ILLEGAL_CONSUMER_GROUP
    route = await front.stub.QueryRoute(
        pb.QueryRouteRequest(topic=resource("bad topic!")), metadata=metadata()
    )
    assert route.status.code == Code.ILLEGAL_TOPIC


async def test_sync_flush_answers_after_the_fsync(tmp_path) -> None:  # noqa: ANN001
    config = BrokerConfig(port=0, grpc_port=0, flush="sync", data_dir=tmp_path)
    async for front in _front(config):
        front.broker.topics.create("Durable")
        response = await front.send(message("Durable", b"kept"))
        assert response.status.code == Code.OK
        assert front.broker.store.commitlog.flushed_offset >= front.broker.store.max_physical_offset
