"""Lite topics over raw gRPC (the protocol stubs of rocketmq-python-client, driven by hand, as
the official client cannot: it ignores NotifyUnsubscribeLiteCommand and sends no OffsetOption):
exclusive groups (the evicted client is told over its Telemetry stream, and told again when it
re-sends the lite topic), OffsetOption on SyncLiteSubscription, wildcard groups refusing a
PARTIAL_ADD, and lite topic expiry on a manual clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode
from pocketmq.broker.protocol.headers import CreateTopicRequestHeader
from tests.integration.cluster import Cluster, Process
from tests.integration.raw import RawClient
from tests.integration.test_grpc_official_client import start_grpc_broker

grpc = pytest.importorskip(
    "grpc", reason="from a pocketmq checkout: python3 -m pip install -e '.[grpc]'"
)
stubs = pytest.importorskip(
    "pocketmq.broker.grpc.stubs", reason="from a pocketmq checkout: pip install -e '.[grpc]'"
)
definition_pb2, service_pb2 = stubs.definition_pb2, stubs.service_pb2
Action = definition_pb2.LiteSubscriptionAction
Code = definition_pb2.Code
PARENT, EXPIRING, KEPT = "lite-parent", "expiring-parent", "kept-parent"


def create_topic(broker: Process, topic: str, attributes: str) -> None:
    header = CreateTopicRequestHeader(
        topic=topic,
        default_topic="TBW102",
        read_queue_nums=4,
        write_queue_nums=4,
        perm=6,
        topic_filter_type="SINGLE_TAG",
        attributes=attributes,
    )
    with RawClient(broker.address) as client:
        response = client.call(
            RemotingCommand(
                code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=header.to_ext_fields()
            )
        )
    assert response.code == 0, response.remark


def create_group(broker: Process, group: str, **attributes: str) -> None:
    body = json.dumps({"groupName": group, "attributes": attributes})
    with RawClient(broker.address) as client:
        response = client.call(
            RemotingCommand(
                code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body.encode()
            )
        )
    assert response.code == 0, response.remark


def send_lite(broker: Process, parent: str, lite: str, *bodies: str) -> None:
    with RawClient(broker.address) as client:
        for body in bodies:
            response = client.send_message(
                parent,
                body.encode(),
                properties=f"__LITE_TOPIC\x01{lite}\x02UNIQ_KEY\x01{body}\x02",
            )
            assert response.code == 0, response.remark


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(tmp_path_factory.mktemp("lite-grpc")) as cluster:
        broker = start_grpc_broker(cluster, "--clock", "manual")
        create_topic(broker, PARENT, "+message.type=LITE")
        create_topic(broker, EXPIRING, "+message.type=LITE,+lite.topic.expiration=30")
        create_topic(broker, KEPT, "+message.type=LITE")
        create_group(
            broker, "exclusive", **{"+lite.bind.topic": PARENT, "+lite.sub.model": "Exclusive"}
        )
        create_group(broker, "shared", **{"+lite.bind.topic": PARENT})
        create_group(
            broker,
            "rewinding",
            **{
                "+lite.bind.topic": PARENT,
                "+lite.sub.model": "Exclusive",
                "+lite.sub.reset.offset.exclusive": "true",
                "+lite.sub.reset.offset.unsubscribe": "true",
            },
        )
        create_group(broker, "offsets", **{"+lite.bind.topic": PARENT})
        create_group(
            broker, "wildcard", **{"+lite.bind.topic": PARENT, "+lite.sub.wildcard": "true"}
        )
        create_group(broker, "expiring", **{"+lite.bind.topic": EXPIRING})
        create_group(broker, "kept", **{"+lite.bind.topic": KEPT})
        yield broker


class LiteClient:
    """One lite push consumer, as the SDKs speak for it: a Telemetry stream with its settings,
    SyncLiteSubscription, ReceiveMessage and AckMessage, all under its x-mq-client-id."""

    def __init__(self, channel: Any, client_id: str, group: str, parent: str) -> None:
        self.stub = stubs.service_pb2_grpc.MessagingServiceStub(channel)
        self.metadata = (("x-mq-client-id", client_id),)
        self.group, self.parent = group, parent
        self.outgoing: asyncio.Queue[Any] = asyncio.Queue()
        self.stream: Any = None

    async def open(self) -> None:
        async def commands() -> AsyncIterator[Any]:
            while (command := await self.outgoing.get()) is not None:
                yield command

        settings = definition_pb2.Settings(client_type=definition_pb2.ClientType.LITE_PUSH_CONSUMER)
        settings.subscription.group.name = self.group
        entry = settings.subscription.subscriptions.add()
        entry.topic.name = self.parent
        entry.expression.expression = "*"
        self.stream = self.stub.Telemetry(commands(), metadata=self.metadata)
        await self.outgoing.put(service_pb2.TelemetryCommand(settings=settings))
        reply = await self.command()
        assert reply.WhichOneof("command") == "settings", reply

    async def command(self, timeout_s: float = 10.0) -> Any:
        return await asyncio.wait_for(self.stream.read(), timeout_s)

    async def close(self) -> None:
        await self.outgoing.put(None)
        self.stream.cancel()

    async def sync(self, action: int, *lites: str, option: Any = None) -> Any:
        request = service_pb2.SyncLiteSubscriptionRequest(action=action, lite_topic_set=lites)
        request.topic.name, request.group.name = self.parent, self.group
        if option is not None:
            request.offset_option.CopyFrom(option)
        response = await self.stub.SyncLiteSubscription(request, metadata=self.metadata, timeout=10)
        return response.status

    async def receive(self, polling_s: int = 5) -> list[tuple[str, str]]:
        """One ReceiveMessage; (lite topic, body) of each message, acknowledged at once."""
        request = service_pb2.ReceiveMessageRequest(batch_size=32, auto_renew=False)
        request.group.name = self.group
        request.message_queue.topic.name = self.parent
        request.message_queue.id = -1
        request.filter_expression.expression = "*"
        request.invisible_duration.FromSeconds(30)
        request.long_polling_timeout.FromSeconds(polling_s)
        got = []
        call = self.stub.ReceiveMessage(request, metadata=self.metadata, timeout=polling_s + 10)
        async for response in call:
            if response.WhichOneof("content") == "message":
                message = response.message
                got.append(message)
        for message in got:
            ack = service_pb2.AckMessageRequest()
            ack.group.name, ack.topic.name = self.group, self.parent
            ack.entries.add(
                message_id=message.system_properties.message_id,
                receipt_handle=message.system_properties.receipt_handle,
                lite_topic=message.system_properties.lite_topic,
            )
            status = (await self.stub.AckMessage(ack, metadata=self.metadata, timeout=10)).status
            assert status.code == Code.OK, status
        return [(m.system_properties.lite_topic, m.body.decode()) for m in got]


@pytest.fixture
async def channel(broker: Process) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(broker.extra["grpc"]) as channel:
        yield channel


async def client(channel: Any, client_id: str, group: str, parent: str = PARENT) -> LiteClient:
    lite = LiteClient(channel, client_id, group, parent)
    await lite.open()
    return lite


async def test_an_exclusive_lite_topic_moves_and_the_loser_is_told(
    broker: Process, channel: Any
) -> None:
    first = await client(channel, "exclusive-a", "exclusive")
    second = await client(channel, "exclusive-b", "exclusive")
    try:
        assert (await first.sync(Action.PARTIAL_ADD, "solo", "other")).code == Code.OK
        assert (await second.sync(Action.PARTIAL_ADD, "solo")).code == Code.OK
        told = await first.command()
        assert told.WhichOneof("command") == "notify_unsubscribe_lite_command"
        assert told.notify_unsubscribe_lite_command.lite_topic == "solo"
        send_lite(broker, PARENT, "solo", "solo-0", "solo-1")
        send_lite(broker, PARENT, "other", "other-0")
        assert await first.receive() == [("other", "other-0")]
        assert await second.receive() == [("solo", "solo-0"), ("solo", "solo-1")]
        # The loser ignored the notice (as the Python SDK does): its 30 s COMPLETE_ADD still
        # names solo, so it is told again, and still gets none of solo.
        assert (await first.sync(Action.COMPLETE_ADD, "solo", "other")).code == Code.OK
        again = await first.command()
        assert again.notify_unsubscribe_lite_command.lite_topic == "solo"
        # Both stored before the loser asks: one receive pops every lite topic it may take, so
        # solo-2 would come with other-1 were solo still its.
        send_lite(broker, PARENT, "solo", "solo-2")
        send_lite(broker, PARENT, "other", "other-1")
        assert await first.receive() == [("other", "other-1")]
        assert await second.receive() == [("solo", "solo-2")]
    finally:
        await first.close()
        await second.close()


async def test_groups_that_rewind_on_a_move_and_on_unsubscribe(
    broker: Process, channel: Any
) -> None:
    first = await client(channel, "rewinding-a", "rewinding")
    second = await client(channel, "rewinding-b", "rewinding")
    try:
        send_lite(broker, PARENT, "again", "again-0", "again-1")
        await first.sync(Action.PARTIAL_ADD, "again")
        assert [b for _, b in await first.receive()] == ["again-0", "again-1"]
        # lite.sub.reset.offset.exclusive: the move starts the group over
        await second.sync(Action.PARTIAL_ADD, "again")
        assert (await first.command()).notify_unsubscribe_lite_command.lite_topic == "again"
        assert [b for _, b in await second.receive()] == ["again-0", "again-1"]
        # lite.sub.reset.offset.unsubscribe: so does a PARTIAL_REMOVE
        await second.sync(Action.PARTIAL_REMOVE, "again")
        await second.sync(Action.PARTIAL_ADD, "again")
        assert [b for _, b in await second.receive()] == ["again-0", "again-1"]
    finally:
        await first.close()
        await second.close()


async def test_a_shared_group_tells_nobody(broker: Process, channel: Any) -> None:
    first = await client(channel, "shared-a", "shared")
    second = await client(channel, "shared-b", "shared")
    try:
        assert (await first.sync(Action.PARTIAL_ADD, "both")).code == Code.OK
        assert (await second.sync(Action.PARTIAL_ADD, "both")).code == Code.OK
        with pytest.raises(TimeoutError):
            await first.command(timeout_s=1.0)
        send_lite(broker, PARENT, "both", "both-0")
        # The first to ask takes it; the other keeps the lite topic, and gets what comes next
        # but not both-0 again.
        assert await first.receive() == [("both", "both-0")]
        send_lite(broker, PARENT, "both", "both-1")
        assert await second.receive() == [("both", "both-1")]
    finally:
        await first.close()
        await second.close()


async def test_offset_options_on_subscribe(broker: Process, channel: Any) -> None:
    send_lite(broker, PARENT, "history", *(f"h-{i}" for i in range(5)))
    consumer = await client(channel, "offsets-a", "offsets")
    Option = definition_pb2.OffsetOption
    try:
        # MAX: from the end, so only what comes next.
        status = await consumer.sync(
            Action.PARTIAL_ADD, "history", option=Option(policy=Option.MAX)
        )
        assert status.code == Code.OK, status
        send_lite(broker, PARENT, "history", "h-5")
        assert await consumer.receive() == [("history", "h-5")]  # none of h-0 to h-4
        # An offset, then TAIL_N from the committed offset (6), then MIN.
        await consumer.sync(Action.PARTIAL_ADD, "history", option=Option(offset=3))
        assert [b for _, b in await consumer.receive()] == ["h-3", "h-4", "h-5"]
        await consumer.sync(Action.PARTIAL_ADD, "history", option=Option(tail_n=2))
        assert [b for _, b in await consumer.receive()] == ["h-4", "h-5"]
        await consumer.sync(Action.PARTIAL_ADD, "history", option=Option(policy=Option.MIN))
        assert len(await consumer.receive()) == 6
        # LAST (and a timestamp, which RocketMQ ignores) keep the group where it is: at the
        # end, so the next receive brings only what comes next.
        await consumer.sync(Action.PARTIAL_ADD, "history", option=Option(policy=Option.LAST))
        await consumer.sync(Action.PARTIAL_ADD, "history", option=Option(timestamp=1))
        send_lite(broker, PARENT, "history", "h-6")
        assert await consumer.receive() == [("history", "h-6")]
    finally:
        await consumer.close()


async def test_a_wildcard_group_takes_every_lite_topic(broker: Process, channel: Any) -> None:
    consumer = await client(channel, "wildcard-a", "wildcard")
    try:
        refused = await consumer.sync(Action.PARTIAL_ADD, "one")
        assert refused.code == Code.BAD_REQUEST and "wildcard" in refused.message, refused
        assert (await consumer.sync(Action.COMPLETE_ADD)).code == Code.OK
        send_lite(broker, PARENT, "wild-1", "w1")
        send_lite(broker, PARENT, "wild-2", "w2")
        got: list[tuple[str, str]] = []
        for _ in range(5):
            got += await consumer.receive()
            if {"w1", "w2"} <= {b for _, b in got}:
                break
        assert {("wild-1", "w1"), ("wild-2", "w2")} <= set(got)
    finally:
        await consumer.close()


async def test_an_idle_lite_topic_expires(broker: Process, channel: Any) -> None:
    consumer = await client(channel, "expiring-a", "expiring", EXPIRING)
    keeper = await client(channel, "kept-a", "kept", KEPT)
    try:
        send_lite(broker, EXPIRING, "idle", "old-0", "old-1")
        send_lite(broker, KEPT, "idle", "kept-0")
        assert (await consumer.sync(Action.PARTIAL_ADD, "idle")).code == Code.OK
        assert (await keeper.sync(Action.PARTIAL_ADD, "idle")).code == Code.OK
        with RawClient(broker.address) as admin:
            admin.clock("advance", duration="31m")  # TTL 30 min; checks every 2 min
            admin.clock("advance", duration="2m")
            topics = admin.call(RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG))
        table = json.loads(topics.body or b"{}")["topicConfigTable"]
        assert f"%LMQ%{EXPIRING}|idle" not in table
        assert f"%LMQ%{KEPT}|idle" in table  # no lite.topic.expiration: never
        # Removed without a word to the client (cleanSubscription, notifyClient false) ...
        with pytest.raises(TimeoutError):
            await consumer.command(timeout_s=1.0)
        # ... which re-subscribes with its next COMPLETE_ADD; a new message makes the lite
        # topic again, and the expired ones are gone.
        assert (await consumer.sync(Action.COMPLETE_ADD, "idle")).code == Code.OK
        send_lite(broker, EXPIRING, "idle", "new-0")
        assert await consumer.receive() == [("idle", "new-0")]
        assert await keeper.receive() == [("idle", "kept-0")]
    finally:
        await consumer.close()
        await keeper.close()
