"""Time for every broker service: a clock and one scheduler of due work.

Every service that waits (delay levels, timers, invisibility expiries, retries, transaction
checks) asks the :class:`Scheduler` to call it at a due time instead of sleeping on its own.
With the :class:`SystemClock` the scheduler sleeps until the earliest due time. With the
:class:`ManualClock` time moves only when told: ``advance`` runs everything that falls due, in
due-time order, with the clock set to each item's due time, and returns when nothing more is
due — so a test covers a two-hour delay level or fifteen check-backs in milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import inspect
import itertools
import logging
import time
from collections.abc import Awaitable, Callable

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.store.durations import parse_duration_ms  # re-exported: the broker's text form

__all__ = ["Clock", "ManualClock", "Scheduler", "SystemClock", "parse_duration_ms"]

log = logging.getLogger("pocketmq.broker")

Callback = Callable[[], Awaitable[None] | None]


class Clock:
    """Milliseconds since the epoch. Subclasses: :class:`SystemClock`, :class:`ManualClock`."""

    manual = False

    def now_ms(self) -> int:
        raise NotImplementedError

    def __call__(self) -> int:
        return self.now_ms()


class SystemClock(Clock):
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock(Clock):
    """A clock that stands still until :meth:`Scheduler.advance` or :meth:`set` moves it."""

    manual = True

    def __init__(self, start_ms: int | None = None) -> None:
        self._now = time.time_ns() // 1_000_000 if start_ms is None else start_ms

    def now_ms(self) -> int:
        return self._now

    def set(self, ms: int) -> None:
        self._now = ms


class Scheduler:
    """Runs callbacks at due times on the broker's clock, earliest first."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._heap: list[tuple[int, int, Callback, Callable[[], bool] | None]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._advancing = asyncio.Lock()
        # Work that is not scheduled at a time but checks the clock (retention): run after each
        # manual advance.
        self.after_advance: Callable[[], object] | None = None

    def at(
        self, due_ms: int, callback: Callback, *, alive: Callable[[], bool] | None = None
    ) -> None:
        """Run ``callback`` at ``due_ms``. ``alive`` says whether it still has work to do (a
        transaction already ended, a message already acknowledged): dead entries are dropped
        unrun and are not counted as pending or fired."""
        heapq.heappush(self._heap, (due_ms, next(self._seq), callback, alive))
        if self._heap[0][0] == due_ms:
            self._wake.set()

    def pending(self) -> int:
        return sum(1 for item in self._heap if item[3] is None or item[3]())

    def next_due_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def start(self) -> None:
        if not self.clock.manual:
            self._task = asyncio.create_task(self._run(), name="scheduler")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _fire(self, callback: Callback) -> None:
        try:
            result = callback()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("scheduled work failed")

    async def _run(self) -> None:
        while True:
            now = self.clock.now_ms()
            while self._heap and self._heap[0][0] <= now:
                _, _, callback, alive = heapq.heappop(self._heap)
                if alive is None or alive():
                    await self._fire(callback)
                now = self.clock.now_ms()
            self._wake.clear()
            timeout = None if not self._heap else max(0.0, (self._heap[0][0] - now) / 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):  # not wait_for: see Broker._register_loop
                    await self._wake.wait()

    async def advance(self, duration_ms: int) -> int:
        """Manual clock: move time forward, firing what falls due in order. Returns the count."""
        assert isinstance(self.clock, ManualClock), "advance needs the manual clock"
        async with self._advancing:
            target = self.clock.now_ms() + duration_ms
            fired = 0
            while self._heap and self._heap[0][0] <= target:
                due, _, callback, alive = heapq.heappop(self._heap)
                if alive is not None and not alive():
                    continue  # nothing left to do: not run, not counted
                if due > self.clock.now_ms():
                    self.clock.set(due)
                await self._fire(callback)
                fired += 1
                await asyncio.sleep(0)  # let work the callback started (wake-ups, writes) run
            self.clock.set(target)
            if self.after_advance is not None:
                try:
                    self.after_advance()
                except Exception:
                    log.exception("work after the clock advanced failed")
            return fired


async def move_clock(
    clock: Clock, scheduler: Scheduler, *, advance: str | None = None, to: str | None = None
) -> int:
    """An admin's move of a manual clock: forward by ``advance`` (2h, 90s, 1h30m, 250ms or
    milliseconds) or to the epoch milliseconds ``to``; everything that falls due runs, in
    order, before it returns how many scheduled items ran. Refuses a system clock
    (ILLEGAL_STATE) and a move backwards or a value that is no duration (INVALID_PARAMETER)."""
    if not isinstance(clock, ManualClock):
        raise BrokerError(
            Kind.ILLEGAL_STATE, "the broker runs on the system clock; start it with --clock manual"
        )
    try:
        duration = parse_duration_ms(advance or "") if to is None else int(to) - clock.now_ms()
    except ValueError as error:
        raise BrokerError(Kind.INVALID_PARAMETER, str(error)) from None
    if duration < 0:
        raise BrokerError(Kind.INVALID_PARAMETER, "the manual clock never goes backwards")
    return await scheduler.advance(duration)
