"""Name-server client: topic routes, cached and refreshed.

GET_ROUTEINFO_BY_TOPIC (105) with ``acceptStandardJsonOnly=true``; the route's queues are
turned into publish queues (writable queues of brokers with a master, brokerId 0, sorted by
broker name) and subscribe queues (readable ones), as ``MQClientInstance`` does. A producer
sending to a topic the name server does not know yet falls back to the route of ``TBW102``
(at most ``default_topic_queue_nums`` queues per broker); the broker creates the topic on
the first send.

Routes are cached for ``refresh_interval_s`` (30 s); ``invalidate`` forces a fetch on the next
use (after a failed send, say). When a fetch fails the stale route is kept and used.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from pocketmq.broker.protocol import RemotingCommand, RemotingHeader, RequestCode, ResponseCode
from pocketmq.broker.protocol.codes import Perm
from pocketmq.broker.protocol.headers import (
    GetRouteInfoRequestHeader,
    QueueData,
    TopicRouteData,
    decode_json_body,
)
from pocketmq.store.topics import AUTO_CREATE_TOPIC  # the template of auto-created topics

from .connection import ConnectionPool, make_request
from .errors import (
    BrokerError,
    ClientError,
    ClientUsageError,
    ConnectionLostError,
    RequestTimeoutError,
    RouteNotFoundError,
    TopicNotExistError,
    error_for_code,
)
from .message import MessageQueue

__all__ = [
    "AUTO_CREATE_TOPIC",
    "DEFAULT_NAMESRV",
    "MASTER_ID",
    "RouteClient",
    "TopicRoute",
    "namesrv_addresses",
]

log = logging.getLogger("pocketmq.client.route")

DEFAULT_NAMESRV: Final = "127.0.0.1:9876"
MASTER_ID: Final = 0


def namesrv_addresses(namesrv: str | Sequence[str] | None = None) -> list[str]:
    """Name servers from the argument, else env ``NAMESRV_ADDR``, else 127.0.0.1:9876.

    A string may list several addresses separated by semicolons.
    """
    if namesrv is None:
        namesrv = os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV
    items = namesrv.split(";") if isinstance(namesrv, str) else list(namesrv)
    addrs = [a.strip() for a in items if a and a.strip()]
    if not addrs:
        raise ClientUsageError(f"no name server address in {namesrv!r}")
    return addrs


@dataclass(frozen=True)
class TopicRoute:
    """A topic's route with its derived queue lists."""

    topic: str
    data: TopicRouteData
    publish_queues: tuple[MessageQueue, ...]
    subscribe_queues: tuple[MessageQueue, ...]
    brokers: dict[str, dict[int, str]] = field(default_factory=dict)  # name -> id -> addr
    from_default_topic: bool = False

    @classmethod
    def build(
        cls, topic: str, data: TopicRouteData, *, from_default_topic: bool = False
    ) -> TopicRoute:
        brokers = {b.broker_name: dict(b.broker_addrs) for b in data.broker_datas}
        return cls(
            topic=topic,
            data=data,
            publish_queues=tuple(_publish_queues(topic, data, brokers)),
            subscribe_queues=tuple(_subscribe_queues(topic, data)),
            brokers=brokers,
            from_default_topic=from_default_topic,
        )

    def master_addr(self, broker_name: str) -> str | None:
        return self.brokers.get(broker_name, {}).get(MASTER_ID)

    def any_addr(self, broker_name: str) -> str | None:
        """The master if there is one, else the replica with the lowest id."""
        addrs = self.brokers.get(broker_name, {})
        if MASTER_ID in addrs:
            return addrs[MASTER_ID]
        return addrs[min(addrs)] if addrs else None

    def all_addrs(self) -> set[str]:
        return {a for addrs in self.brokers.values() for a in addrs.values()}

    def master_addrs(self) -> dict[str, str]:
        """broker name -> master address."""
        return {n: a[MASTER_ID] for n, a in self.brokers.items() if MASTER_ID in a}


def _publish_queues(
    topic: str, data: TopicRouteData, brokers: dict[str, dict[int, str]]
) -> Iterable[MessageQueue]:
    if data.order_topic_conf:  # "brokerA:4;brokerB:4": the queues are fixed
        for item in data.order_topic_conf.split(";"):
            name, _, count = item.partition(":")
            if name and count.strip().isdigit():
                for qid in range(int(count)):
                    yield MessageQueue(topic, name.strip(), qid)
        return
    for qd in sorted(data.queue_datas, key=lambda q: q.broker_name):
        if not qd.perm & Perm.WRITE:
            continue
        if MASTER_ID not in brokers.get(qd.broker_name, {}):
            continue  # no master: nobody takes writes for this broker
        for qid in range(qd.write_queue_nums):
            yield MessageQueue(topic, qd.broker_name, qid)


def _subscribe_queues(topic: str, data: TopicRouteData) -> Iterable[MessageQueue]:
    for qd in sorted(data.queue_datas, key=lambda q: q.broker_name):
        if qd.perm & Perm.READ:
            for qid in range(qd.read_queue_nums):
                yield MessageQueue(topic, qd.broker_name, qid)


def _shrink_default_route(data: TopicRouteData, queue_nums: int) -> TopicRouteData:
    """TBW102's route as a template for a new topic: at most ``queue_nums`` queues each."""
    queue_datas = [
        QueueData(
            broker_name=q.broker_name,
            read_queue_nums=min(queue_nums, q.read_queue_nums),
            write_queue_nums=min(queue_nums, q.read_queue_nums),
            perm=q.perm,
            topic_sys_flag=q.topic_sys_flag,
        )
        for q in data.queue_datas
    ]
    return TopicRouteData(
        order_topic_conf=data.order_topic_conf,
        queue_datas=queue_datas,
        broker_datas=list(data.broker_datas),
        filter_server_table=dict(data.filter_server_table),
    )


class RouteClient:
    """Fetches and caches topic routes from the name servers.

    Name servers are tried in turn, starting with the one that answered last; a connection
    failure moves on to the next one.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        namesrv: str | Sequence[str] | None = None,
        *,
        timeout_ms: float = 3000,
        refresh_interval_s: float = 30.0,
        default_topic_queue_nums: int = 4,
    ) -> None:
        self.pool = pool
        self.namesrv = namesrv_addresses(namesrv)
        self.timeout_ms = timeout_ms
        self.refresh_interval_s = refresh_interval_s
        self.default_topic_queue_nums = default_topic_queue_nums
        self._routes: dict[str, tuple[TopicRoute, float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._namesrv_index = 0

    # -- name server requests ----------------------------------------------------------------

    async def invoke_namesrv(
        self,
        code: int,
        header: RemotingHeader | None = None,
        *,
        timeout_ms: float | None = None,
    ) -> RemotingCommand:
        """Send a request to a name server; the first one that answers wins.

        Returns the response whatever its code; raises the last connection error or timeout
        when none answers.
        """
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        last_error: ClientError | None = None
        count = len(self.namesrv)
        for step in range(count):
            index = (self._namesrv_index + step) % count
            addr = self.namesrv[index]
            try:
                response = await self.pool.invoke(addr, make_request(code, header), timeout)
            except (ConnectionLostError, RequestTimeoutError) as e:
                log.debug("name server %s failed: %s", addr, e)
                last_error = e
                continue
            self._namesrv_index = index
            return response
        assert last_error is not None
        raise last_error

    async def fetch(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC; ``TopicNotExistError`` when the name server has none."""
        response = await self.invoke_namesrv(
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True),
        )
        if response.code != ResponseCode.SUCCESS:
            raise error_for_code(response.code, response.remark)
        if not response.body:
            raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, f"empty route for {topic}")
        return decode_json_body(response.body, TopicRouteData)

    # -- cache -------------------------------------------------------------------------------

    def cached(self, topic: str) -> TopicRoute | None:
        entry = self._routes.get(topic)
        return entry[0] if entry else None

    def cached_topics(self) -> list[str]:
        return list(self._routes)

    def invalidate(self, topic: str) -> None:
        """Fetch again on the next use (the stale route stays available as a fallback)."""
        entry = self._routes.get(topic)
        if entry is not None:
            self._routes[topic] = (entry[0], float("-inf"))

    def forget(self, topic: str) -> None:
        self._routes.pop(topic, None)

    def fresh(self, topic: str) -> TopicRoute | None:
        """The cached route of ``topic`` if it needs no refresh (what ``get`` would return
        without waiting), else None."""
        entry = self._routes.get(topic)
        if (
            entry is not None
            and asyncio.get_running_loop().time() - entry[1] < self.refresh_interval_s
        ):
            return entry[0]
        return None

    async def get(self, topic: str, *, for_publish: bool = False) -> TopicRoute:
        """The route of ``topic`` from the cache, fetched when missing or older than the
        refresh interval. ``for_publish`` allows the TBW102 fallback for a new topic.

        Raises ``RouteNotFoundError`` when there is no route (and no stale one to use).
        """
        loop = asyncio.get_running_loop()
        entry = self._routes.get(topic)
        if entry is not None and loop.time() - entry[1] < self.refresh_interval_s:
            return entry[0]
        lock = self._locks.setdefault(topic, asyncio.Lock())
        async with lock:  # one fetch per topic however many callers wait
            entry = self._routes.get(topic)
            if entry is not None and loop.time() - entry[1] < self.refresh_interval_s:
                return entry[0]
            try:
                route = await self._fetch_route(topic, for_publish=for_publish)
            except ClientError as e:
                if entry is not None:
                    log.warning("route of %s not refreshed, keeping the old one: %s", topic, e)
                    return entry[0]
                if isinstance(e, BrokerError):
                    raise RouteNotFoundError(topic, str(e)) from e
                raise
            self._routes[topic] = (route, loop.time())
            return route

    async def _fetch_route(self, topic: str, *, for_publish: bool) -> TopicRoute:
        try:
            data = await self.fetch(topic)
        except TopicNotExistError:
            if not for_publish or topic == AUTO_CREATE_TOPIC:
                raise
            default = await self.fetch(AUTO_CREATE_TOPIC)
            data = _shrink_default_route(default, self.default_topic_queue_nums)
            route = TopicRoute.build(topic, data, from_default_topic=True)
        else:
            route = TopicRoute.build(topic, data)
        if for_publish and not route.publish_queues:
            raise RouteNotFoundError(topic, "no writable queue with a master broker")
        return route

    async def refresh(self, topics: Iterable[str] | None = None) -> None:
        """Re-fetch the given (default: every cached) topic; failures keep the old route."""
        for topic in list(self._routes if topics is None else topics):
            self.invalidate(topic)
            entry = self._routes.get(topic)
            try:
                await self.get(topic, for_publish=bool(entry and entry[0].from_default_topic))
            except ClientError as e:
                log.debug("route refresh of %s failed: %s", topic, e)

    # -- brokers -----------------------------------------------------------------------------

    def broker_addr(self, broker_name: str, *, master_only: bool = True) -> str | None:
        """The address of a broker named in any cached route (master, or any replica)."""
        for route, _ in self._routes.values():
            addr = route.master_addr(broker_name) if master_only else route.any_addr(broker_name)
            if addr:
                return addr
        return None

    def all_broker_addrs(self) -> set[str]:
        addrs: set[str] = set()
        for route, _ in self._routes.values():
            addrs |= route.all_addrs()
        return addrs

    def brokers_of(self, topics: Iterable[str]) -> set[str]:
        addrs: set[str] = set()
        for topic in topics:
            route = self.cached(topic)
            if route is not None:
                addrs |= route.all_addrs()
        return addrs
