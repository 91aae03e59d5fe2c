"""Small JSON files under ``config/`` (RocketMQ's ConfigManager): written atomically."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TypeVar

import msgspec

__all__ = ["load_json", "save_json"]

log = logging.getLogger("pocketmq.broker")

T = TypeVar("T")


def load_json(path: Path | None, type_: type[T], default: T) -> T:
    """The file decoded as ``type_``; ``default`` when absent. A damaged file is kept aside
    (``.corrupt``) and reported, never silently dropped."""
    if path is None or not path.exists():
        return default
    data = path.read_bytes()
    try:
        return msgspec.json.decode(data, type=type_)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        aside = path.with_name(path.name + ".corrupt")
        path.replace(aside)
        log.error("%s is not valid (%s); moved to %s, starting empty", path, error, aside)
        return default


def save_json(path: Path | None, value: object) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".tmp")
    with open(temp, "wb") as handle:
        handle.write(msgspec.json.encode(value))
        handle.flush()
        os.fsync(handle.fileno())  # never an empty file after a power loss
    temp.replace(path)
