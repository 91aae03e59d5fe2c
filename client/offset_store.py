"""Where a consumer keeps the next offset to consume of each queue.

* ``RemoteOffsetStore`` (clustering): the broker keeps the group's offsets. Reads use
  QUERY_CONSUMER_OFFSET (code 22 = the group has none yet); writes go out with every pull
  (the pull's commitOffset) and as UPDATE_CONSUMER_OFFSET, periodically (oneway) and on close.
* ``LocalFileOffsetStore`` (broadcasting): every consumer keeps its own offsets in a JSON file,
  written atomically (temporary file + rename), with the previous version kept as ``.bak``.

The file format is our own standard JSON (RocketMQ's file uses fastjson's object-keyed maps,
which are not JSON)::

    {"offsetTable": [{"topic": "T", "brokerName": "b", "queueId": 0, "offset": 42}, ...]}
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import msgspec

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import (
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)

from .connection import check_response, make_request
from .errors import ClientError
from .message import MessageQueue

if TYPE_CHECKING:
    from ._core import ClientCore

__all__ = [
    "LocalFileOffsetStore",
    "OffsetStore",
    "RemoteOffsetStore",
    "default_offsets_dir",
]

log = logging.getLogger("pocketmq.client.offsets")


def default_offsets_dir(client_id: str, group: str) -> Path:
    """``~/.rocketmq_offsets/<clientId>/<group>`` (RocketMQ's ``LocalFileOffsetStore``)."""
    return Path.home() / ".rocketmq_offsets" / client_id / group


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    def read(self, mq: MessageQueue) -> int | None:
        """The offset held in memory, if any."""
        ...

    async def read_from_store(self, mq: MessageQueue) -> int | None:
        """The stored offset (broker or file); ``None`` when there is none."""
        ...

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None: ...

    async def persist(self, mq: MessageQueue, *, oneway: bool = True) -> None: ...

    async def persist_all(self, mqs: Iterable[MessageQueue], *, oneway: bool = True) -> None: ...

    def remove(self, mq: MessageQueue) -> None: ...


class _MemoryTable:
    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}

    def read(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq)

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        old = self.table.get(mq)
        if old is None or not increase_only or offset > old:
            self.table[mq] = offset

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)


class RemoteOffsetStore(_MemoryTable):
    """Offsets of a clustering group, kept by the broker."""

    def __init__(self, core: ClientCore, group: str) -> None:
        super().__init__()
        self.core = core
        self.group = group

    async def load(self) -> None:
        """Nothing to load: the broker holds the offsets, read per queue when it is assigned
        (``read_from_store``)."""

    async def read_from_store(self, mq: MessageQueue) -> int | None:
        header = QueryConsumerOffsetRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id
        )
        response = await self.core.invoke_broker(
            mq.broker_name, make_request(RequestCode.QUERY_CONSUMER_OFFSET, header)
        )
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        check_response(response)
        offset = QueryConsumerOffsetResponseHeader.from_ext_fields(response.ext_fields).offset
        self.update(mq, offset, increase_only=False)
        return offset

    def _request(self, mq: MessageQueue, offset: int) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, commit_offset=offset
        )
        return make_request(RequestCode.UPDATE_CONSUMER_OFFSET, header)

    async def persist(self, mq: MessageQueue, *, oneway: bool = False) -> None:
        offset = self.table.get(mq)
        if offset is None:
            return
        addr = self.core.broker_addr(mq.broker_name)
        if oneway:
            await self.core.invoke_oneway(addr, self._request(mq, offset))
        else:
            check_response(await self.core.invoke(addr, self._request(mq, offset)))

    async def persist_all(self, mqs: Iterable[MessageQueue], *, oneway: bool = True) -> None:
        for mq in list(mqs):
            try:
                await self.persist(mq, oneway=oneway)
            except ClientError as e:
                log.warning("offset of %s not persisted: %s", mq, e)


class _OffsetEntry(msgspec.Struct, rename="camel"):
    topic: str
    broker_name: str
    queue_id: int
    offset: int


class _OffsetFile(msgspec.Struct, rename="camel"):
    offset_table: list[_OffsetEntry] = []


class LocalFileOffsetStore(_MemoryTable):
    """Offsets of a broadcasting consumer, in ``<directory>/offsets.json``."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.path = self.directory / "offsets.json"

    async def load(self) -> None:
        self.table = self._read_file()

    def _read_file(self) -> dict[MessageQueue, int]:
        for path in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            try:
                parsed = msgspec.json.decode(data, type=_OffsetFile)
            except msgspec.DecodeError as e:
                log.warning("offset file %s is damaged, trying the backup: %s", path, e)
                continue
            return {
                MessageQueue(e.topic, e.broker_name, e.queue_id): e.offset
                for e in parsed.offset_table
            }
        return {}

    async def read_from_store(self, mq: MessageQueue) -> int | None:
        offset = self._read_file().get(mq)
        if offset is not None:
            self.update(mq, offset, increase_only=False)
        return offset

    async def persist(self, mq: MessageQueue, *, oneway: bool = True) -> None:
        await self.persist_all([mq])

    async def persist_all(self, mqs: Iterable[MessageQueue], *, oneway: bool = True) -> None:
        """Write every offset held in memory (``mqs`` only has to be non-empty)."""
        if not list(mqs) and not self.table:
            return
        self.write()

    def write(self) -> None:
        entries = [
            _OffsetEntry(
                topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id, offset=off
            )
            for mq, off in sorted(self.table.items())
        ]
        data = msgspec.json.encode(_OffsetFile(offset_table=entries))
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if self.path.exists():
            os.replace(self.path, self.path.with_name(self.path.name + ".bak"))
        os.replace(tmp, self.path)
