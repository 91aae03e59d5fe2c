"""Held pull requests (RocketMQ's PullRequestHoldService): a pull that finds nothing waits until a
message arrives on its queue or its suspend time runs out."""

from __future__ import annotations

import asyncio

__all__ = ["PullHoldService"]


class PullHoldService:
    def __init__(self, *, holds_max: int) -> None:
        self.holds_max = holds_max
        self.held = 0
        self._waiters: dict[tuple[str, int], list[asyncio.Future[None]]] = {}

    def can_hold(self) -> bool:
        return self.held < self.holds_max

    async def wait(self, topic: str, queue_id: int, timeout_s: float) -> bool:
        """True when woken by an arrival, False when the time ran out."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = (topic, queue_id)
        self._waiters.setdefault(key, []).append(future)
        self.held += 1
        try:
            await asyncio.wait_for(future, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            self.held -= 1
            waiters = self._waiters.get(key)
            if waiters is not None:
                if future in waiters:
                    waiters.remove(future)
                if not waiters:
                    del self._waiters[key]

    async def wait_any(self, keys: list[tuple[str, int]], timeout_s: float) -> bool:
        """Like :meth:`wait`, woken by an arrival on any of ``keys``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters.setdefault(key, []).append(future)
        self.held += 1
        try:
            await asyncio.wait_for(future, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            self.held -= 1
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    if future in waiters:
                        waiters.remove(future)
                    if not waiters:
                        del self._waiters[key]

    def notify(self, topic: str, queue_id: int) -> None:
        waiters = self._waiters.pop((topic, queue_id), None)
        if waiters:
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    def wake_all(self) -> None:
        for key in list(self._waiters):
            self.notify(*key)
