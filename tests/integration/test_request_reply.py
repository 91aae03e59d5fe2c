"""Request-reply against a real ``pocketmq standalone``: a PushConsumer answers requests that a
Producer sends with ``request``; a reply whose requester went away is refused cleanly; and the
exact frames a Java client exchanges (SEND_REPLY_MESSAGE_V2 in, PUSH_REPLY_MESSAGE_TO_CLIENT
out) with raw sockets."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Iterator

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode, encode_frame
from pocketmq.broker.protocol.headers import HeartbeatData, ProducerData, encode_json_body
from pocketmq.client import Message, Producer, PushConsumer
from pocketmq.client.errors import BrokerSystemError, RequestTimeoutError
from pocketmq.client.message import ReceivedMessage
from tests.integration.cluster import Cluster, Process
from tests.integration.raw import RawClient

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(tmp_path_factory.mktemp("request-reply")) as cluster:
        yield cluster.start_standalone()


def _namesrv(process: Process) -> str:
    return f"127.0.0.1:{process.extra['namesrv_port']}"


async def test_a_push_consumer_answers_a_request(standalone: Process) -> None:
    ns = _namesrv(standalone)
    async with Producer("replier", namesrv=ns) as replier:

        async def answer(message: ReceivedMessage) -> None:
            await replier.reply(message, b"pong:" + message.body)

        consumer = PushConsumer("answerers", namesrv=ns, consume_from="first", listener=answer)
        consumer.subscribe("Ping", "*")
        async with consumer, Producer("requester", namesrv=ns) as requester:
            replies = await asyncio.gather(
                *(requester.request(Message(topic="Ping", body=b"%d" % i), 10) for i in range(3))
            )
            # each request gets its own reply, matched by correlation id
            assert [r.body for r in replies] == [b"pong:0", b"pong:1", b"pong:2"]
            assert {r.topic for r in replies} == {REPLY_TOPIC}
            assert len({r.properties["CORRELATION_ID"] for r in replies}) == 3
            assert {r.properties["REPLY_TO_CLIENT"] for r in replies} == {requester.client_id}


async def test_a_request_nobody_answers_times_out(standalone: Process) -> None:
    async with Producer("lonely", namesrv=_namesrv(standalone)) as requester:
        with pytest.raises(RequestTimeoutError):
            await requester.request(Message(topic="NobodyListens", body=b"hello?"), 0.5)


async def test_a_reply_after_the_requester_went_away_is_refused(standalone: Process) -> None:
    ns = _namesrv(standalone)
    async with Producer("replier-late", namesrv=ns) as replier:
        async with Producer("impatient", namesrv=ns) as requester:
            with pytest.raises(RequestTimeoutError):
                await requester.request(Message(topic="SlowService", body=b"q"), 0.3)
            client_id = requester.client_id
        # the request, as a consumer reads it after the requester closed
        consumer = PushConsumer("slow", namesrv=ns, consume_from="first")
        consumer.subscribe("SlowService", "*")
        async with consumer:
            request = await asyncio.wait_for(anext(aiter(consumer)), 10)
            await consumer.ack(request)
        assert request.properties["REPLY_TO_CLIENT"] == client_id
        assert request.properties["CLUSTER"] == "DefaultCluster"
        with pytest.raises(BrokerSystemError, match=f"channel of <{client_id}> not found"):
            await replier.reply(request, b"too late")
    assert f"channel of <{client_id}> not found" in standalone.log_path.read_text()


def _java_json_frame(code: int, opaque: int, ext: dict[str, str], body: bytes) -> bytes:
    """A request as Java 4.9.x writes it: fastjson header (keys in alphabetical order, control
    characters as \\u0001 / \\u0002), serialize type JSON, then the body."""
    fields = json.dumps(ext, separators=(",", ":"))
    header = (
        f'{{"code":{code},"extFields":{fields},"flag":0,"language":"JAVA","opaque":{opaque},'
        '"serializeTypeCurrentRPC":"JSON","version":409}'
    ).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def _next_request(client: RawClient) -> RemotingCommand:
    """The next request the broker sends to ``client`` (not a response)."""
    while True:
        for frame in client.pending:
            if not frame.is_response:
                client.pending.remove(frame)
                return frame
        data = client.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("the broker closed the connection")
        client.pending.extend(client.decoder.feed(data))


def test_raw_java_frames_of_a_reply(standalone: Process) -> None:
    with RawClient(standalone.address) as requester, RawClient(standalone.address) as replier:
        # the requester says who it is, as a producer (HEART_BEAT)
        heartbeat = HeartbeatData(
            client_id="10.1.2.3@raw-requester",
            producer_data_set=[ProducerData(group_name="raw-requesters")],
        )
        answer = requester.call(
            RemotingCommand(code=RequestCode.HEART_BEAT, body=encode_json_body(heartbeat))
        )
        assert answer.code == ResponseCode.SUCCESS
        properties = (
            "MSG_TYPE\x01reply\x02CORRELATION_ID\x01c0ffee\x02"
            "REPLY_TO_CLIENT\x0110.1.2.3@raw-requester\x02TTL\x013000\x02"
            "UNIQ_KEY\x01AC11000100002A9F0000000000000001\x02WAIT\x01true\x02"
        )
        ext = {  # SendMessageRequestHeaderV2 as createReplyMessage + send give it
            "a": "raw-repliers",
            "b": REPLY_TOPIC,
            "c": "TBW102",
            "d": "4",
            "e": "0",
            "f": "0",
            "g": "1700000000000",
            "h": "0",
            "i": properties,
            "j": "0",
            "k": "false",
            "m": "false",
            "n": "broker-a",
        }
        frame = _java_json_frame(RequestCode.SEND_REPLY_MESSAGE_V2, 77, ext, b"the answer")
        assert b'"i":"MSG_TYPE\\u0001reply\\u0002CORRELATION_ID' in frame  # Java's escaping
        replier.send_bytes(frame)
        push = _next_request(requester)
        assert push.code == RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT
        assert push.body == b"the answer"
        pushed = push.ext_fields or {}
        assert pushed["topic"] == REPLY_TOPIC and pushed["producerGroup"] == "raw-repliers"
        assert pushed["queueId"] == "0" and pushed["bornTimestamp"] == "1700000000000"
        assert pushed["storeHost"] == standalone.address
        assert pushed["bornHost"].startswith("127.0.0.1:")
        assert int(pushed["storeTimestamp"]) > 0
        assert pushed["properties"].startswith(properties)  # + PUSH_REPLY_TIME
        assert "PUSH_REPLY_TIME\x01" in pushed["properties"]
        # the requester takes it, as ClientRemotingProcessor answers
        requester.send_bytes(encode_frame(push.make_response(ResponseCode.SUCCESS)))
        result = replier.read_response(77)
        assert result.code == ResponseCode.SUCCESS, result.remark
        assert result.ext_fields is not None
        assert result.ext_fields["queueId"] == "0"
        assert result.ext_fields["TRACE_ON"] == "true"
        assert len(result.ext_fields["msgId"]) == 32  # stored: the offset message id

        # SEND_REPLY_MESSAGE (324, long names) to a client that is not connected
        long_ext = {
            "producerGroup": "raw-repliers",
            "topic": REPLY_TOPIC,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": "0",
            "sysFlag": "0",
            "bornTimestamp": "1700000000000",
            "flag": "0",
            "properties": properties.replace("raw-requester", "gone"),
            "reconsumeTimes": "0",
            "unitMode": "false",
            "batch": "false",
        }
        replier.send_bytes(_java_json_frame(RequestCode.SEND_REPLY_MESSAGE, 78, long_ext, b"x"))
        refused = replier.read_response(78)
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert refused.remark == "push reply message fail, channel of <10.1.2.3@gone> not found."
