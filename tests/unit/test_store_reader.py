"""StoreReader on the folders a user may hand to ``pocketmq store inspect``: a missing one, a store
with no records yet (what a broker leaves right after it starts), a folder that is not a store."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketmq.store import paths
from pocketmq.store.errors import NotAStoreError
from pocketmq.store.message_store import MessageStore, PutMessage
from pocketmq.store.reader import StoreReader, check_store_folder


def test_a_missing_folder_is_file_not_found_not_a_wrong_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-store"
    with pytest.raises(FileNotFoundError, match="no such folder") as raised:
        StoreReader(missing)
    assert not isinstance(raised.value, NotAStoreError)
    assert str(raised.value) == f"no such folder: {missing}"


def test_a_store_just_opened_and_closed_reads_as_empty(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = MessageStore.open(root)
    try:
        while_open = StoreReader(root)  # the broker's files, no commitlog segment yet
        assert while_open.segments == [] and list(while_open.iter_records()) == []
        assert while_open.summary.records == 0 and while_open.summary.bytes == 0
    finally:
        store.close()
    reader = StoreReader(root)
    assert list(reader.iter_records()) == []
    assert reader.summary.records == 0 and reader.summary.torn_tail is None
    assert reader.summary.damaged == [] and reader.summary.foreign_files == []
    assert reader.states().change_of(0) is None


@pytest.mark.parametrize(
    "made",
    [
        "commitlog/",
        "consumequeue/",
        "checkpoint",
        "abort",
        "config/storeFormat.json",
        "config/topics.json",
    ],
)
def test_any_of_a_brokers_files_makes_an_empty_store(tmp_path: Path, made: str) -> None:
    target = tmp_path / made
    if made.endswith("/"):
        target.mkdir(parents=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"{}")
    assert check_store_folder(tmp_path) is (made == "commitlog/")
    reader = StoreReader(tmp_path)
    assert list(reader.iter_records()) == [] and reader.summary.records == 0


@pytest.mark.parametrize("contents", [[], ["README.md", "index/", "config/", "lock"]])
def test_a_folder_with_nothing_a_store_holds_is_not_a_store(
    tmp_path: Path, contents: list[str]
) -> None:
    for name in contents:
        if name.endswith("/"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text("x")
    with pytest.raises(NotAStoreError, match="not a RocketMQ or pocketmq store") as raised:
        StoreReader(tmp_path)
    assert raised.value.path == str(tmp_path)
    assert isinstance(raised.value, FileNotFoundError)  # what callers caught before


def test_a_file_or_a_commitlog_folder_is_not_a_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore.open(root) as store:
        store.put(PutMessage(topic="T", body=b"one", queue_id=0))
    assert [r.record.body for r in StoreReader(root).iter_records()] == [b"one"]
    with pytest.raises(NotAStoreError, match="give the store folder above it"):
        StoreReader(root / paths.COMMITLOG)
    segment = next((root / paths.COMMITLOG).iterdir())
    with pytest.raises(NotAStoreError, match="a file, not a folder"):
        StoreReader(segment)
