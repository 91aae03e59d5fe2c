"""RECALL_MESSAGE (370), PEEK_MESSAGE (200052), NOTIFICATION (200054) and BATCH_ACK_MESSAGE
(200151) over remoting, in raw frames, on a broker process with a manual clock."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode, encode_frame
from pocketmq.broker.protocol.message_codec import decode_messages
from pocketmq.broker.services.recall import build_recall_handle
from tests.integration.cluster import Cluster, Process
from tests.integration.raw import RawClient

GROUP = "extras-group"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(tmp_path_factory.mktemp("extras")) as cluster:
        yield cluster.start_standalone(extra_args=["--clock", "manual"])


def send(client: RawClient, topic: str, body: str, extra: str = "") -> None:
    response = client.send_message(
        topic, body.encode(), properties=f"UNIQ_KEY\x01{body}\x02{extra}"
    )
    assert response.code == ResponseCode.SUCCESS, response.remark


def recall(client: RawClient, topic: str, handle: str) -> RemotingCommand:
    ext = {"topic": topic, "recallHandle": handle, "producerGroup": "raw-producer"}
    return client.call(RemotingCommand(code=RequestCode.RECALL_MESSAGE, ext_fields=ext))


def peek(client: RawClient, topic: str, max_count: int = 32) -> RemotingCommand:
    ext = {"consumerGroup": GROUP, "topic": topic, "queueId": "-1", "maxMsgNums": str(max_count)}
    return client.call(RemotingCommand(code=RequestCode.PEEK_MESSAGE, ext_fields=ext))


def notification_command(topic: str, poll_ms: int) -> RemotingCommand:
    ext = {
        "consumerGroup": GROUP,
        "topic": topic,
        "queueId": "-1",
        "pollTime": str(poll_ms),
        "bornTime": "0",
    }
    return RemotingCommand(code=RequestCode.NOTIFICATION, ext_fields=ext)


def bitset(*indexes: int) -> str:
    """java.util.BitSet.toByteArray() as fastjson writes a byte[]: base64."""
    data = bytearray(max(indexes) // 8 + 1)
    for i in indexes:
        data[i // 8] |= 1 << (i % 8)
    return base64.b64encode(bytes(data)).decode()


def test_recall_cancels_a_waiting_message(broker: Process) -> None:
    with RawClient(broker.address) as client:
        now = int(client.clock()["now"])
        deliver = now + 60_000
        send(client, "Later", "recall-me", f"TIMER_DELIVER_MS\x01{deliver}\x02")
        send(client, "Later", "keep-me", f"TIMER_DELIVER_MS\x01{deliver}\x02")
        handle = build_recall_handle("Later", "broker-a", deliver, "recall-me")

        assert recall(client, "Other", handle).code == ResponseCode.TOPIC_NOT_EXIST
        assert recall(client, "Later", "bm90IGEgaGFuZGxl").code == ResponseCode.ILLEGAL_OPERATION
        wrong_topic = build_recall_handle("Jobs", "broker-a", deliver, "recall-me")
        refused = recall(client, "Later", wrong_topic)
        assert refused.code == ResponseCode.ILLEGAL_OPERATION and "topic" in refused.remark
        past = build_recall_handle("Later", "broker-a", now - 1, "recall-me")
        assert recall(client, "Later", past).code == ResponseCode.ILLEGAL_OPERATION

        done = recall(client, "Later", handle)
        assert done.code == ResponseCode.SUCCESS and done.ext_fields["msgId"] == "recall-me"
        again = recall(client, "Later", handle)
        assert again.code == ResponseCode.ILLEGAL_OPERATION and "not waiting" in again.remark

        client.clock("advance", duration="61s")
        _, popped = client.pop("Later", GROUP, poll_ms=10_000)  # the timer hands it over
        assert [m.body for m, _ in popped] == [b"keep-me"]


def test_peek_lends_nothing(broker: Process) -> None:
    with RawClient(broker.address) as client:
        assert peek(client, "Peeked").code == ResponseCode.TOPIC_NOT_EXIST
        for i in range(3):
            send(client, "Peeked", f"peek-{i}")
        seen = peek(client, "Peeked", max_count=2)
        assert seen.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_messages(seen.body)] == [b"peek-0", b"peek-1"]
        assert seen.ext_fields["restNum"] == "3"
        _, popped = client.pop("Peeked", GROUP)  # peeking took nothing away
        assert [m.body for m, _ in popped] == [b"peek-0", b"peek-1", b"peek-2"]
        empty = peek(client, "Peeked")
        assert empty.code == ResponseCode.PULL_NOT_FOUND and empty.ext_fields["restNum"] == "0"


def test_notification_answers_at_once_or_when_a_message_comes(broker: Process) -> None:
    with RawClient(broker.address) as client, RawClient(broker.address) as producer:
        send(producer, "Noticed", "first")
        ready = client.call(notification_command("Noticed", 0))
        assert ready.code == ResponseCode.SUCCESS and ready.ext_fields["hasMsg"] == "true"
        client.pop("Noticed", GROUP)  # the group has taken everything
        quiet = client.call(notification_command("Noticed", 0))
        assert quiet.ext_fields["hasMsg"] == "false"
        timed_out = client.call(notification_command("Noticed", 100))
        assert timed_out.code == ResponseCode.SUCCESS and timed_out.ext_fields["hasMsg"] == "false"
        # A held notification: answered once a message arrives, long before its poll time.
        held = notification_command("Noticed", 60_000)
        client.opaque += 1
        held.opaque = client.opaque
        client.send_bytes(encode_frame(held))
        send(producer, "Noticed", "second")
        woken = client.read_response(held.opaque)
        assert woken.code == ResponseCode.SUCCESS and woken.ext_fields["hasMsg"] == "true"


def test_batch_ack_acknowledges_the_set_bits(broker: Process) -> None:
    with RawClient(broker.address) as client:
        for i in range(4):
            send(client, "Batched", f"batch-{i}")
        _, popped = client.pop("Batched", GROUP, invisible_ms=10_000, queue_id=0)
        assert len(popped) == 4
        first = popped[0][1].split(" ")  # ExtraInfoUtil: start, pop time, invisible, revive, ...
        start, pop_time, invisible = int(first[0]), int(first[1]), int(first[2])
        offsets = [m.queue_offset for m, _ in popped]
        body = {
            "brokerName": "broker-a",
            "acks": [
                {
                    "c": GROUP,
                    "t": "Batched",
                    "r": "0",
                    "so": start,
                    "q": 0,
                    "rq": 0,
                    "pt": pop_time,
                    "it": invisible,
                    "b": bitset(offsets[0] - start, offsets[2] - start),
                }
            ],
        }
        command = RemotingCommand(
            code=RequestCode.BATCH_ACK_MESSAGE, body=json.dumps(body).encode()
        )
        assert client.call(command).code == ResponseCode.SUCCESS
        # Acknowledged ones are stale now; the others are still lent and come back later.
        assert client.ack("Batched", GROUP, popped[0][1]).code == ResponseCode.ILLEGAL_OPERATION
        assert client.ack("Batched", GROUP, popped[3][1]).code == ResponseCode.SUCCESS
        client.clock("advance", duration="11s")
        _, again = client.pop("Batched", GROUP)
        assert [m.body for m, _ in again] == [b"batch-1"]
        empty = RemotingCommand(code=RequestCode.BATCH_ACK_MESSAGE, body=b'{"acks": []}')
        assert client.call(empty).code == ResponseCode.NO_MESSAGE
        garbage = RemotingCommand(code=RequestCode.BATCH_ACK_MESSAGE, body=b"not json")
        assert client.call(garbage).code == ResponseCode.SYSTEM_ERROR
