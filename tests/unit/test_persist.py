"""Config files: a checksum, a backup, and damage never read as an empty table."""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec
import pytest

from pocketmq.broker.services.persist import ConfigFileError, load_json, save_json


class Offsets(msgspec.Struct, rename="camel"):
    offset_table: dict[str, dict[int, int]] = {}


EMPTY = Offsets()


def saved(path: Path, *values: Offsets) -> None:
    for value in values:
        save_json(path, value)


def test_a_save_reads_back_and_keeps_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    saved(path, Offsets({"T@g": {0: 5}}), Offsets({"T@g": {0: 7}}))
    assert b'"pocketmqCrc32":' in path.read_bytes()
    assert load_json(path, Offsets, EMPTY) == Offsets({"T@g": {0: 7}})
    assert load_json(path.with_name(path.name + ".bak"), Offsets, EMPTY) == Offsets({"T@g": {0: 5}})
    assert not path.with_name(path.name + ".tmp").exists()


def test_rocketmqs_own_file_has_no_checksum_and_reads_as_is(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text('{"offsetTable":{"T@g":{"0":3}},"dataVersion":{"counter":1}}')
    assert load_json(path, Offsets, EMPTY) == Offsets({"T@g": {0: 3}})


def test_a_changed_digit_is_damage_and_the_backup_is_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "consumerOffset.json"
    saved(path, Offsets({"T@g": {0: 5}}), Offsets({"T@g": {0: 7}}))
    path.write_bytes(path.read_bytes().replace(b":7}", b":9}"))  # the offset moved by hand/rot
    with caplog.at_level(logging.ERROR):
        assert load_json(path, Offsets, EMPTY) == Offsets({"T@g": {0: 5}})
    assert "checksum mismatch" in caplog.text and ".bak" in caplog.text
    assert path.with_name(path.name + ".corrupt").exists()


@pytest.mark.parametrize("at", range(len("pocketmqCrc32")))
def test_a_changed_character_in_the_checksum_key_is_damage_not_a_file_without_one(
    tmp_path: Path, at: int
) -> None:
    path = tmp_path / "consumerOffset.json"
    saved(path, Offsets({"T@g": {0: 7}}))
    data = path.read_bytes()
    key = data.rindex(b"pocketmqCrc32") + at
    changed = b"0" if data[key : key + 1].isalpha() else b"x"  # a digit for a letter, and back
    path.write_bytes(data[:key] + changed + data[key + 1 :])
    with pytest.raises(ConfigFileError, match="pocketmqCrc32 key reads"):
        load_json(path, Offsets, EMPTY)


def test_a_flipped_letter_in_a_key_is_damage_not_an_empty_table(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text('{"offsetTablf":{"T@g":{"0":3}}}')  # no checksum: RocketMQ's, damaged
    with pytest.raises(ConfigFileError, match="'offsetTablf' is not known.*'offsetTable'"):
        load_json(path, Offsets, EMPTY)
    assert path.with_name(path.name + ".corrupt").exists()


def test_damage_with_no_usable_backup_refuses(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    save_json(path, Offsets({"T@g": {0: 5}}))
    path.write_bytes(b'{"offsetTable":{"T@g":{"0":5}}')  # cut short
    with pytest.raises(ConfigFileError, match="has no backup; the broker does not start"):
        load_json(path, Offsets, EMPTY)


def test_a_missing_file_with_a_backup_reads_the_backup(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    saved(path, Offsets({"T@g": {0: 5}}), Offsets({"T@g": {0: 7}}))
    path.unlink()  # a crash between keeping the backup and renaming the new file in
    assert load_json(path, Offsets, EMPTY) == Offsets({"T@g": {0: 5}})


def test_no_file_at_all_is_a_new_table(tmp_path: Path) -> None:
    assert load_json(tmp_path / "consumerOffset.json", Offsets, EMPTY) is EMPTY


def test_the_checksum_key_removed_by_hand_accepts_an_edit(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    save_json(path, Offsets({"T@g": {0: 5}}))
    text = path.read_bytes()
    edited = text[: text.rfind(b',"pocketmqCrc32"')] + b"}"
    path.write_bytes(edited.replace(b":5}", b":6}"))
    assert load_json(path, Offsets, EMPTY) == Offsets({"T@g": {0: 6}})
