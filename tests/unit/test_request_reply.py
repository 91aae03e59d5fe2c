"""Request-reply (RocketMQ 4.6+): the CLUSTER property, the reply topic, SEND_REPLY_MESSAGE(_V2)
and the push to the requester, the SDK's ``request`` / ``reply`` / ``create_reply``."""

from __future__ import annotations

import asyncio
import logging
import zlib
from typing import Any

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.codes import MessageSysFlag
from pocketmq.broker.protocol.headers import ReplyMessageRequestHeader, SendMessageRequestHeader
from pocketmq.client import Message, Producer
from pocketmq.client._reply import (
    PendingRequests,
    create_reply,
    reply_from_push,
    reply_topic,
    request_properties,
)
from pocketmq.client.connection import make_request
from pocketmq.client.errors import BrokerSystemError, ClientUsageError, RequestTimeoutError
from pocketmq.client.message import MessageQueue, ReceivedMessage
from pocketmq.store.message_store import PutMessage
from pocketmq.store.record import decode_properties, unpack_record


def _received(properties: dict[str, str], topic: str = "Ask") -> ReceivedMessage:
    return ReceivedMessage(
        topic=topic,
        body=b"q",
        tags=None,
        keys=(),
        properties=properties,
        msg_id="id",
        offset_msg_id="",
        queue=MessageQueue(topic, "broker-a", 0),
        queue_offset=0,
        commitlog_offset=0,
        flag=0,
        sys_flag=0,
        born_timestamp=1,
        born_host="127.0.0.1:1",
        store_timestamp=2,
        store_host="127.0.0.1:2",
        reconsume_times=0,
    )


def _stored_texts(broker: Broker, topic: str, queue_id: int = 0) -> list[tuple[bytes, str]]:
    """(body, properties text) of each message stored in the queue."""
    got = broker.store.get_messages(topic, queue_id, offset=0, max_count=32)
    records = [unpack_record(view) for _, _, view in got.messages]
    return [(bytes(r.body), r.properties.decode()) for r in records]


def _stored_properties(broker: Broker, topic: str) -> list[dict[str, str]]:
    return [decode_properties(text) for _, text in _stored_texts(broker, topic)]


# -- the SDK's pieces ---------------------------------------------------------------------------


def test_request_properties_are_javas() -> None:
    props = request_properties({"a": "1"}, "cid", "10.0.0.1@1#2", 3000)
    assert props == {
        "a": "1",
        "CORRELATION_ID": "cid",
        "REPLY_TO_CLIENT": "10.0.0.1@1#2",
        "TTL": "3000",
    }
    assert "MSG_TYPE" not in props  # Java marks replies only


def test_create_reply_addresses_the_clusters_reply_topic() -> None:
    request = _received(
        {
            "CLUSTER": "c1",
            "CORRELATION_ID": "cid",
            "REPLY_TO_CLIENT": "me",
            "TTL": "3000",
            "TAGS": "not-copied",
        }
    )
    reply = create_reply(request, b"answer", properties={"x": "y"})
    assert reply.topic == "c1_REPLY_TOPIC" == reply_topic("c1")
    assert reply.body == b"answer"
    assert reply.properties == {
        "x": "y",
        "MSG_TYPE": "reply",
        "CORRELATION_ID": "cid",
        "REPLY_TO_CLIENT": "me",
        "TTL": "3000",
    }
    # what Java leaves null is left out, not written as "None"
    partial = create_reply(_received({"CLUSTER": "c1"}), b"a")
    assert partial.properties == {"MSG_TYPE": "reply"}


def test_create_reply_needs_the_cluster() -> None:
    with pytest.raises(ClientUsageError, match=r"property\[CLUSTER\] is null"):
        create_reply(_received({"CORRELATION_ID": "cid"}), b"a")


def test_reply_push_header_uses_javas_keys() -> None:
    header = ReplyMessageRequestHeader(
        producer_group="g",
        topic="DefaultCluster_REPLY_TOPIC",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=5,
        flag=0,
        properties="MSG_TYPE\x01reply\x02",
        reconsume_times=0,
        born_host="10.0.0.2:3333",
        store_host="10.0.0.1:10911",
        store_timestamp=6,
    )
    assert header.to_ext_fields() == {
        "producerGroup": "g",
        "topic": "DefaultCluster_REPLY_TOPIC",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "5",
        "flag": "0",
        "properties": "MSG_TYPE\x01reply\x02",
        "reconsumeTimes": "0",
        "unitMode": "false",
        "bornHost": "10.0.0.2:3333",
        "storeHost": "10.0.0.1:10911",
        "storeTimestamp": "6",
    }


def _push_ext(properties: str, sys_flag: int = 0) -> dict[str, str]:
    return {
        "producerGroup": "g",
        "topic": "DefaultCluster_REPLY_TOPIC",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "-1",
        "sysFlag": str(sys_flag),
        "bornTimestamp": "5",
        "flag": "0",
        "properties": properties,
        "unitMode": "false",
        "bornHost": "10.0.0.2:3333",
        "storeHost": "10.0.0.1:10911",
        "storeTimestamp": "6",
    }


def test_reply_from_push_inflates_and_marks_arrival() -> None:
    header = ReplyMessageRequestHeader.from_ext_fields(
        _push_ext("CORRELATION_ID\x01c\x02KEYS\x01a b\x02", int(MessageSysFlag.COMPRESSED))
    )
    reply = reply_from_push(header, zlib.compress(b"big answer"))
    assert reply.body == b"big answer"
    assert reply.keys == ("a", "b")
    assert reply.properties["CORRELATION_ID"] == "c"
    assert reply.properties["ARRIVE_TIME"].isdigit()
    assert (reply.born_host, reply.store_host, reply.store_timestamp) == (
        "10.0.0.2:3333",
        "10.0.0.1:10911",
        6,
    )


class _Conn:
    addr = "127.0.0.1:1"


async def test_pending_requests_match_by_correlation_id(caplog: Any) -> None:
    pending = PendingRequests()
    first, second = pending.add("one"), pending.add("two")
    push = RemotingCommand(
        code=RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT,
        opaque=7,
        ext_fields=_push_ext("CORRELATION_ID\x01two\x02"),
        body=b"for two",
    )
    answer = await pending.on_push(_Conn(), push)  # type: ignore[arg-type]
    assert answer.code == ResponseCode.SUCCESS and answer.opaque == 7 and answer.is_response
    assert second.done() and second.result().body == b"for two"
    assert not first.done()
    assert len(pending) == 1
    # a reply nobody waits for (late, or not ours) is answered SUCCESS and only logged
    with caplog.at_level(logging.WARNING, logger="pocketmq.client.producer"):
        again = await pending.on_push(_Conn(), push)  # type: ignore[arg-type]
    assert again.code == ResponseCode.SUCCESS
    assert "not matched any request, CorrelationId: two" in caplog.text
    assert not first.done()


async def test_a_malformed_push_is_refused() -> None:
    pending = PendingRequests()
    push = RemotingCommand(code=RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, ext_fields={"topic": "t"})
    answer = await pending.on_push(_Conn(), push)  # type: ignore[arg-type]
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark == "process reply message fail"


# -- the broker ---------------------------------------------------------------------------------


async def test_the_reply_topic_exists_from_the_start() -> None:
    async with Broker(port=0, store=None) as broker:
        config = broker.topics.get("DefaultCluster_REPLY_TOPIC")
        assert config is not None
        assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (1, 1, 6)


async def test_sent_messages_carry_the_cluster() -> None:
    async with Broker(port=0, store=None) as broker:
        broker.topics.create("T", read_queue_nums=1, write_queue_nums=1)
        for text in ("A\x01b\x02", "A\x01b", "", "CLUSTER\x01other\x02A\x01b\x02"):
            props = decode_properties(text)
            message = PutMessage(
                topic="T", body=b"x", properties=props, properties_text=text or None
            )
            broker.send.put(message, props)
        stored = _stored_properties(broker, "T")
        assert [p.get("CLUSTER") for p in stored] == ["DefaultCluster"] * 4
        assert [p.get("A") for p in stored] == ["b", "b", None, "b"]  # the rest kept
        # the text as sent, with the cluster appended (5.x sends no last separator)
        # (the store may add its own CRC property after it)
        assert _stored_texts(broker, "T")[1][1].startswith(
            "A\x01b\x02CLUSTER\x01DefaultCluster\x02"
        )


async def test_request_and_reply_through_the_broker() -> None:
    async with Broker(port=0, store=None) as broker:
        ns = broker.namesrv_address
        async with (
            Producer("requester", namesrv=ns) as requester,
            Producer("replier", namesrv=ns) as replier,
        ):

            async def answer_when_stored() -> None:
                # the consumer's part, without a consumer: read the request from the store
                while True:
                    for queue_id in range(4):
                        for body, text in _stored_texts(broker, "Ask", queue_id):
                            request = _received(decode_properties(text))
                            await replier.reply(request, b"answer:" + body)
                            return
                    await asyncio.sleep(0.01)

            task = asyncio.create_task(answer_when_stored())
            reply = await requester.request(Message(topic="Ask", body=b"q1"), 5)
            await task
            assert reply.body == b"answer:q1"
            assert reply.topic == "DefaultCluster_REPLY_TOPIC"
            assert reply.properties["MSG_TYPE"] == "reply"
            assert reply.properties["REPLY_TO_CLIENT"] == requester.client_id
            assert reply.properties["TTL"] == "5000"
            assert "PUSH_REPLY_TIME" in reply.properties
            assert "ARRIVE_TIME" in reply.properties
            # also stored (storeReplyMessageEnable), as the replier sent it: no CLUSTER
            (stored,) = _stored_properties(broker, "DefaultCluster_REPLY_TOPIC")
            assert stored["CORRELATION_ID"] == reply.properties["CORRELATION_ID"]
            assert "CLUSTER" not in stored and "PUSH_REPLY_TIME" not in stored


async def test_a_request_without_reply_times_out() -> None:
    async with (
        Broker(port=0, store=None) as broker,
        Producer("requester", namesrv=broker.namesrv_address) as requester,
    ):
        with pytest.raises(RequestTimeoutError):
            await requester.request(Message(topic="Ask", body=b"q"), 0.3)
        assert len(requester._requests) == 0  # forgotten, not leaked


async def test_a_reply_to_a_gone_requester_is_refused(caplog: Any) -> None:
    async with (
        Broker(port=0, store=None) as broker,
        Producer("replier", namesrv=broker.namesrv_address) as replier,
    ):
        request = _received(
            {"CLUSTER": "DefaultCluster", "CORRELATION_ID": "c", "REPLY_TO_CLIENT": "gone@1"}
        )
        with (
            caplog.at_level(logging.WARNING, logger="pocketmq.broker"),
            pytest.raises(BrokerSystemError, match="channel of <gone@1> not found"),
        ):
            await replier.reply(request, b"late")
        assert "channel of <gone@1> not found" in caplog.text
        # stored all the same, as RocketMQ does
        assert len(_stored_properties(broker, "DefaultCluster_REPLY_TOPIC")) == 1


async def test_send_reply_message_v1_header_without_reply_to_client() -> None:
    async with (
        Broker(port=0, store=None) as broker,
        Producer("replier", namesrv=broker.namesrv_address) as replier,
    ):
        header = SendMessageRequestHeader(
            producer_group="replier",
            topic="DefaultCluster_REPLY_TOPIC",
            default_topic="TBW102",
            default_topic_queue_nums=4,
            queue_id=0,
            sys_flag=0,
            born_timestamp=1,
            flag=0,
            properties="MSG_TYPE\x01reply\x02",
        )
        cmd = make_request(RequestCode.SEND_REPLY_MESSAGE, header, body=b"x")
        answer = await replier._core.invoke(broker.address, cmd, 3000)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "reply message properties[REPLY_TO_CLIENT] is null"
        # stored, so the answer names where
        assert answer.ext_fields is not None and answer.ext_fields["queueOffset"] == "0"


def test_the_reply_topic_is_a_system_topic() -> None:
    from pocketmq.broker.protocol.topics import system_topic_refusal
    from pocketmq.store.topics import is_system_topic, reply_topic

    assert reply_topic("DefaultCluster") == "DefaultCluster_REPLY_TOPIC"
    assert is_system_topic("DefaultCluster_REPLY_TOPIC")  # never deleted, not a user topic
    assert system_topic_refusal("DefaultCluster_REPLY_TOPIC") is not None
    assert not is_system_topic("REPLY_TOPIC_orders")
