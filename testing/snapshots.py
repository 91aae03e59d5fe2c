"""Snapshots of a broker's data folder: a copy taken at a clean point, with the manual clock.

A snapshot is a folder ``<root>/<name>/`` holding ``store/`` (the data folder as a clean stop
left it: commitlog, consume queues, index, checkpoint, ``config/*.json`` with the topics,
groups, consumer offsets, delay-level and timer progress) and ``snapshot.json`` (the clock's
time). Pending transactions, delay levels and timers are in the store, so a broker started on
a restored folder finds them again, as after any restart. Used by the test fixture
(``pocketmq_broker.snapshot``) and the command line (``pocketmq snapshot``).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

__all__ = [
    "SnapshotError",
    "SnapshotInfo",
    "list_snapshots",
    "restore_snapshot",
    "save_snapshot",
    "store_in_use",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_INFO = "snapshot.json"
_STORE = "store"
# Left out of a copy: the lock file is per process, abort is absent after a clean stop.
_SKIPPED = {"lock", "abort"}


class SnapshotError(Exception):
    """A snapshot that cannot be saved or restored; the text says why."""


class _Info(msgspec.Struct, kw_only=True):
    name: str
    saved_at_ms: int  # wall clock
    clock_ms: int | None  # the broker's manual clock, None: not known (a system clock)


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    name: str
    path: Path
    saved_at_ms: int
    clock_ms: int | None
    size_bytes: int


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SnapshotError(
            f"snapshot name {name!r}: use 1-100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def store_in_use(data_dir: Path) -> bool:
    """Whether a broker holds the store's lock (``DATA/lock``) right now."""
    lock = data_dir / "lock"
    if not lock.exists():
        return False
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _check_stopped(data_dir: Path) -> None:
    if store_in_use(data_dir):
        raise SnapshotError(f"the store {data_dir} is open in a running broker: stop it first")
    if (data_dir / "abort").exists():
        raise SnapshotError(
            f"the store {data_dir} was not stopped cleanly (its abort file is there): start "
            "and stop the broker once so recovery runs, then save"
        )


def save_snapshot(
    data_dir: str | os.PathLike[str],
    root: str | os.PathLike[str],
    name: str,
    *,
    clock_ms: int | None,
    replace: bool = False,
) -> SnapshotInfo:
    """Copy a stopped broker's data folder into ``root/name``. ``replace``: overwrite a
    snapshot of that name (else SnapshotError)."""
    data, folder = Path(data_dir), Path(root) / _check_name(name)
    if not (data / "commitlog").is_dir() and not (data / "config").is_dir():
        raise SnapshotError(f"{data} is not a broker's data folder (no commitlog/ or config/)")
    _check_stopped(data)
    if folder.exists():
        if not replace:
            raise SnapshotError(f"snapshot {name!r} exists already ({folder})")
        shutil.rmtree(folder)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    shutil.copytree(data, partial / _STORE, ignore=lambda _d, names: _SKIPPED & set(names))
    info = _Info(name=name, saved_at_ms=time.time_ns() // 1_000_000, clock_ms=clock_ms)
    (partial / _INFO).write_bytes(msgspec.json.encode(info))
    partial.rename(folder)  # whole or absent: a crash mid-copy leaves only the .partial
    return _describe(folder)


def restore_snapshot(
    root: str | os.PathLike[str], name: str, data_dir: str | os.PathLike[str]
) -> SnapshotInfo:
    """Replace a stopped broker's data folder with the snapshot ``root/name``."""
    folder, data = Path(root) / _check_name(name), Path(data_dir)
    if not (folder / _INFO).is_file():
        known = ", ".join(s.name for s in list_snapshots(root)) or "none"
        raise SnapshotError(f"no snapshot {name!r} in {root} (there: {known})")
    info = _describe(folder)
    if data.exists():
        _check_stopped(data)
        shutil.rmtree(data)
    shutil.copytree(folder / _STORE, data)
    return info


def list_snapshots(root: str | os.PathLike[str]) -> list[SnapshotInfo]:
    folder = Path(root)
    if not folder.is_dir():
        return []
    return [_describe(p) for p in sorted(folder.iterdir()) if (p / _INFO).is_file()]


def _describe(folder: Path) -> SnapshotInfo:
    try:
        info = msgspec.json.decode((folder / _INFO).read_bytes(), type=_Info)
    except (OSError, msgspec.DecodeError) as error:
        raise SnapshotError(f"{folder / _INFO} cannot be read: {error}") from None
    size = sum(p.stat().st_size for p in (folder / _STORE).rglob("*") if p.is_file())
    return SnapshotInfo(info.name, folder, info.saved_at_ms, info.clock_ms, size)
