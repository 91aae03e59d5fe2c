"""Held pull requests (RocketMQ's PullRequestHoldService): a pull that finds nothing waits until a
message arrives on its queue or its suspend time runs out.

A held pull is one future and one timer: an arrival (``notify``, called by the append itself)
sets the future, which wakes the handler's task directly, so the pull is read again and answered
in the next step of the loop. (``asyncio.wait_for`` put a second future between them: one more
loop turn, an ``epoll_wait`` and a few objects per held pull.)
"""

from __future__ import annotations

import asyncio

__all__ = ["PullHoldService"]


def _time_out(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


class PullHoldService:
    def __init__(self, *, holds_max: int) -> None:
        self.holds_max = holds_max
        self.held = 0
        self._waiters: dict[tuple[str, int], list[asyncio.Future[bool]]] = {}

    def can_hold(self) -> bool:
        return self.held < self.holds_max

    async def wait(self, topic: str, queue_id: int, timeout_s: float) -> bool:
        """True when woken by an arrival, False when the time ran out."""
        return await self.wait_any([(topic, queue_id)], timeout_s)

    async def wait_any(self, keys: list[tuple[str, int]], timeout_s: float) -> bool:
        """Like :meth:`wait`, woken by an arrival on any of ``keys``."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        for key in keys:
            self._waiters.setdefault(key, []).append(future)
        self.held += 1
        timer = loop.call_later(max(0.0, timeout_s), _time_out, future)
        try:
            return await future
        finally:
            timer.cancel()
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
                    future.set_result(True)

    def wake_all(self) -> None:
        for key in list(self._waiters):
            self.notify(*key)
