"""The only module that builds paths inside a store directory (RocketMQ's layout).

Every function returns a path relative to the store root; a :class:`store.files.Backend`
resolves it (on disk or in memory).
"""

from __future__ import annotations

from pathlib import PurePosixPath

__all__ = [
    "ABORT",
    "CHECKPOINT",
    "COMMITLOG",
    "CONFIG",
    "CONSUME_QUEUE",
    "INDEX",
    "LOCK",
    "commitlog_segment",
    "consume_queue_dir",
    "consume_queue_segment",
    "file_name_for_offset",
    "index_file",
    "offset_for_file_name",
]

FILE_NAME_DIGITS = 20

COMMITLOG = PurePosixPath("commitlog")
CONSUME_QUEUE = PurePosixPath("consumequeue")
INDEX = PurePosixPath("index")
CONFIG = PurePosixPath("config")
CHECKPOINT = PurePosixPath("checkpoint")
ABORT = PurePosixPath("abort")
LOCK = PurePosixPath("lock")


def file_name_for_offset(offset: int) -> str:
    """RocketMQ names segment files by their start offset, zero-padded to 20 digits."""
    assert offset >= 0
    return f"{offset:0{FILE_NAME_DIGITS}d}"


def offset_for_file_name(name: str) -> int | None:
    """The start offset a segment file name encodes, or None if the name is not a segment name."""
    if len(name) != FILE_NAME_DIGITS or not name.isdigit():
        return None
    return int(name)


def commitlog_segment(start_offset: int) -> PurePosixPath:
    return COMMITLOG / file_name_for_offset(start_offset)


def consume_queue_dir(topic: str, queue_id: int) -> PurePosixPath:
    return CONSUME_QUEUE / topic / str(queue_id)


def consume_queue_segment(topic: str, queue_id: int, start_byte_offset: int) -> PurePosixPath:
    return consume_queue_dir(topic, queue_id) / file_name_for_offset(start_byte_offset)


def index_file(name: str) -> PurePosixPath:
    """Index files are named by creation time, ``yyyyMMddHHmmssSSS`` in local time."""
    return INDEX / name


def config_file(name: str) -> PurePosixPath:
    return CONFIG / name
