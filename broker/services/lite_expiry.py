"""Lite topic expiry: a lite topic that took no message for its parent's TTL is removed.

RocketMQ's LiteLifecycleManager: the parent topic's ``lite.topic.expiration`` attribute is the
TTL in minutes (-1, the default, or 0: never; at most 30 days). Every ``liteTtlCheckInterval``
(2 min) it looks at each LMQ's last stored message; one inactive for longer than the TTL, and
for at least ``minLiteTTl`` (15 min) whatever the TTL, is deleted: the offsets of its parent's
groups, its consume queue and its subscriptions go (cleanSubscription, without telling the
clients: their next COMPLETE_ADD re-subscribes, and a new message makes the lite topic again).
Nothing is checked in the first ``minLiteTTl`` after the broker starts.

pocketmq's store keeps a deleted topic's consume queue until retention removes its commitlog,
so here the LMQ's topic entry goes (it no longer counts against max_lmq_consume_queue_num, and
no consumer is handed it) and every group's offset moves to its end: a lite topic made again
later carries on after the expired messages, which no group is handed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pocketmq.broker.services.groups import GroupManager
from pocketmq.broker.services.lite import (
    LITE_BIND_TOPIC,
    POLICY_MAX,
    OffsetOption,
    group_attribute,
    parse_lmq,
)
from pocketmq.broker.services.lite_offsets import reset_offset
from pocketmq.broker.services.pop import PopService
from pocketmq.broker.services.topics import TopicManager, topic_message_type

__all__ = [
    "LITE_EXPIRATION",
    "LITE_EXPIRATION_MINUTES_MAX",
    "LITE_TTL_CHECK_INTERVAL_MS",
    "MIN_LITE_TTL_MS",
    "LiteExpiry",
    "expiration_minutes",
    "is_expired",
]

log = logging.getLogger("pocketmq.lite")

LITE_EXPIRATION = "lite.topic.expiration"  # TopicAttributes.LITE_EXPIRATION_ATTRIBUTE
LITE_EXPIRATION_MINUTES_MAX = 30 * 24 * 60  # its range: -1 .. TimeUnit.DAYS.toMinutes(30)
MIN_LITE_TTL_MS = 15 * 60_000  # BrokerConfig.minLiteTTl
LITE_TTL_CHECK_INTERVAL_MS = 120_000  # BrokerConfig.liteTtlCheckInterval

Expired = Callable[[str, str], None]  # (parent, lite)


def expiration_minutes(attributes: Mapping[str, str]) -> int:
    """A parent's TTL in minutes, <= 0 for none. A value outside RocketMQ's range or no number
    counts as none (and is logged), as an unknown TTL does in isLiteTopicExpired."""
    text = attributes.get(LITE_EXPIRATION, "-1")
    try:
        minutes = int(text)
    except ValueError:
        minutes = None
    if minutes is None or not -1 <= minutes <= LITE_EXPIRATION_MINUTES_MAX:
        log.warning(
            "%s=%r is not a number of minutes in [-1, %d]: no lite topic expires by it",
            LITE_EXPIRATION,
            text,
            LITE_EXPIRATION_MINUTES_MAX,
        )
        return -1
    return minutes


def is_expired(minutes: int, last_store_ms: int, now_ms: int) -> bool:
    """isLiteTopicExpired: inactive for at least minLiteTTl and for longer than the TTL."""
    inactive_ms = now_ms - last_store_ms
    if inactive_ms < MIN_LITE_TTL_MS or minutes <= 0:
        return False
    return inactive_ms > minutes * 60_000


@dataclass
class LiteExpiry:
    topics: TopicManager
    groups: GroupManager
    pop: PopService
    now_ms: Callable[[], int]
    started_ms: int
    # told of each lite topic removed (the gRPC front drops it from its subscriptions)
    listeners: list[Expired] = field(default_factory=list)
    next_check_ms: int = 0

    def due(self) -> bool:
        """Whether a check should run now: every LITE_TTL_CHECK_INTERVAL_MS, never in the first
        MIN_LITE_TTL_MS of the broker (the base protection for a restart)."""
        now = self.now_ms()
        return now - self.started_ms >= MIN_LITE_TTL_MS and now >= self.next_check_ms

    def run_if_due(self) -> list[str]:
        if not self.due():
            return []
        self.next_check_ms = self.now_ms() + LITE_TTL_CHECK_INTERVAL_MS
        return self.sweep()

    def sweep(self) -> list[str]:
        """Remove every expired LMQ now; returns their names."""
        now = self.now_ms()
        removed = []
        for lmq in [t for t in self.topics.topics if parse_lmq(t) is not None]:
            parent, lite = parse_lmq(lmq) or ("", "")
            config = self.topics.get(parent)
            if config is None or topic_message_type(config) != "LITE":
                continue  # no TTL known for it: kept, as RocketMQ keeps it
            last = self._last_store_ms(lmq)
            if last is None or not is_expired(expiration_minutes(config.attributes), last, now):
                continue
            self._delete(parent, lite, lmq)
            removed.append(lmq)
        if removed:
            log.info("expired lite topics removed: %s", ", ".join(removed))
        return removed

    def _last_store_ms(self, lmq: str) -> int | None:
        store = self.pop.store
        high = store.max_offset(lmq, 0)
        queue = store.consume_queues.get(lmq, 0)
        if high <= 0 or queue is None:
            return None
        entries = queue.get(high - 1, 1)
        return store.store_time_of(entries[0][0]) if entries else None

    def _delete(self, parent: str, lite: str, lmq: str) -> None:
        bound = [
            name
            for name, config in self.groups.groups.items()
            if group_attribute(config.attributes or {}, LITE_BIND_TOPIC) == parent
        ]
        for group in sorted(set(bound) | set(self.pop.offsets.groups_of(lmq))):
            reset_offset(self.pop, group, lmq, OffsetOption("policy", POLICY_MAX))
        self.topics.delete(lmq)
        for listener in self.listeners:
            try:
                listener(parent, lite)
            except Exception:
                log.exception("a listener of lite topic expiry failed")
