"""The name server's routing tables (RocketMQ's ``RouteInfoManager``), pure and synchronous.

No asyncio, no sockets, no clock: every method that needs the time takes ``now_ms``. A
registration may carry an opaque ``channel`` (the connection it came over); the server uses it
to drop the brokers of a connection that closes, as RocketMQ's ``BrokerHousekeepingService``
does.

Tables, as in RocketMQ:

* ``topic -> {brokerName -> QueueData}``: written only by master registrations (brokerId 0);
* ``brokerName -> BrokerData`` (cluster, ``{brokerId: addr}``, zone, acting-master flag);
* ``cluster -> {brokerName}``;
* live brokers, keyed by ``(cluster, brokerAddr)``: last registration time, timeout, data
  version, HA address, channel.

A broker name disappears when its last address goes (unregister, expiry, closed channel); its
queue data goes with it, and a topic disappears when no broker name holds it any more.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Final

import msgspec

from pocketmq.broker.protocol.codes import Perm
from pocketmq.broker.protocol.headers import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicRouteData,
)

__all__ = [
    "BROKER_TIMEOUT_MS",
    "MASTER_ID",
    "BrokerLiveInfo",
    "RegisterResult",
    "RouteInfoManager",
]

MASTER_ID: Final = 0  # MixAll.MASTER_ID
BROKER_TIMEOUT_MS: Final = 120_000  # RocketMQ's default heartbeat timeout (2 minutes)

# Java's DataVersion starts at the construction time, so a real broker never sends all zeros.
# All zeros means "the sender does not keep a version": its topics are applied every time.
_UNVERSIONED: Final = DataVersion(timestamp=0, counter=0, state_version=0)


@dataclass(slots=True)
class BrokerLiveInfo:
    """One registered broker process (master or slave)."""

    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str
    data_version: DataVersion
    last_update_ms: int
    timeout_ms: int
    channel: Hashable | None = None

    def expired(self, now_ms: int) -> bool:
        return self.last_update_ms + self.timeout_ms < now_ms


@dataclass(frozen=True, slots=True)
class RegisterResult:
    """What REGISTER_BROKER answers: for a slave, its master's address and HA address."""

    master_addr: str | None = None
    ha_server_addr: str | None = None
    first: bool = False  # the broker name or this broker id was not registered before


@dataclass(slots=True)
class _BrokerEntry:
    cluster: str
    broker_name: str
    addrs: dict[int, str] = field(default_factory=dict)
    zone_name: str | None = None
    enable_acting_master: bool = False

    def to_wire(self) -> BrokerData:
        return BrokerData(
            cluster=self.cluster,
            broker_name=self.broker_name,
            broker_addrs=dict(sorted(self.addrs.items())),
            zone_name=self.zone_name,
            enable_acting_master=self.enable_acting_master,
        )


class RouteInfoManager:
    """Routing state of one name server. Not thread-safe; the server calls it from one loop.

    ``broker_timeout_ms`` applies to registrations that do not say their own timeout.
    ``delete_topic_with_broker_registration`` (RocketMQ 5.x namesrv option, default off there
    too): when a master re-registers with a new data version, drop its queues of the topics
    missing from its table.
    """

    def __init__(
        self,
        *,
        broker_timeout_ms: int = BROKER_TIMEOUT_MS,
        delete_topic_with_broker_registration: bool = False,
    ) -> None:
        self.broker_timeout_ms = broker_timeout_ms
        self.delete_topic_with_broker_registration = delete_topic_with_broker_registration
        self._topic_queues: dict[str, dict[str, QueueData]] = {}
        self._brokers: dict[str, _BrokerEntry] = {}
        self._clusters: dict[str, set[str]] = {}
        self._live: dict[tuple[str, str], BrokerLiveInfo] = {}

    # -- registration ---------------------------------------------------------------------

    def register_broker(
        self,
        *,
        cluster: str,
        broker_name: str,
        broker_id: int,
        broker_addr: str,
        ha_server_addr: str = "",
        topic_configs: Mapping[str, TopicConfig] | None = None,
        data_version: DataVersion = _UNVERSIONED,
        now_ms: int,
        timeout_ms: int | None = None,
        channel: Hashable | None = None,
        zone_name: str | None = None,
        enable_acting_master: bool = False,
    ) -> RegisterResult:
        """Add or refresh a broker. Topic configs count only from a master (``broker_id`` 0),
        and only when its data version changed or the registration is its first."""
        self._clusters.setdefault(cluster, set()).add(broker_name)

        entry = self._brokers.get(broker_name)
        first = entry is None
        if entry is None:
            entry = _BrokerEntry(cluster=cluster, broker_name=broker_name)
            self._brokers[broker_name] = entry
        entry.cluster = cluster
        if zone_name is not None:
            entry.zone_name = zone_name
        entry.enable_acting_master = enable_acting_master
        # The same address under another id: a slave switched to master (or back).
        for other_id in [i for i, a in entry.addrs.items() if a == broker_addr and i != broker_id]:
            del entry.addrs[other_id]
        previous_addr = entry.addrs.get(broker_id)
        entry.addrs[broker_id] = broker_addr
        first = first or previous_addr is None
        if previous_addr is not None and previous_addr != broker_addr:
            # The id moved to a new address: the old process is gone for this name server.
            self._live.pop((cluster, previous_addr), None)

        key = (cluster, broker_addr)
        previous = self._live.get(key)
        if broker_id == MASTER_ID and topic_configs is not None:
            changed = (
                previous is None
                or data_version == _UNVERSIONED
                or previous.data_version != data_version
            )
            if changed or first:
                self._apply_topics(broker_name, topic_configs, prune=previous is not None)

        self._live[key] = BrokerLiveInfo(
            cluster=cluster,
            broker_name=broker_name,
            broker_id=broker_id,
            broker_addr=broker_addr,
            ha_server_addr=ha_server_addr,
            data_version=data_version,
            last_update_ms=now_ms,
            timeout_ms=self.broker_timeout_ms if timeout_ms is None else timeout_ms,
            channel=channel,
        )

        if broker_id != MASTER_ID:
            master_addr = entry.addrs.get(MASTER_ID)
            if master_addr is not None:
                master = self._live.get((cluster, master_addr))
                if master is not None:
                    return RegisterResult(
                        master_addr=master_addr, ha_server_addr=master.ha_server_addr, first=first
                    )
        return RegisterResult(first=first)

    def _apply_topics(
        self, broker_name: str, topic_configs: Mapping[str, TopicConfig], *, prune: bool
    ) -> None:
        seen: set[str] = set()
        for key, config in topic_configs.items():
            topic = config.topic_name or key
            seen.add(topic)
            queue = QueueData(
                broker_name=broker_name,
                read_queue_nums=config.read_queue_nums,
                write_queue_nums=config.write_queue_nums,
                perm=config.perm,
                topic_sys_flag=config.topic_sys_flag,
            )
            queues = self._topic_queues.setdefault(topic, {})
            if queues.get(broker_name) != queue:
                queues[broker_name] = queue
        if prune and self.delete_topic_with_broker_registration:
            for topic in [t for t, q in self._topic_queues.items() if broker_name in q]:
                if topic not in seen:
                    self._remove_queue(topic, broker_name)

    def unregister_broker(
        self, *, cluster: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> bool:
        """Remove one broker process (UNREGISTER_BROKER). False if it was not registered."""
        live = self._live.get((cluster, broker_addr))
        entry = self._brokers.get(broker_name)
        known = live is not None or (
            entry is not None and entry.addrs.get(broker_id) == broker_addr
        )
        if live is not None:
            del self._live[(cluster, broker_addr)]
        if entry is not None and entry.addrs.get(broker_id) == broker_addr:
            del entry.addrs[broker_id]
            if not entry.addrs:
                self._remove_broker_name(broker_name)
        return known

    def on_channel_destroy(self, channel: Hashable) -> list[BrokerLiveInfo]:
        """The connection ``channel`` closed: remove the brokers whose latest registration
        came over it. Returns them."""
        gone = [
            info
            for info in self._live.values()
            if info.channel is not None and info.channel == channel
        ]
        for info in gone:
            self._drop(info)
        return gone

    def expire(self, now_ms: int) -> list[BrokerLiveInfo]:
        """Remove the brokers not re-registered within their timeout (RocketMQ's
        ``scanNotActiveBroker``). Returns them, channels included, so the caller can close
        their connections as RocketMQ does."""
        gone = [info for info in self._live.values() if info.expired(now_ms)]
        for info in gone:
            self._drop(info)
        return gone

    def _drop(self, info: BrokerLiveInfo) -> None:
        self._live.pop((info.cluster, info.broker_addr), None)
        entry = self._brokers.get(info.broker_name)
        if entry is None:
            return
        for broker_id in [i for i, a in entry.addrs.items() if a == info.broker_addr]:
            del entry.addrs[broker_id]
        if not entry.addrs:
            self._remove_broker_name(info.broker_name)

    def _remove_broker_name(self, broker_name: str) -> None:
        entry = self._brokers.pop(broker_name, None)
        clusters = [entry.cluster] if entry is not None else list(self._clusters)
        for cluster in clusters:
            names = self._clusters.get(cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self._clusters[cluster]
        for topic in [t for t, q in self._topic_queues.items() if broker_name in q]:
            self._remove_queue(topic, broker_name)

    def _remove_queue(self, topic: str, broker_name: str) -> None:
        queues = self._topic_queues.get(topic)
        if queues is None:
            return
        queues.pop(broker_name, None)
        if not queues:
            del self._topic_queues[topic]

    # -- liveness and data versions (QUERY_DATA_VERSION) ----------------------------------

    def live_brokers(self) -> list[BrokerLiveInfo]:
        return sorted(self._live.values(), key=lambda i: (i.cluster, i.broker_name, i.broker_id))

    def data_version_of(self, cluster: str, broker_addr: str) -> DataVersion | None:
        info = self._live.get((cluster, broker_addr))
        return None if info is None else info.data_version

    def is_topic_config_changed(
        self, cluster: str, broker_addr: str, data_version: DataVersion
    ) -> bool:
        stored = self.data_version_of(cluster, broker_addr)
        return stored is None or stored != data_version

    def touch(self, cluster: str, broker_addr: str, now_ms: int) -> bool:
        """Refresh a broker's last-update time; False if it is not registered."""
        info = self._live.get((cluster, broker_addr))
        if info is None:
            return False
        info.last_update_ms = now_ms
        return True

    # -- queries ----------------------------------------------------------------------------

    def route_of(self, topic: str) -> TopicRouteData | None:
        """The topic's route, or None when no registered broker name holds it."""
        queues = self._topic_queues.get(topic)
        if not queues:
            return None
        names = sorted(queues)
        broker_datas = [self._brokers[n].to_wire() for n in names if n in self._brokers]
        if not broker_datas:
            return None
        return TopicRouteData(
            queue_datas=[queues[n] for n in names],
            broker_datas=broker_datas,
            filter_server_table={},
        )

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={n: self._brokers[n].to_wire() for n in sorted(self._brokers)},
            cluster_addr_table={c: sorted(self._clusters[c]) for c in sorted(self._clusters)},
        )

    def all_topics(self) -> list[str]:
        return sorted(self._topic_queues)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self._clusters.get(cluster, set())
        return sorted(t for t, q in self._topic_queues.items() if not names.isdisjoint(q))

    def has_topic(self, topic: str) -> bool:
        return topic in self._topic_queues

    # -- administration ---------------------------------------------------------------------

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """Forget a topic (DELETE_TOPIC_IN_NAMESRV); with ``cluster``, only that cluster's
        queues of it (5.x). It comes back when a master re-registers a new data version."""
        queues = self._topic_queues.get(topic)
        if queues is None:
            return False
        if cluster is None:
            del self._topic_queues[topic]
            return True
        names = self._clusters.get(cluster, set())
        hit = [n for n in queues if n in names]
        for name in hit:
            self._remove_queue(topic, name)
        return bool(hit)

    def wipe_write_perm(self, broker_name: str) -> int:
        """Clear the WRITE bit of every queue data of ``broker_name``; returns how many topics."""
        return self._change_perm(broker_name, lambda p: p & ~Perm.WRITE)

    def add_write_perm(self, broker_name: str) -> int:
        """Set the WRITE bit back (ADD_WRITE_PERM_OF_BROKER); returns how many topics."""
        return self._change_perm(broker_name, lambda p: p | Perm.WRITE)

    def _change_perm(self, broker_name: str, change: Callable[[int], int]) -> int:
        count = 0
        for queues in self._topic_queues.values():
            queue = queues.get(broker_name)
            if queue is not None:
                queues[broker_name] = msgspec.structs.replace(queue, perm=int(change(queue.perm)))
                count += 1
        return count
