"""Group attribute changes as mqadmin sends them and RocketMQ's update applies them."""

from __future__ import annotations

import pytest

from pocketmq.broker.handlers.admin import alter_group_attributes
from pocketmq.client.admin import parse_group_attributes
from pocketmq.client.errors import ClientUsageError


def test_mqadmin_text_becomes_the_map_it_sends() -> None:
    assert parse_group_attributes("+lite.bind.topic=P, +a=1,-b") == {
        "+lite.bind.topic": "P",
        "+a": "1",
        "-b": "",
    }
    assert parse_group_attributes("") == {}


@pytest.mark.parametrize("text", ["a=1", "+a", "-", "+=1", "+a=1,+a=2", "+a=1,-a", "+a=b=c"])
def test_malformed_attribute_text_is_refused(text: str) -> None:
    with pytest.raises(ClientUsageError):
        parse_group_attributes(text)


def test_a_new_group_takes_additions_only() -> None:
    assert alter_group_attributes(None, {"+lite.bind.topic": "P"}) == {"lite.bind.topic": "P"}
    with pytest.raises(ValueError, match="only"):
        alter_group_attributes(None, {"-x": ""})


def test_an_update_keeps_what_it_does_not_name() -> None:
    current = {"lite.bind.topic": "P", "x": "1"}
    assert alter_group_attributes(current, {}) == current
    assert alter_group_attributes(current, {"+x": "2", "+y": "3"}) == {
        "lite.bind.topic": "P",
        "x": "2",
        "y": "3",
    }
    assert alter_group_attributes(current, {"-x": ""}) == {"lite.bind.topic": "P"}
    # keys stored as sent before (with their "+") are read as RocketMQ's own
    assert alter_group_attributes({"+lite.bind.topic": "P"}, {}) == {"lite.bind.topic": "P"}


@pytest.mark.parametrize(
    "changes", [{"-missing": ""}, {"x": "1"}, {"+": "1"}, {"+x": "1", "-x": ""}]
)
def test_an_update_that_cannot_apply_is_refused(changes: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        alter_group_attributes({"x": "0"}, changes)
