"""Small JSON files under ``config/`` (RocketMQ's ConfigManager): topics, groups, consumer
offsets, delay-level progress, the timer's low-water mark.

Damage is never read as an empty table:

* **A checksum.** Each file pocketmq writes ends with one more key, ``"pocketmqCrc32"``: the
  CRC-32 of the file as it would be without that key. RocketMQ's readers (fastjson) ignore an
  unknown key. A changed digit (a consumer offset moved) no longer passes as data. A file with
  no such key (RocketMQ's own, or one written by hand) is read without the check; to accept a
  file edited by hand, delete that key.
* **A key that is not there.** A file with a key the table does not know that is nearly the
  name of one it knows but misses (one flipped letter in ``offsetTable``) is damage, not an
  empty table; other unknown keys (newer RocketMQ versions add some) are ignored.
* **A backup.** Each save keeps the previous file as ``<name>.bak``, and the new file replaces
  it atomically (written to ``.tmp``, fsynced, renamed). A damaged file is set aside as
  ``.corrupt`` and the backup is read instead, with an ERROR in the log. With no usable backup,
  the broker refuses to start (``ConfigFileError``) rather than start empty and overwrite the
  file at the next save.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

__all__ = [
    "ConfigFileError",
    "Journal",
    "JournaledTable",
    "Write",
    "encode_json",
    "load_json",
    "save_json",
    "write_json",
]

# A save taken on the event loop and finished off it: the disk part (write, fsync, renames) of
# a table encoded where it is changed. None when there was nothing to save.
Write = Callable[[], None]

log = logging.getLogger("pocketmq.broker")

T = TypeVar("T")

_CRC_KEY = b',"pocketmqCrc32":'
_LAST_NUMBER_KEY = re.compile(rb',\s*"([^"]{1,40})"\s*:\s*-?\d+\s*}\s*$')


class ConfigFileError(ValueError):
    """A config file (and its backup) is damaged; the broker does not start on it."""


class _Damaged(Exception):
    pass


def _with_checksum(body: bytes) -> bytes:
    if len(body) < 3 or not body.startswith(b"{") or not body.endswith(b"}"):
        return body  # not an object with keys: nothing to add a key to
    return body[:-1] + _CRC_KEY + str(zlib.crc32(body)).encode() + b"}"


def _check_checksum(data: bytes) -> None:
    at = data.rfind(_CRC_KEY)
    if at < 0:
        # RocketMQ's own file, or one written by hand; unless its last key is ours, damaged
        # (a changed letter or digit of the key would otherwise switch the check off).
        last = _LAST_NUMBER_KEY.search(data)
        if last and difflib.SequenceMatcher(None, last[1], b"pocketmqCrc32").ratio() >= 0.8:
            raise _Damaged(f"its pocketmqCrc32 key reads {last[1].decode(errors='replace')!r}")
        return
    tail = data[at + len(_CRC_KEY) :].strip()
    if not tail.endswith(b"}") or not tail[:-1].strip().isdigit():
        raise _Damaged("its pocketmqCrc32 key is not the last one or not a number")
    stored = int(tail[:-1])
    actual = zlib.crc32(data[:at] + b"}")
    if stored != actual:
        raise _Damaged(
            f"checksum mismatch (pocketmqCrc32 {stored}, content {actual}): changed since "
            "pocketmq wrote it; if it was edited on purpose, delete the pocketmqCrc32 key"
        )


def _check_keys(raw: Any, type_: type[Any]) -> None:
    if not isinstance(raw, dict):
        raise _Damaged(f"expected a JSON object, found {type(raw).__name__}")
    known = {f.encode_name for f in msgspec.structs.fields(type_)}
    present = set(raw) - {"pocketmqCrc32"}
    missing = sorted(known - present)
    for key in sorted(present - known):
        close = difflib.get_close_matches(key, missing, n=1, cutoff=0.8)
        if close:
            raise _Damaged(
                f"key {key!r} is not known, and {close[0]!r} is missing: a damaged key "
                "(read as it is, the table would be empty)"
            )


def _read(path: Path, type_: type[T]) -> T:
    data = path.read_bytes()
    _check_checksum(data)
    try:
        _check_keys(msgspec.json.decode(data), type_)
        return msgspec.json.decode(data, type=type_)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise _Damaged(str(error)) from None


def load_json(path: Path | None, type_: type[T], default: T) -> T:
    """The file decoded as ``type_``; ``default`` when neither it nor its backup exists. A
    damaged file is set aside and its backup read; ``ConfigFileError`` when there is none."""
    if path is None:
        return default
    backup = path.with_name(path.name + ".bak")
    if not path.exists():
        if not backup.exists():
            return default
        # A crash between keeping the backup and renaming the new file in: the backup is the
        # last complete save.
        try:
            value = _read(backup, type_)
        except _Damaged as error:
            raise ConfigFileError(
                f"{path} is missing and its backup {backup} is damaged: {error}"
            ) from None
        log.warning("%s is missing; read its backup %s (the save before)", path, backup)
        return value
    try:
        return _read(path, type_)
    except _Damaged as error:
        aside = path.with_name(path.name + ".corrupt")
        path.replace(aside)
        if backup.exists():
            try:
                value = _read(backup, type_)
            except _Damaged as backup_error:
                raise ConfigFileError(
                    f"{path} is damaged ({error}; kept as {aside}) and so is its backup "
                    f"{backup} ({backup_error}); the broker does not start on a damaged table"
                ) from None
            log.error(
                "%s is damaged (%s); kept as %s, read its backup %s (the save before)",
                path,
                error,
                aside,
                backup,
            )
            return value
        raise ConfigFileError(
            f"{path} is damaged ({error}; kept as {aside}) and has no backup; the broker does "
            "not start on a damaged table (fix the file, or remove it to start empty)"
        ) from None


def save_json(path: Path | None, value: object) -> None:
    """Write atomically, with a checksum; the previous file becomes ``<name>.bak``."""
    write_json(path, encode_json(value))


def encode_json(value: object) -> bytes:
    """What :func:`save_json` writes for ``value``: the caller may encode on the event loop,
    where the value is changed, and write with :func:`write_json` on a worker thread."""
    return _with_checksum(msgspec.json.encode(value))


def write_json(path: Path | None, content: bytes) -> None:
    """Write what :func:`encode_json` made, atomically and synced (see :func:`save_json`)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".tmp")
    try:
        with open(temp, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())  # never an empty file after a power loss
    except OSError:
        # A full disk: the old file stays as it was, and a half-written temp file must not
        # keep holding the space that ran out.
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    if path.exists():
        os.replace(path, path.with_name(path.name + ".bak"))
    os.replace(temp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the renames themselves survive a power loss
    finally:
        os.close(directory)


class Journal:
    """Changes to a table, appended beside its file as ``<name>.journal``: one line each,
    ``<crc32> <json>``, synced before :meth:`append` returns. A change then costs one small
    write however large the table is (saving the table whole for each change made creating
    10,000 topics one by one quadratic); the owner saves the table whole now and then and at a
    clean stop, then :meth:`clear`\\ s the journal.

    Entries must be idempotent (each says the whole new value of one key): a crash between
    saving the table and clearing the journal replays changes the table already holds. A torn
    last line (a crash in the middle of an append, which was never acknowledged) is dropped; a
    damaged line before it is damage, and the broker refuses to start on it.
    """

    def __init__(self, table_path: Path | None) -> None:
        self.path = (
            None if table_path is None else table_path.with_name(table_path.name + ".journal")
        )
        self._fd: int | None = None
        self._size = 0
        self.count = 0  # entries in the journal now

    def read(self) -> list[bytes]:
        """The entries in order (the JSON of each)."""
        if self.path is None or not self.path.exists():
            return []
        data = self.path.read_bytes()
        entries: list[bytes] = []
        lines = data.split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line:
                continue
            crc, _, body = line.partition(b" ")
            if crc.isdigit() and int(crc) == zlib.crc32(body):
                entries.append(body)
                continue
            if number == len(lines):  # no newline after it: the torn tail of a crash
                log.warning("%s: dropped a torn last entry (%d bytes)", self.path, len(line))
                break
            raise ConfigFileError(
                f"{self.path}: entry {number} is damaged (checksum mismatch); the broker does "
                "not start on a damaged table (fix or remove the line)"
            )
        self.count = len(entries)
        return entries

    def append(self, entry: bytes) -> None:
        """Append one entry durably; on an error nothing of it stays (the file is cut back)."""
        if self.path is None:
            self.count += 1
            return
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._size = os.fstat(self._fd).st_size
            _fsync_directory(self.path.parent)  # the new file's name survives a power loss
        line = b"%d %s\n" % (zlib.crc32(entry), entry)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fdatasync(self._fd)
        except OSError:
            # ENOSPC after part of the line: cut it, so the next append starts a clean line
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            raise
        self._size += len(line)
        self.count += 1

    def clear(self) -> None:
        """Remove the journal: call after the table was saved whole. Its file is closed too,
        so a clean stop leaves no open file behind."""
        self.count = 0
        self.close()
        if self.path is not None and self.path.exists():
            self.path.unlink()
            _fsync_directory(self.path.parent)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class JournaledTable:
    """When a table's change is saved whole and when as a :class:`Journal` line (the topic
    table's rule, for any table keyed by name): whole while the table holds at most
    ``journal_min`` entries and the journal is empty, as RocketMQ saves; beyond, one journal
    line, and the table is due to be saved whole once the journal holds ``journal_min`` entries
    or half the table, so the journal never outgrows the table and the cost of a change stays
    flat."""

    def __init__(self, path: Path | None, *, journal_min: int = 256) -> None:
        self.path = path
        self.journal = Journal(path)
        self.journal_min = journal_min

    def save_change(
        self, size: int, whole: Callable[[], object], entry: Callable[[], bytes]
    ) -> bool:
        """Make one change durable: the table ``whole()`` (``size`` entries, the change in it)
        or the journal line ``entry()``. True when the table is now due to be saved whole
        (:meth:`save_whole`). An ``OSError`` leaves both files as they were."""
        if size <= self.journal_min and not self.journal.count:
            save_json(self.path, whole())
            return False
        self.journal.append(entry())
        return self.journal.count >= max(self.journal_min, size // 2)

    def save_whole(self, value: object) -> None:
        """Save the table whole and empty the journal (now and then, and at a clean stop)."""
        save_json(self.path, value)
        self.journal.clear()


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
