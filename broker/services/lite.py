"""Lite topics (RocketMQ's RIP-83): many small topics multiplexed onto one LITE parent topic.

A producer sends to the parent topic with a lite topic name in the message; a lite consumer
binds to the parent and subscribes to the lite topics it wants, one by one, at run time.

Storage follows RocketMQ's (LiteUtil.toLmqName): each lite topic is a light message queue
(LMQ) of its own, queue 0, so every lite topic has its own offsets per consumer group and a
group's consumers each take only the lite topics they subscribed to. RocketMQ names it
``%LMQ%$<parent>$<lite>``; ``$`` is not a legal topic character here, so pocketmq writes
``%LMQ%<parent>|<lite>``. The LMQ is created at the first message sent to the lite topic.
Lite consumers pop in order mode, as PopLiteMessageProcessor does (isFifoBlocked), so each
lite topic is consumed in the order sent (one batch at a time, the next after the acks).

Subscriptions live in memory, per consumer group, parent topic and client, as in RocketMQ's
LiteSubscriptionRegistry: clients re-send the whole set every 30 s (COMPLETE_ADD), so a
restarted broker learns them again. A group's attributes choose how its clients share lite
topics (``lite.sub.model`` Shared or Exclusive, ``lite.sub.wildcard``); a PARTIAL_ADD may
carry an OffsetOption that moves the group's offset in each lite topic it names. Expiry
(``lite.topic.expiration``) is in lite_expiry.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "LITE_BIND_TOPIC",
    "LITE_RESET_EXCLUSIVE",
    "LITE_RESET_UNSUBSCRIBE",
    "LITE_SUB_MODEL",
    "LITE_SUB_WILDCARD",
    "POLICY_LAST",
    "POLICY_MAX",
    "POLICY_MIN",
    "SUB_MODELS",
    "Eviction",
    "OffsetOption",
    "LITE_PROPERTY",
    "LITE_SUBSCRIPTION_QUOTA",
    "LITE_TOPIC_SIZE_MAX",
    "LMQ_PREFIX",
    "LiteSubscriptions",
    "bind_problem",
    "group_attribute",
    "is_exclusive",
    "is_wildcard",
    "offset_target",
    "parse_lmq",
    "resets_on",
    "is_lmq",
    "lmq_name",
    "validate_lite_topic",
]

LMQ_PREFIX = "%LMQ%"
LITE_BIND_TOPIC = "lite.bind.topic"  # the group attribute naming its one parent topic
LITE_PROPERTY = "__LITE_TOPIC"  # MessageConst.PROPERTY_LITE_TOPIC
LITE_SUBSCRIPTION_QUOTA = 2000  # lite topics one client may subscribe to (lite.sub.client.quota)
LITE_TOPIC_SIZE_MAX = 64  # characters in a lite topic name
# Group attributes (SubscriptionGroupAttributes)
LITE_SUB_MODEL = "lite.sub.model"  # Shared (default) or Exclusive
LITE_SUB_WILDCARD = "lite.sub.wildcard"  # present: the group takes every lite topic
LITE_RESET_EXCLUSIVE = "lite.sub.reset.offset.exclusive"  # an eviction rewinds the group
LITE_RESET_UNSUBSCRIBE = "lite.sub.reset.offset.unsubscribe"  # a PARTIAL_REMOVE rewinds it
SUB_MODELS = ("Shared", "Exclusive")
# OffsetOption.Policy (and RocketMQ's OffsetOption.POLICY_*_VALUE)
POLICY_LAST, POLICY_MIN, POLICY_MAX = 0, 1, 2
_TOPIC_NAME_MAX = 127  # the LMQ must still be a legal topic name
_LITE_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")


def lmq_name(parent: str, lite: str) -> str:
    return f"{LMQ_PREFIX}{parent}|{lite}"


def is_lmq(topic: str) -> bool:
    return topic.startswith(LMQ_PREFIX)


def parse_lmq(topic: str) -> tuple[str, str] | None:
    """(parent, lite) of an LMQ name; None for any other topic."""
    if not is_lmq(topic):
        return None
    parent, bar, lite = topic[len(LMQ_PREFIX) :].rpartition("|")
    return (parent, lite) if bar and parent and lite else None


def bind_problem(group: str, attributes: Mapping[str, str], parent: str) -> str | None:
    """Why ``group`` may not consume lite topics of ``parent``; None when it may.

    RocketMQ (PopLiteMessageProcessor.preCheck) serves a lite consumer only when its group's
    ``lite.bind.topic`` is that parent: a group bound elsewhere, or bound to nothing, is
    refused (INVALID_PARAMETER). mqadmin's ``+lite.bind.topic=<parent>`` may arrive with its
    ``+`` kept, as pocketmq stores a group's attributes as sent.
    """
    bound = attributes.get(LITE_BIND_TOPIC) or attributes.get(f"+{LITE_BIND_TOPIC}")
    if bound == parent:
        return None
    return (
        f"subscription bind topic not match, group={group}: its {LITE_BIND_TOPIC} is "
        f"{bound or 'not set'}, not {parent}"
    )


def group_attribute(attributes: Mapping[str, str], name: str) -> str | None:
    """A group attribute as set through UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, whose keys may
    keep mqadmin's ``+``."""
    value = attributes.get(name)
    return value if value is not None else attributes.get(f"+{name}")


def is_exclusive(attributes: Mapping[str, str]) -> bool:
    """``lite.sub.model=Exclusive`` (SubscriptionGroupConfig.isLiteSubExclusive)."""
    return group_attribute(attributes, LITE_SUB_MODEL) == "Exclusive"


def is_wildcard(attributes: Mapping[str, str]) -> bool:
    """Any ``lite.sub.wildcard`` makes a wildcard group (isWildcardLiteGroup: containsKey)."""
    return group_attribute(attributes, LITE_SUB_WILDCARD) is not None


def resets_on(attributes: Mapping[str, str], name: str) -> bool:
    """A boolean group attribute, read as Java's Boolean.parseBoolean reads it."""
    return (group_attribute(attributes, name) or "").lower() == "true"


@dataclass(frozen=True, slots=True)
class OffsetOption:
    """Where a PARTIAL_ADD starts the group in a lite topic (apache.rocketmq.v2.OffsetOption):
    ``policy`` (LAST, MIN or MAX), ``offset``, ``tail_n`` or ``timestamp``."""

    kind: str
    value: int


def offset_target(option: OffsetOption, current: int | None, low: int, high: int) -> int | None:
    """The offset ``option`` moves the group to, or None to leave it (resetOffset): MIN is the
    queue's first message, MAX its end, OFFSET the value within [low, high], TAIL_N the value
    before the group's committed offset (only when it has one). RocketMQ ignores TIMESTAMP
    ("disabled silently for now"), and so does pocketmq; LAST keeps the offset."""
    if option.kind == "policy":
        if option.value == POLICY_MIN:
            return low
        if option.value == POLICY_MAX:
            return high
        return None
    if option.kind == "offset":
        return min(max(option.value, low), high)
    if option.kind == "tail_n" and current is not None:
        return min(max(current - option.value, low), high)
    return None


def validate_lite_topic(parent: str, lite: str) -> str | None:
    """Why ``lite`` cannot be a lite topic of ``parent``; None when it can."""
    if not lite or not lite.strip():
        return "lite topic cannot be blank"
    if len(lite) > LITE_TOPIC_SIZE_MAX:
        return f"lite topic {lite!r} is longer than {LITE_TOPIC_SIZE_MAX} characters"
    if not _LITE_NAME.match(lite):
        return f"lite topic {lite!r} contains characters other than a-z A-Z 0-9 _ -"
    if len(lmq_name(parent, lite)) > _TOPIC_NAME_MAX:
        return (
            f"lite topic {lite!r} of {parent} makes a queue name over {_TOPIC_NAME_MAX} characters"
        )
    return None


@dataclass(frozen=True, slots=True)
class Eviction:
    """An exclusive group's client that lost a lite topic to another client of its group."""

    client_id: str
    group: str
    parent: str
    lite: str


@dataclass
class LiteSubscriptions:
    """Which lite topics each client of a (group, parent topic) subscribed to.

    As RocketMQ's LiteSubscriptionRegistryImpl: an exclusive group's lite topic belongs to one
    client at a time (a PARTIAL_ADD takes it from the others, who are told and tombstoned, so
    their next COMPLETE_ADD of it is answered with the notice again and they cannot pop it); a
    wildcard group's clients take every lite topic of the parent.
    """

    # (group, parent) -> client id -> lite topics
    table: dict[tuple[str, str], dict[str, set[str]]] = field(default_factory=dict)
    # (group, parent) -> wildcard clients (ExclusiveEvictionTombstones' twin: topic@group)
    wildcard: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    # client id -> (group, parent, lite) it was evicted from and has not given up yet
    tombstones: dict[str, set[tuple[str, str, str]]] = field(default_factory=dict)

    def of(self, group: str, parent: str, client_id: str) -> set[str]:
        return self.table.get((group, parent), {}).get(client_id, set())

    def poppable(self, group: str, parent: str, client_id: str) -> set[str]:
        """The lite topics this client may pop: its own, less those another took from it."""
        lost = {
            lite for g, p, lite in self.tombstones.get(client_id, ()) if (g, p) == (group, parent)
        }
        return self.of(group, parent, client_id) - lost

    def is_wildcard(self, group: str, parent: str, client_id: str) -> bool:
        return client_id in self.wildcard.get((group, parent), ())

    def replace(self, group: str, parent: str, client_id: str, lites: list[str]) -> None:
        self.table.setdefault((group, parent), {})[client_id] = set(lites)

    def add_wildcard(self, group: str, parent: str, client_id: str) -> None:
        self.wildcard.setdefault((group, parent), set()).add(client_id)

    def add_partial(
        self, group: str, parent: str, client_id: str, lites: list[str], *, exclusive: bool
    ) -> list[Eviction]:
        """PARTIAL_ADD; in an exclusive group the other holders of each lite topic lose it."""
        evicted: list[Eviction] = []
        clients = self.table.setdefault((group, parent), {})
        mine = clients.setdefault(client_id, set())
        for lite in lites:
            mine.add(lite)
            if not exclusive:
                continue
            for other, theirs in clients.items():
                if other != client_id and lite in theirs:
                    theirs.discard(lite)
                    self.tombstones.setdefault(other, set()).add((group, parent, lite))
                    evicted.append(Eviction(other, group, parent, lite))
            # re-claiming a lite topic clears this client's own stale tombstone for it
            self._untomb(client_id, {(group, parent, lite)})
        return evicted

    def add_complete(
        self, group: str, parent: str, client_id: str, lites: list[str], *, exclusive: bool
    ) -> list[str]:
        """COMPLETE_ADD; in an exclusive group, the lite topics of the set that were taken from
        this client (its notice was lost or ignored) are returned, to be told again."""
        self.replace(group, parent, client_id, lites)
        if not exclusive:
            return []
        lost = self.tombstones.get(client_id, set())
        stale = {t for t in lost if t[:2] == (group, parent) and t[2] not in lites}
        self._untomb(client_id, stale)
        return sorted(t[2] for t in self.tombstones.get(client_id, ()) if t[:2] == (group, parent))

    def remove(self, group: str, parent: str, client_id: str, lites: list[str]) -> None:
        clients = self.table.get((group, parent))
        if clients is not None and client_id in clients:
            clients[client_id].difference_update(lites)

    def remove_all(self, group: str, parent: str, client_id: str) -> None:
        """COMPLETE_REMOVE: the client drops all its lite subscriptions, wildcard or not."""
        self.replace(group, parent, client_id, [])
        self.wildcard.get((group, parent), set()).discard(client_id)
        self.tombstones.pop(client_id, None)

    def drop_lite(self, parent: str, lite: str) -> list[tuple[str, str]]:
        """An expired lite topic leaves every subscription (cleanSubscription); returns the
        (group, client id) pairs that held it."""
        dropped = []
        for (group, owner), clients in self.table.items():
            if owner != parent:
                continue
            for client_id, lites in clients.items():
                if lite in lites:
                    lites.discard(lite)
                    dropped.append((group, client_id))
        return dropped

    def drop_client(self, client_id: str) -> None:
        self.tombstones.pop(client_id, None)
        for key in list(self.table):
            clients = self.table[key]
            clients.pop(client_id, None)
            if not clients:
                del self.table[key]
        for key in list(self.wildcard):
            self.wildcard[key].discard(client_id)
            if not self.wildcard[key]:
                del self.wildcard[key]

    def _untomb(self, client_id: str, entries: set[tuple[str, str, str]]) -> None:
        lost = self.tombstones.get(client_id)
        if lost is not None:
            lost.difference_update(entries)
            if not lost:
                del self.tombstones[client_id]
