"""Topic attributes (RocketMQ 5.x ``message.type``) and subscription group configs: parsing,
defaults, and the round trip through ``config/topics.json`` and ``subscriptionGroup.json``."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from pocketmq.broker.handlers.common import RESPONSE_CODES
from pocketmq.broker.protocol import ResponseCode
from pocketmq.broker.protocol.headers import TopicConfig
from pocketmq.broker.services.groups import GroupConfig, GroupManager, validate_group_name
from pocketmq.broker.services.topics import (
    MESSAGE_TYPES,
    TopicError,
    TopicManager,
    apply_attribute_changes,
    parse_attribute_changes,
    parse_attributes,
    topic_message_type,
)


def test_message_types_are_rocketmqs() -> None:
    assert MESSAGE_TYPES == (
        "NORMAL",
        "FIFO",
        "DELAY",
        "TRANSACTION",
        "MIXED",
        "PRIORITY",
        "LITE",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("+message.type=FIFO", {"message.type": "FIFO"}),
        (
            "+message.type=MIXED,+queue.type=BatchCQ",
            {"message.type": "MIXED", "queue.type": "BatchCQ"},
        ),
        ("+message.type=DELAY,", {"message.type": "DELAY"}),  # Java's split drops the tail
        (" +message.type=TRANSACTION ", {"message.type": "TRANSACTION"}),
    ],
)
def test_parse_attributes(text: str, expected: dict[str, str]) -> None:
    assert parse_attributes(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("message.type=FIFO", "not of the form"),  # no "+"
        ("+message.type=", "not of the form"),
        ("+message.type=FIFO=x", "not of the form"),
        ("message.type", "neither"),
        ("+=FIFO", "no key"),
        ("-", "no key"),
        ("+a=1,+a=2", "given twice"),
        ("+message.type=fifo", "not one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED"),
        ("+message.type=UNKNOWN", "'UNKNOWN' is not one of"),
        ("-message.type", "only \\+key=value"),  # creating: nothing to delete
    ],
)
def test_parse_attributes_refuses_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(TopicError, match=reason) as caught:
        parse_attributes(text)
    # answered as SYSTEM_ERROR, as RocketMQ answers
    assert RESPONSE_CODES[caught.value.kind] == ResponseCode.SYSTEM_ERROR


def test_changes_add_and_delete_as_rocketmqs_attribute_util() -> None:
    assert parse_attribute_changes("+a=1,-b") == ({"a": "1"}, ["b"])
    current = {"message.type": "FIFO", "queue.type": "BatchCQ"}
    assert apply_attribute_changes(current, "-queue.type,+message.type=DELAY") == {
        "message.type": "DELAY"
    }
    assert current == {"message.type": "FIFO", "queue.type": "BatchCQ"}  # not changed in place
    assert apply_attribute_changes(None, "+message.type=FIFO") == {"message.type": "FIFO"}
    with pytest.raises(TopicError, match="does not have it"):
        apply_attribute_changes({}, "-message.type")
    with pytest.raises(TopicError, match="only \\+key=value"):
        apply_attribute_changes(None, "-message.type")


def test_a_topic_without_the_attribute_is_normal() -> None:
    assert topic_message_type(TopicConfig(topic_name="T")) == "NORMAL"
    assert topic_message_type(TopicConfig(topic_name="T", attributes={"other": "x"})) == "NORMAL"
    fifo = TopicConfig(topic_name="T", attributes={"message.type": "FIFO"})
    assert topic_message_type(fifo) == "FIFO"


def _topics(path: Path) -> TopicManager:
    return TopicManager(path, default_queue_nums=4, auto_create=True)


def test_attributes_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    topics = _topics(path)
    topics.create("Ledger", attributes={"message.type": "FIFO"})
    topics.create("Plain")
    on_disk = json.loads(path.read_bytes())["topicConfigTable"]
    assert on_disk["Ledger"]["attributes"] == {"message.type": "FIFO"}  # RocketMQ's layout

    again = _topics(path)
    ledger = again.get("Ledger")
    assert ledger is not None and ledger.attributes == {"message.type": "FIFO"}
    assert topic_message_type(ledger) == "FIFO"
    plain = again.get("Plain")
    assert plain is not None and topic_message_type(plain) == "NORMAL"


def test_an_update_without_attributes_keeps_them(tmp_path: Path) -> None:
    topics = _topics(tmp_path / "topics.json")
    topics.create(
        "Ledger", read_queue_nums=2, write_queue_nums=2, attributes={"message.type": "FIFO"}
    )
    updated = topics.create("Ledger", read_queue_nums=8, write_queue_nums=8)
    assert updated.read_queue_nums == 8 and updated.attributes == {"message.type": "FIFO"}
    cleared = topics.create("Ledger", attributes={})
    assert cleared.attributes == {}


def test_create_refuses_an_unknown_message_type_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = _topics(path)
    with pytest.raises(TopicError, match="'fifo' is not one of"):
        topics.create("Ledger", attributes={"message.type": "fifo"})
    assert topics.get("Ledger") is None and not path.exists()


def test_a_rocketmq_topics_json_with_attributes_loads(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    path.write_text(
        json.dumps(
            {
                "dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": 1700000000000},
                "topicConfigTable": {
                    "Ledger": {
                        "attributes": {"message.type": "FIFO"},
                        "order": False,
                        "perm": 6,
                        "readQueueNums": 8,
                        "topicFilterType": "SINGLE_TAG",
                        "topicName": "Ledger",
                        "topicSysFlag": 0,
                        "writeQueueNums": 8,
                    }
                },
            }
        )
    )
    ledger = _topics(path).get("Ledger")
    assert ledger is not None and topic_message_type(ledger) == "FIFO"


# -- subscription groups -------------------------------------------------------------------


def test_group_defaults_are_rocketmqs() -> None:
    config = GroupConfig(group_name="G")
    assert config.consume_message_orderly is False
    assert config.group_sys_flag == 0 and config.consume_timeout_minute == 15
    assert config.retry_max_times == 16 and config.consume_broadcast_enable is True


def test_an_old_subscription_group_file_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    # what pocketmq wrote before: no dataVersion, none of the newer fields
    path.write_text(
        json.dumps(
            {
                "subscriptionGroupTable": {
                    "G": {
                        "groupName": "G",
                        "consumeEnable": True,
                        "consumeFromMinEnable": True,
                        "consumeBroadcastEnable": True,
                        "retryQueueNums": 1,
                        "retryMaxTimes": 5,
                        "brokerId": 0,
                        "whichBrokerWhenConsumeSlowly": 1,
                        "notifyConsumerIdsChangedEnable": True,
                        "attributes": {},
                    }
                }
            }
        )
    )
    groups = GroupManager(path, auto_create=True)
    assert groups.groups["G"].retry_max_times == 5
    assert groups.groups["G"].consume_message_orderly is False
    assert path.exists()  # not moved aside as corrupt


def test_an_orderly_group_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    groups = GroupManager(path, auto_create=False)
    groups.put(GroupConfig(group_name="G", consume_message_orderly=True, retry_max_times=3))
    assert groups.data_version.counter == 1
    on_disk = json.loads(path.read_bytes())
    assert on_disk["subscriptionGroupTable"]["G"]["consumeMessageOrderly"] is True
    again = GroupManager(path, auto_create=False)
    assert again.groups["G"].consume_message_orderly is True
    assert again.groups["G"].retry_max_times == 3
    assert again.data_version.counter == 1


def test_a_rocketmq_subscription_group_config_decodes() -> None:
    body = {
        "groupName": "G",
        "consumeMessageOrderly": True,
        "groupRetryPolicy": {"type": "CUSTOMIZED"},  # 5.x fields pocketmq does not keep
        "subscriptionDataSet": None,
        "consumeTimeoutMinute": 30,
        "groupSysFlag": 0,
    }
    config = msgspec.json.decode(json.dumps(body), type=GroupConfig)
    assert config.consume_message_orderly is True and config.consume_timeout_minute == 30


@pytest.mark.parametrize(
    ("group", "reason"),
    [("", "blank"), ("a b", "outside"), ("g" * 256, "more than 255"), ("g/h", "outside")],
)
def test_group_names_are_checked(group: str, reason: str) -> None:
    problem = validate_group_name(group)
    assert problem is not None and reason in problem


def test_good_group_names_pass() -> None:
    for group in ("G", "%RETRY%x", "a|b", "g" * 255, "with-dash_and_underscore"):
        assert validate_group_name(group) is None
