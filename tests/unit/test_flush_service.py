"""Group commit (flush=sync): futures that answer after the fsync, or time out."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator

from pocketmq.broker.services.flush import FlushService
from pocketmq.store.message_store import MessageStore, PutMessage


class GatedStore(MessageStore):
    """flush_to blocks until the test opens the gate (a slow disk)."""

    gate: threading.Event
    flushes: list[int]

    def flush_to(self, offset: int) -> int:
        self.flushes.append(offset)
        assert self.gate.wait(10)
        return super().flush_to(offset)


def gated_store() -> GatedStore:
    store = GatedStore.in_memory()
    store.gate = threading.Event()
    store.flushes = []
    return store


@contextlib.asynccontextmanager
async def sync_flush(
    store: GatedStore, *, timeout_ms: int = 5000, open_gate: bool = False
) -> AsyncIterator[FlushService]:
    """A started group-commit service over ``store``; closed (gate opened) afterwards."""
    if open_gate:
        store.gate.set()
    service = FlushService(
        store, sync=True, interval_ms=500, metadata_interval_ms=60_000, timeout_ms=timeout_ms
    )
    service.start()
    try:
        yield service
    finally:
        store.gate.set()
        await service.close()
        store.close()


def put(store: MessageStore) -> int:
    return store.put(PutMessage(topic="T", body=b"x" * 100)).end_offset


async def test_one_fsync_answers_every_send_waiting_for_it() -> None:
    store = gated_store()
    async with sync_flush(store, open_gate=True) as service:
        ends = [put(store) for _ in range(50)]
        futures = [
            service.when_durable(end, f"ok {n}", lambda: "late") for n, end in enumerate(ends)
        ]
        assert await asyncio.gather(*futures) == [f"ok {n}" for n in range(50)]
        assert service.fsync_count == 1
        assert store.flushes == [ends[-1]]
        # already durable: answered at once, no fsync
        done = service.when_durable(ends[10], "ok", lambda: "late")
        assert done.done() and done.result() == "ok"
        assert await service.wait_durable(ends[-1]) is True
        assert service.fsync_count == 1


async def test_sends_during_an_fsync_wait_for_the_next_one() -> None:
    store = gated_store()
    async with sync_flush(store) as service:
        first = service.when_durable(put(store), 1, lambda: -1)
        while not store.flushes:
            await asyncio.sleep(0.001)  # the first fsync is under way (and blocked)
        later_end = put(store)
        second = service.when_durable(later_end, 2, lambda: -1)
        # out of order: a smaller end offset queued after a larger one is still answered
        third = service.when_durable(later_end - 1, 3, lambda: -1)
        store.gate.set()
        assert await asyncio.gather(first, second, third) == [1, 2, 3]
        assert store.flushes[-1] == later_end
        assert service.fsync_count == 2


async def test_a_flush_slower_than_the_timeout_answers_with_the_timeout_result() -> None:
    store = gated_store()
    async with sync_flush(store, timeout_ms=50) as service:
        end = put(store)
        futures = [service.when_durable(end, "ok", lambda: "FLUSH_DISK_TIMEOUT") for _ in range(3)]
        await asyncio.sleep(0.02)
        later = service.when_durable(end, "ok", lambda: "FLUSH_DISK_TIMEOUT")
        assert await asyncio.gather(*futures) == ["FLUSH_DISK_TIMEOUT"] * 3
        assert not later.done()  # its own deadline is 20 ms later
        assert await later == "FLUSH_DISK_TIMEOUT"
        assert await service.wait_durable(end) is False
        store.gate.set()
        # the fsync that was stuck completes; new waiters are answered by it or the next one
        assert await service.wait_durable(end) is True


async def test_closing_cancels_the_waiters() -> None:
    store = gated_store()
    service = FlushService(
        store, sync=True, interval_ms=500, metadata_interval_ms=60_000, timeout_ms=5000
    )
    service.start()
    future = service.when_durable(put(store), "ok", lambda: "late")
    while not store.flushes:
        await asyncio.sleep(0.001)
    store.gate.set()
    await service.close()
    assert future.done()
    if not future.cancelled():
        assert future.result() == "ok"  # the fsync finished before the close
    store.close()


async def test_the_sends_of_one_loop_step_share_one_fsync_started_without_a_task() -> None:
    store = gated_store()
    async with sync_flush(store, open_gate=True) as service:
        tasks = len(asyncio.all_tasks())
        first = service.when_durable(put(store), 1, lambda: -1)
        second = service.when_durable(put(store), 2, lambda: -1)  # same step, appended later
        assert await asyncio.gather(first, second) == [1, 2]
        assert service.fsync_count == 1 and len(store.flushes) == 1
        assert len(asyncio.all_tasks()) == tasks  # no task made per commit


class FailingOnceStore(GatedStore):
    def flush_to(self, offset: int) -> int:
        if not self.flushes:
            self.flushes.append(-1)
            raise OSError(5, "I/O error")
        return super().flush_to(offset)


async def test_a_failed_fsync_is_tried_again_and_its_waiters_answered_after() -> None:
    store = FailingOnceStore.in_memory()
    store.gate = threading.Event()
    store.flushes = []
    async with sync_flush(store, open_gate=True) as service:
        end = put(store)
        assert await service.when_durable(end, "ok", lambda: "late") == "ok"
        assert store.flushes == [-1, end]
        assert service.fsync_count == 1
