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
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pocketmq.store import paths
from pocketmq.store.files import Backend

__all__ = ["CHECKPOINT_SIZE", "Checkpoint"]

CHECKPOINT_SIZE = 4096
_LAYOUT = struct.Struct(">qqqqq")


@dataclass(slots=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

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
        return packed + bytes(CHECKPOINT_SIZE - len(packed))

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint:
        if len(data) < _LAYOUT.size:
            # RocketMQ 4.x wrote three longs; the missing fields read as zero.
            data = data + bytes(_LAYOUT.size - len(data))
        return cls(*_LAYOUT.unpack_from(data))

    @classmethod
    def load(cls, backend: Backend) -> Checkpoint | None:
        data = backend.read_bytes(paths.CHECKPOINT)
        return None if data is None else cls.decode(data)

    def save(self, backend: Backend) -> None:
        backend.write_bytes(paths.CHECKPOINT, self.encode())
