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
restarted broker learns them again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "LITE_BIND_TOPIC",
    "LITE_PROPERTY",
    "LITE_SUBSCRIPTION_QUOTA",
    "LITE_TOPIC_SIZE_MAX",
    "LMQ_PREFIX",
    "LiteSubscriptions",
    "bind_problem",
    "is_lmq",
    "lmq_name",
    "validate_lite_topic",
]

LMQ_PREFIX = "%LMQ%"
LITE_BIND_TOPIC = "lite.bind.topic"  # the group attribute naming its one parent topic
LITE_PROPERTY = "__LITE_TOPIC"  # MessageConst.PROPERTY_LITE_TOPIC
LITE_SUBSCRIPTION_QUOTA = 2000  # lite topics one client may subscribe to (lite.sub.client.quota)
LITE_TOPIC_SIZE_MAX = 64  # characters in a lite topic name
_TOPIC_NAME_MAX = 127  # the LMQ must still be a legal topic name
_LITE_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")


def lmq_name(parent: str, lite: str) -> str:
    return f"{LMQ_PREFIX}{parent}|{lite}"


def is_lmq(topic: str) -> bool:
    return topic.startswith(LMQ_PREFIX)


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


@dataclass
class LiteSubscriptions:
    """Which lite topics each client of a (group, parent topic) subscribed to."""

    # (group, parent) -> client id -> lite topics
    table: dict[tuple[str, str], dict[str, set[str]]] = field(default_factory=dict)

    def of(self, group: str, parent: str, client_id: str) -> set[str]:
        return self.table.get((group, parent), {}).get(client_id, set())

    def replace(self, group: str, parent: str, client_id: str, lites: list[str]) -> None:
        self.table.setdefault((group, parent), {})[client_id] = set(lites)

    def remove(self, group: str, parent: str, client_id: str, lites: list[str]) -> None:
        clients = self.table.get((group, parent))
        if clients is not None and client_id in clients:
            clients[client_id].difference_update(lites)

    def drop_client(self, client_id: str) -> None:
        for key in list(self.table):
            clients = self.table[key]
            clients.pop(client_id, None)
            if not clients:
                del self.table[key]
