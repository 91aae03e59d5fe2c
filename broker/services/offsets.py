"""Consumer offsets (RocketMQ's ConsumerOffsetManager), persisted as ``config/consumerOffset.json``:
``{"offsetTable": {"<topic>@<group>": {"<queueId>": <next offset>}}}``."""

from __future__ import annotations

from pathlib import Path

import msgspec

from pocketmq.broker.services.persist import Write, encode_json, load_json, write_json

__all__ = ["OffsetManager"]


class _OffsetFile(msgspec.Struct, rename="camel"):
    offset_table: dict[str, dict[int, int]] = {}


class OffsetManager:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.table: dict[str, dict[int, int]] = load_json(
            path, _OffsetFile, _OffsetFile()
        ).offset_table
        self._dirty = False

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(self.key(topic, group), {})[queue_id] = offset
        self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(self.key(topic, group), {}).get(queue_id)

    def groups_of(self, topic: str) -> list[str]:
        return sorted(k.split("@", 1)[1] for k in self.table if k.split("@", 1)[0] == topic)

    def remove_group(self, group: str) -> list[str]:
        """Drop every offset of ``group`` (ConsumerOffsetManager.removeOffset); returns the
        topics it had offsets of."""
        keys = [k for k in self.table if k.split("@", 1)[1:] == [group]]
        for key in keys:
            del self.table[key]
        if keys:
            self._dirty = True
        return sorted(k.split("@", 1)[0] for k in keys)

    def persist(self, *, force: bool = False) -> None:
        write = self.save_later(force=force)
        if write is not None:
            write()

    def save_later(self, *, force: bool = False) -> Write | None:
        """The table as it is now, to be written by the returned call (on any thread), or None
        when nothing changed since the last save. A write that fails leaves the table to be
        saved again (its error is the caller's to report)."""
        if not (self._dirty or force):
            return None
        content = encode_json(_OffsetFile(offset_table=self.table))
        self._dirty = False  # commits from now on make it dirty again

        def write() -> None:
            try:
                write_json(self.path, content)
            except BaseException:
                self._dirty = True
                raise

        return write
