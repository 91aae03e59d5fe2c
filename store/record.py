"""The commitlog record: Apache RocketMQ's on-disk message layout (V1 and V2 magic), in one place.

Everything that reads or writes a record builds on this module: the store (commitlog appends,
reads, the recovery scan), the remoting codec (a pulled body is records back to back), the SDK
(its consumer decodes pulled records) and the Spark reader. Their fast paths take their structs
and offsets from the definitions here (:data:`FIELDS`, :func:`fixed_struct`, :data:`FIELD_AT`);
property tests pin each fast path to the general code below. The module is pure (struct,
msgspec, the CRC helper, the store's error classes), so the SDK may import it without the store
engine (``tests/test_layering.py``).

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
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple, Protocol

import msgspec

from pocketmq.store.crc import crc32
from pocketmq.store.errors import CorruptRecordError, LimitExceededError

__all__ = [
    "BLANK_MAGIC",
    "BODY_AT_V4",
    "END_FILE_MIN_BLANK_LENGTH",
    "FIELDS",
    "FIELD_AT",
    "MAGIC_V1",
    "MAGIC_V2",
    "MIN_RECORD_SIZE",
    "Host",
    "MessageRecord",
    "PropertyError",
    "RecordFields",
    "RecordLimits",
    "SysFlag",
    "body_crc",
    "check_record",
    "decode_properties",
    "decode_properties_bytes",
    "decode_record",
    "encode_properties",
    "encode_properties_checked",
    "encode_batch",
    "encode_record",
    "fixed_struct",
    "pack_record",
    "picking_struct",
    "record_length",
    "stored_length",
    "transaction_type",
    "unpack_record",
    "with_reconsume_times",
]

MAGIC_V1: Final = 0xDAA320A7
MAGIC_V2: Final = 0xDAA320AB
BLANK_MAGIC: Final = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH: Final = 8  # TOTALSIZE + MAGIC of the filler record

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"


class SysFlag:
    """Bits of the SYSFLAG field (RocketMQ ``MessageSysFlag``; ``broker.protocol.codes`` names
    this class so too). Plain ints, not an ``IntFlag``: they are combined with every message's
    flags, and enum arithmetic is several times slower."""

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
    # Bits 8-10: the compression of a COMPRESSED body (4.x clients write 0: zlib).
    COMPRESSION_LZ4 = 0x100
    COMPRESSION_ZSTD = 0x200
    COMPRESSION_ZLIB = 0x300
    COMPRESSION_MASK = 0x700


def transaction_type(sysflag: int) -> int:
    return sysflag & SysFlag.TRANSACTION_MASK


# -- the layout ----------------------------------------------------------------------------------

# The fixed part of a record, field by field with its struct code. A host is its address (4 bytes
# for IPv4, 16 for IPv6: the sysflag bit says which) then an int port; "{born}s" and "{store}s"
# are filled in with the address widths. Every offset and struct below derives from this table.
FIELDS: Final = (
    ("total_size", "i"),
    ("magic", "I"),
    ("body_crc", "I"),
    ("queue_id", "i"),
    ("flag", "i"),
    ("queue_offset", "q"),
    ("physical_offset", "q"),
    ("sysflag", "i"),
    ("born_timestamp", "q"),
    ("born_address", "{born}s"),
    ("born_port", "i"),
    ("store_timestamp", "q"),
    ("store_address", "{store}s"),
    ("store_port", "i"),
    ("reconsume_times", "i"),
    ("prepared_transaction_offset", "q"),
    ("body_length", "i"),
)
ADDRESS_V4: Final = 4
ADDRESS_V6: Final = 16
V6_SHIFT: Final = ADDRESS_V6 - ADDRESS_V4  # what an IPv6 host moves every later field by
HOST_SIZE_V4: Final = ADDRESS_V4 + 4  # address and port
HOST_SIZE_V6: Final = ADDRESS_V6 + 4


def _codes(born: int, store: int, *, signed_crc: bool = False) -> list[str]:
    return [
        "i" if signed_crc and name == "body_crc" else code.format(born=born, store=store)
        for name, code in FIELDS
    ]


def fixed_struct(
    born: int = ADDRESS_V4, store: int = ADDRESS_V4, *, signed_crc: bool = False
) -> struct.Struct:
    """The fixed part (TOTALSIZE .. the body length) as one struct, for born and store addresses
    of ``born`` and ``store`` bytes: it unpacks to the values of :data:`FIELDS`, in order.
    ``signed_crc`` reads BODYCRC as Java does (a signed int), for readers that show what a Java
    client shows; a valid record's CRC has the sign bit clear, so only damage tells them apart."""
    return struct.Struct(">" + "".join(_codes(born, store, signed_crc=signed_crc)))


def _offsets() -> dict[str, int]:
    codes = _codes(ADDRESS_V4, ADDRESS_V4)
    return {
        name: struct.calcsize(">" + "".join(codes[:index]))
        for index, (name, _) in enumerate(FIELDS)
    }


# Where each fixed field starts in a record with IPv4 hosts. Fields before the born address are
# where they are in any record; the later ones move by V6_SHIFT for each IPv6 host before them.
FIELD_AT: Final = _offsets()
MAGIC_AT: Final = FIELD_AT["magic"]  # 4
BODY_CRC_AT: Final = FIELD_AT["body_crc"]  # 8
QUEUE_OFFSET_AT: Final = FIELD_AT["queue_offset"]  # 20
PHYSICAL_OFFSET_AT: Final = FIELD_AT["physical_offset"]  # 28
SYSFLAG_AT: Final = FIELD_AT["sysflag"]  # 36
BORN_ADDRESS_AT: Final = FIELD_AT["born_address"]  # 48
STORE_TIMESTAMP_AT_V4: Final = FIELD_AT["store_timestamp"]  # 56
STORE_ADDRESS_AT_V4: Final = FIELD_AT["store_address"]  # 64
RECONSUME_TIMES_AT_V4: Final = FIELD_AT["reconsume_times"]  # 72
BODY_LENGTH_AT_V4: Final = FIELD_AT["body_length"]  # 84
# The fixed part of each host combination (born, store address widths).
PREFIX: Final = {
    (b, s): fixed_struct(b, s) for b in (ADDRESS_V4, ADDRESS_V6) for s in (ADDRESS_V4, ADDRESS_V6)
}
PREFIX_V4: Final = PREFIX[(ADDRESS_V4, ADDRESS_V4)]
BODY_AT_V4: Final = PREFIX_V4.size  # 88: the first body byte
TOPIC_LENGTH_MAX_V1: Final = 127  # V1 holds a signed-byte topic length; longer topics need V2
# The smallest record: V1, IPv4 hosts, empty body, topic and properties (TOPIC and PROPERTIES
# lengths, 1 + 2 bytes).
MIN_RECORD_SIZE: Final = BODY_AT_V4 + 1 + 2  # 91
HOSTS_V6 = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6


def picking_struct(*names: str) -> struct.Struct:
    """A struct that reads the named fixed fields (in layout order) of a record with IPv4 hosts
    and skips the bytes between them: one unpack for a fast path that needs a few fields."""
    codes = _codes(ADDRESS_V4, ADDRESS_V4)
    index = {name: i for i, (name, _) in enumerate(FIELDS)}
    wanted = sorted({index[name] for name in names})
    assert len(wanted) == len(names), f"a field named twice in {names}"
    text = ">"
    at = 0
    for i in wanted:
        name = FIELDS[i][0]
        if FIELD_AT[name] > at:
            text += f"{FIELD_AT[name] - at}x"
        text += codes[i]
        at = FIELD_AT[name] + struct.calcsize(">" + codes[i])
    return struct.Struct(text)


_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_SIZE_MAGIC_CRC = struct.Struct(">iII")
_SIZE_MAGIC = struct.Struct(">iI")


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


# -- CRCs ----------------------------------------------------------------------------------------

CRC_PROPERTY_NAME = "__CRC32#"
CRC_PROPERTY_LENGTH = 20  # "__CRC32#" 0x01 ten digits 0x02
CRC_RESERVE = (
    CRC_PROPERTY_LENGTH + 1
)  # and a separator that may have to close the user's properties
CRC_PROPERTY_PREFIX = b"__CRC32#\x01"
# The property written backwards, digits left to right: ``(CRC_PROPERTY_BACKWARDS % crc)[::-1]``
# is the property (the least significant digit first, as RocketMQ writes it).
CRC_PROPERTY_BACKWARDS = b"\x02%010d" + CRC_PROPERTY_PREFIX[::-1]


def encode_crc_property(crc: int) -> bytes:
    """RocketMQ's ``__CRC32#`` property: ten decimal digits, least significant digit first."""
    assert 0 <= crc <= 0x7FFFFFFF
    return (CRC_PROPERTY_BACKWARDS % crc)[::-1]


def record_crc_at(view: memoryview | bytes, end: int) -> int | None:
    """The whole-record CRC stored in the last 20 bytes before ``end``, or None if absent."""
    start = end - CRC_PROPERTY_LENGTH
    prefix = len(CRC_PROPERTY_PREFIX)
    if (
        start < 0
        or view[end - 1] != 2
        or bytes(view[start : start + prefix]) != CRC_PROPERTY_PREFIX
    ):
        return None
    digits = bytes(view[start + prefix : end - 1])
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


# -- properties ----------------------------------------------------------------------------------


def encode_properties(properties: Mapping[str, str | None]) -> str:
    """``name\\x01value\\x02`` for each pair, trailing separator included; None values skipped.

    Trusts its input: a name holding 0x01 or 0x02, or a value holding 0x02, changes the meaning
    of the string (properties decoded by :func:`decode_properties` never do). Text from outside
    goes through :func:`encode_properties_checked`."""
    return "".join(
        [f"{name}\x01{value}\x02" for name, value in properties.items() if value is not None]
    )


class PropertyError(ValueError):
    """A property that the properties string cannot carry (a separator in it)."""

    def __init__(self, reason: str, value: str) -> None:
        self.reason = reason
        self.value = value
        super().__init__(f"{reason}: {value!r}")


def encode_properties_checked(properties: Mapping[str, str | None]) -> str:
    """Java's ``messageProperties2String``, refusing what would change the string's meaning:
    a name holding 0x01/0x02 or a value holding 0x02 raises :class:`PropertyError` (Java writes
    them blindly). ``None`` values are skipped; empty names or values are written, as Java does,
    and are dropped again by :func:`decode_properties`."""
    parts: list[str] = []
    for name, value in properties.items():
        if value is None:
            continue
        if NAME_VALUE_SEPARATOR in name or PROPERTY_SEPARATOR in name:
            raise PropertyError("property name holds a separator", name)
        if PROPERTY_SEPARATOR in value:
            raise PropertyError(f"value of property {name!r} holds 0x02", value)
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


def decode_properties_bytes(raw: bytes) -> dict[str, str]:
    """A record's PROPERTIES field as a reader shows it: UTF-8, with bytes that are not replaced
    (Java's ``new String(bytes, UTF_8)``), and without the store's ``__CRC32#``: it guards the
    stored bytes and is not part of the message (a copy of the message gets its own)."""
    if not raw:
        return {}
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
    properties = decode_properties(text)
    properties.pop(CRC_PROPERTY_NAME, None)
    return properties


# -- encoding ------------------------------------------------------------------------------------


def record_length(body_len: int, topic_len: int, properties_len: int, sysflag: int = 0) -> int:
    """RocketMQ ``calMsgLength`` for V1 (topic length <= 127) or V2 records."""
    born = ADDRESS_V6 if sysflag & SysFlag.BORNHOST_V6 else ADDRESS_V4
    stored = ADDRESS_V6 if sysflag & SysFlag.STOREHOST_V6 else ADDRESS_V4
    topic_len_size = 1 if topic_len <= TOPIC_LENGTH_MAX_V1 else 2
    return PREFIX[(born, stored)].size + body_len + topic_len_size + topic_len + 2 + properties_len


def pack_record(
    topic: bytes,
    body: bytes | memoryview,
    properties: bytes,
    *,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sysflag: int,
    born_timestamp: int,
    born_address: bytes,
    born_port: int,
    store_timestamp: int,
    store_address: bytes,
    store_port: int,
    reconsume_times: int,
    prepared_transaction_offset: int,
) -> bytes:
    """One record with TOTALSIZE, magic and BODYCRC computed: V1, or V2 for a topic over 127
    bytes; the host bits of ``sysflag`` follow the address widths, as RocketMQ chooses them.
    ``body`` is written as given (already compressed if ``sysflag`` says so). Checks no limit:
    lengths must fit their fields (the caller's limits), other values raise ``struct.error``."""
    sysflag &= ~HOSTS_V6
    if len(born_address) == ADDRESS_V6:
        sysflag |= SysFlag.BORNHOST_V6
    if len(store_address) == ADDRESS_V6:
        sysflag |= SysFlag.STOREHOST_V6
    version_two = len(topic) > TOPIC_LENGTH_MAX_V1
    prefix = PREFIX[(len(born_address), len(store_address))]
    total = prefix.size + len(body) + (2 if version_two else 1) + len(topic) + 2 + len(properties)
    return b"".join(
        (
            prefix.pack(
                total,
                MAGIC_V2 if version_two else MAGIC_V1,
                crc32(body) & 0x7FFFFFFF,
                queue_id,
                flag,
                queue_offset,
                physical_offset,
                sysflag,
                born_timestamp,
                born_address,
                born_port,
                store_timestamp,
                store_address,
                store_port,
                reconsume_times,
                prepared_transaction_offset,
                len(body),
            ),
            body,
            len(topic).to_bytes(2 if version_two else 1, "big"),
            topic,
            len(properties).to_bytes(2, "big"),
            properties,
        )
    )


def stored_length(
    topic_field_len: int, body_len: int, properties: bytes, v6_hosts: int, append_crc: bool
) -> int:
    """The TOTALSIZE a store writes: ``topic_field_len`` is the TOPIC field (its length byte or
    short included), ``v6_hosts`` how many of the two hosts are IPv6, ``append_crc`` whether the
    ``__CRC32#`` property (and the separator it may need before it) ends the properties."""
    properties_len = len(properties)
    if append_crc:
        properties_len += CRC_PROPERTY_LENGTH
        if properties and properties[-1] != 2:
            properties_len += 1
    return BODY_AT_V4 + v6_hosts * V6_SHIFT + body_len + topic_field_len + 2 + properties_len


def topic_field(topic: bytes) -> bytes:
    """The TOPIC field: its length (a byte in V1, a short in V2), then the name."""
    return len(topic).to_bytes(2 if len(topic) > TOPIC_LENGTH_MAX_V1 else 1, "big") + topic


class BatchMessage(Protocol):
    """What :func:`encode_batch` reads of each message (the store's ``PutMessage``)."""

    @property
    def body(self) -> bytes: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def flag(self) -> int: ...
    @property
    def sysflag(self) -> int: ...
    @property
    def born_timestamp(self) -> int: ...
    @property
    def born_host(self) -> Host: ...
    @property
    def reconsume_times(self) -> int: ...
    @property
    def prepared_transaction_offset(self) -> int: ...


_CRC_MASK = 0x7FFFFFFF
_NOT_V6 = ~HOSTS_V6


def encode_batch(
    messages: Sequence[BatchMessage],
    topic_fields: Sequence[bytes],
    properties_fields: Sequence[bytes],
    queue_offsets: Sequence[int],
    sizes: Sequence[int],
    store_timestamps: Sequence[int],
    *,
    physical_offset: int,
    store_host: Host,
    append_crc: bool,
) -> bytes:
    """A batch of records back to back, from ``physical_offset`` on: byte for byte what a loop
    of single appends writes there. ``topic_fields`` are :func:`topic_field`;
    ``properties_fields`` each record's PROPERTIES field but the ``__CRC32#`` property: its
    length (counting that property's 20 bytes when ``append_crc``), then the properties (with
    the separator that property needs before it); ``sizes`` each record's TOTALSIZE (a
    mismatch is a bug and asserts). Checks no limit: the caller's limits, as
    :func:`pack_record`.

    Each record is one ``join`` of its header, body and those fields, its CRCs computed on
    bytes objects, and the batch one ``join`` of them: two copies of each body, which cost
    less than the slice arithmetic and views of writing each part into the target."""
    parts: list[bytes] = []
    append = parts.append
    store_address = store_host.address
    store_port = store_host.port
    store_v6 = len(store_address) == ADDRESS_V6
    at = physical_offset
    for message, topic, props, queue_offset, total, store_timestamp in zip(
        messages,
        topic_fields,
        properties_fields,
        queue_offsets,
        sizes,
        store_timestamps,
        strict=True,
    ):
        body = message.body
        born_host = message.born_host
        born_address = born_host.address
        sysflag = message.sysflag & _NOT_V6
        if len(born_address) == ADDRESS_V4 and not store_v6:
            prefix = PREFIX_V4
        else:
            if len(born_address) == ADDRESS_V6:
                sysflag |= SysFlag.BORNHOST_V6
            if store_v6:
                sysflag |= SysFlag.STOREHOST_V6
            prefix = PREFIX[(len(born_address), len(store_address))]
        record = b"".join(
            (
                prefix.pack(
                    total,
                    MAGIC_V1 if len(topic) <= TOPIC_LENGTH_MAX_V1 + 1 else MAGIC_V2,
                    crc32(body) & _CRC_MASK,
                    message.queue_id,
                    message.flag,
                    queue_offset,
                    at,
                    sysflag,
                    message.born_timestamp,
                    born_address,
                    born_host.port,
                    store_timestamp,
                    store_address,
                    store_port,
                    message.reconsume_times,
                    message.prepared_transaction_offset,
                    len(body),
                ),
                body,
                topic,
                props,
            )
        )
        append(record)
        if append_crc:
            append((CRC_PROPERTY_BACKWARDS % (crc32(record) & _CRC_MASK))[::-1])
        at += total
    data = b"".join(parts)
    assert len(data) == at - physical_offset, (len(data), at - physical_offset)
    return data


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
    encoded = pack_record(
        topic_bytes,
        record.body,
        properties_bytes,
        queue_id=record.queue_id,
        flag=record.flag,
        queue_offset=record.queue_offset,
        physical_offset=record.physical_offset,
        sysflag=record.sysflag,
        born_timestamp=record.born_timestamp,
        born_address=record.born_host.address,
        born_port=record.born_host.port,
        store_timestamp=record.store_timestamp,
        store_address=record.store_host.address,
        store_port=record.store_host.port,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
    )
    if append_crc:
        total = len(encoded)
        crc = crc32(memoryview(encoded)[: total - CRC_PROPERTY_LENGTH]) & 0x7FFFFFFF
        encoded = encoded[: total - CRC_PROPERTY_LENGTH] + encode_crc_property(crc)
    return encoded


def with_reconsume_times(record: bytes, reconsume_times: int) -> bytes:
    """A copy of an encoded record with RECONSUMETIMES set. A whole-record ``__CRC32#`` in it no
    longer matches: the copy is for a reader (a pulled body), not for the store."""
    sysflag = _I32.unpack_from(record, SYSFLAG_AT)[0]
    at = RECONSUME_TIMES_AT_V4
    if sysflag & SysFlag.BORNHOST_V6:
        at += V6_SHIFT
    if sysflag & SysFlag.STOREHOST_V6:
        at += V6_SHIFT
    return record[:at] + _I32.pack(reconsume_times) + record[at + 4 :]


def check_limits(
    topic: str,
    topic_bytes: bytes,
    body: bytes | memoryview,
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


def encode_blank(remaining: int) -> bytes:
    """The END-OF-FILE filler: only 8 bytes are written, TOTALSIZE says how many are left."""
    assert remaining >= END_FILE_MIN_BLANK_LENGTH
    return _SIZE_MAGIC_CRC.pack(remaining, BLANK_MAGIC, 0)[:8]


# -- validating and decoding ---------------------------------------------------------------------


class _Fault(Exception):
    """What is wrong with a record (``reason``) and where (``at``: the faulty field)."""

    def __init__(self, reason: str, at: int) -> None:
        self.reason = reason
        self.at = at


def _parts(
    view: memoryview | bytes, position: int
) -> tuple[int, int, int, int, int, int, int] | None:
    """Check the structure of the record at ``position`` (magic, then every length, so that the
    fields add up to TOTALSIZE within ``view``): (total size, magic, sysflag, body position,
    TOPIC position, PROPERTIES position, properties length). None for an END-OF-FILE filler;
    raises :class:`_Fault` for anything else that is not a whole record."""
    remaining = len(view) - position
    if remaining < END_FILE_MIN_BLANK_LENGTH:
        raise _Fault(f"only {remaining} bytes left, no record header", position)
    total, magic = _SIZE_MAGIC.unpack_from(view, position)  # 8 bytes: a filler may end here
    if magic == BLANK_MAGIC:
        return None
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        if total == 0 and magic == 0:
            raise _Fault("zero bytes (end of written data)", position)
        raise _Fault(f"bad magic code 0x{magic:08X}", position + MAGIC_AT)
    if total < MIN_RECORD_SIZE or total > remaining:
        raise _Fault(f"record size {total} does not fit the {remaining} bytes left", position)
    sysflag = _I32.unpack_from(view, position + SYSFLAG_AT)[0]
    body_at = position + BODY_AT_V4
    if sysflag & SysFlag.BORNHOST_V6:
        body_at += V6_SHIFT
    if sysflag & SysFlag.STOREHOST_V6:
        body_at += V6_SHIFT
    end = position + total
    if body_at + 3 > end:  # IPv6 hosts in a record too small for them
        raise _Fault(f"record size {total} is smaller than its fixed fields", position)
    body_len = _I32.unpack_from(view, body_at - 4)[0]
    topic_at = body_at + body_len
    if body_len < 0 or topic_at + 3 > end:
        raise _Fault(f"body length {body_len} overruns the record", body_at - 4)
    if magic == MAGIC_V1:
        topic_len = view[topic_at]
        if topic_len > 127:
            topic_len -= 256
        props_at = topic_at + 1 + topic_len
    else:
        topic_len = _I16.unpack_from(view, topic_at)[0]
        props_at = topic_at + 2 + topic_len
    if topic_len < 0 or props_at + 2 > end:
        raise _Fault(f"topic length {topic_len} overruns the record", topic_at)
    props_len = _I16.unpack_from(view, props_at)[0]
    if props_at + 2 + props_len != end:
        raise _Fault(
            f"length mismatch: TOTALSIZE {total}, fields add up to {props_at + 2 + props_len - position}",
            props_at,
        )
    return total, magic, sysflag, body_at, topic_at, props_at, props_len


def _check_crc(
    view: memoryview | bytes,
    position: int,
    parts: tuple[int, int, int, int, int, int, int],
    require_record_crc: bool,
) -> None:
    total, _, _, body_at, topic_at, _, props_len = parts
    end = position + total
    if require_record_crc:
        # The whole-record CRC covers header, body, topic and properties. It is trusted only
        # where the store says it wrote one: elsewhere a client could have sent the property.
        stored = record_crc_at(view, end) if props_len >= CRC_PROPERTY_LENGTH else None
        if stored is None:
            raise CorruptRecordError("record CRC (__CRC32#) missing or mangled", offset=position)
        if crc32(view[position : end - CRC_PROPERTY_LENGTH]) & 0x7FFFFFFF != stored:
            raise CorruptRecordError("record CRC (__CRC32#) mismatch", offset=position)
    elif (
        crc32(view[body_at:topic_at]) & 0x7FFFFFFF
        != _U32.unpack_from(view, position + BODY_CRC_AT)[0]
    ):
        raise CorruptRecordError("body CRC mismatch", offset=position)


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
    try:
        parts = _parts(view, position)
    except _Fault as fault:
        raise CorruptRecordError(fault.reason, offset=position) from None
    if parts is None:
        return 0
    if check_crc:
        _check_crc(view, position, parts, require_record_crc)
    return parts[0]


# Total size, magic, body CRC, sys flag and body length of a V1 record with IPv4 hosts.
_CHECK_HEAD_V4 = picking_struct("total_size", "magic", "body_crc", "sysflag", "body_length")
_CRC_DIGITS = slice(len(CRC_PROPERTY_PREFIX), CRC_PROPERTY_LENGTH - 1)


def record_intact(view: memoryview | bytes, require_record_crc: bool) -> bool:
    """Whether ``view`` holds exactly one whole record whose CRC matches: the answer of
    ``check_record(view, 0, require_record_crc=...) == len(view)``, without the reason.

    Every record a read serves is checked: the common record (V1 magic, IPv4 hosts) with one
    unpack, anything else by ``check_record``.
    """
    n = len(view)
    if n >= _CHECK_HEAD_V4.size + 3:
        total, magic, crc, sysflag, body_len = _CHECK_HEAD_V4.unpack_from(view, 0)
        topic_at = BODY_AT_V4 + body_len
        if (
            magic == MAGIC_V1
            and not sysflag & HOSTS_V6
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
                return crc32(view[BODY_AT_V4:topic_at]) & 0x7FFFFFFF == crc
            tail = bytes(view[n - CRC_PROPERTY_LENGTH :]) if n - props_at >= 22 else b""
            digits = tail[_CRC_DIGITS]
            return (
                tail[: len(CRC_PROPERTY_PREFIX)] == CRC_PROPERTY_PREFIX
                and tail[CRC_PROPERTY_LENGTH - 1 :] == b"\x02"
                and digits.isdigit()
                and crc32(view[: n - CRC_PROPERTY_LENGTH]) & 0x7FFFFFFF == int(digits[::-1])
            )
    try:
        return check_record(view, 0, require_record_crc=require_record_crc) == n
    except CorruptRecordError:
        return False


class RecordFields(NamedTuple):
    """Every field of one record as stored: numbers, packed addresses, and the body, topic and
    properties as bytes (their text is the reader's choice)."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sysflag: int
    born_timestamp: int
    born_address: bytes
    born_port: int
    store_timestamp: int
    store_address: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: bytes
    properties: bytes


def _fields(
    view: memoryview | bytes, position: int, parts: tuple[int, int, int, int, int, int, int]
) -> RecordFields:
    _, magic, sysflag, body_at, topic_at, props_at, props_len = parts
    prefix = PREFIX[
        (
            ADDRESS_V6 if sysflag & SysFlag.BORNHOST_V6 else ADDRESS_V4,
            ADDRESS_V6 if sysflag & SysFlag.STOREHOST_V6 else ADDRESS_V4,
        )
    ]
    values = prefix.unpack_from(view, position)[:-1]  # the body length is len(body)
    topic_start = topic_at + (1 if magic == MAGIC_V1 else 2)
    return RecordFields._make(
        (
            *values,
            bytes(view[body_at:topic_at]),
            bytes(view[topic_start:props_at]),
            bytes(view[props_at + 2 : props_at + 2 + props_len]),
        )
    )


def unpack_record(view: memoryview | bytes, position: int = 0) -> RecordFields:
    """Every field of the record at ``position``, its structure checked as :func:`check_record`
    checks it (not its CRC). Raises :class:`CorruptRecordError` whose ``offset`` is where the
    fault is (the field that is wrong, or the record's start), relative to ``view``."""
    try:
        parts = _parts(view, position)
    except _Fault as fault:
        raise CorruptRecordError(fault.reason, offset=fault.at) from None
    if parts is None:
        raise CorruptRecordError("END-OF-FILE filler, not a message", offset=position + MAGIC_AT)
    return _fields(view, position, parts)


def decode_record(
    view: memoryview | bytes,
    position: int = 0,
    *,
    check_crc: bool = True,
    require_record_crc: bool = False,
    text_errors: str = "strict",
) -> MessageRecord:
    """Decode the whole record at ``position``; checks structure (and CRC unless told not to).
    Topic and properties that are not UTF-8 raise, unless ``text_errors`` names another
    handler (``"replace"``: tools that show a damaged record rather than stop at it)."""
    try:
        parts = _parts(view, position)
    except _Fault as fault:
        raise CorruptRecordError(fault.reason, offset=position) from None
    if parts is None:
        raise CorruptRecordError("END-OF-FILE filler, not a message", offset=position)
    if check_crc:
        _check_crc(view, position, parts, require_record_crc)
    fields = _fields(view, position, parts)
    try:
        topic = fields.topic.decode("utf-8", text_errors)
        properties = decode_properties(fields.properties.decode("utf-8", text_errors))
    except UnicodeDecodeError as error:
        raise CorruptRecordError(
            f"topic or properties are not UTF-8: {error}", offset=position
        ) from None
    # The store's whole-record CRC guards these bytes; it is not part of the message, and a copy
    # of the message gets its own.
    properties.pop(CRC_PROPERTY_NAME, None)
    return MessageRecord(
        topic=topic,
        body=fields.body,
        queue_id=fields.queue_id,
        flag=fields.flag,
        properties=properties,
        sysflag=fields.sysflag,
        born_timestamp=fields.born_timestamp,
        born_host=Host(fields.born_address, fields.born_port),
        store_timestamp=fields.store_timestamp,
        store_host=Host(fields.store_address, fields.store_port),
        reconsume_times=fields.reconsume_times,
        prepared_transaction_offset=fields.prepared_transaction_offset,
        queue_offset=fields.queue_offset,
        physical_offset=fields.physical_offset,
        total_size=fields.total_size,
        body_crc=fields.body_crc,
        magic=fields.magic,
    )
