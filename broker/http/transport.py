"""A stored message in the two transports of Iggy's message-state post: JSON and binary.

Pure: a record and its state in, a dict or bytes out (and back, for clients and tests).

Binary layout of one message, every integer little-endian (as Iggy's binary protocol):

    offset     u64   the queue offset
    state      u8    1 available, 10 unavailable, 20 poisoned, 30 marked for deletion
    timestamp  u64   store time in microseconds
    id         u128  the message's 16-byte unique key
    checksum   u32   CRC-32 of the payload
    headers    u32 block length (0: none), then per header:
                     u32 key length, key, u8 kind (2: string), u32 value length, value
    length     u32   payload length
    payload    length bytes
"""

from __future__ import annotations

import base64
import struct
import zlib
from dataclasses import dataclass

from pocketmq.store.record import MessageRecord
from pocketmq.store.state import MessageState

__all__ = [
    "HEADER_KIND_STRING",
    "TransportMessage",
    "decode_binary",
    "encode_binary",
    "from_json",
    "message_id",
    "to_json",
    "transport_message",
]

# Iggy's HeaderKind codes: RocketMQ properties are all strings.
HEADER_KIND_STRING = 2
_KIND_NAMES = {HEADER_KIND_STRING: "string"}

_FIXED = struct.Struct("<QBQ16sI")  # offset, state, timestamp, id (as 16 raw LE bytes), checksum
_U32 = struct.Struct("<I")
_U128_MAX = (1 << 128) - 1


@dataclass(frozen=True, slots=True)
class TransportMessage:
    offset: int
    state: MessageState
    timestamp_us: int
    id: int
    checksum: int
    headers: dict[str, str] | None
    payload: bytes


def message_id(record: MessageRecord, offset_msg_id: str) -> int:
    """The unique key as an unsigned 128-bit number: UNIQ_KEY (32 hex digits; a 5.x ID, "01"
    and 32 hex digits, without its version byte), else the 16-byte offset message ID."""
    for text in (record.unique_key or "", offset_msg_id):
        if len(text) == 34 and text.startswith("01"):
            text = text[2:]
        if len(text) == 32:
            try:
                return int(text, 16)
            except ValueError:
                continue
    return 0


def transport_message(
    record: MessageRecord, state: MessageState, offset_msg_id: str
) -> TransportMessage:
    return TransportMessage(
        offset=record.queue_offset,
        state=state,
        timestamp_us=record.store_timestamp * 1000,
        id=message_id(record, offset_msg_id),
        checksum=zlib.crc32(record.body),
        headers=dict(record.properties) if record.properties else None,
        payload=bytes(record.body),
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def to_json(message: TransportMessage) -> dict[str, object]:
    headers = (
        None
        if message.headers is None
        else {
            name: {"kind": "string", "value": _b64(value.encode("utf-8"))}
            for name, value in message.headers.items()
        }
    )
    return {
        "offset": message.offset,
        "state": message.state.label,
        "timestamp": message.timestamp_us,
        "id": message.id,
        "checksum": message.checksum,
        "headers": headers,
        "payload": _b64(message.payload),
    }


def from_json(value: dict[str, object]) -> TransportMessage:
    """The JSON transport back; ValueError (or KeyError, TypeError) on one that is not."""
    raw_headers = value["headers"]
    headers: dict[str, str] | None = None
    if raw_headers is not None:
        assert isinstance(raw_headers, dict)
        headers = {}
        for name, header in raw_headers.items():
            if header["kind"] != "string":
                raise ValueError(f"header {name!r}: kind {header['kind']!r} is not string")
            headers[name] = base64.b64decode(header["value"], validate=True).decode("utf-8")
    payload = base64.b64decode(str(value["payload"]), validate=True)
    return TransportMessage(
        offset=int(value["offset"]),  # type: ignore[call-overload]
        state=MessageState[str(value["state"]).upper()],
        timestamp_us=int(value["timestamp"]),  # type: ignore[call-overload]
        id=int(value["id"]),  # type: ignore[call-overload]
        checksum=int(value["checksum"]),  # type: ignore[call-overload]
        headers=headers,
        payload=payload,
    )


def _encode_headers(headers: dict[str, str] | None) -> bytes:
    if not headers:
        return _U32.pack(0)
    parts = []
    for name, value in headers.items():
        key, data = name.encode("utf-8"), value.encode("utf-8")
        parts += [_U32.pack(len(key)), key, bytes([HEADER_KIND_STRING]), _U32.pack(len(data)), data]
    block = b"".join(parts)
    return _U32.pack(len(block)) + block


def encode_binary(message: TransportMessage) -> bytes:
    assert 0 <= message.id <= _U128_MAX
    fixed = _FIXED.pack(
        message.offset,
        int(message.state),
        message.timestamp_us,
        message.id.to_bytes(16, "little"),
        message.checksum,
    )
    return b"".join(
        (fixed, _encode_headers(message.headers), _U32.pack(len(message.payload)), message.payload)
    )


class _Reader:
    def __init__(self, data: bytes, position: int) -> None:
        self.data = data
        self.position = position

    def take(self, size: int, what: str) -> bytes:
        end = self.position + size
        if end > len(self.data):
            raise ValueError(
                f"{what} at byte {self.position} needs {size} bytes, {len(self.data) - self.position} left"
            )
        chunk = self.data[self.position : end]
        self.position = end
        return chunk

    def u32(self, what: str) -> int:
        return int(_U32.unpack(self.take(4, what))[0])


def _decode_headers(block: bytes) -> dict[str, str]:
    reader = _Reader(block, 0)
    headers = {}
    while reader.position < len(block):
        key = reader.take(reader.u32("header key length"), "header key").decode("utf-8")
        kind = reader.take(1, "header kind")[0]
        if kind not in _KIND_NAMES:
            raise ValueError(f"header {key!r}: kind {kind} is not string ({HEADER_KIND_STRING})")
        headers[key] = reader.take(reader.u32("header value length"), "header value").decode(
            "utf-8"
        )
    return headers


def decode_binary(data: bytes) -> list[TransportMessage]:
    """Messages one after the other, as ``encode_binary`` writes them; ValueError on a body
    that is cut or malformed (saying where)."""
    reader = _Reader(data, 0)
    messages = []
    while reader.position < len(data):
        offset, state, timestamp, raw_id, checksum = _FIXED.unpack(
            reader.take(_FIXED.size, "message head")
        )
        block = reader.take(reader.u32("headers length"), "headers")
        payload = reader.take(reader.u32("payload length"), "payload")
        messages.append(
            TransportMessage(
                offset=offset,
                state=MessageState(state),
                timestamp_us=timestamp,
                id=int.from_bytes(raw_id, "little"),
                checksum=checksum,
                headers=_decode_headers(block) if block else None,
                payload=payload,
            )
        )
    return messages
