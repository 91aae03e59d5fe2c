"""SQL92 property filters through an embedded broker: PULL_MESSAGE, POP_MESSAGE and
CHECK_CLIENT_CONFIG with raw frames, as a Java client sends them."""

from __future__ import annotations

import time

import msgspec

from pocketmq.broker.app import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeaderV2
from pocketmq.broker.protocol.message_codec import decode_messages
from pocketmq.broker.services.clock import ManualClock
from tests.integration.raw import call

TOPIC = "Orders"
GROUP = "sql-group"
# (body, properties): "a" a number, TAGS, "region" missing on one, a non-number on another.
MESSAGES = [
    (b"m0", {"a": "1", "TAGS": "x", "region": "eu"}),
    (b"m1", {"a": "7", "TAGS": "y", "region": "us"}),
    (b"m2", {"a": "12", "TAGS": "x"}),
    (b"m3", {"a": "many", "TAGS": "x", "region": "eu"}),
    (b"m4", {"a": "9", "TAGS": "z", "region": "eu"}),
]


def _properties(values: dict[str, str]) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in values.items())


async def _send_all(address: str) -> None:
    for body, properties in MESSAGES:
        header = SendMessageRequestHeaderV2(
            producer_group="p",
            topic=TOPIC,
            default_topic="TBW102",
            default_topic_queue_nums=1,
            queue_id=0,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties=_properties(properties),
        )
        sent = await call(
            address,
            RemotingCommand(
                code=RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_ext_fields(), body=body
            ),
        )
        assert sent.code == ResponseCode.SUCCESS, sent.remark


async def _pull(address: str, expression: str, offset: int = 0) -> RemotingCommand:
    header = PullMessageRequestHeader(
        consumer_group=GROUP,
        topic=TOPIC,
        queue_id=0,
        queue_offset=offset,
        max_msg_nums=32,
        sys_flag=0x4,  # SUBSCRIPTION: the expression travels with the pull
        commit_offset=0,
        suspend_timeout_millis=0,
        subscription=expression,
        sub_version=0,
        expression_type="SQL92",
    )
    return await call(
        address, RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=header.to_ext_fields())
    )


def _bodies(response: RemotingCommand) -> list[bytes]:
    return [m.body for m in decode_messages(response.body or b"")]


async def _check(address: str, expression: str, kind: str = "SQL92") -> RemotingCommand:
    body = {
        "clientId": "127.0.0.1@test",
        "group": GROUP,
        "subscriptionData": {
            "topic": TOPIC,
            "subString": expression,
            "expressionType": kind,
            "subVersion": 1,
            "classFilterMode": False,
            "tagsSet": [],
            "codeSet": [],
        },
    }
    return await call(
        address,
        RemotingCommand(code=RequestCode.CHECK_CLIENT_CONFIG, body=msgspec.json.encode(body)),
    )


async def test_pull_and_pop_filter_by_sql_and_check_client_config() -> None:
    async with Broker(port=0, store=None, clock=ManualClock(1_700_000_000_000)) as broker:
        await _send_all(broker.address)

        cases = {
            "a > 5": [b"m1", b"m2", b"m4"],  # "many" is no number: that message is dropped
            "a BETWEEN 2 AND 10 AND TAGS IN ('y', 'z')": [b"m1", b"m4"],
            "region IS NULL": [b"m2"],
            "NOT (region = 'eu')": [b"m1"],  # m2: NOT unknown is unknown, not true
            "TAGS = 'x' OR a >= 9": [b"m0", b"m2", b"m3", b"m4"],
        }
        for expression, expected in cases.items():
            pulled = await _pull(broker.address, expression)
            assert pulled.code == ResponseCode.SUCCESS, (expression, pulled.remark)
            assert _bodies(pulled) == expected, expression
            assert pulled.ext_fields["nextBeginOffset"] == "5"

        nothing = await _pull(broker.address, "a > 100")
        assert nothing.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert nothing.ext_fields["nextBeginOffset"] == "5"  # skipped past, as a tag miss
        bad = await _pull(broker.address, "a >")
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED

        pop_ext = {
            "consumerGroup": GROUP,
            "topic": TOPIC,
            "queueId": "-1",
            "maxMsgNums": "32",
            "invisibleTime": "30000",
            "pollTime": "0",
            "bornTime": str(int(time.time() * 1000)),
            "initMode": "0",
            "expType": "SQL92",
            "exp": "region = 'eu' AND a < 5",
        }
        popped = await call(
            broker.address, RemotingCommand(code=RequestCode.POP_MESSAGE, ext_fields=pop_ext)
        )
        assert popped.code == ResponseCode.SUCCESS, popped.remark
        assert _bodies(popped) == [b"m0"]
        again = await call(
            broker.address, RemotingCommand(code=RequestCode.POP_MESSAGE, ext_fields=pop_ext)
        )
        assert again.code == ResponseCode.PULL_NOT_FOUND  # m0 in flight, the rest refused
        pop_ext["exp"] = "region = "
        refused = await call(
            broker.address, RemotingCommand(code=RequestCode.POP_MESSAGE, ext_fields=pop_ext)
        )
        assert refused.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED

        assert (await _check(broker.address, "a > 5 AND TAGS IS NOT NULL")).code == 0
        assert (await _check(broker.address, "x || y", "TAG")).code == 0
        failed = await _check(broker.address, "a > 'x'")
        assert failed.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "cannot be compared" in (failed.remark or "")


async def test_property_filter_off_answers_as_rocketmq() -> None:
    config = BrokerConfig(port=0, property_filter=False)
    async with Broker(config, store=None, clock=ManualClock(1_700_000_000_000)) as broker:
        await _send_all(broker.address)
        expected = "The broker does not support consumer to filter message by SQL92"
        checked = await _check(broker.address, "a > 5")
        assert (checked.code, checked.remark) == (ResponseCode.SYSTEM_ERROR, expected)
        pulled = await _pull(broker.address, "a > 5")
        assert (pulled.code, pulled.remark) == (ResponseCode.SYSTEM_ERROR, expected)
        assert (await _check(broker.address, "*", "TAG")).code == ResponseCode.SUCCESS
