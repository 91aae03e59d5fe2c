"""Queue locks for orderly consumers (RocketMQ's RebalanceLockManager): a client locks the queues
it consumes in order; a lock not renewed within the expiry (60 s) can be taken by another."""

from __future__ import annotations

from pocketmq.broker.protocol.headers import MessageQueue

__all__ = ["LockManager"]


class LockManager:
    def __init__(self, *, expiry_ms: int) -> None:
        self.expiry_ms = expiry_ms
        self._locks: dict[str, dict[MessageQueue, tuple[str, int]]] = {}

    def try_lock(
        self, group: str, queues: list[MessageQueue], client_id: str, now_ms: int
    ) -> list[MessageQueue]:
        """Lock what is free, expired or already ours; returns the queues the client now holds."""
        table = self._locks.setdefault(group, {})
        locked = []
        for queue in queues:
            holder = table.get(queue)
            if holder is None or holder[0] == client_id or now_ms - holder[1] > self.expiry_ms:
                table[queue] = (client_id, now_ms)
                locked.append(queue)
        return locked

    def unlock(self, group: str, queues: list[MessageQueue], client_id: str) -> None:
        table = self._locks.get(group, {})
        for queue in queues:
            holder = table.get(queue)
            if holder is not None and holder[0] == client_id:
                del table[queue]

    def holder(self, group: str, queue: MessageQueue, now_ms: int) -> str | None:
        holder = self._locks.get(group, {}).get(queue)
        if holder is None or now_ms - holder[1] > self.expiry_ms:
            return None
        return holder[0]
