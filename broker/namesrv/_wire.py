"""Name-server wire pieces that ``broker.protocol`` does not define (yet): a few request codes,
custom headers and JSON bodies, plus the compressed REGISTER_BROKER body.

Header and body field names are RocketMQ's (``common/.../protocol/header/namesrv/*``,
``protocol/body/TopicList.java``, ``KVTable.java``, ``RegisterBrokerBody.java``).
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

import msgspec

from pocketmq.broker.protocol.errors import MalformedBodyError
from pocketmq.broker.protocol.headers import (
    DataVersion,
    Int,
    Long,
    RegisterBrokerBody,
    RemotingHeader,
    TopicConfig,
    TopicConfigSerializeWrapper,
    decode_json_body,
)

__all__ = [
    "GET_KVLIST_BY_NAMESPACE",
    "AddWritePermOfBrokerRequestHeader",
    "AddWritePermOfBrokerResponseHeader",
    "DeleteKVConfigRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "KVTable",
    "PutKVConfigRequestHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
    "TopicList",
    "WipeWritePermOfBrokerRequestHeader",
    "WipeWritePermOfBrokerResponseHeader",
    "decode_compressed_register_body",
    "encode_compressed_register_body",
]

GET_KVLIST_BY_NAMESPACE: Final = 219  # RequestCode.GET_KVLIST_BY_NAMESPACE

# The KV namespace whose table REGISTER_BROKER answers with (NamesrvUtil).
NAMESPACE_ORDER_TOPIC_CONFIG: Final = "ORDER_TOPIC_CONFIG"


class GetTopicsByClusterRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    cluster: str


class DeleteTopicFromNamesrvRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    topic: str
    cluster_name: str | None = None  # 5.x: only this cluster's queues


class PutKVConfigRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    namespace: str
    key: str
    value: str


class GetKVConfigRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    namespace: str
    key: str


class GetKVConfigResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    value: str | None = None


class DeleteKVConfigRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    namespace: str
    key: str


class GetKVListByNamespaceRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    namespace: str


class WipeWritePermOfBrokerRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    broker_name: str


class WipeWritePermOfBrokerResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    wipe_topic_count: Int


class AddWritePermOfBrokerRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    broker_name: str


class AddWritePermOfBrokerResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    add_topic_count: Int


class QueryDataVersionRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


class QueryDataVersionResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    changed: bool


class TopicList(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) and GET_TOPICS_BY_CLUSTER (224) body.
    ``topicList`` is always written (``[]`` when empty); an unset ``brokerAddr`` is left out."""

    topic_list: list[str] = []
    broker_addr: str | msgspec.UnsetType = msgspec.UNSET


class KVTable(msgspec.Struct, frozen=True, kw_only=True):
    """GET_KVLIST_BY_NAMESPACE (219) body; also the REGISTER_BROKER response body."""

    table: dict[str, str] = {}


# -- compressed RegisterBrokerBody ---------------------------------------------------------
#
# zlib stream (java.util.zip.Deflater, not raw) of big-endian length-prefixed parts:
#   int n + DataVersion JSON
#   int count, then count x (int n + TopicConfig.encode(): "name read write perm filterType"
#                            [+ " " + attributes JSON in 5.x])
#   int n + filter server list JSON
#   5.x: int count, then count x (int n + TopicQueueMappingInfo JSON)   (ignored here)

_I32 = struct.Struct(">i")


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def int32(self, what: str) -> int:
        if self.remaining() < 4:
            raise MalformedBodyError(f"compressed body ends inside {what}", offset=self.pos)
        (value,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return value

    def chunk(self, what: str) -> bytes:
        n = self.int32(f"the length of {what}")
        if n < 0 or n > self.remaining():
            raise MalformedBodyError(
                f"{what}: length {n} but {self.remaining()} bytes left", offset=self.pos - 4
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out


def _decode_topic_config(text: str) -> TopicConfig:
    parts = text.split(" ")
    if len(parts) < 5:
        raise MalformedBodyError(f"topic config {text!r} has {len(parts)} fields, not 5")
    name, read, write, perm, filter_type = parts[:5]
    try:
        read_n, write_n, perm_n = int(read), int(write), int(perm)
    except ValueError:
        raise MalformedBodyError(f"topic config {text!r}: a number does not parse") from None
    attributes: dict[str, str] = {}
    if len(parts) > 5:
        attributes = decode_json_body(" ".join(parts[5:]), dict[str, str])
    return TopicConfig(
        topic_name=name,
        read_queue_nums=read_n,
        write_queue_nums=write_n,
        perm=perm_n,
        topic_filter_type=filter_type,
        attributes=attributes,
    )


def decode_compressed_register_body(data: bytes, *, size_max: int) -> RegisterBrokerBody:
    """Inflate and parse a ``compressed=true`` REGISTER_BROKER body; ``MalformedBodyError``.

    ``size_max`` bounds the inflated size (a small body may inflate to a huge one).
    """
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(data, size_max)
    except zlib.error as e:
        raise MalformedBodyError(f"compressed body does not inflate: {e}") from None
    if inflater.unconsumed_tail:
        raise MalformedBodyError(f"compressed body inflates to more than {size_max} bytes")
    reader = _Reader(raw)
    version = decode_json_body(reader.chunk("the data version"), DataVersion)
    count = reader.int32("the topic count")
    if count < 0 or count > reader.remaining() // 4:
        raise MalformedBodyError(f"bad topic count {count}", offset=reader.pos - 4)
    table: dict[str, TopicConfig] = {}
    for index in range(count):
        chunk = reader.chunk(f"topic config #{index}")
        config = _decode_topic_config(chunk.decode("utf-8", "replace"))
        table[config.topic_name] = config
    filters: list[str] = []
    if reader.remaining():  # Java requires it; be lenient about a missing tail
        filters = decode_json_body(reader.chunk("the filter server list"), list[str] | None) or []  # type: ignore[arg-type]  # a union is a type to msgspec
    return RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table=table, data_version=version
        ),
        filter_server_list=filters,
    )


def encode_compressed_register_body(body: RegisterBrokerBody) -> bytes:
    """The compressed form Java's ``RegisterBrokerBody.encode(true)`` writes (5.x layout);
    ``topicSysFlag`` and ``order`` are not part of it, as in Java."""
    wrapper = body.topic_config_serialize_wrapper
    parts: list[bytes] = []

    def put(chunk: bytes) -> None:
        parts.append(_I32.pack(len(chunk)))
        parts.append(chunk)

    put(msgspec.json.encode(wrapper.data_version))
    parts.append(_I32.pack(len(wrapper.topic_config_table)))
    for config in wrapper.topic_config_table.values():
        text = " ".join(
            [
                config.topic_name,
                str(config.read_queue_nums),
                str(config.write_queue_nums),
                str(config.perm),
                config.topic_filter_type,
            ]
        )
        if config.attributes:
            text += " " + msgspec.json.encode(config.attributes).decode()
        put(text.encode())
    put(msgspec.json.encode(body.filter_server_list))
    parts.append(_I32.pack(0))  # no static-topic mappings
    return zlib.compress(b"".join(parts), 9)
