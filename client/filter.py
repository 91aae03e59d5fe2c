"""Tag expressions (``"*"``, ``"A || B"``); Java's ``String.hashCode`` is ``store.javahash``'s.

The broker filters a queue by the hash codes of the subscribed tags (``codeSet``), which can
collide, so the client filters again on the ``TAGS`` string (``tagsSet``), as RocketMQ's
``PullAPIWrapper.processPullResult`` does: with a non-empty tag set, a message is kept only
if its tag is in the set (a message without a tag is dropped).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, TypeVar

from pocketmq.broker.protocol.headers import SubscriptionData
from pocketmq.store.javahash import java_string_hash

from .errors import ClientUsageError

__all__ = [
    "SUB_ALL",
    "TagExpression",
    "java_string_hash",
    "queue_index_for_key",
]

T = TypeVar("T")

SUB_ALL: Final = "*"
_TAG_SEPARATOR: Final = "||"


def queue_index_for_key(key: str, queue_count: int) -> int:
    """``SelectMessageQueueByHash``: ``abs(key.hashCode() % n)`` with Java's remainder."""
    if queue_count <= 0:
        raise ClientUsageError("no queue to select from")
    return abs(java_string_hash(key)) % queue_count


@dataclass(frozen=True)
class TagExpression:
    """A parsed TAG subscription. ``tags`` empty means every message."""

    expression: str
    tags: tuple[str, ...]

    @classmethod
    def parse(cls, expression: str | None) -> TagExpression:
        """``FilterAPI.buildSubscriptionData``: empty or ``*`` = all; else tags split on
        ``||`` and trimmed. An expression without a single tag is an error."""
        if expression is None or not expression.strip() or expression.strip() == SUB_ALL:
            return cls(SUB_ALL, ())
        tags: list[str] = []
        for part in expression.split(_TAG_SEPARATOR):
            tag = part.strip()
            if tag and tag not in tags:
                tags.append(tag)
        if not tags:
            raise ClientUsageError(f"tag expression holds no tag: {expression!r}")
        return cls(expression, tuple(tags))

    @property
    def matches_all(self) -> bool:
        return not self.tags

    @property
    def codes(self) -> tuple[int, ...]:
        return tuple(java_string_hash(t) for t in self.tags)

    def matches(self, tag: str | None) -> bool:
        """Client-side re-check of one message's ``TAGS``."""
        if not self.tags:
            return True
        return tag is not None and tag in self.tags

    def filter(self, messages: Iterable[T], tag_of: Callable[[T], str | None]) -> list[T]:
        if not self.tags:
            return list(messages)
        return [m for m in messages if self.matches(tag_of(m))]

    def subscription_data(self, topic: str, *, sub_version: int | None = None) -> SubscriptionData:
        """The ``SubscriptionData`` a heartbeat carries for this expression."""
        return SubscriptionData(
            topic=topic,
            sub_string=self.expression if self.tags else SUB_ALL,
            tags_set=list(self.tags),
            code_set=list(self.codes),
            sub_version=int(time.time() * 1000) if sub_version is None else sub_version,
            expression_type="TAG",
        )
