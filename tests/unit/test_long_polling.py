"""Held pulls (broker/services/long_polling.py): woken by an arrival, in the next loop step."""

from __future__ import annotations

import asyncio

from pocketmq.broker.services.long_polling import PullHoldService


async def test_a_held_pull_is_woken_in_the_loop_step_after_the_arrival() -> None:
    holds = PullHoldService(holds_max=10)
    held = asyncio.ensure_future(holds.wait("T", 1, 30))
    await asyncio.sleep(0)
    assert holds.held == 1
    holds.notify("T", 0)  # another queue: still held
    await asyncio.sleep(0)
    assert not held.done()
    holds.notify("T", 1)
    await asyncio.sleep(0)  # one step: the held task ran (no second future in between)
    assert held.done() and held.result() is True
    assert holds.held == 0 and not holds._waiters


async def test_a_held_pull_times_out_false_and_leaves_nothing_behind() -> None:
    holds = PullHoldService(holds_max=10)
    assert await holds.wait_any([("T", 0), ("T", 1)], 0.01) is False
    assert holds.held == 0 and not holds._waiters
    holds.notify("T", 0)  # nobody waits: nothing happens


async def test_wait_any_wakes_on_any_key_and_a_cancelled_hold_is_dropped() -> None:
    holds = PullHoldService(holds_max=2)
    first = asyncio.ensure_future(holds.wait_any([("A", 0), ("B", 3)], 30))
    second = asyncio.ensure_future(holds.wait("A", 0, 30))
    await asyncio.sleep(0)
    assert holds.held == 2 and not holds.can_hold()
    second.cancel()
    await asyncio.sleep(0)
    assert holds.held == 1 and holds._waiters[("A", 0)] == holds._waiters[("B", 3)]
    holds.notify("B", 3)
    assert await first is True
    assert holds.held == 0 and not holds._waiters
