"""The ``checkpoint`` file, in RocketMQ 5.x's layout (one 4 KiB page, five longs used).

    offset  size  field
         0     8  physicMsgTimestamp    store time of the last record flushed in the commitlog
         8     8  logicsMsgTimestamp    store time of the last record flushed in consume queues
        16     8  indexMsgTimestamp     store time of the last record flushed in the index
        24     8  masterFlushedOffset   commitlog offset flushed (5.x)
        32     8  confirmPhyOffset      commitlog offset up to which everything (commitlog,
                                        consume queues, index, state) is durable

pocketmq advances ``confirmPhyOffset`` only after the consume queues and the index are flushed up
to it, so recovery can start from the segment that holds it.

pocketmq also keeps a copy of the record-CRC range of ``config/storeFormat.json`` in bytes 40-67
(RocketMQ reads only the first 40), so that losing that file does not turn the whole-record CRC
off for the data written with it:

        40     4  "PMQ1"                marks the copy
        44     8  recordCrcFrom         -1: none
        52     8  recordCrcUntil        -1: still open
        60     4  crc32 of bytes 40-59  masked with 0x7FFFFFFF; a copy that fails it is ignored

and a seal over RocketMQ's five longs, so that a damaged checkpoint is not believed (it says
where recovery may start, and what needs no rescan):

        64     4  "PMQC"                marks the seal
        68     4  crc32 of bytes 0-39   masked with 0x7FFFFFFF; ``damaged`` when it fails
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pocketmq.store import paths
from pocketmq.store.crc import crc32
from pocketmq.store.files import Backend

__all__ = ["CHECKPOINT_SIZE", "Checkpoint"]

CHECKPOINT_SIZE = 4096
_LAYOUT = struct.Struct(">qqqqq")
_CRC_RANGE = struct.Struct(">4sqq")
_CRC_RANGE_MAGIC = b"PMQ1"
_SEAL_AT = 64
_SEAL_MAGIC = b"PMQC"
_U32 = struct.Struct(">I")


@dataclass(slots=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    # The record-CRC range of storeFormat.json (a copy); None: no copy in the file.
    record_crc_range: tuple[int | None, int | None] | None = None
    # Read back: the five longs fail their seal (a file written by RocketMQ has none).
    damaged: bool = False

    @property
    def min_timestamp(self) -> int:
        """RocketMQ's rule: min(physic, logics) - 3 s, floored at 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def encode(self) -> bytes:
        packed = _LAYOUT.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )
        if self.record_crc_range is not None:
            low, high = self.record_crc_range
            copy = _CRC_RANGE.pack(
                _CRC_RANGE_MAGIC, -1 if low is None else low, -1 if high is None else high
            )
            packed += copy + _U32.pack(crc32(copy) & 0x7FFFFFFF)
        packed += bytes(_SEAL_AT - len(packed))
        packed += _SEAL_MAGIC + _U32.pack(crc32(packed[: _LAYOUT.size]) & 0x7FFFFFFF)
        return packed + bytes(CHECKPOINT_SIZE - len(packed))

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint:
        if len(data) < _LAYOUT.size:
            # RocketMQ 4.x wrote three longs; the missing fields read as zero.
            data = data + bytes(_LAYOUT.size - len(data))
        checkpoint = cls(*_LAYOUT.unpack_from(data))
        end = _LAYOUT.size + _CRC_RANGE.size
        if len(data) >= end + 4:
            copy = data[_LAYOUT.size : end]
            magic, low, high = _CRC_RANGE.unpack(copy)
            if (
                magic == _CRC_RANGE_MAGIC
                and _U32.unpack_from(data, end)[0] == crc32(copy) & 0x7FFFFFFF
            ):
                checkpoint.record_crc_range = (None if low < 0 else low, None if high < 0 else high)
        seal = data[_SEAL_AT : _SEAL_AT + 8]
        if len(seal) == 8 and seal[:4] == _SEAL_MAGIC:
            checkpoint.damaged = (
                _U32.unpack_from(seal, 4)[0] != crc32(data[: _LAYOUT.size]) & 0x7FFFFFFF
            )
        return checkpoint

    @classmethod
    def load(cls, backend: Backend) -> Checkpoint | None:
        data = backend.read_bytes(paths.CHECKPOINT)
        return None if data is None else cls.decode(data)

    def save(self, backend: Backend) -> None:
        backend.write_bytes(paths.CHECKPOINT, self.encode())
