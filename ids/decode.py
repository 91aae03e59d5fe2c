"""Decode any RocketMQ message ID into a JSON-ready dict, guessing its scheme.

* 34 hex chars starting with "01": 5.x ID (scheme "v5").
* 32 (IPv4) or 56 (IPv6) hex chars: either a 4.x unique key ("uniq_v4") or an offset ID
  ("offset") -- the lengths are the same, so we guess. Heuristic: it is an offset ID iff the
  4 bytes after the IP read as a port 1..65535 (top two bytes zero) AND the 8-byte offset has a
  zero top byte (offsets below 2**56, i.e. 64 PiB). In a unique key those bytes are the pid's
  low 16 bits and the discriminator, so a unique key passes only if its pid bits are 0 and a
  discriminator byte is 0 (about 1 in 16.7 million). The other reading is always returned
  under "alternative", and "reason" says why the primary one was chosen.
"""

from __future__ import annotations

from datetime import tzinfo
from typing import Any

from pocketmq.ids._common import parse_hex
from pocketmq.ids.errors import InvalidMessageIdError
from pocketmq.ids.offset_id import OffsetMsgId, decode_offset_msg_id
from pocketmq.ids.uniq_id import UniqId, decode_uniq_id
from pocketmq.ids.v5_id import V5_ID_LENGTH, V5MessageId, decode_v5_id

__all__ = ["decode_message_id", "looks_like_offset_msg_id"]

_AMBIGUOUS_LENGTHS = (32, 56)


def _offset_verdict(raw: bytes) -> tuple[bool, str]:
    ip_len = 4 if len(raw) == 16 else 16
    port_field = int.from_bytes(raw[ip_len : ip_len + 4], "big")
    offset_top = raw[ip_len + 4]
    if not 1 <= port_field <= 0xFFFF:
        return False, f"port field 0x{port_field:08X} is not a port 1..65535, so not an offset ID"
    if offset_top != 0:
        return False, f"offset field's top byte 0x{offset_top:02X} is not zero, so not an offset ID"
    return True, f"port field {port_field} and offset below 2**56 fit an offset ID"


def looks_like_offset_msg_id(text: str) -> bool:
    """The module's heuristic for a 32/56-char ID: True for offset ID, False for 4.x unique key."""
    raw = parse_hex(text.strip(), _AMBIGUOUS_LENGTHS, "4.x unique key or offset message ID")
    return _offset_verdict(raw)[0]


def _offset_dict(text: str, d: OffsetMsgId) -> dict[str, Any]:
    return {
        "scheme": "offset",
        "id": text,
        "host": d.host,
        "port": d.port,
        "broker_addr": d.broker_addr,
        "ip_version": d.ip_version,
        "physical_offset": d.physical_offset,
    }


def _uniq_dict(text: str, d: UniqId) -> dict[str, Any]:
    return {
        "scheme": "uniq_v4",
        "id": text,
        "ip": d.ip,
        "ip_version": d.ip_version,
        "pid": d.pid,
        "discriminator": d.discriminator,
        "discriminator_hex": f"{d.discriminator:08X}",
        "month_ms": d.month_ms,
        "counter": d.counter,
        "nearly_time": d.nearly_time.isoformat(timespec="milliseconds"),
        "nearly_time_ms": d.nearly_time_ms,
    }


def _v5_dict(text: str, d: V5MessageId) -> dict[str, Any]:
    return {
        "scheme": "v5",
        "id": text,
        "version": d.version,
        "mac": d.mac,
        "pid": d.pid,
        "seconds": d.seconds,
        "time": d.time.isoformat(),
        "time_ms": int(d.time.timestamp()) * 1000,
        "sequence": d.sequence,
    }


def decode_message_id(
    text: str, *, now_ms: int | None = None, tz: tzinfo | None = None
) -> dict[str, Any]:
    """Decode a message ID of any scheme (hex is case-insensitive, surrounding blanks ignored).

    now_ms / tz only matter for a 4.x unique key's approximate time (defaults: wall clock,
    system local zone). Raises InvalidMessageIdError if the text fits no scheme.
    """
    if not isinstance(text, str):
        raise InvalidMessageIdError(f"not a string: {type(text).__name__}")
    norm = text.strip().upper()
    n = len(norm)
    if n == V5_ID_LENGTH:
        return _v5_dict(norm, decode_v5_id(norm))
    if n not in _AMBIGUOUS_LENGTHS:
        raise InvalidMessageIdError(
            f"bad length {n}: message IDs have 32 or 56 hex chars (4.x unique key / offset ID)"
            " or 34 (5.x)"
        )
    raw = parse_hex(norm, _AMBIGUOUS_LENGTHS, "4.x unique key or offset message ID")
    is_offset, reason = _offset_verdict(raw)
    offset = _offset_dict(norm, decode_offset_msg_id(norm))
    uniq = _uniq_dict(norm, decode_uniq_id(norm, now_ms=now_ms, tz=tz))
    primary, other = (offset, uniq) if is_offset else (uniq, offset)
    return {**primary, "reason": reason, "alternative": other}
