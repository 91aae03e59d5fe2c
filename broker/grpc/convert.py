"""Between the protocol's ``Message`` and pocketmq's stored records, as RocketMQ's proxy does
(SendMessageActivity.buildMessageProperty on the way in, GrpcConverter.buildMessage on the way
out), so that a message sent over gRPC reads the same over remoting and the reverse."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from pocketmq.broker.grpc.stubs import definition_pb2
from pocketmq.broker.services.lite import LITE_PROPERTY
from pocketmq.store.message_store import PutMessage
from pocketmq.store.record import Host, MessageRecord, SysFlag, encode_properties

__all__ = [
    "PRIORITY_PROPERTY",
    "SYSTEM_PROPERTIES",
    "GrpcStatusError",
    "accepted_types",
    "consistent_hash",
    "message_type_of",
    "to_message",
    "to_put_message",
]

Code = definition_pb2.Code
MessageType = definition_pb2.MessageType

# MessageConst.STRING_HASH_SET: names the broker owns. A user property may not use them, and
# they are not handed back to consumers as user properties.
SYSTEM_PROPERTIES = frozenset(
    [
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "__CRC32#",
    ]
)
# Names pocketmq writes itself and never hands out as user properties either.
_HIDDEN = SYSTEM_PROPERTIES | {
    "__SHARDINGKEY",
    "__PRIORITY",
    LITE_PROPERTY,
    "TRACE_CONTEXT",
    "__transactionId__",
    "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
}

# ProxyConfig defaults.
USER_PROPERTY_MAX_NUM = 128
USER_PROPERTY_SIZE_MAX = 16 * 1024
MESSAGE_GROUP_SIZE_MAX = 64
DELAY_MAX_MS = 24 * 3600 * 1000  # maxDelayTimeMills: one day
TRANSACTION_RECOVERY_MAX_S = 3600  # maxTransactionRecoverySecond


class GrpcStatusError(Exception):
    """A request refused with one of the protocol's status codes."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


# -- topic message types -----------------------------------------------------------------------

_TOPIC_TYPES = {
    "NORMAL": (MessageType.NORMAL,),
    "FIFO": (MessageType.FIFO,),
    "DELAY": (MessageType.DELAY,),
    "TRANSACTION": (MessageType.TRANSACTION,),
    "MIXED": (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION),
    "PRIORITY": (MessageType.PRIORITY,),
    "LITE": (MessageType.LITE,),
}

# Where a priority message keeps its priority in the store. The RocketMQ source pocketmq follows
# (5.3.x) predates priority messages, so the name is pocketmq's, styled as __SHARDINGKEY.
PRIORITY_PROPERTY = "__PRIORITY"


def accepted_types(topic_message_type: str) -> tuple[int, ...]:
    """What a route advertises for a topic of this ``message.type`` (RouteActivity)."""
    return _TOPIC_TYPES.get(topic_message_type, (MessageType.MESSAGE_TYPE_UNSPECIFIED,))


# -- FIFO queue choice ---------------------------------------------------------------------------


def consistent_hash(value: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash(long, int)``: the proxy's queue for a message group is
    ``consistentHash(messageGroup.hashCode(), writeQueues)``."""
    state = value & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        high = state >> 33
        high = high - (1 << 32) if high & 0x80000000 else high  # Java's (int) cast
        following = int((candidate + 1) / ((high + 1) / 2147483648.0))
        if 0 <= following < buckets:
            candidate = following
        else:
            return candidate


# -- in: protocol message -> stored message ---------------------------------------------------


def _has_control_character(text: str) -> bool:
    return any(ord(c) < 0x20 and c not in "\t\r\n" or ord(c) == 0x7F for c in text)


def _check_tag(tag: str) -> None:
    if not tag:
        return
    if not tag.strip():
        raise GrpcStatusError(
            Code.ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace"
        )
    if "|" in tag:
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
    if _has_control_character(tag):
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")


def _millis(timestamp: object) -> int:
    return timestamp.seconds * 1000 + timestamp.nanos // 1_000_000  # type: ignore[attr-defined]


def to_put_message(
    message: object,
    *,
    born_host: Host,
    producer_group: str,
    body_size_max: int,
    now_ms: int,
) -> PutMessage:
    """The message to store for one ``apache.rocketmq.v2.Message``; raises GrpcStatusError
    for what the proxy refuses, naming the limit."""
    system = message.system_properties  # type: ignore[attr-defined]
    body: bytes = message.body  # type: ignore[attr-defined]
    if not body:
        raise GrpcStatusError(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(body) > body_size_max:
        raise GrpcStatusError(
            Code.MESSAGE_BODY_TOO_LARGE,
            f"message body of {len(body)} bytes exceeds the max {body_size_max}",
        )
    user: Mapping[str, str] = message.user_properties  # type: ignore[attr-defined]
    if len(user) > USER_PROPERTY_MAX_NUM:
        raise GrpcStatusError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"{len(user)} user properties, max is {USER_PROPERTY_MAX_NUM}",
        )
    size = 0
    properties: dict[str, str] = {}
    for key, value in user.items():
        if key in SYSTEM_PROPERTIES:
            raise GrpcStatusError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}"
            )
        if _has_control_character(key) or _has_control_character(value):
            raise GrpcStatusError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"property {key!r} contains a control character",
            )
        size += len(key.encode()) + len(value.encode())
        properties[key] = value
    tag = system.tag
    _check_tag(tag)
    if tag:
        properties["TAGS"] = tag
        size += len(tag.encode())
    keys = list(system.keys)
    for key in keys:
        if key and not key.strip():
            raise GrpcStatusError(
                Code.ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace"
            )
        if _has_control_character(key):
            raise GrpcStatusError(Code.ILLEGAL_MESSAGE_KEY, "key cannot contain control character")
        size += len(key.encode())
    if keys:
        properties["KEYS"] = " ".join(keys)
    if size > USER_PROPERTY_SIZE_MAX:
        raise GrpcStatusError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"user properties of {size} bytes, max is {USER_PROPERTY_SIZE_MAX}",
        )
    message_id = system.message_id
    if not message_id.strip():
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    properties["UNIQ_KEY"] = message_id
    sysflag = 0
    if system.body_encoding == definition_pb2.Encoding.GZIP:
        sysflag |= SysFlag.COMPRESSED
    message_type = system.message_type
    if message_type == MessageType.TRANSACTION:
        properties["TRAN_MSG"] = "true"
        sysflag |= SysFlag.TRANSACTION_PREPARED_TYPE
        if system.HasField("orphaned_transaction_recovery_duration"):
            seconds = system.orphaned_transaction_recovery_duration.seconds
            if seconds > TRANSACTION_RECOVERY_MAX_S:
                raise GrpcStatusError(
                    Code.BAD_REQUEST,
                    f"transaction recovery time {seconds} s exceeds the max "
                    f"{TRANSACTION_RECOVERY_MAX_S} s",
                )
            properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(seconds)
    if system.HasField("delivery_timestamp"):
        deliver_ms = _millis(system.delivery_timestamp)
        if deliver_ms - now_ms > DELAY_MAX_MS:
            raise GrpcStatusError(
                Code.ILLEGAL_DELIVERY_TIME,
                f"the max delay time of message is too large, max is {DELAY_MAX_MS} ms",
            )
        properties["TIMER_DELIVER_MS"] = str(deliver_ms)
    properties["RECONSUME_TIME"] = str(system.delivery_attempt)
    properties["PGROUP"] = producer_group
    group = system.message_group
    if group:
        if not group.strip():
            raise GrpcStatusError(
                Code.ILLEGAL_MESSAGE_GROUP,
                "message group cannot be the char sequence of whitespace",
            )
        if len(group.encode()) >= MESSAGE_GROUP_SIZE_MAX:
            raise GrpcStatusError(
                Code.ILLEGAL_MESSAGE_GROUP,
                f"message group exceeds the max size {MESSAGE_GROUP_SIZE_MAX}",
            )
        if _has_control_character(group):
            raise GrpcStatusError(
                Code.ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character"
            )
        properties["__SHARDINGKEY"] = group
    if system.HasField("priority"):
        if system.priority < 0:
            raise GrpcStatusError(Code.BAD_REQUEST, "priority must be a non-negative number")
        properties[PRIORITY_PROPERTY] = str(system.priority)
    if system.HasField("lite_topic"):
        properties[LITE_PROPERTY] = system.lite_topic  # checked by the sender (lite.py)
    if system.trace_context:
        properties["TRACE_CONTEXT"] = system.trace_context
    if system.born_host:
        properties["__BORNHOST"] = system.born_host
    born_ms = _millis(system.born_timestamp) if system.HasField("born_timestamp") else now_ms
    properties["BORN_TIMESTAMP"] = str(born_ms)
    return PutMessage(
        topic=message.topic.name,  # type: ignore[attr-defined]
        body=body,
        properties=properties,
        properties_text=encode_properties(properties),
        sysflag=sysflag,
        born_timestamp=born_ms,
        born_host=born_host,
    )


def message_type_of(properties: Mapping[str, str]) -> int:
    """The type a stored message reads as (GrpcConverter.buildSystemProperties)."""
    if properties.get("TRAN_MSG") == "true":
        return MessageType.TRANSACTION
    if "DELAY" in properties or "TIMER_DELIVER_MS" in properties or "TIMER_DELAY_SEC" in properties:
        return MessageType.DELAY
    if "__SHARDINGKEY" in properties:
        return MessageType.FIFO
    if PRIORITY_PROPERTY in properties:
        return MessageType.PRIORITY
    if LITE_PROPERTY in properties:
        return MessageType.LITE
    return MessageType.NORMAL


# -- out: stored record -> protocol message ---------------------------------------------------


def to_message(
    record: MessageRecord,
    *,
    topic: str | None = None,
    receipt_handle: str | None = None,
    invisible_ms: int | None = None,
    delivery_attempt: int | None = None,
) -> object:
    """An ``apache.rocketmq.v2.Message`` for a stored record. ``topic`` overrides the record's
    (a retried message is stored in a retry topic but belongs to its original topic)."""
    properties = record.properties
    system = definition_pb2.SystemProperties(
        message_id=properties.get("UNIQ_KEY") or "",
        # An MD5 as the proxy sends: the client checks the body against it.
        body_digest=definition_pb2.Digest(
            type=definition_pb2.DigestType.MD5,
            checksum=hashlib.md5(record.body).hexdigest().upper(),
        ),
        body_encoding=(
            definition_pb2.Encoding.GZIP
            if record.sysflag & SysFlag.COMPRESSED
            else definition_pb2.Encoding.IDENTITY
        ),
        message_type=message_type_of(properties),
        born_host=properties.get("__BORNHOST") or str(record.born_host),
        store_host=str(record.store_host),
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        delivery_attempt=(
            delivery_attempt if delivery_attempt is not None else record.reconsume_times + 1
        ),
    )
    system.born_timestamp.FromMilliseconds(record.born_timestamp)
    system.store_timestamp.FromMilliseconds(record.store_timestamp)
    tag = properties.get("TAGS")
    if tag is not None:
        system.tag = tag
    if properties.get("KEYS"):
        system.keys.extend(properties["KEYS"].split(" "))
    deliver_ms = properties.get("TIMER_DELIVER_MS")
    if deliver_ms and deliver_ms.isdigit():
        system.delivery_timestamp.FromMilliseconds(int(deliver_ms))
    group = properties.get("__SHARDINGKEY")
    if group is not None:
        system.message_group = group
    priority = properties.get(PRIORITY_PROPERTY)
    if priority is not None and priority.isdigit():
        system.priority = int(priority)
    lite = properties.get(LITE_PROPERTY)
    if lite is not None:
        system.lite_topic = lite
    if receipt_handle is not None:
        system.receipt_handle = receipt_handle
    if invisible_ms is not None:
        system.invisible_duration.FromMilliseconds(invisible_ms)
    trace = properties.get("TRACE_CONTEXT")
    if trace is not None:
        system.trace_context = trace
    origin_topic = properties.get("DLQ_ORIGIN_TOPIC")
    origin_id = properties.get("DLQ_ORIGIN_MESSAGE_ID")
    if origin_topic is not None and origin_id is not None:
        system.dead_letter_queue.topic = origin_topic
        system.dead_letter_queue.message_id = origin_id
    user = {k: v for k, v in properties.items() if k not in _HIDDEN}
    return definition_pb2.Message(
        topic=definition_pb2.Resource(name=topic or record.topic),
        user_properties=user,
        system_properties=system,
        body=record.body,
    )
