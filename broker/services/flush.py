"""Durability: group commit for ``flush=sync``, a timed flush for ``flush=async``.

Sync (RocketMQ's GroupCommitService): a send waits for ``wait_durable(end_offset)``; one fsync,
run on a worker thread so the event loop keeps serving, covers every send waiting at that
moment. Async (FlushRealTimeService): the commitlog is synced every ``interval_ms``. In both
modes consume queues, index and checkpoint are flushed every ``metadata_interval_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor

from store.message_store import MessageStore

__all__ = ["FlushService"]

log = logging.getLogger("pocketmq.broker")


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
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks.append(
            asyncio.create_task(
                self._commit_loop() if self.sync else self._timed_loop(), name="flush"
            )
        )
        self._tasks.append(asyncio.create_task(self._metadata_loop(), name="flush-metadata"))

    async def wait_durable(self, end_offset: int) -> bool:
        """Wait until the commitlog is synced past ``end_offset``; False after the timeout."""
        if end_offset <= self.flushed_offset:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((end_offset, future))
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(future), self.timeout_ms / 1000)
            return True
        except TimeoutError:
            return False

    async def _flush_commitlog(self) -> int:
        target = self.store.max_physical_offset
        loop = asyncio.get_running_loop()
        flushed = await loop.run_in_executor(self._executor, self.store.flush_to, target)
        self.fsync_count += 1
        self.flushed_offset = max(self.flushed_offset, flushed)
        return self.flushed_offset

    async def _commit_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._waiters:
                continue
            try:
                flushed = await self._flush_commitlog()
            except Exception:
                log.exception("commitlog flush failed")
                await asyncio.sleep(0.01)
                self._wake.set()
                continue
            still: list[tuple[int, asyncio.Future[None]]] = []
            for end_offset, future in self._waiters:
                if end_offset <= flushed:
                    if not future.done():
                        future.set_result(None)
                else:
                    still.append((end_offset, future))
            self._waiters = still
            if still:
                self._wake.set()

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
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for _, future in self._waiters:
            if not future.done():
                future.cancel()
        self._executor.shutdown(wait=True)
        self._metadata_executor.shutdown(wait=True)
