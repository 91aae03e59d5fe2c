"""Message encodings carried inside remoting frames.

1. Properties string (SEND header ``i``/``properties``, and inside records)::

       name 0x01 value 0x02 name 0x01 value 0x02 ...      (trailing 0x02 after the last pair)

   Parsing splits on 0x02 and keeps a segment only if it has at least 3 characters and its
   first 0x01 is neither its first nor its last character (so empty names/values vanish).

2. Batch body of SEND_BATCH_MESSAGE (320): one unit per message, back to back::

       TOTALSIZE 4 | MAGICCODE 4 (= 0) | BODYCRC 4 (= 0) | FLAG 4 | BODYLEN 4 | BODY
       | PROPLEN 2 (signed short) | PROPERTIES (UTF-8)

3. Pulled bodies (PULL_MESSAGE, and one record for VIEW_MESSAGE_BY_ID / QUERY_MESSAGE /
   CHECK_TRANSACTION_STATE): commitlog records back to back, in the layout of
   ``store/record.py``, the one definition of the record (layout, codec, flag bits, property
   codec): a pure module the SDK may import. This module reads a pulled body with it as a
   consumer sees it: hosts as text, bodies inflated, text that is not UTF-8 replaced.

The properties codec is ``store/record.py``'s too; ``encode_properties`` here refuses, as a
``LocalProtocolError``, what the string cannot carry.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from pocketmq.store.errors import CorruptRecordError
from pocketmq.store.record import (
    ADDRESS_V4,
    BLANK_MAGIC,
    BODY_CRC_AT,
    MAGIC_V1,
    MAGIC_V2,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    SYSFLAG_AT,
    PropertyError,
    SysFlag,
    body_crc,
    decode_properties,
    decode_properties_bytes,
    encode_properties_checked,
    fixed_struct,
    pack_record,
    unpack_record,
)

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

MESSAGE_MAGIC_CODE_V1: Final = MAGIC_V1
MESSAGE_MAGIC_CODE_V2: Final = MAGIC_V2
BLANK_MAGIC_CODE: Final = BLANK_MAGIC  # end-of-file filler; never inside a pulled body

_PROPERTIES_LENGTH_MAX: Final = 0x7FFF  # signed short


# -- properties ------------------------------------------------------------------------------


def encode_properties(properties: Mapping[str, str | None]) -> str:
    """Java's ``messageProperties2String`` (``store.record.encode_properties_checked``): a name
    holding 0x01/0x02 or a value holding 0x02 would change the meaning of the string, so they
    raise ``LocalProtocolError`` (Java writes them blindly)."""
    try:
        return encode_properties_checked(properties)
    except PropertyError as error:
        raise LocalProtocolError(error.reason, value=error.value) from None


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
    """Encode one commitlog record (V1 magic, or V2 for topics over 127 bytes) with
    ``store.record.pack_record``. TOTALSIZE and BODYCRC are computed; the IPv6 sysflag bits
    follow the host addresses. ``body`` is written as given (already compressed if sysflag
    says so)."""
    born = _host_bytes(message.born_host)
    store = _host_bytes(message.store_host)
    topic = message.topic.encode()
    props = encode_properties(message.properties).encode()
    if len(props) > _PROPERTIES_LENGTH_MAX:
        raise LocalProtocolError("properties longer than 32767 bytes", value=len(props))
    if len(topic) > 0x7FFF:
        raise LocalProtocolError("topic longer than 32767 bytes", value=len(topic))
    try:
        return pack_record(
            topic,
            message.body,
            props,
            queue_id=message.queue_id,
            flag=message.flag,
            queue_offset=message.queue_offset,
            physical_offset=message.commitlog_offset,
            sysflag=int(message.sys_flag),
            born_timestamp=message.born_timestamp,
            born_address=born,
            born_port=message.born_port,
            store_timestamp=message.store_timestamp,
            store_address=store,
            store_port=message.store_port,
            reconsume_times=message.reconsume_times,
            prepared_transaction_offset=message.prepared_transaction_offset,
        )
    except struct.error as e:
        raise LocalProtocolError(f"record field out of range: {e}") from None


class _RecordError(Exception):
    def __init__(self, reason: str, offset: int) -> None:
        self.reason = reason
        self.offset = offset


_COMPRESSED = SysFlag.COMPRESSED
_COMPRESSION_MASK = SysFlag.COMPRESSION_MASK
_COMPRESSION_ZLIB = SysFlag.COMPRESSION_ZLIB


def _host_text(address: bytes) -> str:
    if len(address) == ADDRESS_V4:
        return "%d.%d.%d.%d" % tuple(address)  # noqa: UP031 - the fastest spelling here
    return str(ipaddress.ip_address(address))


# TOTALSIZE .. BODYLEN of a record with IPv4 hosts (nearly every record) in one unpack: the
# fields of ``store.record.FIELDS``, BODYCRC read as Java reads it (a signed int). A reader's
# fast path (the SDK's) starts here and falls back to ``decode_message_at`` for anything but a
# V1, IPv4, uncompressed record.
RECORD_HEAD_V4: Final = fixed_struct(signed_crc=True)
PLAIN_RECORD_EXCLUDED_FLAGS: Final = (
    SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6 | SysFlag.COMPRESSED
)  # sys flag bits the head excludes
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


def _decode_record(
    buf: bytes, pos: int, *, decompress: bool, check_crc: bool
) -> tuple[MessageExt, int]:
    try:
        fields = unpack_record(buf, pos)
    except CorruptRecordError as error:
        raise _RecordError(error.reason, error.offset) from None
    crc = fields.body_crc
    if crc > 0x7FFFFFFF:
        crc -= 1 << 32  # as Java reads it (RECORD_HEAD_V4 too)
    body = fields.body
    sys_flag = fields.sysflag
    if check_crc and body_crc(body) != crc:
        raise _RecordError(f"body CRC {body_crc(body)} != stored {crc}", pos + BODY_CRC_AT)
    if decompress and sys_flag & _COMPRESSED:
        ctype = sys_flag & _COMPRESSION_MASK
        if ctype not in (0, _COMPRESSION_ZLIB):  # 4.x: always zlib
            raise _RecordError(f"unsupported compression type 0x{ctype:X}", pos + SYSFLAG_AT)
        try:
            body = zlib.decompress(body)
        except zlib.error as e:
            raise _RecordError(f"body does not inflate: {e}", pos) from None
    store = fields.store_address
    message = MessageExt(
        topic=_decode_utf8(fields.topic),
        body=body,
        flag=fields.flag,
        # The store's whole-record CRC (RocketMQ's __CRC32#) guards the stored bytes; not user data.
        properties=decode_properties_bytes(fields.properties),
        queue_id=fields.queue_id,
        queue_offset=fields.queue_offset,
        commitlog_offset=fields.physical_offset,
        sys_flag=sys_flag,
        born_timestamp=fields.born_timestamp,
        born_host=host_text(fields.born_address),
        born_port=fields.born_port,
        store_timestamp=fields.store_timestamp,
        store_host=host_text(store),
        store_port=fields.store_port,
        reconsume_times=fields.reconsume_times,
        prepared_transaction_offset=fields.prepared_transaction_offset,
        body_crc=crc,
        store_size=fields.total_size,
        offset_msg_id=offset_msg_id_of(store, fields.store_port, fields.physical_offset),
    )
    return message, pos + fields.total_size


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
