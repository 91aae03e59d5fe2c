"""Durability: group commit for ``flush=sync``, a timed flush for ``flush=async``.

Sync (RocketMQ's GroupCommitService): a send waits for ``when_durable(end_offset, ...)``; one
fsync, run on a worker thread so the event loop keeps serving, covers every send waiting at that
moment. A waiter is one future (no task, no per-send timer): the waiters queue in append order,
and one timer, set to the oldest waiter's deadline, times them out. No task drives the commits:
the first waiter schedules an fsync for the end of the loop step (so the sends read in that step
share it), and the fsync's end, posted back to the loop by the worker, answers the waiters in
that same callback and starts the next fsync at once if sends came meanwhile (a task awaiting
``run_in_executor`` took one loop step more to see the fsync's end). Async (FlushRealTimeService): the commitlog is synced every ``interval_ms``. In both
modes consume queues, index and checkpoint are flushed every ``metadata_interval_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from pocketmq.store.message_store import MessageStore

__all__ = ["FlushService"]

log = logging.getLogger("pocketmq.broker")

T = TypeVar("T")
# (end offset, deadline, future, result when durable, result after the timeout)
_Waiter = tuple[int, float, "asyncio.Future[Any]", Any, Callable[[], Any]]


class FlushService:
    def __init__(
        self,
        store: MessageStore,
        *,
        sync: bool,
        interval_ms: int,
        metadata_interval_ms: int,
        timeout_ms: int,
    ) -> None:
        self.store = store
        self.sync = sync
        self.interval_ms = interval_ms
        self.metadata_interval_ms = metadata_interval_ms
        self.timeout_ms = timeout_ms
        self.flushed_offset = store.commitlog.flushed_offset
        self.fsync_count = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pocketmq-flush")
        # Its own thread: a sync send's fsync never queues behind a metadata flush.
        self._metadata_executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="pocketmq-flush-meta"
        )
        self._waiters: deque[_Waiter] = deque()
        self._expiry: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._committing = False  # an fsync is scheduled or under way (sync mode)
        self._closed = False
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if not self.sync:
            self._tasks.append(asyncio.create_task(self._timed_loop(), name="flush"))
        self._tasks.append(asyncio.create_task(self._metadata_loop(), name="flush-metadata"))

    async def wait_durable(self, end_offset: int) -> bool:
        """Wait until the commitlog is synced past ``end_offset``; False after the timeout."""
        return await self.when_durable(end_offset, True, _false)

    def when_durable(
        self, end_offset: int, durable: T, timed_out: Callable[[], T]
    ) -> asyncio.Future[T]:
        """A future that gets ``durable`` once the commitlog is synced past ``end_offset``, or
        ``timed_out()`` when that takes longer than the flush timeout (the path of every sync
        send: the caller hands the future on, nothing else is made per send)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if end_offset <= self.flushed_offset:
            future.set_result(durable)
            return future
        deadline = loop.time() + self.timeout_ms / 1000
        self._waiters.append((end_offset, deadline, future, durable, timed_out))
        if self._expiry is None:
            self._expiry = loop.call_at(deadline, self._expire)
        if not self._committing:
            self._committing = True
            self._loop = loop
            loop.call_soon(self._commit)  # after the other sends of this loop step
        return future

    def _expire(self) -> None:
        self._expiry = None
        waiters = self._waiters
        loop = asyncio.get_running_loop()
        now = loop.time()
        # Deadlines grow along the queue: the expired ones are at its head.
        while waiters and waiters[0][1] <= now:
            _end, _deadline, future, _durable, timed_out = waiters.popleft()
            if not future.done():
                future.set_result(timed_out())
        if waiters:
            self._expiry = loop.call_at(waiters[0][1], self._expire)

    async def _flush_commitlog(self) -> int:
        target = self.store.max_physical_offset
        loop = asyncio.get_running_loop()
        flushed = await loop.run_in_executor(self._executor, self.store.flush_to, target)
        self.fsync_count += 1
        self.flushed_offset = max(self.flushed_offset, flushed)
        return self.flushed_offset

    def _commit(self) -> None:
        """Start one fsync up to the log's end (``_committing`` is set)."""
        if self._closed or not self._waiters:
            self._committing = False
            return
        target = self.store.max_physical_offset
        job = self._executor.submit(self.store.flush_to, target)
        job.add_done_callback(self._post_committed)

    def _post_committed(self, job: Future[int]) -> None:
        # On the flush thread: hand the result to the loop (gone once the broker stopped).
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._committed, job)

    def _committed(self, job: Future[int]) -> None:
        """On the loop: answer the waiters the fsync covers, start the next one if needed."""
        if self._closed:
            return
        try:
            flushed = job.result()
        except Exception:
            log.exception("commitlog flush failed")
            assert self._loop is not None
            self._loop.call_later(0.01, self._commit)  # try again; the waiters keep waiting
            return
        self.fsync_count += 1
        self.flushed_offset = flushed = max(self.flushed_offset, flushed)
        waiters = self._waiters
        # Appends (and so end offsets) come in the order the waiters queue in; one that
        # came out of order waits for the next flush, which starts at once.
        while waiters and waiters[0][0] <= flushed:
            _end, _deadline, future, durable, _timed_out = waiters.popleft()
            if not future.done():
                future.set_result(durable)
        self._commit()  # the sends that came during this fsync, if any

    async def _timed_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            if self.store.max_physical_offset > self.flushed_offset:
                try:
                    await self._flush_commitlog()
                except Exception:
                    log.exception("commitlog flush failed")

    async def _metadata_loop(self) -> None:
        while True:
            await asyncio.sleep(self.metadata_interval_ms / 1000)
            try:
                # Noted here, synced on the worker: msync must not stall the event loop.
                plan = self.store.flush_plan()
                await asyncio.get_running_loop().run_in_executor(self._metadata_executor, plan)
                self.flushed_offset = max(self.flushed_offset, self.store.commitlog.flushed_offset)
            except Exception:
                log.exception("periodic flush failed")

    async def close(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._expiry is not None:
            self._expiry.cancel()
        for _end, _deadline, future, _durable, _timed_out in self._waiters:
            if not future.done():
                future.cancel()
        self._waiters.clear()
        self._executor.shutdown(wait=True)
        self._metadata_executor.shutdown(wait=True)


def _false() -> bool:
    return False
