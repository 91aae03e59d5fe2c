"""Message encodings carried inside remoting frames.

1. Properties string (SEND header ``i``/``properties``, and inside records)::

       name 0x01 value 0x02 name 0x01 value 0x02 ...      (trailing 0x02 after the last pair)

   Parsing splits on 0x02 and keeps a segment only if it has at least 3 characters and its
   first 0x01 is neither its first nor its last character (so empty names/values vanish).

2. Batch body of SEND_BATCH_MESSAGE (320): one unit per message, back to back::

       TOTALSIZE 4 | MAGICCODE 4 (= 0) | BODYCRC 4 (= 0) | FLAG 4 | BODYLEN 4 | BODY
       | PROPLEN 2 (signed short) | PROPERTIES (UTF-8)

3. Pulled bodies (PULL_MESSAGE, and one record for VIEW_MESSAGE_BY_ID / QUERY_MESSAGE /
   CHECK_TRANSACTION_STATE): commitlog records back to back::

       TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8
       | PHYSICALOFFSET 8 | SYSFLAG 4 | BORNTIMESTAMP 8 | BORNHOST 4+4 or 16+4
       | STORETIMESTAMP 8 | STOREHOST 4+4 or 16+4 | RECONSUMETIMES 4 | PREPARED_TX_OFFSET 8
       | BODYLEN 4 | BODY | TOPICLEN 1 (V1) or 2 (V2) | TOPIC | PROPLEN 2 | PROPERTIES

   Magic V1 ``0xDAA320A7`` has a 1-byte topic length, V2 ``0xDAA320AB`` a 2-byte one. SYSFLAG
   bit 0x10 (born host) / 0x20 (store host) selects 16-byte IPv6 addresses. BODYCRC is
   ``crc32(body) & 0x7FFFFFFF`` of the stored (possibly compressed) body (ISA-L's CRC-32 when
   ``isal`` is installed, else zlib's: the same values, see store/crc.py).

This is the client-side reader of those bytes; the store keeps its own record codec.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

try:  # the store's choice (store/crc.py); this package may not import the store
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover
    from zlib import crc32 as _crc32

from .codes import MessageSysFlag
from .errors import LocalProtocolError, MalformedBodyError

__all__ = [
    "BLANK_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE_V1",
    "MESSAGE_MAGIC_CODE_V2",
    "NAME_VALUE_SEPARATOR",
    "PLAIN_RECORD_EXCLUDED_FLAGS",
    "PROPERTY_SEPARATOR",
    "RECORD_HEAD_V4",
    "BatchMessage",
    "MessageExt",
    "body_crc",
    "decode_batch",
    "decode_batch_texts",
    "decode_message",
    "decode_messages",
    "decode_properties",
    "decode_properties_bytes",
    "decode_message_at",
    "encode_batch",
    "encode_batch_texts",
    "encode_message_record",
    "encode_properties",
    "is_canonical_properties",
    "host_text",
    "offset_msg_id",
    "offset_msg_id_of",
]

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

MESSAGE_MAGIC_CODE_V1: Final = 0xDAA320A7
MESSAGE_MAGIC_CODE_V2: Final = 0xDAA320AB
BLANK_MAGIC_CODE: Final = 0xCBD43194  # end-of-file filler; never inside a pulled body

_PROPERTIES_LENGTH_MAX: Final = 0x7FFF  # signed short
_TOPIC_LENGTH_MAX_V1: Final = 127  # signed byte


# -- properties ------------------------------------------------------------------------------


def encode_properties(properties: Mapping[str, str | None]) -> str:
    """Java's ``messageProperties2String``: ``None`` values are skipped.

    A name holding 0x01/0x02 or a value holding 0x02 would change the meaning of the string,
    so they raise ``LocalProtocolError`` (Java writes them blindly). Empty names or values are
    written, as Java does, and are dropped again by ``decode_properties``.
    """
    parts: list[str] = []
    for name, value in properties.items():
        if value is None:
            continue
        if NAME_VALUE_SEPARATOR in name or PROPERTY_SEPARATOR in name:
            raise LocalProtocolError("property name holds a separator", value=name)
        if PROPERTY_SEPARATOR in value:
            raise LocalProtocolError(f"value of property {name!r} holds 0x02", value=value)
        parts.append(f"{name}\x01{value}\x02")
    return "".join(parts)


def decode_properties(text: str) -> dict[str, str]:
    """Java's ``string2messageProperties``; never fails, drops malformed segments."""
    out: dict[str, str] = {}
    for segment in text.split(PROPERTY_SEPARATOR):
        # Kept iff the first 0x01 is neither the first nor the last character (so the segment
        # has at least 3): a non-empty name before it and a non-empty value after it.
        name, _, value = segment.partition(NAME_VALUE_SEPARATOR)
        if name and value:
            out[name] = value
    return out


def _decode_utf8(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")  # Java's new String(bytes, UTF_8)


# -- batch body (SEND_BATCH_MESSAGE) ---------------------------------------------------------

_BATCH_HEAD = struct.Struct(">iiiii")  # total size, magic, body crc, flag, body length
_I16 = struct.Struct(">h")


class BatchMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a batch; topic and queue come from the request header."""

    body: bytes
    flag: int = 0
    properties: dict[str, str] = {}


def encode_batch(messages: Iterable[BatchMessage]) -> bytes:
    """Java's ``MessageDecoder.encodeMessages``."""
    return encode_batch_texts((m.body, m.flag, encode_properties(m.properties)) for m in messages)


def encode_batch_texts(messages: Iterable[tuple[bytes, int, str]]) -> bytes:
    """``encode_batch`` of (body, flag, properties string) items, for a caller that has each
    message's properties string already (``encode_properties`` of its properties)."""
    parts: list[bytes] = []
    for body, flag, text in messages:
        props = text.encode()
        if len(props) > _PROPERTIES_LENGTH_MAX:
            raise LocalProtocolError("properties longer than 32767 bytes", value=len(props))
        total = _BATCH_HEAD.size + len(body) + 2 + len(props)
        try:
            parts.append(_BATCH_HEAD.pack(total, 0, 0, flag, len(body)))
        except struct.error as e:
            raise LocalProtocolError(f"batch message does not fit: {e}") from None
        parts.append(body)
        parts.append(_I16.pack(len(props)))
        parts.append(props)
    return b"".join(parts)


def decode_batch(data: bytes | bytearray | memoryview) -> list[BatchMessage]:
    """Split a SEND_BATCH_MESSAGE body. Fields are read in sequence, as the broker does
    (TOTALSIZE, MAGICCODE and BODYCRC are not checked); bytes that run short raise
    ``MalformedBodyError``."""
    return [
        BatchMessage(body=body, flag=flag, properties=props)
        for body, flag, props, _ in decode_batch_texts(data)
    ]


def decode_batch_texts(
    data: bytes | bytearray | memoryview,
) -> list[tuple[bytes, int, dict[str, str], str]]:
    """``decode_batch`` as (body, flag, properties, properties string) tuples: the string as
    sent, for a caller that stores it (see ``is_canonical_properties``)."""
    buf = bytes(data)
    out: list[tuple[bytes, int, dict[str, str], str]] = []
    pos = 0
    end = len(buf)
    head = _BATCH_HEAD.size
    while pos < end:
        if end - pos < head + 2:
            raise MalformedBodyError("truncated batch message header", offset=pos)
        _, _, _, flag, body_len = _BATCH_HEAD.unpack_from(buf, pos)
        p = pos + head
        if body_len < 0 or body_len > end - p - 2:
            raise MalformedBodyError(f"batch body length {body_len}", offset=pos + 16)
        body = buf[p : p + body_len]
        p += body_len
        (props_len,) = _I16.unpack_from(buf, p)
        p += 2
        if props_len < 0 or props_len > end - p:
            raise MalformedBodyError(f"batch properties length {props_len}", offset=p - 2)
        text = _decode_utf8(buf[p : p + props_len])
        p += props_len
        out.append((body, flag, decode_properties(text), text))
        pos = p
    return out


def is_canonical_properties(text: str, properties: Mapping[str, str]) -> bool:
    """Whether ``text`` is exactly ``encode_properties(properties)`` given that
    ``properties == decode_properties(text)``: true iff no segment was dropped or repeated
    (each of the ``len(properties)`` pairs ends with a 0x02, and nothing follows the last)."""
    if not text:
        return not properties
    return text[-1] == PROPERTY_SEPARATOR and text.count(PROPERTY_SEPARATOR) == len(properties)


# -- commitlog records (pulled bodies) -------------------------------------------------------

# total size, magic, body crc, queue id, flag, queue offset, physical offset, sys flag,
# born timestamp
_REC_HEAD = struct.Struct(">iIiiiqqiq")
_HOST_PORT = struct.Struct(">i")
_STORE_TS = struct.Struct(">q")
_REC_MID = struct.Struct(">iq")  # reconsume times, prepared transaction offset
_BODY_LEN = struct.Struct(">i")
_OFFSET_ID_TAIL = struct.Struct(">iq")  # port, commitlog offset


class MessageExt(msgspec.Struct, kw_only=True):
    """A stored message as a consumer sees it.

    ``born_host``/``store_host`` are IP address strings (IPv4 dotted or IPv6); the wire
    form is chosen by sysflag bits 0x10/0x20. ``sys_flag`` is as stored: it keeps the
    COMPRESSED bit even when the decoder has inflated ``body``. ``offset_msg_id`` is the broker's id for the
    record (store host, port, commitlog offset in hex).
    """

    topic: str
    body: bytes
    flag: int = 0
    properties: dict[str, str] = {}
    queue_id: int = 0
    queue_offset: int = 0
    commitlog_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1"
    born_port: int = 0
    store_timestamp: int = 0
    store_host: str = "127.0.0.1"
    store_port: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int = 0  # as stored; not checked unless asked
    store_size: int = 0
    offset_msg_id: str = ""

    @property
    def msg_id(self) -> str:
        """What Java clients call msgId: the producer's ``UNIQ_KEY``, else ``offset_msg_id``."""
        return self.properties.get("UNIQ_KEY") or self.offset_msg_id

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> str | None:
        return self.properties.get("KEYS")


def body_crc(body: bytes) -> int:
    """BODYCRC as RocketMQ stores it: CRC-32 with the sign bit cleared."""
    return _crc32(body) & 0x7FFFFFFF


def offset_msg_id(host: str, port: int, commitlog_offset: int) -> str:
    """offsetMsgId: address (4 or 16 bytes) + port (4) + commitlog offset (8), upper hex."""
    packed = ipaddress.ip_address(host).packed
    return (packed + _OFFSET_ID_TAIL.pack(port, commitlog_offset)).hex().upper()


def _host_bytes(host: str) -> bytes:
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        raise LocalProtocolError("host is not an IP address", value=host) from None


def encode_message_record(message: MessageExt) -> bytes:
    """Encode one commitlog record (V1 magic, or V2 for topics over 127 bytes).

    TOTALSIZE and BODYCRC are computed; the IPv6 sysflag bits follow the host addresses.
    ``body`` is written as given (already compressed if sysflag says so).
    """
    born = _host_bytes(message.born_host)
    store = _host_bytes(message.store_host)
    sys_flag = message.sys_flag & ~(MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6)
    if len(born) == 16:
        sys_flag |= MessageSysFlag.BORNHOST_V6
    if len(store) == 16:
        sys_flag |= MessageSysFlag.STOREHOST_V6
    topic = message.topic.encode()
    props = encode_properties(message.properties).encode()
    if len(props) > _PROPERTIES_LENGTH_MAX:
        raise LocalProtocolError("properties longer than 32767 bytes", value=len(props))
    if len(topic) <= _TOPIC_LENGTH_MAX_V1:
        magic, topic_len = MESSAGE_MAGIC_CODE_V1, bytes([len(topic)])
    elif len(topic) <= 0x7FFF:
        magic, topic_len = MESSAGE_MAGIC_CODE_V2, _I16.pack(len(topic))
    else:
        raise LocalProtocolError("topic longer than 32767 bytes", value=len(topic))
    body = message.body
    total = (
        _REC_HEAD.size
        + len(born)
        + 4
        + 8
        + len(store)
        + 4
        + _REC_MID.size
        + 4
        + len(body)
        + len(topic_len)
        + len(topic)
        + 2
        + len(props)
    )
    try:
        return b"".join(
            (
                _REC_HEAD.pack(
                    total,
                    magic,
                    body_crc(body),
                    message.queue_id,
                    message.flag,
                    message.queue_offset,
                    message.commitlog_offset,
                    int(sys_flag),
                    message.born_timestamp,
                ),
                born,
                _HOST_PORT.pack(message.born_port),
                _STORE_TS.pack(message.store_timestamp),
                store,
                _HOST_PORT.pack(message.store_port),
                _REC_MID.pack(message.reconsume_times, message.prepared_transaction_offset),
                _BODY_LEN.pack(len(body)),
                body,
                topic_len,
                topic,
                _I16.pack(len(props)),
                props,
            )
        )
    except struct.error as e:
        raise LocalProtocolError(f"record field out of range: {e}") from None


class _RecordError(Exception):
    def __init__(self, reason: str, offset: int) -> None:
        self.reason = reason
        self.offset = offset


_BORNHOST_V6 = int(MessageSysFlag.BORNHOST_V6)
_STOREHOST_V6 = int(MessageSysFlag.STOREHOST_V6)
_COMPRESSED = int(MessageSysFlag.COMPRESSED)
_I8 = struct.Struct(">b")


def _host_text(address: bytes) -> str:
    if len(address) == 4:
        return "%d.%d.%d.%d" % tuple(address)  # noqa: UP031 - the fastest spelling here
    return str(ipaddress.ip_address(address))


_V6_HOSTS = _BORNHOST_V6 | _STOREHOST_V6
# TOTALSIZE .. BODYLEN of a record with IPv4 hosts (nearly every record) in one unpack: total
# size, magic, body CRC, queue id, flag, queue offset, commitlog offset, sys flag, born
# timestamp, born address, born port, store timestamp, store address, store port, reconsume
# times, prepared transaction offset, body length. A reader's fast path (the SDK's) starts
# here and falls back to ``decode_record_at`` for anything but a V1, IPv4, uncompressed record.
RECORD_HEAD_V4: Final = struct.Struct(">iIiiiqqiq 4si q 4si iq i")
PLAIN_RECORD_EXCLUDED_FLAGS: Final = _V6_HOSTS | _COMPRESSED  # sys flag bits the head excludes
_host_texts: dict[bytes, str] = {}  # address bytes -> text; a client sees few hosts
_HOST_TEXTS_MAX: Final = 1024


def host_text(address: bytes) -> str:
    """A record's packed host address (4 or 16 bytes) as text; cached, as a reader sees few."""
    text = _host_texts.get(address)
    if text is None:
        if len(_host_texts) >= _HOST_TEXTS_MAX:
            _host_texts.clear()
        text = _host_texts[address] = _host_text(address)
    return text


def offset_msg_id_of(address: bytes, port: int, commitlog_offset: int) -> str:
    """offsetMsgId from a record's packed store address, store port and commitlog offset."""
    return (address + _OFFSET_ID_TAIL.pack(port, commitlog_offset)).hex().upper()


def decode_properties_bytes(raw: bytes) -> dict[str, str]:
    """A record's properties field as stored (UTF-8) without the store's ``__CRC32#``."""
    properties = decode_properties(_decode_utf8(raw)) if raw else {}
    properties.pop("__CRC32#", None)  # the store's whole-record CRC, not user data
    return properties


def _decode_record(
    buf: bytes, pos: int, *, decompress: bool, check_crc: bool
) -> tuple[MessageExt, int]:
    end = len(buf)
    if end - pos < _REC_HEAD.size:
        raise _RecordError("truncated record header", pos)
    (
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        commitlog_offset,
        sys_flag,
        born_ts,
    ) = _REC_HEAD.unpack_from(buf, pos)
    if magic == MESSAGE_MAGIC_CODE_V1:
        topic_len_size = 1
    elif magic == MESSAGE_MAGIC_CODE_V2:
        topic_len_size = 2
    else:
        raise _RecordError(f"bad magic code 0x{magic:08X}", pos + 4)
    if total <= 0 or total > end - pos:
        raise _RecordError(f"record size {total} exceeds the {end - pos} bytes left", pos)
    rec_end = pos + total  # every read below stays inside the record
    # Plain ints, not the IntFlag members: enum arithmetic is slow on this per-message path.
    born_len = 16 if sys_flag & _BORNHOST_V6 else 4
    store_len = 16 if sys_flag & _STOREHOST_V6 else 4
    p = pos + _REC_HEAD.size
    fixed_rest = born_len + 4 + 8 + store_len + 4 + _REC_MID.size + 4
    if rec_end - p < fixed_rest:
        raise _RecordError("record shorter than its fixed fields", pos)
    born = buf[p : p + born_len]
    p += born_len
    (born_port,) = _HOST_PORT.unpack_from(buf, p)
    p += 4
    (store_ts,) = _STORE_TS.unpack_from(buf, p)
    p += 8
    store = buf[p : p + store_len]
    p += store_len
    (store_port,) = _HOST_PORT.unpack_from(buf, p)
    p += 4
    reconsume, prepared = _REC_MID.unpack_from(buf, p)
    p += _REC_MID.size
    (body_len,) = _BODY_LEN.unpack_from(buf, p)
    p += 4
    if body_len < 0 or body_len > rec_end - p - topic_len_size:
        raise _RecordError(f"body length {body_len}", p - 4)
    body = buf[p : p + body_len]
    p += body_len
    if topic_len_size == 1:
        topic_len = _I8.unpack_from(buf, p)[0]  # signed byte, as Java reads it
    else:
        (topic_len,) = _I16.unpack_from(buf, p)
    p += topic_len_size
    if topic_len < 0 or topic_len > rec_end - p - 2:
        raise _RecordError(f"topic length {topic_len}", p - topic_len_size)
    topic = _decode_utf8(buf[p : p + topic_len])
    p += topic_len
    (props_len,) = _I16.unpack_from(buf, p)
    p += 2
    if props_len < 0 or props_len > rec_end - p:
        raise _RecordError(f"properties length {props_len}", p - 2)
    # The store's whole-record CRC (RocketMQ's __CRC32#) guards the stored bytes; not user data.
    properties = decode_properties_bytes(buf[p : p + props_len])
    p += props_len
    if p != rec_end:
        raise _RecordError(f"record size {total} but fields end at {p - pos}", pos)
    if check_crc and body_crc(body) != crc:
        raise _RecordError(f"body CRC {body_crc(body)} != stored {crc}", pos + 8)
    if decompress and sys_flag & _COMPRESSED:
        ctype = sys_flag & MessageSysFlag.COMPRESSION_MASK
        if ctype not in (0, MessageSysFlag.COMPRESSION_ZLIB):  # 4.x: always zlib
            raise _RecordError(f"unsupported compression type 0x{ctype:X}", pos + 36)
        try:
            body = zlib.decompress(body)
        except zlib.error as e:
            raise _RecordError(f"body does not inflate: {e}", pos) from None
    message = MessageExt(
        topic=topic,
        body=body,
        flag=flag,
        properties=properties,
        queue_id=queue_id,
        queue_offset=queue_offset,
        commitlog_offset=commitlog_offset,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=host_text(born),
        born_port=born_port,
        store_timestamp=store_ts,
        store_host=host_text(store),
        store_port=store_port,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body_crc=crc,
        store_size=total,
        offset_msg_id=offset_msg_id_of(store, store_port, commitlog_offset),
    )
    return message, rec_end


def decode_message_at(
    buf: bytes, pos: int, *, decompress: bool = True, check_crc: bool = False
) -> tuple[MessageExt, int]:
    """The record starting at ``buf[pos]`` and where it ends; raises ``MalformedBodyError``
    naming the fault and its offset."""
    try:
        return _decode_record(buf, pos, decompress=decompress, check_crc=check_crc)
    except _RecordError as e:
        raise MalformedBodyError(e.reason, offset=e.offset) from None


def decode_messages(
    data: bytes | bytearray | memoryview,
    *,
    decompress: bool = True,
    check_crc: bool = False,
    strict: bool = False,
) -> list[MessageExt]:
    """Decode back-to-back commitlog records (a PULL_MESSAGE body).

    Like Java's ``MessageDecoder.decodes``, a record that fails to decode ends the list
    and what came before is returned; with ``strict=True`` it raises ``MalformedBodyError``.
    Compressed (zlib) bodies are inflated unless ``decompress=False``; the Java client does
    not check BODYCRC, and neither do we unless ``check_crc=True``.
    """
    buf = bytes(data)
    out: list[MessageExt] = []
    pos = 0
    while pos < len(buf):
        try:
            message, pos = _decode_record(buf, pos, decompress=decompress, check_crc=check_crc)
        except _RecordError as e:
            if strict:
                raise MalformedBodyError(e.reason, offset=e.offset) from None
            break
        out.append(message)
    return out


def decode_message(
    data: bytes | bytearray | memoryview, *, decompress: bool = True, check_crc: bool = False
) -> MessageExt:
    """Decode exactly one record (VIEW_MESSAGE_BY_ID, CHECK_TRANSACTION_STATE bodies)."""
    buf = bytes(data)
    try:
        message, end = _decode_record(buf, 0, decompress=decompress, check_crc=check_crc)
    except _RecordError as e:
        raise MalformedBodyError(e.reason, offset=e.offset) from None
    if end != len(buf):
        raise MalformedBodyError(f"{len(buf) - end} bytes after the record", offset=end)
    return message
