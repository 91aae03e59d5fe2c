"""Bad input against a real broker process: it answers with an error code or closes only the
offending connection; other clients carry on; nothing is stored for a refused send."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import GetMaxOffsetRequestHeader
from tests.integration.cluster import Cluster, Process
from tests.integration.raw import RawClient


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(tmp_path_factory.mktemp("bad-input")) as cluster:
        yield cluster.start_standalone()


def max_offset(client: RawClient, topic: str, queue_id: int = 0) -> int:
    header = GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id)
    response = client.call(
        RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields=header.to_ext_fields())
    )
    assert response.code == ResponseCode.SUCCESS
    return int(response.ext_fields["offset"])


def test_a_good_client_works(broker: Process) -> None:
    with RawClient(broker.address) as client:
        response = client.send_message("GoodTopic", b"hello")
        assert response.code == ResponseCode.SUCCESS, response.remark
        pulled = client.pull("GoodTopic", 0, 0)
        assert pulled.code == ResponseCode.SUCCESS and b"hello" in pulled.body


def test_garbage_bytes_close_only_that_connection(broker: Process) -> None:
    with RawClient(broker.address) as bystander, RawClient(broker.address) as bad:
        bad.send_bytes(b"\x00\x00\x00\x10" + b"\xff" * 16)  # type byte 0xff: no such serialize type
        assert bad.closed_by_peer()
        assert bystander.send_message("Bystander", b"still fine").code == ResponseCode.SUCCESS


def test_a_frame_over_16_mib_is_refused_before_it_is_read(broker: Process) -> None:
    with RawClient(broker.address) as bad:
        bad.send_bytes(struct.pack(">i", 16 * 1024 * 1024 + 1) + b"\x00\x00\x00\x02{}")
        assert bad.closed_by_peer()
    with RawClient(broker.address) as client:
        assert client.send_message("AfterBigFrame", b"ok").code == ResponseCode.SUCCESS


def test_a_header_that_is_not_json_closes_the_connection(broker: Process) -> None:
    header = b"this is not json"
    with RawClient(broker.address) as bad:
        bad.send_bytes(struct.pack(">ii", 4 + len(header), len(header)) + header)
        assert bad.closed_by_peer()


@pytest.mark.parametrize(
    "header",
    [
        # 16 MiB would block a pure-Python reader for seconds; refused unread past 64 KiB
        b"{code:'10',extFields:{'k':'" + b"v" * (1024 * 1024) + b"'}}",
        b'{"code":10,"extFields":{"k":' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
    ],
    ids=["huge-lenient-header", "deeply-nested-header"],
)
def test_a_header_too_big_to_read_leniently_or_too_deep_closes_only_that_connection(
    broker: Process, header: bytes
) -> None:
    with RawClient(broker.address) as bystander, RawClient(broker.address) as bad:
        bad.send_bytes(struct.pack(">ii", 4 + len(header), len(header)) + header)
        assert bad.closed_by_peer()
        assert bystander.send_message("Bystander", b"still fine").code == ResponseCode.SUCCESS
    assert "Traceback" not in broker.log_tail(200)


def test_unknown_request_code(broker: Process) -> None:
    with RawClient(broker.address) as client:
        response = client.call(RemotingCommand(code=4242))
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "4242" in response.remark


def test_unknown_topic_and_group(broker: Process) -> None:
    with RawClient(broker.address) as client:
        assert client.pull("NoSuchTopic", 0, 0).code == ResponseCode.TOPIC_NOT_EXIST
        response = client.call(
            RemotingCommand(
                code=RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields={"consumerGroup": "nobody"}
            )
        )
        assert response.code == ResponseCode.SYSTEM_ERROR and "no consumer" in response.remark
        missing_field = client.call(
            RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={"topic": "GoodTopic"})
        )
        assert (
            missing_field.code == ResponseCode.SYSTEM_ERROR
            and "consumerGroup" in missing_field.remark
        )


def test_refused_sends_store_nothing(broker: Process) -> None:
    with RawClient(broker.address) as client:
        bad_name = client.send_message("bad topic!", b"x")
        assert bad_name.code == ResponseCode.SYSTEM_ERROR and "character" in bad_name.remark
        too_big = client.send_message("Refused", b"x" * (4 * 1024 * 1024 + 1))
        assert too_big.code == ResponseCode.MESSAGE_ILLEGAL and "body_size_max" in too_big.remark
        system = client.send_message("SCHEDULE_TOPIC_XXXX", b"x")
        assert system.code == ResponseCode.NO_PERMISSION
        bad_queue = client.send_message("Refused", b"x", queue_id=99)
        assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "queueId" in bad_queue.remark
        big_properties = client.send_message(
            "Refused", b"x", properties="K\x01" + "v" * 33000 + "\x02"
        )
        assert big_properties.code == ResponseCode.MESSAGE_ILLEGAL
        assert all(max_offset(client, "Refused", q) == 0 for q in range(4))
        assert client.send_message("Refused", b"now a good one").code == ResponseCode.SUCCESS


def test_a_client_that_disconnects_mid_request(broker: Process) -> None:
    with RawClient(broker.address) as half:
        half.send_bytes(struct.pack(">i", 200) + b'\x00\x00\x00\x10{"code":10')  # a frame cut short
    with RawClient(broker.address) as poller:
        header_offset = max_offset(poller, "GoodTopic")
        # A long poll whose client goes away before it is answered.
        poller.sock.sendall(
            __import__("pocketmq.broker.protocol", fromlist=["encode_frame"]).encode_frame(
                RemotingCommand(
                    code=RequestCode.PULL_MESSAGE,
                    opaque=77,
                    ext_fields={
                        "consumerGroup": "g",
                        "topic": "GoodTopic",
                        "queueId": "0",
                        "queueOffset": str(header_offset),
                        "maxMsgNums": "32",
                        "sysFlag": "6",
                        "commitOffset": "0",
                        "suspendTimeoutMillis": "15000",
                        "subscription": "*",
                        "subVersion": "0",
                    },
                )
            )
        )
    with RawClient(broker.address) as client:
        assert (
            client.send_message("GoodTopic", b"after the disconnects").code == ResponseCode.SUCCESS
        )
        assert client.pull("GoodTopic", 0, header_offset).code == ResponseCode.SUCCESS
    assert broker.running
    assert "Traceback" not in Path(broker.log_path).read_text()


def test_a_batch_is_stored_as_one_record_per_message(broker: Process) -> None:
    from pocketmq.broker.protocol.message_codec import BatchMessage, decode_messages, encode_batch

    body = encode_batch(
        [
            BatchMessage(body=f"b{i}".encode(), properties={"UNIQ_KEY": f"B{i}", "TAGS": "t"})
            for i in range(3)
        ]
    )
    with RawClient(broker.address) as client:
        response = client.send_message("Batched", body, code=RequestCode.SEND_BATCH_MESSAGE)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert response.ext_fields["transactionId"] == "B0,B1,B2"
        assert len(response.ext_fields["msgId"].split(",")) == 3
        pulled = decode_messages(client.pull("Batched", 0, 0).body)
        assert [(m.body, m.properties["UNIQ_KEY"], m.queue_offset) for m in pulled] == [
            (b"b0", "B0", 0),
            (b"b1", "B1", 1),
            (b"b2", "B2", 2),
        ]
        bad = client.send_message(
            "Batched", b"\x00\x00\x00\x05xx", code=RequestCode.SEND_BATCH_MESSAGE
        )
        assert bad.code == ResponseCode.MESSAGE_ILLEGAL
