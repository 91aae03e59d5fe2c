"""Pure parts: message validation and properties, batch checks, received-message decoding,
route derivation, name-server addresses, the broadcasting offset file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pocketmq.broker.protocol.headers import BrokerData, QueueData, TopicRouteData
from pocketmq.broker.protocol.message_codec import MessageExt, decode_batch
from pocketmq.client import Message, MessageQueue, Producer, ReceivedMessage
from pocketmq.client.errors import ClientClosedError, ClientUsageError, MessageTooLargeError
from pocketmq.client.offset_store import LocalFileOffsetStore, default_offsets_dir
from pocketmq.client.route import TopicRoute, namesrv_addresses

MQ = MessageQueue("T", "broker-a", 0)


@pytest.fixture
def producer() -> Producer:
    # never started: validation needs no connection
    return Producer("G", namesrv="127.0.0.1:1", client_ip="127.0.0.1", max_message_size=1024)


def test_properties_set_by_the_sdk(producer: Producer) -> None:
    message = Message(
        topic="T", body=b"x", tags="A", keys=["k1", "k2"], delay_level=3, properties={"p": "v"}
    )
    props = producer._properties(message)
    assert props["TAGS"] == "A"
    assert props["KEYS"] == "k1 k2"
    assert props["WAIT"] == "true"
    assert props["DELAY"] == "3"
    assert props["p"] == "v"
    assert len(props["UNIQ_KEY"]) == 34 and props["UNIQ_KEY"].startswith("01")  # v5 id
    # a key given by the caller is kept (RocketMQ sets UNIQ_KEY only if absent)
    again = producer._properties(Message(topic="T", body=b"x", properties={"UNIQ_KEY": "K"}))
    assert again["UNIQ_KEY"] == "K"


def test_v4_unique_keys() -> None:
    from pocketmq.ids import decode_uniq_id

    p = Producer("G", namesrv="127.0.0.1:1", client_ip="10.1.2.3", unique_id_scheme="v4")
    key = p.new_unique_key()
    assert len(key) == 32
    assert decode_uniq_id(key).ip == "10.1.2.3"


def test_single_key_string_becomes_a_list() -> None:
    assert Message(topic="T", body=b"x", keys="order-1").keys == ["order-1"]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "message",
    [
        Message(topic="T", body=b""),
        Message(topic="", body=b"x"),
        Message(topic="bad topic", body=b"x"),
        Message(topic="x" * 128, body=b"x"),
        Message(topic="SCHEDULE_TOPIC_XXXX", body=b"x"),
        Message(topic="T", body=b"x", delay_level=-1),
        Message(topic="T", body="text"),  # type: ignore[arg-type]
    ],
)
def test_bad_messages_are_usage_errors(producer: Producer, message: Message) -> None:
    with pytest.raises(ClientUsageError):
        producer._properties(message)


def test_body_over_the_limit(producer: Producer) -> None:
    with pytest.raises(MessageTooLargeError) as info:
        producer._properties(Message(topic="T", body=b"x" * 1025))
    assert info.value.size_bytes == 1025 and info.value.size_bytes_max == 1024


def test_property_with_a_separator_is_refused(producer: Producer) -> None:
    props = producer._properties(Message(topic="T", body=b"x", properties={"k": "a\x02b"}))
    with pytest.raises(ClientUsageError):
        producer._properties_text(props)


def test_batch_body_gives_each_message_its_own_key(producer: Producer) -> None:
    messages = [
        Message(topic="T", body=f"m{i}".encode(), tags="A", keys=[f"k{i}"]) for i in range(3)
    ]
    body, keys = producer.encode_batch(messages)
    inner = decode_batch(body)
    assert [m.body for m in inner] == [b"m0", b"m1", b"m2"]
    assert [m.properties["UNIQ_KEY"] for m in inner] == keys
    assert len(set(keys)) == 3
    assert all(m.properties["WAIT"] == "true" and m.properties["TAGS"] == "A" for m in inner)
    assert [m.properties["KEYS"] for m in inner] == ["k0", "k1", "k2"]


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [Message(topic="T", body=b"a"), Message(topic="U", body=b"b")],
        [Message(topic="T", body=b"a", delay_level=2)],
        [Message(topic="%RETRY%G", body=b"a")],
        [Message(topic="T", body=b"")],
    ],
)
def test_bad_batches(producer: Producer, messages: list[Message]) -> None:
    with pytest.raises(ClientUsageError):
        producer.encode_batch(messages)


def test_batch_over_the_limit_counts_the_encoded_size(producer: Producer) -> None:
    # each body fits, the batch does not
    messages = [Message(topic="T", body=b"x" * 400) for _ in range(3)]
    with pytest.raises(MessageTooLargeError) as info:
        producer.encode_batch(messages)
    assert info.value.size_bytes > 1200


async def test_send_needs_start_and_not_close(producer: Producer) -> None:
    with pytest.raises(ClientClosedError):
        await producer.send(Message(topic="T", body=b"x"))
    await producer.close()
    with pytest.raises(ClientClosedError):
        await producer.send(Message(topic="T", body=b"x"))
    with pytest.raises(ClientClosedError):
        await producer.start()


def test_received_message_from_a_retry_record() -> None:
    ext = MessageExt(
        topic="%RETRY%G",
        body=b"b",
        properties={"RETRY_TOPIC": "T", "UNIQ_KEY": "U1", "KEYS": "a b", "TAGS": "A"},
        queue_id=0,
        queue_offset=5,
        commitlog_offset=100,
        store_port=10911,
        reconsume_times=2,
        offset_msg_id="7F0000010000000000000000000064",
    )
    queue = MessageQueue("%RETRY%G", "broker-a", 0)
    view = ReceivedMessage.from_ext(ext, queue)
    assert view.topic == "T" and view.queue == queue
    assert view.msg_id == "U1" and view.keys == ("a", "b") and view.tags == "A"
    assert view.delivery_attempt == 3 and view.store_host == "127.0.0.1:10911"
    data = view.to_dict()
    assert data["body"] == "b" and json.dumps(data)
    binary = ReceivedMessage.from_ext(MessageExt(topic="T", body=b"\xff"), MQ).to_dict()
    assert binary["body_base64"] == "/w=="


def test_namesrv_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    assert namesrv_addresses("a:1; b:2;") == ["a:1", "b:2"]
    assert namesrv_addresses(["a:1"]) == ["a:1"]
    monkeypatch.setenv("NAMESRV_ADDR", "env:9")
    assert namesrv_addresses(None) == ["env:9"]
    monkeypatch.delenv("NAMESRV_ADDR")
    assert namesrv_addresses(None) == ["127.0.0.1:9876"]
    with pytest.raises(ClientUsageError):
        namesrv_addresses(" ; ")


def test_route_queues() -> None:
    data = TopicRouteData(
        queue_datas=[
            QueueData(broker_name="b", read_queue_nums=2, write_queue_nums=3, perm=6),
            QueueData(broker_name="a", read_queue_nums=1, write_queue_nums=1, perm=4),  # read only
            QueueData(broker_name="c", read_queue_nums=2, write_queue_nums=2, perm=6),  # no master
        ],
        broker_datas=[
            BrokerData(cluster="C", broker_name="a", broker_addrs={0: "h:1"}),
            BrokerData(cluster="C", broker_name="b", broker_addrs={0: "h:2", 1: "h:3"}),
            BrokerData(cluster="C", broker_name="c", broker_addrs={1: "h:4"}),
        ],
    )
    route = TopicRoute.build("T", data)
    assert route.publish_queues == tuple(MessageQueue("T", "b", i) for i in range(3))
    assert [str(q) for q in route.subscribe_queues] == [
        "T@a#0",
        "T@b#0",
        "T@b#1",
        "T@c#0",
        "T@c#1",
    ]
    assert route.master_addr("b") == "h:2" and route.master_addr("c") is None
    assert route.any_addr("c") == "h:4"
    assert route.all_addrs() == {"h:1", "h:2", "h:3", "h:4"}


def test_ordered_topic_conf_fixes_the_queues() -> None:
    data = TopicRouteData(
        order_topic_conf="b1:2;b2:1",
        broker_datas=[BrokerData(cluster="C", broker_name="b1", broker_addrs={0: "h:1"})],
    )
    route = TopicRoute.build("T", data)
    assert route.publish_queues == (
        MessageQueue("T", "b1", 0),
        MessageQueue("T", "b1", 1),
        MessageQueue("T", "b2", 0),
    )


async def test_local_offset_file_round_trip(tmp_path: Path) -> None:
    store = LocalFileOffsetStore(tmp_path / "c" / "G")
    await store.load()
    assert store.read(MQ) is None
    store.update(MQ, 5)
    store.update(MQ, 3)  # increase-only by default
    assert store.read(MQ) == 5
    store.update(MQ, 3, increase_only=False)
    other = MessageQueue("U", "broker-b", 2)
    store.update(other, 9)
    await store.persist_all([MQ])
    raw = json.loads((tmp_path / "c" / "G" / "offsets.json").read_text())
    assert {"topic": "T", "brokerName": "broker-a", "queueId": 0, "offset": 3} in raw["offsetTable"]
    fresh = LocalFileOffsetStore(tmp_path / "c" / "G")
    await fresh.load()
    assert (fresh.read(MQ), fresh.read(other)) == (3, 9)
    assert await fresh.read_from_store(MessageQueue("T", "broker-a", 7)) is None
    assert not list((tmp_path / "c" / "G").glob("*.tmp"))


async def test_local_offset_file_falls_back_to_the_backup(tmp_path: Path) -> None:
    store = LocalFileOffsetStore(tmp_path)
    store.update(MQ, 1)
    await store.persist(MQ)
    store.update(MQ, 2)
    await store.persist(MQ)  # the first version is now offsets.json.bak
    (tmp_path / "offsets.json").write_text("{not json")
    fresh = LocalFileOffsetStore(tmp_path)
    await fresh.load()
    assert fresh.read(MQ) == 1


def test_default_offsets_dir() -> None:
    path = default_offsets_dir("1.2.3.4@9#1", "G")
    assert path.parts[-3:] == (".rocketmq_offsets", "1.2.3.4@9#1", "G")
    assert path.parent.parent.parent == Path.home()
