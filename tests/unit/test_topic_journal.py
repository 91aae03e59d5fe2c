"""The topic table's journal: a change is durable when acknowledged, in one appended line, and
the table is saved whole only now and then; a crash replays the journal, a torn last line is
dropped, damage before it stops the start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pocketmq.broker.services.persist import ConfigFileError
from pocketmq.broker.services.topics import TopicManager


def manager(path: Path) -> TopicManager:
    return TopicManager(path, default_queue_nums=4, auto_create=True)


def on_disk(path: Path) -> set[str]:
    return set(json.loads(path.read_bytes())["topicConfigTable"])


def test_a_small_table_is_saved_whole_and_a_large_one_through_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    journal = path.with_name("topics.json.journal")
    topics = manager(path)
    topics.create("First")
    assert "First" in on_disk(path) and not journal.exists()  # as RocketMQ: whole, at once
    for i in range(400):
        topics.create(f"T{i}")
    assert journal.exists() and "T399" not in on_disk(path)
    # A crash now (no clean stop): the journal has every acknowledged change.
    after_crash = manager(path)
    assert after_crash.get("T399") is not None and after_crash.get("First") is not None
    assert after_crash.data_version == topics.data_version
    topics.delete("T5")
    topics.create("T6", read_queue_nums=2, write_queue_nums=2)
    reread = manager(path)
    assert reread.get("T5") is None and reread.get("T6").read_queue_nums == 2  # type: ignore[union-attr]
    topics.persist()  # a clean stop saves the table whole and removes the journal
    assert not journal.exists() and "T399" in on_disk(path) and "T5" not in on_disk(path)


def test_the_journal_stays_short(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    topics = manager(path)
    for i in range(1200):
        topics.create(f"T{i}")
        assert topics.file.journal.count <= max(256, len(topics.topics) // 2)
    assert len(on_disk(path)) > 600  # saved whole on the way


def test_a_torn_last_line_is_dropped_and_damage_before_it_stops_the_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config" / "topics.json"
    topics = manager(path)
    for i in range(300):
        topics.create(f"T{i}")
    journal = path.with_name("topics.json.journal")
    lines = journal.read_bytes().split(b"\n")
    assert len(lines) > 3
    # A crash in the middle of an append, which was never acknowledged
    journal.write_bytes(b"\n".join(lines[:-1]) + b"\n" + lines[-2][:20])
    assert manager(path).get("T299") is not None
    # One changed digit in an acknowledged line: damage, not an empty or shorter table
    damaged = lines[1].replace(b'"readQueueNums":4', b'"readQueueNums":5')
    assert damaged != lines[1]
    journal.write_bytes(b"\n".join([lines[0], damaged, *lines[2:]]))
    with pytest.raises(ConfigFileError, match="entry 2 is damaged"):
        manager(path)
