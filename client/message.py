"""What an application sends and receives.

* ``Message``: built by the application and passed to ``Producer.send``.
* ``ReceivedMessage`` (alias ``MessageView``): a stored message as a consumer sees it.
* ``SendResult``: what the broker answered to a send.
* ``MessageQueue``: (topic, broker name, queue id); ordered as RocketMQ orders them.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, NamedTuple

from pocketmq.broker.protocol.errors import MalformedBodyError
from pocketmq.broker.protocol.headers import MessageQueue as _WireMessageQueue
from pocketmq.broker.protocol.message_codec import (
    PLAIN_RECORD_EXCLUDED_FLAGS,
    RECORD_HEAD_V4,
    MessageExt,
    decode_message_at,
    host_text,
    offset_msg_id_of,
)
from pocketmq.store.crc import crc32
from pocketmq.store.record import MAGIC_V1, decode_properties_bytes
from pocketmq.store.topics import DLQ_TOPIC_PREFIX, NOT_ALLOWED_SEND_TOPICS, RETRY_TOPIC_PREFIX

from .errors import ClientUsageError, CorruptMessageError

__all__ = [
    "PROPERTY_DELAY",
    "PROPERTY_KEYS",
    "PROPERTY_RETRY_TOPIC",
    "PROPERTY_SHARDING_KEY",
    "PROPERTY_TAGS",
    "PROPERTY_UNIQ_KEY",
    "PROPERTY_WAIT",
    "RETRY_TOPIC_PREFIX",
    "DLQ_TOPIC_PREFIX",
    "Message",
    "MessageQueue",
    "MessageView",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "body_to_json",
    "validate_topic",
]

# Property names (rocketmq-store.md §9).
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_WAIT: Final = "WAIT"
PROPERTY_DELAY: Final = "DELAY"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"
PROPERTY_MIN_OFFSET: Final = "MIN_OFFSET"
PROPERTY_MAX_OFFSET: Final = "MAX_OFFSET"
KEY_SEPARATOR: Final = " "

_TOPIC_CHARS = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_TOPIC_LENGTH_MAX: Final = 127


def validate_topic(topic: str, *, for_send: bool = False) -> None:
    """RocketMQ's topic rules (``Validators.checkTopic``); ``ClientUsageError`` if broken."""
    if not isinstance(topic, str) or not topic:
        raise ClientUsageError("topic must be a non-empty string")
    if len(topic) > _TOPIC_LENGTH_MAX and not topic.startswith(
        (RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX)
    ):
        raise ClientUsageError(f"topic longer than {_TOPIC_LENGTH_MAX} characters: {topic!r}")
    if not _TOPIC_CHARS.match(topic):
        raise ClientUsageError(f"topic may only hold %|a-zA-Z0-9_- characters: {topic!r}")
    if for_send and topic in NOT_ALLOWED_SEND_TOPICS:
        raise ClientUsageError(f"clients may not send to system topic {topic!r}")


class MessageQueue(NamedTuple):
    """A queue of a topic on one broker. Tuple order = RocketMQ's ``MessageQueue.compareTo``."""

    topic: str
    broker_name: str
    queue_id: int

    def to_wire(self) -> _WireMessageQueue:
        return _WireMessageQueue(
            topic=self.topic, broker_name=self.broker_name, queue_id=self.queue_id
        )

    @classmethod
    def from_wire(cls, mq: _WireMessageQueue) -> MessageQueue:
        return cls(mq.topic, mq.broker_name, mq.queue_id)

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}#{self.queue_id}"


@dataclass(kw_only=True)
class Message:
    """A message to send.

    ``keys`` become the ``KEYS`` property (joined by spaces; the broker indexes each one);
    ``tags`` the ``TAGS`` property (one tag; consumers filter on it). ``delay_level`` 1..18
    picks one of the broker's delay levels (0 = deliver now). ``sharding_key`` routes the
    message to ``hash(key) % queues`` for ordered delivery unless ``send`` is given a queue
    or selector. ``properties`` are user properties; names the SDK sets itself (UNIQ_KEY,
    TAGS, KEYS, WAIT, DELAY) are overwritten.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    flag: int = 0
    sharding_key: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.keys, str):  # a single key is a common slip
            self.keys = [self.keys]


class SendStatus(StrEnum):
    """RocketMQ's ``SendStatus``. Anything but SEND_OK means stored but not as durable as asked."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, kw_only=True)
class SendResult:
    """``msg_id`` is the producer's unique key (``UNIQ_KEY``); ``offset_msg_id`` the broker's
    id (store host + commitlog offset). For a batch both are comma-joined, one per message,
    and ``queue_offset`` is the first message's."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": str(self.status),
            "msg_id": self.msg_id,
            "offset_msg_id": self.offset_msg_id,
            "topic": self.queue.topic,
            "broker_name": self.queue.broker_name,
            "queue_id": self.queue.queue_id,
            "queue_offset": self.queue_offset,
            "transaction_id": self.transaction_id,
        }


@dataclass(frozen=True, kw_only=True)
class ReceivedMessage:
    """A message read from a broker.

    ``topic`` is the topic the message was sent to: for a redelivery read from
    ``%RETRY%<group>`` it is the original topic, while ``queue`` is where it was read from
    (the retry queue). ``msg_id`` is the producer's ``UNIQ_KEY`` (else ``offset_msg_id``).

    ``receipt_handle`` is set on messages from ``SimpleConsumer.receive`` (POP): RocketMQ's
    ``ExtraInfoUtil`` text that ``ack`` and ``change_invisible_duration`` send back. It is not
    part of equality or hashing, because ``change_invisible_duration`` renews it in place.

    A message a consumer pulled decodes its text fields (``properties`` and what comes from
    them, ``offset_msg_id``, the two hosts) when one of them is first read: the consumer
    itself needs none of them, and they were more than half of decoding a pulled message.
    """

    topic: str
    body: bytes
    tags: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    commitlog_offset: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    body_crc: int = 0
    receipt_handle: str | None = field(default=None, compare=False)

    @property
    def queue_id(self) -> int:
        return self.queue.queue_id

    @property
    def broker_name(self) -> str:
        return self.queue.broker_name

    @property
    def delivery_attempt(self) -> int:
        """1 for the first delivery, 2 for the first redelivery, ..."""
        return self.reconsume_times + 1

    @classmethod
    def from_ext(
        cls, ext: MessageExt, queue: MessageQueue, *, receipt_handle: str | None = None
    ) -> ReceivedMessage:
        """Build from a decoded record, as ``PullAPIWrapper.processPullResult`` does: the
        requested queue wins over the record's queue id, and a retry topic is undone."""
        return _received(
            ext.topic,
            ext.body,
            ext.properties,
            ext.offset_msg_id,
            queue,
            ext.queue_offset,
            ext.commitlog_offset,
            ext.flag,
            ext.sys_flag,
            ext.born_timestamp,
            f"{ext.born_host}:{ext.born_port}",
            ext.store_timestamp,
            f"{ext.store_host}:{ext.store_port}",
            ext.reconsume_times,
            ext.body_crc,
            receipt_handle,
        )

    @classmethod
    def from_records(
        cls, data: bytes, queue: MessageQueue, *, check_crc: bool = True
    ) -> list[ReceivedMessage]:
        """A pulled body (records back to back) as messages, as ``from_ext`` builds them from
        ``decode_message_at``.

        Each body is checked against its BODYCRC unless ``check_crc=False`` (Kafka's
        ``check.crcs``; the Java client checks nothing). A record that fails the check or does
        not decode raises ``CorruptMessageError`` carrying the good messages before it: the
        rest of the batch is never dropped without a word, nor a bad body handed over.
        """
        buf = bytes(data)
        out: list[ReceivedMessage] = []
        pos = 0
        end = len(buf)
        head_size = RECORD_HEAD_V4.size
        unpack = RECORD_HEAD_V4.unpack_from
        topics = _topic_texts
        while pos < end:
            # The common record (V1, IPv4 hosts, body not compressed) in one unpack, its texts
            # left raw; anything else, or anything wrong, goes to the general decoder.
            if end - pos >= head_size:
                (
                    total,
                    magic,
                    crc,
                    _,
                    flag,
                    queue_offset,
                    commitlog_offset,
                    sys_flag,
                    born_ts,
                    born,
                    born_port,
                    store_ts,
                    store,
                    store_port,
                    reconsume,
                    _,
                    body_len,
                ) = unpack(buf, pos)
                rec_end = pos + total
                body_end = pos + head_size + body_len  # at TOPICLEN
                if (
                    magic == MAGIC_V1
                    and not sys_flag & PLAIN_RECORD_EXCLUDED_FLAGS
                    and head_size <= total <= end - pos
                    and body_len >= 0
                    and body_end < rec_end
                    and buf[body_end] <= 127  # a signed byte
                    and (props_at := body_end + 3 + buf[body_end]) <= rec_end
                    and buf[props_at - 2] <= 127  # the properties length is a signed short
                    and (buf[props_at - 2] << 8 | buf[props_at - 1]) + props_at == rec_end
                ):
                    body = buf[pos + head_size : body_end]
                    if check_crc and crc32(body) & 0x7FFFFFFF != crc:
                        raise _corrupt(
                            f"body CRC {crc32(body) & 0x7FFFFFFF} != stored {crc}", out, queue
                        )
                    raw_topic = buf[body_end + 1 : props_at - 2]
                    topic = topics.get(raw_topic)
                    if topic is None:
                        topic = _topic_text(raw_topic)
                    message = _new_object(ReceivedMessage)
                    message.__dict__.update(
                        topic=topic,
                        body=body,
                        queue=queue,
                        queue_offset=queue_offset,
                        commitlog_offset=commitlog_offset,
                        flag=flag,
                        sys_flag=sys_flag,
                        born_timestamp=born_ts,
                        store_timestamp=store_ts,
                        reconsume_times=reconsume,
                        body_crc=crc,
                        receipt_handle=None,
                        _raw_texts=(
                            buf[props_at:rec_end],
                            born,
                            born_port,
                            store,
                            store_port,
                            commitlog_offset,
                        ),
                    )
                    if topic.startswith(RETRY_TOPIC_PREFIX):  # the original topic, now
                        message.__dict__["topic"] = message.properties.get(
                            PROPERTY_RETRY_TOPIC, topic
                        )
                    out.append(message)
                    pos = rec_end
                    continue
            try:
                ext, pos = decode_message_at(buf, pos, check_crc=check_crc)
            except MalformedBodyError as error:
                raise _corrupt(str(error), out, queue) from None
            out.append(cls.from_ext(ext, queue))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: body as UTF-8 text if it is, else base64 under ``body_base64``."""
        out: dict[str, Any] = {
            "topic": self.topic,
            "msg_id": self.msg_id,
            "offset_msg_id": self.offset_msg_id,
            "tags": self.tags,
            "keys": list(self.keys),
            "broker_name": self.queue.broker_name,
            "queue_id": self.queue.queue_id,
            "queue_offset": self.queue_offset,
            "commitlog_offset": self.commitlog_offset,
            "born_timestamp": self.born_timestamp,
            "born_host": self.born_host,
            "store_timestamp": self.store_timestamp,
            "store_host": self.store_host,
            "reconsume_times": self.reconsume_times,
            "properties": dict(self.properties),
        }
        if self.receipt_handle is not None:
            out["receipt_handle"] = self.receipt_handle
        out.update(body_to_json(self.body))
        return out


MessageView = ReceivedMessage


def _corrupt(reason: str, good: list[ReceivedMessage], queue: MessageQueue) -> CorruptMessageError:
    # The bad record follows the last good one in its queue (pulls read one queue in order).
    at = good[-1].queue_offset + 1 if good else None
    return CorruptMessageError(reason, messages=good, queue=queue, queue_offset=at)


_new_object = object.__new__
_topic_texts: dict[bytes, str] = {}  # topic bytes -> text: a consumer reads few topics
_TOPIC_TEXTS_MAX: Final = 1024


def _topic_text(raw: bytes) -> str:
    if len(_topic_texts) >= _TOPIC_TEXTS_MAX:
        _topic_texts.clear()
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")  # Java's new String(bytes, UTF_8)
    _topic_texts[raw] = text
    return text


class _DecodedOnFirstRead:
    """A text field of a pulled message: the first read of any of them decodes them all into
    the instance dict, which later reads find first (a non-data descriptor)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, message: ReceivedMessage | None, owner: type | None = None) -> Any:
        if message is None:
            return self
        fields = message.__dict__
        raw = fields.get("_raw_texts")
        if raw is None:
            raise AttributeError(self.name)
        props_raw, born, born_port, store, store_port, commitlog_offset = raw
        _fill_texts(
            fields,
            decode_properties_bytes(props_raw),
            offset_msg_id_of(store, store_port, commitlog_offset),
            f"{host_text(born)}:{born_port}",
            f"{host_text(store)}:{store_port}",
        )
        return fields[self.name]


def _fill_texts(
    fields: dict[str, Any],
    props: dict[str, str],
    offset_msg_id: str,
    born_host: str,
    store_host: str,
) -> None:
    """A message's text fields into its instance dict: from its properties, offset message id
    and hosts."""
    keys_text = props.get(PROPERTY_KEYS)
    fields["tags"] = props.get(PROPERTY_TAGS)
    fields["keys"] = tuple(k for k in keys_text.split(KEY_SEPARATOR) if k) if keys_text else ()
    fields["properties"] = props
    fields["msg_id"] = props.get(PROPERTY_UNIQ_KEY) or offset_msg_id
    fields["offset_msg_id"] = offset_msg_id
    fields["born_host"] = born_host
    fields["store_host"] = store_host


# Set after @dataclass has made the class: as class attributes they would be field defaults.
for _name in ("tags", "keys", "properties", "msg_id", "offset_msg_id", "born_host", "store_host"):
    setattr(ReceivedMessage, _name, _DecodedOnFirstRead(_name))


def _received(
    topic: str,
    body: bytes,
    props: dict[str, str],
    offset_msg_id: str,
    queue: MessageQueue,
    queue_offset: int,
    commitlog_offset: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: str,
    store_timestamp: int,
    store_host: str,
    reconsume_times: int,
    body_crc: int,
    receipt_handle: str | None,
) -> ReceivedMessage:
    if topic.startswith(RETRY_TOPIC_PREFIX):
        topic = props.get(PROPERTY_RETRY_TOPIC, topic)
    message = _new_object(ReceivedMessage)
    # A frozen dataclass's __init__ sets its 19 fields one object.__setattr__ at a time;
    # filling the instance dict at once is several times cheaper and gives the same object.
    fields = message.__dict__
    fields.update(
        topic=topic,
        body=body,
        queue=queue,
        queue_offset=queue_offset,
        commitlog_offset=commitlog_offset,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        store_timestamp=store_timestamp,
        reconsume_times=reconsume_times,
        body_crc=body_crc,
        receipt_handle=receipt_handle,
    )
    _fill_texts(fields, props, offset_msg_id, born_host, store_host)
    return message


def body_to_json(body: bytes) -> dict[str, str]:
    """``{"body": text}`` for UTF-8 bodies, else ``{"body_base64": ...}``."""
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(body).decode("ascii")}
