"""The subscription group table's journal (the topic table's rule, ``persist.JournaledTable``):
a change is durable when acknowledged, in one appended line beyond 256 groups; a crash replays
the journal; a disk that refuses the save refuses an administrator's group and keeps a
consumer's, saved once the disk has room."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import pytest

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.services.groups import GroupConfig, GroupManager
from pocketmq.broker.services.persist import ConfigFileError


def on_disk(path: Path) -> dict[str, dict[str, object]]:
    return json.loads(path.read_bytes())["subscriptionGroupTable"]


def test_a_small_table_is_saved_whole_and_a_large_one_through_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "config" / "subscriptionGroup.json"
    journal = path.with_name("subscriptionGroup.json.journal")
    groups = GroupManager(path, auto_create=True)
    groups.put(GroupConfig(group_name="First", retry_max_times=3))
    assert "First" in on_disk(path) and not journal.exists()  # as RocketMQ: whole, at once
    for i in range(400):
        groups.find_or_create(f"G{i}")
    assert journal.exists() and "G399" not in on_disk(path)
    # A crash now (no clean stop): the journal has every acknowledged change.
    after_crash = GroupManager(path, auto_create=False)
    assert set(after_crash.groups) == set(groups.groups)
    assert after_crash.data_version == groups.data_version
    groups.put(GroupConfig(group_name="G5", consume_message_orderly=True))
    assert GroupManager(path, auto_create=False).groups["G5"].consume_message_orderly is True
    groups.persist()  # a clean stop saves the table whole and removes the journal
    assert not journal.exists() and len(on_disk(path)) == 401
    assert on_disk(path)["G5"]["consumeMessageOrderly"] is True
    groups.close()


def test_the_journal_stays_short(tmp_path: Path) -> None:
    path = tmp_path / "config" / "subscriptionGroup.json"
    groups = GroupManager(path, auto_create=True)
    for i in range(1200):
        groups.put(GroupConfig(group_name=f"G{i}"))
        assert groups.file.journal.count <= max(256, len(groups.groups) // 2)
    assert len(on_disk(path)) > 600  # saved whole on the way
    assert set(GroupManager(path, auto_create=False).groups) == set(groups.groups)


def test_a_damaged_journal_line_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "config" / "subscriptionGroup.json"
    groups = GroupManager(path, auto_create=True)
    for i in range(300):
        groups.put(GroupConfig(group_name=f"G{i}", retry_max_times=3))
    journal = path.with_name("subscriptionGroup.json.journal")
    lines = journal.read_bytes().split(b"\n")
    damaged = lines[1].replace(b'"retryMaxTimes":3', b'"retryMaxTimes":4')
    assert damaged != lines[1]
    journal.write_bytes(b"\n".join([lines[0], damaged, *lines[2:]]))
    with pytest.raises(ConfigFileError, match="entry 2 is damaged"):
        GroupManager(path, auto_create=True)


@pytest.mark.parametrize("size", [10, 300])  # saved whole, and through the journal
def test_a_refused_save_refuses_an_admins_group_and_keeps_a_consumers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, size: int
) -> None:
    caplog.set_level(logging.INFO, logger="pocketmq.broker")
    path = tmp_path / "config" / "subscriptionGroup.json"
    groups = GroupManager(path, auto_create=True)
    for i in range(size):
        groups.put(GroupConfig(group_name=f"G{i}"))
    version = groups.data_version

    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    # Both ways a change is saved meet the full disk: the fsync of a whole save, the append.
    monkeypatch.setattr(os, "fsync", no_space)
    monkeypatch.setattr(os, "fdatasync", no_space)
    with pytest.raises(BrokerError) as refused:
        groups.put(GroupConfig(group_name="ByAdmin"))
    assert refused.value.kind is Kind.SERVICE_UNAVAILABLE
    assert str(tmp_path) not in str(refused.value)
    assert "ByAdmin" not in groups.groups and groups.data_version == version
    assert groups.find_or_create("ByConsumer") is not None  # the consumer goes on
    assert groups.find_or_create("ByConsumer2") is not None
    groups.save_unsaved()  # still full: still kept
    assert "ByConsumer" in groups.groups
    assert "ByConsumer" not in GroupManager(path, auto_create=False).groups

    monkeypatch.undo()
    groups.save_unsaved()
    reread = GroupManager(path, auto_create=False).groups
    assert {"ByConsumer", "ByConsumer2"} <= set(reread) and "ByAdmin" not in reread
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].exc_info is None
    assert "saving the subscription group table failed" in warnings[0].getMessage()
    infos = [r.getMessage() for r in caplog.records if "works again" in r.getMessage()]
    assert infos == ["saving the subscription group table works again (4 attempts failed)"]
