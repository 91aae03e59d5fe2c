"""Headers and JSON bodies of the read-only admin requests about traffic, progress and clients
(RocketMQ's ``AdminBrokerProcessor``; the classes of ``remoting/protocol/admin`` and ``body``):

* GET_CONSUME_STATS (208): ``GetConsumeStatsRequestHeader`` -> ``ConsumeStats``
* GET_TOPIC_STATS_INFO (202): ``GetTopicStatsInfoRequestHeader`` -> ``TopicStatsTable``
* GET_BROKER_RUNTIME_INFO (28): no header -> ``KVTable``
* GET_CONSUMER_CONNECTION_LIST (203) -> ``ConsumerConnection``;
  GET_PRODUCER_CONNECTION_LIST (204) -> ``ProducerConnection``
* GET_ALL_CONSUMER_OFFSET (43) -> ``AllConsumerOffsets`` (``{"offsetTable": {"T@G": {...}}}``)
* QUERY_TOPIC_CONSUME_BY_WHO (300) -> ``GroupList``; QUERY_TOPICS_BY_CONSUMER (343) -> ``TopicList``
* GET_BROKER_CONSUME_STATS (317): ``GetConsumeStatsInBrokerHeader`` -> ``ConsumeStatsList``
* VIEW_BROKER_STATS_DATA (315): ``ViewBrokerStatsDataRequestHeader`` -> ``BrokerStatsData``
* GET_TOPIC_CONFIG (351): ``GetTopicConfigRequestHeader`` -> ``TopicConfigAndQueueMapping``
* GET_SUBSCRIPTIONGROUP_CONFIG (352): ``GetSubscriptionGroupConfigRequestHeader`` -> the group's
  SubscriptionGroupConfig
* GET_ALL_PRODUCER_INFO (328) -> ``ProducerTableInfo``
* QUERY_CONSUME_TIME_SPAN (303): ``QueryConsumeTimeSpanRequestHeader`` -> ``QueryConsumeTimeSpanBody``

``ConsumeStats.offsetTable`` and ``TopicStatsTable.offsetTable`` are maps keyed by a
``MessageQueue`` object, which fastjson writes as the bare object (``{{"brokerName":"b",
"queueId":0,"topic":"T"}:{...}}``, not JSON); Java's tools read nothing else. Here such a map is a
``dict[str, ...]`` keyed by the queue's JSON text (``queue_key``, fields sorted as fastjson
writes them; the lenient reader gives the same text on the way in), and ``encode_fastjson``
writes these keys back as bare objects.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ._json import canonical_json
from .headers import (
    Int,
    Long,
    MessageQueue,
    RemotingHeader,
    SubscriptionData,
    TopicConfig,
    _java_names,
)

__all__ = [
    "AllConsumerOffsets",
    "BrokerStatsData",
    "BrokerStatsItem",
    "ConsumeStats",
    "ConsumeStatsList",
    "ConsumerConnection",
    "GetConsumeStatsInBrokerHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetProducerConnectionListRequestHeader",
    "GetSubscriptionGroupConfigRequestHeader",
    "GetTopicConfigRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "GroupList",
    "KVTable",
    "OffsetWrapper",
    "ProducerConnection",
    "ProducerInfo",
    "ProducerTableInfo",
    "QueryConsumeTimeSpanBody",
    "QueryConsumeTimeSpanRequestHeader",
    "QueryTopicConsumeByWhoRequestHeader",
    "QueryTopicsByConsumerRequestHeader",
    "QueueTimeSpan",
    "RemoteConnection",
    "TopicConfigAndQueueMapping",
    "TopicList",
    "TopicOffset",
    "TopicStatsTable",
    "ViewBrokerStatsDataRequestHeader",
    "encode_fastjson",
    "parse_queue_key",
    "queue_key",
]


# -- headers ---------------------------------------------------------------------------------


class GetConsumeStatsRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    """``topicList`` (5.x): topics separated by ``;``, reported whether subscribed or not."""

    consumer_group: str
    topic: str | None = None
    topic_list: str | None = None

    def topics(self) -> list[str]:
        return [t for t in (self.topic_list or "").split(";") if t]


class GetTopicStatsInfoRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    topic: str


class GetConsumerConnectionListRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    consumer_group: str


class GetProducerConnectionListRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    producer_group: str


class QueryTopicConsumeByWhoRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    topic: str


class QueryTopicsByConsumerRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    group: str


class GetConsumeStatsInBrokerHeader(
    RemotingHeader, frozen=True, kw_only=True, rename=_java_names(is_order="isOrder")
):
    is_order: bool = False


class ViewBrokerStatsDataRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    stats_name: str
    stats_key: str


class GetTopicConfigRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    topic: str
    lo: bool | None = None  # logic queue mapping (static topics): not built


class GetSubscriptionGroupConfigRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    group: str


class QueryConsumeTimeSpanRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    topic: str
    group: str


# -- MessageQueue-keyed maps -----------------------------------------------------------------


def queue_key(topic: str, broker_name: str, queue_id: int) -> str:
    """A MessageQueue as a map key: fastjson's object text, fields sorted."""
    return canonical_json({"brokerName": broker_name, "queueId": queue_id, "topic": topic})


def parse_queue_key(key: str) -> MessageQueue | None:
    """The MessageQueue of a key written by ``queue_key`` or read from fastjson; None if it
    is not one."""
    try:
        return msgspec.json.decode(key, type=MessageQueue)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


# A JSON string holding a queue key, as msgspec writes it: "{\"brokerName\":...}" followed by
# the colon that makes it a key.
_QUOTED_QUEUE_KEY = re.compile(rb'"(\{\\"brokerName\\":(?:[^"\\]|\\.)*\})":')


def encode_fastjson(body: msgspec.Struct) -> bytes:
    """``body`` as JSON, with every queue-keyed map's keys written as bare objects (fastjson)."""
    data = msgspec.json.encode(body)
    return _QUOTED_QUEUE_KEY.sub(
        lambda m: msgspec.json.decode(b'"' + m.group(1) + b'"').encode() + b":", data
    )


# -- bodies ----------------------------------------------------------------------------------


class OffsetWrapper(msgspec.Struct, kw_only=True, rename="camel"):
    broker_offset: Long = 0
    consumer_offset: Long = 0
    pull_offset: Long = 0
    last_timestamp: Long = 0


class ConsumeStats(msgspec.Struct, kw_only=True, rename="camel"):
    offset_table: dict[str, OffsetWrapper] = {}  # queue_key -> offsets
    consume_tps: float = 0.0

    def total_diff(self) -> int:
        """ConsumeStats.computeTotalDiff: the lag of every queue."""
        return sum(w.broker_offset - w.consumer_offset for w in self.offset_table.values())

    def inflight_diff(self) -> int:
        """ConsumeStats.computeInflightTotalDiff."""
        return sum(w.pull_offset - w.consumer_offset for w in self.offset_table.values())


class TopicOffset(msgspec.Struct, kw_only=True, rename="camel"):
    min_offset: Long = 0
    max_offset: Long = 0
    last_update_timestamp: Long = 0


class TopicStatsTable(msgspec.Struct, kw_only=True, rename="camel"):
    offset_table: dict[str, TopicOffset] = {}  # queue_key -> offsets
    topic_put_tps: float = 0.0


class KVTable(msgspec.Struct, kw_only=True):
    table: dict[str, str] = {}


class RemoteConnection(msgspec.Struct, kw_only=True, rename="camel"):
    """RocketMQ's ``Connection``: one client, as its heartbeat introduced it."""

    client_id: str = ""
    client_addr: str = ""
    language: str = "JAVA"  # LanguageCode name
    version: Int = 0


class ConsumerConnection(msgspec.Struct, kw_only=True, rename="camel"):
    connection_set: list[RemoteConnection] = []
    subscription_table: dict[str, SubscriptionData] = {}
    consume_type: str | None = None  # ConsumeType name
    message_model: str | None = None  # MessageModel name
    consume_from_where: str | None = None  # ConsumeFromWhere name


class ProducerConnection(msgspec.Struct, kw_only=True, rename="camel"):
    connection_set: list[RemoteConnection] = []


class ProducerInfo(msgspec.Struct, kw_only=True, rename=_java_names(remote_ip="remoteIP")):
    client_id: str = ""
    remote_ip: str = ""
    language: str = "JAVA"
    version: Int = 0
    last_update_timestamp: Long = 0


class ProducerTableInfo(msgspec.Struct, kw_only=True):
    data: dict[str, list[ProducerInfo]] = {}  # producer group -> its producers


class AllConsumerOffsets(msgspec.Struct, kw_only=True, rename="camel"):
    """ConsumerOffsetManager.encode(): ``{"<topic>@<group>": {"<queueId>": offset}}``."""

    offset_table: dict[str, dict[int, Long]] = {}


class GroupList(msgspec.Struct, kw_only=True, rename="camel"):
    group_list: list[str] = []


class TopicList(msgspec.Struct, kw_only=True, rename="camel"):
    topic_list: list[str] = []
    broker_addr: str | None = None


class ConsumeStatsList(msgspec.Struct, kw_only=True, rename="camel"):
    """GET_BROKER_CONSUME_STATS: per group, the ConsumeStats of each of its topics."""

    consume_stats_list: list[dict[str, list[ConsumeStats]]] = []
    broker_addr: str | None = None
    total_diff: Long = 0
    total_inflight_diff: Long = 0


class QueueTimeSpan(msgspec.Struct, kw_only=True, rename="camel"):
    message_queue: MessageQueue
    min_time_stamp: Long = 0
    max_time_stamp: Long = 0
    consume_time_stamp: Long = 0
    delay_time: Long = 0


class QueryConsumeTimeSpanBody(msgspec.Struct, kw_only=True, rename="camel"):
    consume_time_span_set: list[QueueTimeSpan] = []


class BrokerStatsItem(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The increase over a window, its rate per second, and the average per call."""

    sum: Long = 0
    tps: float = 0.0
    avgpt: float = 0.0


class BrokerStatsData(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    stats_minute: BrokerStatsItem = BrokerStatsItem()
    stats_hour: BrokerStatsItem = BrokerStatsItem()
    stats_day: BrokerStatsItem = BrokerStatsItem()


class TopicConfigAndQueueMapping(TopicConfig, frozen=True, kw_only=True, rename="camel"):
    """GET_TOPIC_CONFIG's body: the TopicConfig, and the static topic's queue mapping (none:
    pocketmq has no static topics)."""

    mapping_detail: dict[str, Any] | None = None
