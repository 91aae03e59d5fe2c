"""The commitlog record: Apache RocketMQ's on-disk message layout (V1 and V2 magic).

All integers are big-endian. Offsets below assume IPv4 born and store hosts; an IPv6 host (sysflag
bit 0x10 for the born host, 0x20 for the store host) is 16 + 4 bytes instead of 4 + 4 and shifts
every later field by 12.

    offset  size  field
         0     4  TOTALSIZE            whole record, this field included
         4     4  MAGICCODE            0xDAA320A7 (V1) or 0xDAA320AB (V2)
         8     4  BODYCRC              crc32(body) & 0x7FFFFFFF
        12     4  QUEUEID
        16     4  FLAG                 user flag
        20     8  QUEUEOFFSET          logical index in the consume queue
        28     8  PHYSICALOFFSET       global commitlog offset of this record
        36     4  SYSFLAG              see SysFlag
        40     8  BORNTIMESTAMP        ms since epoch, producer clock
        48   4+4  BORNHOST             address + int port (16+4 for IPv6)
        56     8  STORETIMESTAMP       ms since epoch, broker clock
        64   4+4  STOREHOSTADDRESS     (16+4 for IPv6)
        72     4  RECONSUMETIMES
        76     8  PREPARED TX OFFSET   commitlog offset of the half message (commit records only)
        84   4+n  BODY                 int length, then bytes
            1+n  TOPIC                V1: signed byte length; V2: signed short length (2+n)
            2+n  PROPERTIES           signed short length, then name\\x01value\\x02 ...

END-OF-FILE filler: 8 bytes, TOTALSIZE = bytes left in the segment, MAGIC = 0xCBD43194.

The hot paths use :func:`store.crc.crc32` (zlib's CRC-32, Java's CRC32 values, computed by ISA-L
when it is installed; both several times faster than crcmod's C extension on this machine); the
property tests check it against crcmod's ``crc-32`` definition.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Mapping

import msgspec

from pocketmq.store.crc import crc32
from pocketmq.store.errors import CorruptRecordError, LimitExceededError

__all__ = [
    "BLANK_MAGIC",
    "END_FILE_MIN_BLANK_LENGTH",
    "MAGIC_V1",
    "MAGIC_V2",
    "Host",
    "MessageRecord",
    "RecordLimits",
    "SysFlag",
    "body_crc",
    "check_record",
    "decode_properties",
    "decode_record",
    "encode_properties",
    "encode_record",
    "record_length",
    "transaction_type",
]

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8  # TOTALSIZE + MAGIC of the filler record

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class SysFlag:
    """Bits of the SYSFLAG field (RocketMQ ``MessageSysFlag``)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_TYPE_MASK = 0x700


def transaction_type(sysflag: int) -> int:
    return sysflag & SysFlag.TRANSACTION_MASK


# Head: TOTALSIZE .. SYSFLAG, then BORNTIMESTAMP.
_HEAD = struct.Struct(">iIIiiqqiq")
# The fields after each host, keyed by the host's address length.
_HEAD_SIZE = _HEAD.size  # 48: where BORNHOST starts
PHYSICAL_OFFSET_POSITION = struct.calcsize(">iIIiiq")  # 28
QUEUE_OFFSET_POSITION = struct.calcsize(">iIIii")  # 20
SYSFLAG_POSITION = struct.calcsize(">iIIiiqq")  # 36
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_I8 = struct.Struct(">b")
_SIZE_MAGIC_CRC = struct.Struct(">iII")
_SIZE_MAGIC = struct.Struct(">iI")
_Q = struct.Struct(">q")


def _middle_struct(born_len: int, store_len: int) -> struct.Struct:
    # BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PREPARED TX OFFSET, BODY length
    return struct.Struct(f">{born_len}siq{store_len}siiqi")


_BODY_POSITION_V4 = _HEAD_SIZE + struct.calcsize(">4siq4siiqi")  # 88: first body byte

_MIDDLE = {(b, s): _middle_struct(b, s) for b in (4, 16) for s in (4, 16)}
# Full fixed prefix (up to and including the body length), one struct per host combination.
_PREFIX = {
    (b, s): struct.Struct(">iIIiiqqiq" + f"{b}siq{s}siiqi") for b in (4, 16) for s in (4, 16)
}


class RecordLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Limits checked before anything is written, each with RocketMQ's default."""

    body_size_max: int = 4 * 1024 * 1024  # RocketMQ maxMessageSize
    properties_size_max: int = 32767  # Short.MAX_VALUE: the properties length field is a short
    topic_size_max: int = 127  # TopicValidator; V1 records hold a signed-byte topic length
    system_topic_size_max: int = 255  # %RETRY% topics (RocketMQ exempts only that prefix)


class Host(msgspec.Struct, frozen=True, array_like=True):
    """A socket address as stored: packed address (4 or 16 bytes) and port."""

    address: bytes
    port: int

    @classmethod
    def parse(cls, text: str) -> Host:
        """``"10.0.0.5:10911"`` or ``"[::1]:10911"``."""
        host, _, port = text.rpartition(":")
        host = host.strip("[]")
        return cls(ipaddress.ip_address(host).packed, int(port))

    def __str__(self) -> str:
        ip = ipaddress.ip_address(self.address)
        return f"[{ip}]:{self.port}" if ip.version == 6 else f"{ip}:{self.port}"

    @property
    def is_v6(self) -> bool:
        return len(self.address) == 16


# The default store host: 127.0.0.1 and RocketMQ's broker port, so that offset message IDs of
# a store used on its own still decode as offset IDs.
LOCALHOST = Host(b"\x7f\x00\x00\x01", 10911)


class MessageRecord(msgspec.Struct, kw_only=True):
    """One decoded commitlog record. ``physical_offset`` is where it lives; ``total_size`` its length."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = {}
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: Host = LOCALHOST
    store_timestamp: int = 0
    store_host: Host = LOCALHOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    total_size: int = 0
    body_crc: int = 0
    magic: int = MAGIC_V1

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get("KEYS", "").split(" ") if k]

    @property
    def unique_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")


CRC_PROPERTY_NAME = "__CRC32#"
CRC_PROPERTY_LENGTH = 20  # "__CRC32#" 0x01 ten digits 0x02
CRC_RESERVE = (
    CRC_PROPERTY_LENGTH + 1
)  # and a separator that may have to close the user's properties
_CRC_PROPERTY_PREFIX = b"__CRC32#\x01"


def encode_crc_property(crc: int) -> bytes:
    """RocketMQ's ``__CRC32#`` property: ten decimal digits, least significant digit first."""
    assert 0 <= crc <= 0x7FFFFFFF
    return _CRC_PROPERTY_PREFIX + (b"%010d" % crc)[::-1] + b"\x02"


def record_crc_at(view: memoryview | bytes, end: int) -> int | None:
    """The whole-record CRC stored in the last 20 bytes before ``end``, or None if absent."""
    start = end - CRC_PROPERTY_LENGTH
    if start < 0 or view[end - 1] != 2 or bytes(view[start : start + 9]) != _CRC_PROPERTY_PREFIX:
        return None
    digits = bytes(view[start + 9 : end - 1])
    if not digits.isdigit():
        return None
    return int(digits[::-1])


def with_crc_room(properties: bytes) -> bytes:
    """Properties with a separator closing them (as RocketMQ adds before the CRC property)."""
    if properties and not properties.endswith(b"\x02"):
        return properties + b"\x02"
    return properties


def body_crc(body: bytes | memoryview) -> int:
    """RocketMQ's body CRC: CRC-32 (ISO-HDLC, as ``java.util.zip.CRC32``) with the sign bit cleared."""
    return crc32(body) & 0x7FFFFFFF


def encode_properties(properties: Mapping[str, str]) -> str:
    """``name\\x01value\\x02`` for each pair, trailing separator included; None values skipped."""
    return "".join(
        f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
        for name, value in properties.items()
        if value is not None
    )


def decode_properties(text: str) -> dict[str, str]:
    """RocketMQ's parse rule: pairs split on 0x02; a pair needs 0x01 neither first nor last."""
    result: dict[str, str] = {}
    if not text:
        return result
    for pair in text.split(PROPERTY_SEPARATOR):
        index = pair.find(NAME_VALUE_SEPARATOR)
        if index > 0 and index < len(pair) - 1:
            result[pair[:index]] = pair[index + 1 :]
    return result


def record_length(body_len: int, topic_len: int, properties_len: int, sysflag: int = 0) -> int:
    """RocketMQ ``calMsgLength`` for V1 (topic length <= 127) or V2 records."""
    born = 20 if sysflag & SysFlag.BORNHOST_V6 else 8
    stored = 20 if sysflag & SysFlag.STOREHOST_V6 else 8
    topic_len_size = 1 if topic_len <= 127 else 2
    return (
        4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + born
        + 8
        + stored
        + 4
        + 8
        + 4
        + body_len
        + topic_len_size
        + topic_len
        + 2
        + properties_len
    )


def encode_record(
    record: MessageRecord,
    *,
    limits: RecordLimits | None = None,
    properties_bytes: bytes | None = None,
    append_crc: bool = False,
) -> bytes:
    """Encode ``record`` as stored, with its own offsets, timestamps and a freshly computed CRC.

    ``append_crc`` adds RocketMQ's ``__CRC32#`` property (``enabledAppendPropCRC``): a CRC of
    the whole record but its last 20 bytes, so header and properties are guarded too.

    The magic (V1 or V2) and the host bits of the sysflag follow from the topic and hosts, as
    RocketMQ chooses them. Raises :class:`LimitExceededError` and writes nothing when a limit
    is broken.
    """
    limits = limits or DEFAULT_LIMITS
    topic_bytes = record.topic.encode("utf-8")
    if properties_bytes is None:
        properties_bytes = encode_properties(record.properties).encode("utf-8")
    check_limits(
        record.topic,
        topic_bytes,
        record.body,
        properties_bytes,
        limits,
        reserve=CRC_RESERVE if append_crc else 0,
    )
    if append_crc:
        properties_bytes = with_crc_room(properties_bytes) + bytes(CRC_PROPERTY_LENGTH)
    body = record.body
    born, stored = record.born_host, record.store_host
    sysflag = record.sysflag & ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
    if born.is_v6:
        sysflag |= SysFlag.BORNHOST_V6
    if stored.is_v6:
        sysflag |= SysFlag.STOREHOST_V6
    topic_len = len(topic_bytes)
    version_two = topic_len > 127
    total = record_length(len(body), topic_len, len(properties_bytes), sysflag)
    prefix = _PREFIX[(len(born.address), len(stored.address))].pack(
        total,
        MAGIC_V2 if version_two else MAGIC_V1,
        body_crc(body),
        record.queue_id,
        record.flag,
        record.queue_offset,
        record.physical_offset,
        sysflag,
        record.born_timestamp,
        born.address,
        born.port,
        record.store_timestamp,
        stored.address,
        stored.port,
        record.reconsume_times,
        record.prepared_transaction_offset,
        len(body),
    )
    topic_len_bytes = topic_len.to_bytes(2 if version_two else 1, "big")
    encoded = b"".join(
        (
            prefix,
            body,
            topic_len_bytes,
            topic_bytes,
            len(properties_bytes).to_bytes(2, "big"),
            properties_bytes,
        )
    )
    assert len(encoded) == total
    if append_crc:
        crc = crc32(memoryview(encoded)[: total - CRC_PROPERTY_LENGTH]) & 0x7FFFFFFF
        encoded = encoded[: total - CRC_PROPERTY_LENGTH] + encode_crc_property(crc)
    return encoded


def check_limits(
    topic: str,
    topic_bytes: bytes,
    body: bytes,
    properties_bytes: bytes,
    limits: RecordLimits,
    *,
    reserve: int = 0,
) -> None:
    """Raise :class:`LimitExceededError` naming the first limit ``body``/``topic``/properties break."""
    # Only %RETRY% topics may be longer (RocketMQ's HookUtils exempts that prefix alone).
    topic_max = (
        limits.system_topic_size_max if topic.startswith("%RETRY%") else limits.topic_size_max
    )
    if not topic_bytes:
        raise LimitExceededError("topic", topic, "non-empty", "the topic is empty")
    if len(topic_bytes) > topic_max:
        raise LimitExceededError(
            "topic_size_max", len(topic_bytes), topic_max, f"topic {topic[:40]!r}..."
        )
    if not _topic_chars_ok(topic):
        raise LimitExceededError(
            "topic",
            topic,
            "^[%|a-zA-Z0-9_-]+$",
            "the topic has a character outside the allowed set",
        )
    if len(body) > limits.body_size_max:
        raise LimitExceededError("body_size_max", len(body), limits.body_size_max)
    if len(properties_bytes) > limits.properties_size_max - reserve:
        raise LimitExceededError(
            "properties_size_max",
            len(properties_bytes),
            limits.properties_size_max - reserve,
            f"{reserve} bytes are kept for the record CRC" if reserve else "",
        )


_TOPIC_CHARS = frozenset(b"%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def _topic_chars_ok(topic: str) -> bool:
    return topic.isascii() and all(c in _TOPIC_CHARS for c in topic.encode("ascii"))


DEFAULT_LIMITS = RecordLimits()


def check_record(
    view: memoryview | bytes,
    position: int,
    *,
    check_crc: bool = True,
    require_record_crc: bool = False,
) -> int:
    """Validate the record at ``position`` the way recovery does and return its size.

    ``require_record_crc`` (for records a store wrote with ``append_record_crc``) makes a missing
    or mangled ``__CRC32#`` property an error instead of falling back to the body CRC.

    Returns 0 for an END-OF-FILE filler (the caller moves to the next segment). Raises
    :class:`CorruptRecordError` with the reason for anything else that is not a whole, valid
    record: too few bytes, bad magic, a CRC or length mismatch. ``position`` is relative to
    ``view``; the error's offset is that same relative position.
    """
    remaining = len(view) - position
    if remaining < 8:
        raise CorruptRecordError(f"only {remaining} bytes left, no record header", offset=position)
    total, magic = _SIZE_MAGIC.unpack_from(view, position)  # 8 bytes: a filler may end here
    if magic == BLANK_MAGIC:
        return 0
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        if total == 0 and magic == 0:
            raise CorruptRecordError("zero bytes (end of written data)", offset=position)
        raise CorruptRecordError(f"bad magic code 0x{magic:08X}", offset=position)
    if total < 91 or total > remaining:
        raise CorruptRecordError(
            f"record size {total} does not fit the {remaining} bytes left", offset=position
        )
    crc = _U32.unpack_from(view, position + 8)[0]
    sysflag = _I32.unpack_from(view, position + SYSFLAG_POSITION)[0]
    body_at = position + _BODY_POSITION_V4
    if sysflag & SysFlag.BORNHOST_V6:
        body_at += 12
    if sysflag & SysFlag.STOREHOST_V6:
        body_at += 12
    body_len = _I32.unpack_from(view, body_at - 4)[0]
    topic_at = body_at + body_len
    end = position + total
    if body_len < 0 or topic_at + 3 > end:
        raise CorruptRecordError(f"body length {body_len} overruns the record", offset=position)
    if magic == MAGIC_V1:
        topic_len = view[topic_at]
        if topic_len > 127:
            topic_len -= 256
        props_at = topic_at + 1 + topic_len
    else:
        topic_len = _I16.unpack_from(view, topic_at)[0]
        props_at = topic_at + 2 + topic_len
    if topic_len < 0 or props_at + 2 > end:
        raise CorruptRecordError(f"topic length {topic_len} overruns the record", offset=position)
    props_len = _I16.unpack_from(view, props_at)[0]
    if props_at + 2 + props_len != end:
        raise CorruptRecordError(
            f"length mismatch: TOTALSIZE {total}, fields add up to {props_at + 2 + props_len - position}",
            offset=position,
        )
    if check_crc:
        if require_record_crc:
            # The whole-record CRC covers header, body, topic and properties. It is trusted only
            # where the store says it wrote one: elsewhere a client could have sent the property.
            stored = record_crc_at(view, end) if props_len >= CRC_PROPERTY_LENGTH else None
            if stored is None:
                raise CorruptRecordError(
                    "record CRC (__CRC32#) missing or mangled", offset=position
                )
            if crc32(view[position : end - CRC_PROPERTY_LENGTH]) & 0x7FFFFFFF != stored:
                raise CorruptRecordError("record CRC (__CRC32#) mismatch", offset=position)
        elif crc32(view[body_at:topic_at]) & 0x7FFFFFFF != crc:
            raise CorruptRecordError("body CRC mismatch", offset=position)
    return total


# Total size, magic, body CRC, sys flag and body length of a V1 record with IPv4 hosts.
_CHECK_HEAD_V4 = struct.Struct(">iII24xi44xi")
_V6_HOSTS = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6


def record_intact(view: memoryview | bytes, require_record_crc: bool) -> bool:
    """Whether ``view`` holds exactly one whole record whose CRC matches: the answer of
    ``check_record(view, 0, require_record_crc=...) == len(view)``, without the reason.

    Every record a read serves is checked: the common record (V1 magic, IPv4 hosts) with one
    unpack, anything else by ``check_record``.
    """
    n = len(view)
    if n >= _CHECK_HEAD_V4.size + 3:
        total, magic, crc, sysflag, body_len = _CHECK_HEAD_V4.unpack_from(view, 0)
        topic_at = _BODY_POSITION_V4 + body_len
        if (
            magic == MAGIC_V1
            and not sysflag & _V6_HOSTS
            and total == n
            and body_len >= 0
            and topic_at + 3 <= n
            and view[topic_at] <= 127  # TOPICLEN is a signed byte
            and (props_at := topic_at + 1 + view[topic_at]) + 2 <= n
            and view[props_at] <= 127  # PROPERTIESLENGTH is a signed short
        ):
            if props_at + 2 + (view[props_at] << 8 | view[props_at + 1]) != n:
                return False
            if not require_record_crc:
                return crc32(view[_BODY_POSITION_V4:topic_at]) & 0x7FFFFFFF == crc
            tail = bytes(view[n - CRC_PROPERTY_LENGTH :]) if n - props_at >= 22 else b""
            digits = tail[9:19]
            return (
                tail[:9] == _CRC_PROPERTY_PREFIX
                and tail[19:] == b"\x02"
                and digits.isdigit()
                and crc32(view[: n - CRC_PROPERTY_LENGTH]) & 0x7FFFFFFF == int(digits[::-1])
            )
    try:
        return check_record(view, 0, require_record_crc=require_record_crc) == n
    except CorruptRecordError:
        return False


def decode_record(
    view: memoryview | bytes,
    position: int = 0,
    *,
    check_crc: bool = True,
    require_record_crc: bool = False,
) -> MessageRecord:
    """Decode the whole record at ``position``; checks structure (and CRC unless told not to)."""
    total = check_record(view, position, check_crc=check_crc, require_record_crc=require_record_crc)
    if total == 0:
        raise CorruptRecordError("END-OF-FILE filler, not a message", offset=position)
    (size, magic, crc, queue_id, flag, queue_offset, physical_offset, sysflag, born_ts) = (
        _HEAD.unpack_from(view, position)
    )
    born_len = 16 if sysflag & SysFlag.BORNHOST_V6 else 4
    store_len = 16 if sysflag & SysFlag.STOREHOST_V6 else 4
    middle = _MIDDLE[(born_len, store_len)]
    (born_addr, born_port, store_ts, store_addr, store_port, reconsume, prepared, body_len) = (
        middle.unpack_from(view, position + _HEAD_SIZE)
    )
    body_at = position + _HEAD_SIZE + middle.size
    topic_at = body_at + body_len
    if magic == MAGIC_V1:
        topic_len = _I8.unpack_from(view, topic_at)[0]
        topic_start = topic_at + 1
    else:
        topic_len = _I16.unpack_from(view, topic_at)[0]
        topic_start = topic_at + 2
    props_at = topic_start + topic_len
    props_len = _I16.unpack_from(view, props_at)[0]
    try:
        topic = bytes(view[topic_start:props_at]).decode("utf-8")
        properties = decode_properties(
            bytes(view[props_at + 2 : props_at + 2 + props_len]).decode("utf-8")
        )
        # The store's whole-record CRC guards these bytes; it is not part of the message, and a
        # copy of the message gets its own.
        properties.pop(CRC_PROPERTY_NAME, None)
    except UnicodeDecodeError as error:
        raise CorruptRecordError(
            f"topic or properties are not UTF-8: {error}", offset=position
        ) from None
    return MessageRecord(
        topic=topic,
        body=bytes(view[body_at:topic_at]),
        queue_id=queue_id,
        flag=flag,
        properties=properties,
        sysflag=sysflag,
        born_timestamp=born_ts,
        born_host=Host(born_addr, born_port),
        store_timestamp=store_ts,
        store_host=Host(store_addr, store_port),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        total_size=size,
        body_crc=crc,
        magic=magic,
    )


def encode_blank(remaining: int) -> bytes:
    """The END-OF-FILE filler: only 8 bytes are written, TOTALSIZE says how many are left."""
    assert remaining >= END_FILE_MIN_BLANK_LENGTH
    return _SIZE_MAGIC_CRC.pack(remaining, BLANK_MAGIC, 0)[:8]
