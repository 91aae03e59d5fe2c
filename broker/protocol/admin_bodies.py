"""Headers and JSON bodies of the admin requests that change a broker's groups and offsets, and of
the requests a broker sends a consumer on an administrator's behalf (RocketMQ's
``AdminBrokerProcessor`` and ``Broker2Client``; the client's ``ClientRemotingProcessor``):

* DELETE_SUBSCRIPTIONGROUP (207): ``DeleteSubscriptionGroupRequestHeader``
* INVOKE_BROKER_TO_RESET_OFFSET (222) and RESET_CONSUMER_CLIENT_OFFSET (220):
  ``ResetOffsetRequestHeader``, ``ResetOffsetBody``
* INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) and GET_CONSUMER_STATUS_FROM_CLIENT (221):
  ``GetConsumerStatusRequestHeader``, ``GetConsumerStatusBody``
* GET_CONSUMER_RUNNING_INFO (307): ``GetConsumerRunningInfoRequestHeader``,
  ``ConsumerRunningInfo``
* CONSUME_MESSAGE_DIRECTLY (309): ``ConsumeMessageDirectlyResultRequestHeader``,
  ``ConsumeMessageDirectlyResult``

Several of these bodies are maps keyed by a ``MessageQueue`` object. fastjson writes such a key
as the object itself, ``{{"brokerName":"b","queueId":0,"topic":"T"}:5}``, which is not JSON;
Java's tools read nothing else. So these bodies hold such maps as ``dict[str, ...]`` keyed by the
queue's canonical JSON text (``mq_key``: the text the lenient reader gives such a key on the way
in), and ``encode_fastjson_body`` writes the key back as the bare object.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

from ._json import canonical_json
from .errors import MalformedBodyError
from .headers import (
    Int,
    Long,
    MessageQueue,
    RemotingHeader,
    SubscriptionData,
    _java_names,
    decode_json_body,
)

__all__ = [
    "CM_RESULTS",
    "ConsumeMessageDirectlyResult",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ConsumeStatus",
    "ConsumerRunningInfo",
    "DeleteSubscriptionGroupRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "GetConsumerStatusBody",
    "GetConsumerStatusRequestHeader",
    "PROP_CLIENT_VERSION",
    "PROP_CONSUMER_START_TIMESTAMP",
    "PROP_CONSUME_ORDERLY",
    "PROP_CONSUME_TYPE",
    "PROP_NAMESERVER_ADDR",
    "PROP_THREADPOOL_CORE_SIZE",
    "ProcessQueueInfo",
    "MessageQueueForC",
    "ResetOffsetBody",
    "ResetOffsetBodyForC",
    "ResetOffsetRequestHeader",
    "decode_mq_table",
    "encode_fastjson_body",
    "mq_key",
    "parse_mq_key",
]


# -- headers ---------------------------------------------------------------------------------


class DeleteSubscriptionGroupRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    """DELETE_SUBSCRIPTIONGROUP (207); ``cleanOffset`` also drops the group's offsets."""

    group_name: str
    clean_offset: bool = False


class ResetOffsetRequestHeader(
    RemotingHeader, frozen=True, kw_only=True, rename=_java_names(is_force="isForce")
):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) from a tool; RESET_CONSUMER_CLIENT_OFFSET (220) from
    the broker to each consumer (topic, group and timestamp only). ``timestamp`` -1 means the
    end of each queue; ``isForce`` false moves a queue only backwards."""

    topic: str
    group: str
    queue_id: Int = -1
    offset: Long | None = None
    timestamp: Long
    is_force: bool = False


class GetConsumerStatusRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) and GET_CONSUMER_STATUS_FROM_CLIENT (221);
    ``clientAddr`` (a client id) narrows the question to one consumer."""

    topic: str
    group: str
    client_addr: str | None = None


class GetConsumerRunningInfoRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    """GET_CONSUMER_RUNNING_INFO (307), to the broker and relayed by it to the client."""

    consumer_group: str
    client_id: str
    jstack_enable: bool = False


class ConsumeMessageDirectlyResultRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    """CONSUME_MESSAGE_DIRECTLY (309). ``msgId`` is an offset message ID of the broker asked;
    the broker adds ``brokerName`` (and the sys flags) before relaying it to the client."""

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None
    topic: str | None = None
    topic_sys_flag: Int | None = None
    group_sys_flag: Int | None = None


# -- MessageQueue-keyed maps -----------------------------------------------------------------


def mq_key(mq: MessageQueue) -> str:
    """The key text of ``mq`` in a MessageQueue-keyed map: fastjson's object, fields sorted."""
    return canonical_json({"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic})


def parse_mq_key(key: str) -> MessageQueue:
    """The queue a map key names; ``MalformedBodyError`` when it names none."""
    try:
        return msgspec.convert(json.loads(key), MessageQueue)
    except (ValueError, msgspec.ValidationError) as error:
        raise MalformedBodyError(f"not a MessageQueue map key: {key[:200]!r} ({error})") from None


def decode_mq_table(table: dict[str, Any]) -> dict[MessageQueue, Any]:
    """A decoded MessageQueue-keyed map with its keys as queues."""
    return {parse_mq_key(key): value for key, value in table.items()}


def _dump(value: Any, out: list[str]) -> None:
    if isinstance(value, dict):
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                out.append(",")
            text = str(key)
            # A queue key (mq_key's text) goes out as the object fastjson writes; no topic,
            # group or property name written by pocketmq starts with "{".
            out.append(text if text.startswith("{") else json.dumps(text, ensure_ascii=False))
            out.append(":")
            _dump(item, out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _dump(item, out)
        out.append("]")
    else:
        out.append(json.dumps(value, ensure_ascii=False))


def encode_fastjson_body(body: msgspec.Struct) -> bytes:
    """``body`` as fastjson writes it: MessageQueue-keyed maps with bare object keys."""
    out: list[str] = []
    _dump(msgspec.to_builtins(body), out)
    return "".join(out).encode()


# -- bodies ----------------------------------------------------------------------------------


class ResetOffsetBody(msgspec.Struct, kw_only=True, rename="camel"):
    """The offsets a reset moves each queue to (``mq_key`` -> offset): the broker's request to
    each consumer and its answer to the tool."""

    offset_table: dict[str, Long] = {}


class MessageQueueForC(msgspec.Struct, kw_only=True, rename="camel"):
    topic: str
    broker_name: str
    queue_id: Int
    offset: Long


class ResetOffsetBodyForC(msgspec.Struct, kw_only=True, rename="camel"):
    """``ResetOffsetBody`` as sent to a consumer whose requests say CPP: a list, not a map."""

    offset_table: list[MessageQueueForC] = []


class GetConsumerStatusBody(msgspec.Struct, kw_only=True, rename="camel"):
    """A client's answer (``messageQueueTable``: its offsets of the topic) and the broker's
    answer to the tool (``consumerTable``: client id -> that table)."""

    message_queue_table: dict[str, Long] = {}
    consumer_table: dict[str, dict[str, Long]] = {}


class ProcessQueueInfo(msgspec.Struct, kw_only=True, rename=_java_names(dropped="droped")):
    """One owned queue in a running consumer (RocketMQ spells ``droped`` so)."""

    commit_offset: Long = 0
    cached_msg_min_offset: Long = 0
    cached_msg_max_offset: Long = 0
    cached_msg_count: Int = 0
    cached_msg_size_in_mi_b: Int = 0
    transaction_msg_min_offset: Long = 0
    transaction_msg_max_offset: Long = 0
    transaction_msg_count: Int = 0
    locked: bool = False
    try_unlock_times: Long = 0
    last_lock_timestamp: Long = 0
    dropped: bool = False
    last_pull_timestamp: Long = 0
    last_consume_timestamp: Long = 0


class ConsumeStatus(
    msgspec.Struct,
    kw_only=True,
    rename={
        "pull_rt": "pullRT",
        "pull_tps": "pullTPS",
        "consume_rt": "consumeRT",
        "consume_ok_tps": "consumeOKTPS",
        "consume_failed_tps": "consumeFailedTPS",
        "consume_failed_msgs": "consumeFailedMsgs",
    },
):
    """A consumer's figures for one topic (the client's ``ConsumerStatsManager``): mean pull
    and consume times in ms, per-second rates, failures in the last hour."""

    pull_rt: float = 0.0
    pull_tps: float = 0.0
    consume_rt: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    consume_failed_msgs: Long = 0


# ConsumerRunningInfo's property names (its PROP_* constants).
PROP_NAMESERVER_ADDR: Final = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE: Final = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY: Final = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE: Final = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION: Final = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP: Final = "PROP_CONSUMER_START_TIMESTAMP"


class ConsumerRunningInfo(msgspec.Struct, kw_only=True, rename="camel"):
    """GET_CONSUMER_RUNNING_INFO's answer: the consumer's settings as text (``properties``),
    its subscriptions, each owned queue (``mqTable``, ``mq_key`` -> ProcessQueueInfo) and its
    figures per topic (``statusTable``)."""

    properties: dict[str, str] = {}
    subscription_set: list[SubscriptionData] = []
    mq_table: dict[str, ProcessQueueInfo] = {}
    mq_pop_table: dict[str, dict[str, Any]] = {}
    status_table: dict[str, ConsumeStatus] = {}
    user_consumer_info: dict[str, str] = {}
    jstack: str | None = None

    @classmethod
    def decode(cls, data: bytes) -> ConsumerRunningInfo:
        return decode_json_body(data, cls)


# CMResult, the outcome of a direct consumption, in RocketMQ's order.
CM_RESULTS: Final = (
    "CR_SUCCESS",
    "CR_LATER",
    "CR_ROLLBACK",
    "CR_COMMIT",
    "CR_THROW_EXCEPTION",
    "CR_RETURN_NULL",
)


class ConsumeMessageDirectlyResult(msgspec.Struct, kw_only=True, rename="camel"):
    """CONSUME_MESSAGE_DIRECTLY's answer: what the consumer's listener made of the message."""

    order: bool = False
    auto_commit: bool = True
    consume_result: str | None = None  # a CM_RESULTS name
    remark: str | None = None
    spent_time_mills: Long = 0
