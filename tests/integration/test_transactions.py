"""Transactional messages against a real broker process on a manual clock."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import EndTransactionRequestHeader, SendMessageRequestHeaderV2
from pocketmq.broker.protocol.message_codec import decode_message, decode_messages
from pocketmq.ids import decode_offset_msg_id
from tests.integration.cluster import Cluster, Process
from tests.integration.raw import RawClient

GROUP = "tx-producer"
COMMIT, ROLLBACK, UNKNOWN = 8, 12, 0


@pytest.fixture
def broker(tmp_path) -> Iterator[Process]:  # noqa: ANN001
    with Cluster(tmp_path) as cluster:
        yield cluster.start_standalone(extra_args=["--clock", "manual"])


def send_half(client: RawClient, topic: str, body: bytes, key: str) -> tuple[int, int]:
    """(commit log offset, queue offset) of the half message."""
    header = SendMessageRequestHeaderV2(
        producer_group=GROUP,
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0x4,
        born_timestamp=int(client.clock()["now"]),
        flag=0,
        properties=f"TRAN_MSG\x01true\x02PGROUP\x01{GROUP}\x02UNIQ_KEY\x01{key}\x02",
    )
    response = client.call(
        RemotingCommand(
            code=RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_ext_fields(), body=body
        )
    )
    assert response.code == ResponseCode.SUCCESS, response.remark
    return decode_offset_msg_id(response.ext_fields["msgId"]).physical_offset, int(
        response.ext_fields["queueOffset"]
    )


def end(
    client: RawClient,
    offset: int,
    queue_offset: int,
    key: str,
    outcome: int,
    *,
    from_check: bool = False,
) -> RemotingCommand:
    header = EndTransactionRequestHeader(
        producer_group=GROUP,
        tran_state_table_offset=queue_offset,
        commit_log_offset=offset,
        commit_or_rollback=outcome,
        from_transaction_check=from_check,
        msg_id=key,
    )
    return client.call(
        RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=header.to_ext_fields())
    )


def visible(client: RawClient, topic: str) -> list[bytes]:
    response = client.pull(topic, 0, 0, group="tx-reader")
    return [m.body for m in decode_messages(response.body)] if response.code == 0 else []


def tx_cli(broker: Process, *args: str, as_json: bool = True) -> list[dict]:
    """``pocketmq tx ...`` against the broker: its --json rows, or its readable lines."""
    done = subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", "tx", *args, "--broker", broker.address]
        + (["--json"] if as_json else []),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    if not as_json:
        return done.stdout.splitlines()  # type: ignore[return-value]
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_commit_and_rollback(broker: Process) -> None:
    with RawClient(broker.address) as client:
        client.heartbeat_producer(GROUP)
        committed = send_half(client, "Payments", b"pay-1", "TX1")
        rolled = send_half(client, "Payments", b"pay-2", "TX2")
        assert visible(client, "Payments") == []
        assert end(client, *committed, "TX1", COMMIT).code == ResponseCode.SUCCESS
        assert end(client, *rolled, "TX2", ROLLBACK).code == ResponseCode.SUCCESS
        again = end(client, *committed, "TX1", COMMIT)
        assert again.code == ResponseCode.SUCCESS and again.remark == "already ended"
        response = client.pull("Payments", 0, 0, group="tx-reader")
        [message] = decode_messages(response.body)
        assert message.body == b"pay-1" and message.prepared_transaction_offset == committed[0]
        assert message.sys_flag & 0xC == COMMIT and "TRAN_MSG" not in message.properties
        assert tx_cli(broker, "list") == []


def test_unknown_then_a_check_that_commits(broker: Process) -> None:
    with RawClient(broker.address) as client:
        client.heartbeat_producer(GROUP)
        offset, queue_offset = send_half(client, "Orders", b"order-9", "TX9")
        assert end(client, offset, queue_offset, "TX9", UNKNOWN).code == ResponseCode.SUCCESS
        [pending] = tx_cli(broker, "list")
        assert pending["transaction_id"] == "TX9" and pending["check_times"] == 0
        # raw epoch milliseconds in --json, ISO times for a person
        assert isinstance(pending["next_check_ms"], int)
        header, row = tx_cli(broker, "list", as_json=False)
        assert header.split()[:6] == [
            "transaction_id", "producer_group", "topic", "check_times", "next_check", "born_timestamp"
        ]  # fmt: skip
        assert row.split()[0] == "TX9" and re.search(r" \d{4}-\d\d-\d\dT[\d:.]+Z ", row)
        client.clock("advance", duration="5999ms")
        assert client.requests_received(RequestCode.CHECK_TRANSACTION_STATE) == 0
        client.clock("advance", duration="1ms")  # transactionTimeOut: 6 s after birth
        check = client.wait_request(RequestCode.CHECK_TRANSACTION_STATE)
        half = decode_message(check.body)
        assert (
            half.topic == "Orders"
            and half.body == b"order-9"
            and check.ext_fields["transactionId"] == "TX9"
        )
        answer = end(
            client,
            int(check.ext_fields["commitLogOffset"]),
            int(check.ext_fields["tranStateTableOffset"]),
            "TX9",
            COMMIT,
            from_check=True,
        )
        assert answer.code == ResponseCode.SUCCESS and answer.remark == "committed"
        assert visible(client, "Orders") == [b"order-9"]
        client.clock("advance", duration="10m")
        assert (
            client.requests_received(RequestCode.CHECK_TRANSACTION_STATE) == 0
        )  # never after a commit


def test_unknown_forever_gives_fifteen_checks_then_the_discard_topic(broker: Process) -> None:
    with RawClient(broker.address) as client:
        client.heartbeat_producer(GROUP)
        send_half(client, "Limbo", b"never-decided", "TXL")
        checks = 0
        for _ in range(20):
            client.clock("advance", duration="30s")
            checks += client.requests_received(RequestCode.CHECK_TRANSACTION_STATE)
            client.heartbeat_producer(GROUP)
        assert checks == 15
        assert tx_cli(broker, "list") == []
        assert visible(client, "TRANS_CHECK_MAX_TIME_TOPIC") == [b"never-decided"]
        assert visible(client, "Limbo") == []


def test_no_live_producer_is_checked_later_without_counting(broker: Process) -> None:
    with RawClient(broker.address) as producer:
        producer.heartbeat_producer(GROUP)
        offset, queue_offset = send_half(producer, "Later", b"later", "TXN")
    with RawClient(broker.address) as admin:  # the producer is gone
        admin.clock("advance", duration="2m")
        [pending] = tx_cli(broker, "list")
        assert pending["check_times"] == 0
    with RawClient(broker.address) as restarted:  # the producer's restarted process
        restarted.heartbeat_producer(GROUP, "raw-producer@2")
        restarted.clock("advance", duration="30s")
        check = restarted.wait_request(RequestCode.CHECK_TRANSACTION_STATE)
        assert check.ext_fields["transactionId"] == "TXN"
        assert (
            end(
                restarted,
                int(check.ext_fields["commitLogOffset"]),
                int(check.ext_fields["tranStateTableOffset"]),
                "TXN",
                ROLLBACK,
                from_check=True,
            ).code
            == 0
        )
        assert visible(restarted, "Later") == []


def test_a_broker_restart_resumes_the_checks(broker: Process) -> None:
    with RawClient(broker.address) as client:
        client.heartbeat_producer(GROUP)
        send_half(client, "Resume", b"resume-me", "TXR")
        client.clock("advance", duration="6s")
        assert client.requests_received(RequestCode.CHECK_TRANSACTION_STATE) == 1
        now = int(client.clock()["now"])
    broker.kill()
    broker.start()
    with RawClient(broker.address) as client:
        client.heartbeat_producer(GROUP)
        [pending] = tx_cli(broker, "list")
        assert pending["check_times"] == 1
        client.clock("set", time=str(now + 31_000))
        check = client.wait_request(RequestCode.CHECK_TRANSACTION_STATE)
        assert check.ext_fields["transactionId"] == "TXR"
        answer = end(
            client,
            int(check.ext_fields["commitLogOffset"]),
            int(check.ext_fields["tranStateTableOffset"]),
            "TXR",
            COMMIT,
            from_check=True,
        )
        assert answer.remark == "committed"
        assert visible(client, "Resume") == [b"resume-me"]


def test_check_now_from_the_command_line(broker: Process) -> None:
    with RawClient(broker.address) as client:
        client.heartbeat_producer(GROUP)
        send_half(client, "Now", b"check-me", "TXC")
        [outcome] = tx_cli(broker, "check-now", "TXC")
        assert outcome == {"transaction_id": "TXC", "outcome": "check 1 sent"}
        assert (
            client.wait_request(RequestCode.CHECK_TRANSACTION_STATE).ext_fields["transactionId"]
            == "TXC"
        )
        [pending] = tx_cli(broker, "list")
        assert pending["check_times"] == 1
