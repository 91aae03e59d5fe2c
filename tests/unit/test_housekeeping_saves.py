"""The housekeeping's periodic saves (consumer offsets, delay-level and timer progress) are
encoded on the event loop and written, with their fsyncs, on a worker thread; a stop waits for
a write in flight before it saves the same files itself."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.services import offsets as offsets_module
from pocketmq.broker.services.clock import ManualClock

START_MS = 1_700_000_000_000


def offsets_on_disk(store: Path) -> object:
    return json.loads((store / "config" / "consumerOffset.json").read_bytes())["offsetTable"]


async def test_the_saves_are_written_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = offsets_module.write_json
    threads: list[int] = []

    def recorded(path: Path | None, content: bytes) -> None:
        threads.append(threading.get_ident())
        real(path, content)

    monkeypatch.setattr(offsets_module, "write_json", recorded)
    async with Broker(port=0, store=tmp_path, clock=ManualClock(START_MS), namesrv=False) as broker:
        broker.offsets.commit("G", "T", 0, 7)
        await broker.keep_house(broker._chores())
        assert threads and threading.get_ident() not in threads
        assert offsets_on_disk(tmp_path) == {"T@G": {"0": 7}}
        await broker.keep_house(broker._chores())
        assert len(threads) == 1  # nothing changed: nothing written


async def test_a_stop_waits_for_the_write_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = offsets_module.write_json
    entered, gate = threading.Event(), threading.Event()

    def slow(path: Path | None, content: bytes) -> None:
        if not entered.is_set():  # the housekeeping's write; the stop's goes straight through
            entered.set()
            assert gate.wait(30)
        real(path, content)

    monkeypatch.setattr(offsets_module, "write_json", slow)
    broker = Broker(port=0, store=tmp_path, clock=ManualClock(START_MS), namesrv=False)
    await broker.start()
    broker.offsets.commit("G", "T", 0, 7)
    housekeeping = asyncio.create_task(broker.keep_house(broker._chores()))
    assert await asyncio.to_thread(entered.wait, 30)
    broker._tasks.append(housekeeping)  # as the broker's own loop task: the stop cancels it
    broker.offsets.commit("G", "T", 0, 9)  # after the snapshot being written
    stopping = asyncio.create_task(broker.close())
    await asyncio.sleep(0.2)
    assert not stopping.done()  # held by the write on its thread
    gate.set()
    await stopping
    # the stop's own save came after the housekeeping's, not before or at the same time
    assert offsets_on_disk(tmp_path) == {"T@G": {"0": 9}}
