"""Traffic, consume progress and clients through the SDK, mixed into ``Admin``: the requests
behind mqadmin's consumerProgress, topicStatus, brokerStatus, consumerConnection,
producerConnection and statsAll, asked of every master broker (or of ``broker=``, a broker
name or "host:port") and merged::

    progress = await admin.consumer_progress("billing")          # ConsumerProgress
    print(progress.lag, progress.inflight, progress.consume_tps)
    for q in progress.queues:                                     # QueueProgress, sorted
        print(q.queue, q.broker_offset, q.consumer_offset, q.lag, q.last_timestamp_ms)

    stats = await admin.topic_stats("Orders")                     # TopicStats: queues, put TPS
    info = await admin.broker_runtime_info()                      # {broker: {key: value}}
    consumers = await admin.consumer_connections("billing")      # ConsumerConnections
    producers = await admin.producer_connections("orders-producers")
    await admin.topic_consumers("Orders")                         # groups consuming a topic
    await admin.group_topics("billing")                           # topics a group has offsets in
    await admin.broker_stats("TOPIC_PUT_NUMS", "Orders")          # {broker: BrokerStatsData}
    await admin.broker_consume_stats()                            # {broker: BrokerConsumeStats}
    await admin.consumer_offsets()                                # {broker: {"T@G": {q: offset}}}
    await admin.producers()                                       # {broker: {group: [Producer]}}
    await admin.consume_time_span("Orders", "billing")            # [QueueTimeSpan]

Numbers are the broker's (its ProgressService): lag = broker offset - consumer offset per
queue, inflight = messages POP lent and not yet acknowledged. Each result has ``to_dict()``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pocketmq.broker.protocol import RequestCode
from pocketmq.broker.protocol.admin_stats import (
    AllConsumerOffsets,
    BrokerStatsData,
    ConsumerConnection,
    ConsumeStats,
    ConsumeStatsList,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    GroupList,
    KVTable,
    ProducerConnection,
    ProducerTableInfo,
    QueryConsumeTimeSpanBody,
    QueryConsumeTimeSpanRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    QueryTopicsByConsumerRequestHeader,
    TopicList,
    TopicStatsTable,
    ViewBrokerStatsDataRequestHeader,
    parse_queue_key,
)
from pocketmq.broker.protocol.errors import MalformedBodyError
from pocketmq.broker.protocol.headers import decode_json_body

from .connection import check_response, make_request
from .errors import (
    BrokerSystemError,
    ConsumerNotOnlineError,
    TopicNotExistError,
    UnknownBrokerError,
)
from .message import MessageQueue

__all__ = [
    "AdminStatsMixin",
    "BrokerConsumeStats",
    "ClientConnection",
    "ConsumerConnections",
    "ConsumerProgress",
    "Producer",
    "QueueProgress",
    "QueueSpan",
    "TopicQueueStats",
    "TopicStats",
]

T = TypeVar("T")

_STATS_TIMEOUT_MS = 10_000  # a broker's whole consume stats read every queue of every group


@dataclass(frozen=True)
class QueueProgress:
    """One queue of a group's progress: ``lag`` = ``broker_offset - consumer_offset``;
    ``inflight``: lent by POP, not yet acknowledged (``pull_offset - consumer_offset``);
    ``last_timestamp_ms``: store time of the last consumed message (None when none)."""

    queue: MessageQueue
    broker_offset: int
    consumer_offset: int
    pull_offset: int
    last_timestamp_ms: int | None

    @property
    def lag(self) -> int:
        return self.broker_offset - self.consumer_offset

    @property
    def inflight(self) -> int:
        return self.pull_offset - self.consumer_offset

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.queue.topic,
            "broker_name": self.queue.broker_name,
            "queue_id": self.queue.queue_id,
            "broker_offset": self.broker_offset,
            "consumer_offset": self.consumer_offset,
            "pull_offset": self.pull_offset,
            "lag": self.lag,
            "inflight": self.inflight,
            "last_timestamp_ms": self.last_timestamp_ms,
        }


@dataclass(frozen=True)
class ConsumerProgress:
    """A group's progress over every broker asked (mqadmin consumerProgress)."""

    group: str
    queues: list[QueueProgress] = field(default_factory=list)
    consume_tps: float = 0.0

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues)

    @property
    def inflight(self) -> int:
        return sum(q.inflight for q in self.queues)

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "lag": self.lag,
            "inflight": self.inflight,
            "consume_tps": self.consume_tps,
            "queues": [q.to_dict() for q in self.queues],
        }


@dataclass(frozen=True)
class TopicQueueStats:
    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_update_ms: int | None  # store time of the queue's last message

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.queue.topic,
            "broker_name": self.queue.broker_name,
            "queue_id": self.queue.queue_id,
            "min_offset": self.min_offset,
            "max_offset": self.max_offset,
            "last_update_ms": self.last_update_ms,
        }


@dataclass(frozen=True)
class TopicStats:
    """mqadmin topicStatus: every queue's offsets, and the topic's put TPS (messages per
    second over the last minute) summed over its brokers."""

    topic: str
    queues: list[TopicQueueStats] = field(default_factory=list)
    put_tps: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "put_tps": self.put_tps,
            "queues": [q.to_dict() for q in self.queues],
        }


@dataclass(frozen=True)
class ClientConnection:
    """A connected client as its heartbeat introduced it (RocketMQ's Connection)."""

    client_id: str
    client_addr: str
    language: str
    version: int
    broker: str  # the broker it is connected to

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ConsumerConnections:
    """mqadmin consumerConnection: the group's live consumers and its subscriptions
    (topic -> expression)."""

    group: str
    connections: list[ClientConnection] = field(default_factory=list)
    subscriptions: dict[str, str] = field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "consume_type": self.consume_type,
            "message_model": self.message_model,
            "consume_from_where": self.consume_from_where,
            "subscriptions": dict(self.subscriptions),
            "connections": [c.to_dict() for c in self.connections],
        }


@dataclass(frozen=True)
class Producer:
    client_id: str
    remote_ip: str
    language: str
    version: int
    last_update_ms: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class BrokerConsumeStats:
    """GET_BROKER_CONSUME_STATS of one broker: every group's progress there."""

    broker_addr: str | None
    total_diff: int
    total_inflight_diff: int
    groups: dict[str, ConsumerProgress] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "broker_addr": self.broker_addr,
            "total_diff": self.total_diff,
            "total_inflight_diff": self.total_inflight_diff,
            "groups": {name: p.to_dict() for name, p in self.groups.items()},
        }


@dataclass(frozen=True)
class QueueSpan:
    """mqadmin consumeTimeSpan's row: the store times of a queue's first and last message,
    of the group's last consumed one, and how long the next one has waited (ms, 0 if none)."""

    queue: MessageQueue
    min_timestamp_ms: int
    max_timestamp_ms: int
    consume_timestamp_ms: int
    delay_ms: int

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["queue"] = {
            "topic": self.queue.topic,
            "broker_name": self.queue.broker_name,
            "queue_id": self.queue.queue_id,
        }
        return out


def _queues(table: ConsumeStats, group: str) -> list[QueueProgress]:
    out = []
    for key, wrapper in table.offset_table.items():
        wire = parse_queue_key(key)
        if wire is None:
            raise UnknownBrokerError(0, f"consume stats of {group}: a queue key {key!r}")
        out.append(
            QueueProgress(
                queue=MessageQueue(wire.topic, wire.broker_name, wire.queue_id),
                broker_offset=wrapper.broker_offset,
                consumer_offset=wrapper.consumer_offset,
                pull_offset=max(wrapper.pull_offset, wrapper.consumer_offset),
                last_timestamp_ms=wrapper.last_timestamp or None,
            )
        )
    return out


def _sort_key(q: QueueProgress | TopicQueueStats) -> tuple[str, str, int]:
    return (q.queue.topic, q.queue.broker_name, q.queue.queue_id)


class AdminStatsMixin:
    """The stats and progress requests for ``Admin`` (which provides ``_check_open``,
    ``_targets`` and ``_core``)."""

    if TYPE_CHECKING:
        _core: Any

        def _check_open(self) -> None: ...

        async def _targets(self, broker: str | None) -> dict[str, str]: ...

    async def _ask(
        self, code: int, header: Any = None, *, broker: str | None = None
    ) -> dict[str, bytes]:
        """Each target broker's answer body: broker name -> body."""
        self._check_open()
        out = {}
        for name, addr in (await self._targets(broker)).items():
            request = make_request(code, header)
            response = check_response(await self._core.invoke(addr, request, _STATS_TIMEOUT_MS))
            out[name] = response.body or b"{}"
        return out

    async def consumer_progress(
        self, group: str, *, topic: str | None = None, broker: str | None = None
    ) -> ConsumerProgress:
        """GET_CONSUME_STATS (208) from every master broker (or ``broker``), merged: the
        group's queues with their lag, sorted by topic, broker and queue."""
        header = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
        queues: list[QueueProgress] = []
        tps = 0.0
        for body in (
            await self._ask(RequestCode.GET_CONSUME_STATS, header, broker=broker)
        ).values():
            table = _decode(body, ConsumeStats)
            queues.extend(_queues(table, group))
            tps += table.consume_tps
        return ConsumerProgress(group=group, queues=sorted(queues, key=_sort_key), consume_tps=tps)

    async def topic_stats(self, topic: str, *, broker: str | None = None) -> TopicStats:
        """GET_TOPIC_STATS_INFO (202) from every master broker that has the topic (or
        ``broker``); ``TopicNotExistError`` when none has it."""
        self._check_open()
        header = GetTopicStatsInfoRequestHeader(topic=topic)
        queues: list[TopicQueueStats] = []
        tps, found = 0.0, False
        refusal: TopicNotExistError | None = None
        for addr in (await self._targets(broker)).values():
            request = make_request(RequestCode.GET_TOPIC_STATS_INFO, header)
            try:
                response = check_response(await self._core.invoke(addr, request))
            except TopicNotExistError as error:  # not on this broker
                refusal = error
                continue
            found = True
            table = _decode(response.body or b"{}", TopicStatsTable)
            tps += table.topic_put_tps
            for key, offsets in table.offset_table.items():
                wire = parse_queue_key(key)
                if wire is None:
                    raise UnknownBrokerError(0, f"topic stats of {topic}: a queue key {key!r}")
                queues.append(
                    TopicQueueStats(
                        queue=MessageQueue(wire.topic, wire.broker_name, wire.queue_id),
                        min_offset=offsets.min_offset,
                        max_offset=offsets.max_offset,
                        last_update_ms=offsets.last_update_timestamp or None,
                    )
                )
        if not found and refusal is not None:
            raise refusal
        return TopicStats(topic=topic, queues=sorted(queues, key=_sort_key), put_tps=tps)

    async def broker_runtime_info(self, *, broker: str | None = None) -> dict[str, dict[str, str]]:
        """GET_BROKER_RUNTIME_INFO (28), mqadmin brokerStatus: broker name -> its table."""
        bodies = await self._ask(RequestCode.GET_BROKER_RUNTIME_INFO, broker=broker)
        return {name: _decode(body, KVTable).table for name, body in bodies.items()}

    async def consumer_connections(
        self, group: str, *, broker: str | None = None
    ) -> ConsumerConnections:
        """GET_CONSUMER_CONNECTION_LIST (203) from every master broker (or ``broker``), the
        connections merged; ``ConsumerNotOnlineError`` when no broker knows the group."""
        self._check_open()
        header = GetConsumerConnectionListRequestHeader(consumer_group=group)
        merged: ConsumerConnection | None = None
        connections: list[ClientConnection] = []
        subscriptions: dict[str, str] = {}
        for name, addr in (await self._targets(broker)).items():
            request = make_request(RequestCode.GET_CONSUMER_CONNECTION_LIST, header)
            try:
                response = check_response(await self._core.invoke(addr, request))
            except ConsumerNotOnlineError:
                continue
            body = _decode(response.body or b"{}", ConsumerConnection)
            merged = merged or body
            connections.extend(
                ClientConnection(c.client_id, c.client_addr, c.language, c.version, name)
                for c in body.connection_set
            )
            for topic, data in body.subscription_table.items():
                subscriptions[topic] = data.sub_string
        if merged is None:
            raise ConsumerNotOnlineError(206, f"the consumer group[{group}] not online")
        return ConsumerConnections(
            group=group,
            connections=sorted(connections, key=lambda c: (c.client_id, c.broker)),
            subscriptions=dict(sorted(subscriptions.items())),
            consume_type=merged.consume_type,
            message_model=merged.message_model,
            consume_from_where=merged.consume_from_where,
        )

    async def producer_connections(
        self, group: str, *, broker: str | None = None
    ) -> list[ClientConnection]:
        """GET_PRODUCER_CONNECTION_LIST (204) from every master broker (or ``broker``);
        ``BrokerSystemError`` ("not exist") when no broker has a producer of the group."""
        self._check_open()
        header = GetProducerConnectionListRequestHeader(producer_group=group)
        out: list[ClientConnection] = []
        refusal: BrokerSystemError | None = None
        found = False
        for name, addr in (await self._targets(broker)).items():
            request = make_request(RequestCode.GET_PRODUCER_CONNECTION_LIST, header)
            try:
                response = check_response(await self._core.invoke(addr, request))
            except BrokerSystemError as error:  # "the producer group[...] not exist" there
                refusal = error
                continue
            found = True
            body = _decode(response.body or b"{}", ProducerConnection)
            out.extend(
                ClientConnection(c.client_id, c.client_addr, c.language, c.version, name)
                for c in body.connection_set
            )
        if not found and refusal is not None:
            raise refusal
        return sorted(out, key=lambda c: (c.client_id, c.broker))

    async def topic_consumers(self, topic: str, *, broker: str | None = None) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO (300): the groups subscribed to, or with offsets in,
        ``topic`` on any master broker."""
        header = QueryTopicConsumeByWhoRequestHeader(topic=topic)
        groups: set[str] = set()
        bodies = await self._ask(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, header, broker=broker)
        for body in bodies.values():
            groups.update(_decode(body, GroupList).group_list)
        return sorted(groups)

    async def group_topics(self, group: str, *, broker: str | None = None) -> list[str]:
        """QUERY_TOPICS_BY_CONSUMER (343): the topics ``group`` has offsets in."""
        header = QueryTopicsByConsumerRequestHeader(group=group)
        topics: set[str] = set()
        bodies = await self._ask(RequestCode.QUERY_TOPICS_BY_CONSUMER, header, broker=broker)
        for body in bodies.values():
            topics.update(_decode(body, TopicList).topic_list)
        return sorted(topics)

    async def broker_stats(
        self, stats_name: str, stats_key: str, *, broker: str | None = None
    ) -> dict[str, BrokerStatsData]:
        """VIEW_BROKER_STATS_DATA (315), mqadmin statsAll's source: ``stats_name`` one of
        TOPIC_PUT_NUMS, TOPIC_PUT_SIZE (key: topic), GROUP_GET_NUMS, GROUP_GET_SIZE (key:
        ``topic@group``). Brokers without that item are left out."""
        self._check_open()
        header = ViewBrokerStatsDataRequestHeader(stats_name=stats_name, stats_key=stats_key)
        out = {}
        for name, addr in (await self._targets(broker)).items():
            request = make_request(RequestCode.VIEW_BROKER_STATS_DATA, header)
            response = await self._core.invoke(addr, request)
            if response.code == 1 and "not exist" in (response.remark or ""):
                continue
            out[name] = _decode(check_response(response).body or b"{}", BrokerStatsData)
        return out

    async def broker_consume_stats(
        self, *, order: bool = False, broker: str | None = None
    ) -> dict[str, BrokerConsumeStats]:
        """GET_BROKER_CONSUME_STATS (317): every group's progress on each broker (only
        ordered topics' with ``order``)."""
        header = GetConsumeStatsInBrokerHeader(is_order=order)
        out = {}
        bodies = await self._ask(RequestCode.GET_BROKER_CONSUME_STATS, header, broker=broker)
        for name, body in bodies.items():
            data = _decode(body, ConsumeStatsList)
            groups: dict[str, ConsumerProgress] = {}
            for entry in data.consume_stats_list:
                for group, tables in entry.items():
                    queues = [q for t in tables for q in _queues(t, group)]
                    groups[group] = ConsumerProgress(
                        group=group,
                        queues=sorted(queues, key=_sort_key),
                        consume_tps=sum(t.consume_tps for t in tables),
                    )
            out[name] = BrokerConsumeStats(
                broker_addr=data.broker_addr,
                total_diff=data.total_diff,
                total_inflight_diff=data.total_inflight_diff,
                groups=groups,
            )
        return out

    async def consumer_offsets(
        self, *, broker: str | None = None
    ) -> dict[str, dict[str, dict[int, int]]]:
        """GET_ALL_CONSUMER_OFFSET (43): broker name -> {"<topic>@<group>": {queue: offset}};
        a broker with no offset at all answers SYSTEM_ERROR and is left out."""
        self._check_open()
        out = {}
        for name, addr in (await self._targets(broker)).items():
            response = await self._core.invoke(
                addr, make_request(RequestCode.GET_ALL_CONSUMER_OFFSET)
            )
            if response.code == 1 and "No consumer offset" in (response.remark or ""):
                continue
            body = check_response(response).body or b"{}"
            out[name] = _decode(body, AllConsumerOffsets).offset_table
        return out

    async def producers(self, *, broker: str | None = None) -> dict[str, dict[str, list[Producer]]]:
        """GET_ALL_PRODUCER_INFO (328): broker name -> {producer group: its producers}."""
        bodies = await self._ask(RequestCode.GET_ALL_PRODUCER_INFO, broker=broker)
        out = {}
        for name, body in bodies.items():
            table = _decode(body, ProducerTableInfo)
            out[name] = {
                group: [
                    Producer(
                        p.client_id, p.remote_ip, p.language, p.version, p.last_update_timestamp
                    )
                    for p in members
                ]
                for group, members in table.data.items()
            }
        return out

    async def consume_time_span(
        self, topic: str, group: str, *, broker: str | None = None
    ) -> list[QueueSpan]:
        """QUERY_CONSUME_TIME_SPAN (303) from every master broker (or ``broker``)."""
        header = QueryConsumeTimeSpanRequestHeader(topic=topic, group=group)
        out = []
        bodies = await self._ask(RequestCode.QUERY_CONSUME_TIME_SPAN, header, broker=broker)
        for body in bodies.values():
            for span in _decode(body, QueryConsumeTimeSpanBody).consume_time_span_set:
                mq = span.message_queue
                out.append(
                    QueueSpan(
                        queue=MessageQueue(mq.topic, mq.broker_name, mq.queue_id),
                        min_timestamp_ms=span.min_time_stamp,
                        max_timestamp_ms=span.max_time_stamp,
                        consume_timestamp_ms=span.consume_time_stamp,
                        delay_ms=span.delay_time,
                    )
                )
        return sorted(out, key=lambda s: (s.queue.broker_name, s.queue.queue_id))


def _decode(body: bytes, kind: type[T]) -> T:
    try:
        return decode_json_body(body, kind)
    except MalformedBodyError as error:
        raise UnknownBrokerError(0, f"malformed {kind.__name__} body: {error}") from None
