"""Errors raised by the storage engine.

StoreError
 +-- LimitExceededError        a message broke a named limit; nothing was written
 +-- CorruptRecordError        bytes on disk failed a check (CRC, magic, length)
 +-- StoreLockedError          another process owns the store directory
 +-- StoreFullError            the disk is full (or above the warning ratio); nothing was written
 +-- OffsetOutOfRangeError     a read asked for an offset the store does not hold
 +-- NotAStoreError            a folder given as a store holds nothing a store holds
"""

from __future__ import annotations

__all__ = [
    "CorruptRecordError",
    "LimitExceededError",
    "NotAStoreError",
    "OffsetOutOfRangeError",
    "StoreError",
    "StoreFullError",
    "StoreLockedError",
]


class StoreError(Exception):
    """Base class of every storage-engine error."""


class LimitExceededError(StoreError, ValueError):
    """A value broke a named limit. Carries the limit's name, the value and the maximum."""

    def __init__(self, limit: str, value: object, maximum: object, detail: str = "") -> None:
        self.limit = limit
        self.value = value
        self.maximum = maximum
        text = f"{limit} exceeded: {value!r} (maximum {maximum!r})"
        if detail:
            text = f"{text}: {detail}"
        super().__init__(text)


class CorruptRecordError(StoreError):
    """A record failed a check when read back. ``path`` and ``offset`` say where."""

    def __init__(self, reason: str, *, offset: int, path: str = "") -> None:
        self.reason = reason
        self.offset = offset
        self.path = path
        where = f"{path} " if path else ""
        super().__init__(f"corrupt record at {where}physical offset {offset}: {reason}")


class StoreLockedError(StoreError):
    """The store directory is already open in another process."""


class StoreFullError(StoreError, OSError):
    """The disk is full; the append was refused and nothing was written."""


class OffsetOutOfRangeError(StoreError, IndexError):
    """A read asked for an offset outside what the store holds."""


class NotAStoreError(StoreError, FileNotFoundError):
    """The folder given as a store exists but holds none of a store's files (``commitlog/``,
    ``consumequeue/``, ``checkpoint``, ``abort``, ``config/`` with a store's JSON files), or is
    a file. ``path`` is the folder. A missing folder is a plain ``FileNotFoundError`` instead;
    this one is a ``FileNotFoundError`` too (what was not found is a store), so catch it first
    to tell the two apart."""

    def __init__(self, path: str, detail: str = "") -> None:
        self.path = path
        text = f"{path}: not a RocketMQ or pocketmq store"
        if detail:
            text = f"{text} ({detail})"
        super().__init__(text)
