"""Topic message types (RocketMQ 5.x ``message.type``) and subscription groups
(UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, GET_ALL_SUBSCRIPTIONGROUP_CONFIG) against the embedded
broker, through the SDK's ``Admin``, raw requests, and the command line."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import CreateTopicRequestHeader
from pocketmq.broker.services.topics import topic_message_type
from pocketmq.client import Admin, ClientUsageError
from tests.integration.raw import call


def create_topic_request(topic: str, attributes: str | None) -> RemotingCommand:
    header = CreateTopicRequestHeader(
        topic=topic,
        default_topic="TBW102",
        read_queue_nums=4,
        write_queue_nums=4,
        perm=6,
        topic_filter_type="SINGLE_TAG",
        attributes=attributes,
    )
    return RemotingCommand(
        code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=header.to_ext_fields()
    )


async def test_topic_message_types() -> None:
    async with Broker(port=0, store=None) as broker, Admin(broker.namesrv_address) as admin:
        assert await admin.create_topic("Ledger", 4, message_type="FIFO") == [
            broker.config.broker_name
        ]
        ledger = broker.topics.get("Ledger")
        assert ledger is not None and ledger.attributes == {"message.type": "FIFO"}
        assert topic_message_type(ledger) == "FIFO"

        # an update that names no type keeps it; one that does changes it
        await admin.create_topic("Ledger", 8)
        ledger = broker.topics.get("Ledger")
        assert ledger is not None and ledger.read_queue_nums == 8
        assert topic_message_type(ledger) == "FIFO"
        await admin.create_topic("Ledger", 8, message_type="MIXED")
        assert topic_message_type(broker.topics.get("Ledger")) == "MIXED"  # type: ignore[arg-type]

        await admin.create_topic("Plain", 2)
        plain = broker.topics.get("Plain")
        assert plain is not None and plain.attributes == {}
        assert topic_message_type(plain) == "NORMAL"

        # topic status shows each queue's type, as its broker has it
        assert {s.message_type for s in await admin.topic_status("Ledger")} == {"MIXED"}
        rows = [s.to_dict() for s in await admin.topic_status("Plain")]
        assert len(rows) == 2 and {r["message_type"] for r in rows} == {"NORMAL"}

        with pytest.raises(ClientUsageError, match="message_type must be one of"):
            await admin.create_topic("Refused", 2, message_type="fifo")
        assert broker.topics.get("Refused") is None


async def test_the_broker_refuses_bad_attributes_and_changes_nothing() -> None:
    async with Broker(port=0, store=None) as broker:
        version = broker.topics.data_version
        for attributes, reason in (
            ("+message.type=BOGUS", "'BOGUS' is not one of NORMAL, FIFO"),
            ("message.type=FIFO", "not of the form +key=value"),
            ("-message.type", "only +key=value"),
        ):
            response = await call(broker.address, create_topic_request("Bad", attributes))
            assert response.code == ResponseCode.SYSTEM_ERROR, attributes
            assert reason in (response.remark or ""), response.remark
        assert broker.topics.get("Bad") is None
        assert broker.topics.data_version == version

        # a RocketMQ admin's "+key=value" list, then an update deleting one of them
        ok = await call(
            broker.address, create_topic_request("Good", "+message.type=DELAY,+queue.type=BatchCQ")
        )
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        deleted = await call(broker.address, create_topic_request("Good", "-queue.type"))
        assert deleted.code == ResponseCode.SUCCESS, deleted.remark
        good = broker.topics.get("Good")
        assert good is not None and good.attributes == {"message.type": "DELAY"}
        gone = await call(broker.address, create_topic_request("Good", "-queue.type"))
        assert gone.code == ResponseCode.SYSTEM_ERROR and "does not have it" in (gone.remark or "")


async def test_create_an_orderly_group() -> None:
    async with Broker(port=0, store=None) as broker, Admin(broker.namesrv_address) as admin:
        assert await admin.create_group("LedgerReaders", orderly=True, retry_max_times=3) == [
            broker.config.broker_name
        ]
        config = broker.groups.groups["LedgerReaders"]
        assert config.consume_message_orderly is True
        assert config.retry_max_times == 3
        assert config.consume_broadcast_enable is True

        # the whole config is replaced, as RocketMQ does
        await admin.create_group("LedgerReaders", broadcast=False)
        config = broker.groups.groups["LedgerReaders"]
        assert config.consume_message_orderly is False and config.retry_max_times == 16
        assert config.consume_broadcast_enable is False

        listed = await call(
            broker.address, RemotingCommand(code=RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        )
        assert listed.code == ResponseCode.SUCCESS
        table = json.loads(listed.body or b"{}")
        assert table["subscriptionGroupTable"]["LedgerReaders"]["groupName"] == "LedgerReaders"
        assert table["dataVersion"]["counter"] >= 2

        for group in ("", "bad group", "g" * 256):
            with pytest.raises(ClientUsageError):
                await admin.create_group(group)
        with pytest.raises(ClientUsageError, match="retry_max_times"):
            await admin.create_group("G", retry_max_times=-1)
        assert "G" not in broker.groups.groups


async def test_the_broker_refuses_a_bad_group_config() -> None:
    async with Broker(port=0, store=None) as broker:
        cases: list[tuple[bytes | None, str]] = [
            (None, "no SubscriptionGroupConfig body"),
            (b"not json", "bad request"),
            (b'{"consumeMessageOrderly": true}', "bad request"),  # no groupName
            (b'{"groupName": "a b"}', "outside ^[%|a-zA-Z0-9_-]+$"),
            (b'{"groupName": ""}', "blank"),
            (json.dumps({"groupName": "g" * 256}).encode(), "more than 255"),
        ]
        for body, reason in cases:
            response = await call(
                broker.address,
                RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body),
            )
            assert response.code == ResponseCode.SYSTEM_ERROR, body
            assert reason in (response.remark or ""), response.remark
        assert broker.groups.groups == {}

        # what RocketMQ's mqadmin sends, 5.x fields pocketmq does not keep included
        body = {
            "groupName": "FromJava",
            "consumeEnable": True,
            "consumeMessageOrderly": True,
            "retryMaxTimes": 7,
            "groupRetryPolicy": {"type": "CUSTOMIZED"},
            "subscriptionDataSet": None,
            "attributes": {},
        }
        ok = await call(
            broker.address,
            RemotingCommand(
                code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                body=json.dumps(body).encode(),
            ),
        )
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        config = broker.groups.groups["FromJava"]
        assert config.consume_message_orderly is True and config.retry_max_times == 7


async def run_cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pocketmq.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_the_command_line() -> None:
    async with Broker(port=0, store=None) as broker:
        namesrv = broker.namesrv_address
        assert namesrv is not None
        status, out, err = await run_cli(
            "topic", "create", "--topic", "Ledger", "--message-type", "FIFO", "--json",
            "--namesrv", namesrv,
        )  # fmt: skip
        assert status == 0, err
        assert json.loads(out) == {
            "topic": "Ledger",
            "queues": 8,
            "brokers": [broker.config.broker_name],
            "message_type": "FIFO",
        }
        assert topic_message_type(broker.topics.get("Ledger")) == "FIFO"  # type: ignore[arg-type]

        status, out, err = await run_cli(
            "topic", "create", "--topic", "Ledger", "--message-type", "fifo", "--namesrv", namesrv
        )
        assert status == 2 and "--message-type" in err

        status, out, err = await run_cli(
            "group",
            "create",
            "--group",
            "LedgerReaders",
            "--orderly",
            "--retry-max-times",
            "3",
            "--json",
            "--namesrv",
            namesrv,
        )
        assert status == 0, err
        assert [json.loads(line) for line in out.splitlines()] == [
            {
                "group": "LedgerReaders",
                "broker": broker.config.broker_name,
                "orderly": True,
                "retry_max_times": 3,
            }
        ]
        assert broker.groups.groups["LedgerReaders"].consume_message_orderly is True

        status, out, err = await run_cli(
            "group", "create", "--group", "bad group", "--namesrv", namesrv
        )
        assert status == 2 and "group may only hold" in err and "Traceback" not in err
