"""Moving a consumer group in a lite topic: what RocketMQ's resetOffset (in
LiteSubscriptionRegistryImpl) does for a subscribe's OffsetOption, and for an exclusive move or
an unsubscribe that rewinds the group."""

from __future__ import annotations

from pocketmq.broker.services.lite import OffsetOption, offset_target
from pocketmq.broker.services.pop import PopService

__all__ = ["reset_offset"]


def reset_offset(pop: PopService, group: str, lmq: str, option: OffsetOption) -> int | None:
    """Move ``group``'s offset in the lite topic ``lmq`` as ``option`` says (resetOffset:
    assignResetOffset, then the group's order state for it is forgotten, so the messages it
    holds in flight there no longer block the queue). Returns the new offset, None if kept."""
    current = pop.offsets.query(group, lmq, 0)
    low, high = pop.store.min_offset(lmq, 0), pop.store.max_offset(lmq, 0)
    target = offset_target(option, current, low, high)
    if target is None or target == current:
        return None
    base = (group, lmq, 0)
    pop.offsets.commit(group, lmq, 0, target)
    pop.positions[base] = target
    pop.fifo_acked.pop(base, None)
    for key in [k for k in pop.in_flight if k[:3] == base]:
        del pop.in_flight[key]  # its expiry finds it gone; a late ack is refused as stale
        pop.attempts.pop(key, None)
    return target
