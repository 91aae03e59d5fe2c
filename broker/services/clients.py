"""Who is connected: consumers by group (with their subscriptions) and producers by group.

Mirrors RocketMQ's ConsumerManager / ProducerManager: a heartbeat registers or refreshes a
client on its connection; a lost connection or a client silent for the expiry time is removed;
when a group's membership changes its other members get NOTIFY_CONSUMER_IDS_CHANGED.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pocketmq.broker.protocol.headers import ConsumerData, SubscriptionData
from pocketmq.broker.services.stats import BrokerStats

__all__ = ["Channel", "ClientRegistry", "ConsumerGroupInfo", "ConsumerInfo"]


class Channel(Protocol):
    """What the registry needs of a client's connection, whichever front holds it: whether it
    is closed, and a place to note which groups it joined (RocketMQ's ClientChannelInfo)."""

    closed: bool
    attributes: dict[str, Any]


log = logging.getLogger("pocketmq.broker")


@dataclass(slots=True)
class ConsumerInfo:
    client_id: str
    connection: Channel
    last_heartbeat: float
    # What the client said of itself in its heartbeat (RocketMQ's ClientChannelInfo), for
    # GET_CONSUMER/PRODUCER_CONNECTION_LIST: its address, LanguageCode name and version.
    address: str = ""
    language: str = "JAVA"
    version: int = 0


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    consumers: dict[str, ConsumerInfo] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted(self.consumers)


class ClientRegistry:
    def __init__(
        self,
        *,
        notify: Callable[[str, list[Channel]], None],
        stats: BrokerStats | None = None,
    ) -> None:
        self.consumer_groups: dict[str, ConsumerGroupInfo] = {}
        self.producer_groups: dict[str, dict[str, ConsumerInfo]] = {}
        self._notify = notify
        # counts client connections: opened at a connection's first heartbeat, closed when lost
        self.stats = stats

    def _first_heartbeat(
        self, connection: Channel, client_id: str, front: str, address: str
    ) -> None:
        if "client_id" not in connection.attributes:
            connection.attributes["front"] = front
            connection.attributes["address"] = address
            # once per connection, at its first heartbeat: the moment its client id is known
            log.info("client %s connected from %s (%s)", client_id, address or "?", front)
            if self.stats is not None:
                self.stats.connection_opened(front)
        connection.attributes["client_id"] = client_id

    def register_consumer(
        self,
        data: ConsumerData,
        client_id: str,
        connection: Channel,
        now: float,
        *,
        address: str = "",
        language: str = "JAVA",
        version: int = 0,
        front: str = "remoting",
    ) -> bool:
        """Register or refresh; returns True when the group's membership changed."""
        info = self.consumer_groups.get(data.group_name)
        if info is None:
            info = self.consumer_groups[data.group_name] = ConsumerGroupInfo(data.group_name)
        info.consume_type = data.consume_type
        info.message_model = data.message_model
        info.consume_from_where = data.consume_from_where
        for subscription in data.subscription_data_set:
            current = info.subscriptions.get(subscription.topic)
            if current is None or current.sub_version <= subscription.sub_version:
                info.subscriptions[subscription.topic] = subscription
        existing = info.consumers.get(client_id)
        changed = existing is None or existing.connection is not connection
        info.consumers[client_id] = ConsumerInfo(
            client_id, connection, now, address, language, version
        )
        connection.attributes.setdefault("consumer_groups", set()).add(data.group_name)
        self._first_heartbeat(connection, client_id, front, address)
        if changed:
            self._changed(info)
        return changed

    def register_producer(
        self,
        group: str,
        client_id: str,
        connection: Channel,
        now: float,
        *,
        address: str = "",
        language: str = "JAVA",
        version: int = 0,
        front: str = "remoting",
    ) -> None:
        self.producer_groups.setdefault(group, {})[client_id] = ConsumerInfo(
            client_id, connection, now, address, language, version
        )
        connection.attributes.setdefault("producer_groups", set()).add(group)
        self._first_heartbeat(connection, client_id, front, address)

    def unregister(
        self, client_id: str, *, consumer_group: str | None, producer_group: str | None
    ) -> None:
        if consumer_group:
            info = self.consumer_groups.get(consumer_group)
            if info is not None and info.consumers.pop(client_id, None) is not None:
                self._changed(info)
        if producer_group:
            self.producer_groups.get(producer_group, {}).pop(client_id, None)

    def connection_lost(self, connection: Channel) -> None:
        attributes = connection.attributes
        if "client_id" in attributes:
            log.info(
                "client %s at %s disconnected (%s)",
                attributes["client_id"],
                attributes.get("address") or "?",
                attributes.get("front", "remoting"),
            )
        if self.stats is not None and "client_id" in attributes:
            self.stats.connection_closed(attributes.get("front", "remoting"))
        for group in connection.attributes.get("consumer_groups", ()):
            info = self.consumer_groups.get(group)
            if info is None:
                continue
            gone = [cid for cid, c in info.consumers.items() if c.connection is connection]
            for cid in gone:
                del info.consumers[cid]
            if gone:
                self._changed(info)
        for group in connection.attributes.get("producer_groups", ()):
            producers = self.producer_groups.get(group, {})
            for cid in [cid for cid, p in producers.items() if p.connection is connection]:
                del producers[cid]

    def expire(self, deadline: float) -> None:
        """Drop clients whose last heartbeat is older than ``deadline`` (loop time)."""
        for info in self.consumer_groups.values():
            stale = [cid for cid, c in info.consumers.items() if c.last_heartbeat < deadline]
            for cid in stale:
                log.info("consumer %s of %s expired", cid, info.group)
                del info.consumers[cid]
            if stale:
                self._changed(info)
        for producers in self.producer_groups.values():
            for cid in [cid for cid, p in producers.items() if p.last_heartbeat < deadline]:
                del producers[cid]

    def _changed(self, info: ConsumerGroupInfo) -> None:
        self._notify(info.group, [c.connection for c in info.consumers.values()])

    def group(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumer_groups.get(group)

    def channels_of(self, client_id: str) -> list[Channel]:
        """The open connections a client ID registered over (as producer or consumer), once
        each: what a fault that cuts one client closes."""
        found: dict[int, Channel] = {}
        for info in self.consumer_groups.values():
            member = info.consumers.get(client_id)
            if member is not None and not member.connection.closed:
                found[id(member.connection)] = member.connection
        for producers in self.producer_groups.values():
            producer = producers.get(client_id)
            if producer is not None and not producer.connection.closed:
                found[id(producer.connection)] = producer.connection
        return list(found.values())

    def producers_of(self, group: str) -> list[Channel]:
        return [
            p.connection
            for p in self.producer_groups.get(group, {}).values()
            if not p.connection.closed
        ]
