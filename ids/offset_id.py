"""Offset message ID ("offsetMsgId"), made by the broker when it stores a message.

Layout, big-endian, shown as uppercase hex:

    store host IP (4 bytes IPv4 / 16 bytes IPv6) | port (4-byte int) | commitlog offset (8-byte long)

so 32 hex chars for IPv4 and 56 for IPv6. The ID is a physical address: looking it up is a
direct read at that commitlog offset on that broker. A retried/re-put copy gets a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

from pocketmq.ids._common import IpLike, format_ip, pack_ip, parse_hex

__all__ = [
    "OFFSET_ID_LENGTHS",
    "OffsetMsgId",
    "decode_offset_msg_id",
    "encode_offset_msg_id",
    "offset_msg_id_from_packed",
]

OFFSET_ID_LENGTHS = (32, 56)
_MAX_OFFSET = (1 << 63) - 1  # Java long


@dataclass(frozen=True, slots=True)
class OffsetMsgId:
    """A decoded offset message ID. port/offset are read as Java does (signed int / long)."""

    host: str
    port: int
    physical_offset: int
    ip_version: int

    @property
    def broker_addr(self) -> str:
        """Broker address as host:port, with an IPv6 host in brackets."""
        host = f"[{self.host}]" if self.ip_version == 6 else self.host
        return f"{host}:{self.port}"


def offset_msg_id_from_packed(addr: bytes, port: int, offset: int) -> str:
    """Hot-path encoder for the broker: addr is the already packed 4/16-byte store host IP."""
    if len(addr) != 4 and len(addr) != 16:
        raise ValueError(f"packed IP must be 4 or 16 bytes, got {len(addr)}")
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"port out of range: {port}")
    if not 0 <= offset <= _MAX_OFFSET:
        raise ValueError(f"physical offset out of range: {offset}")
    # Ranges are checked above, so fixed-width hex formatting cannot overflow or go negative.
    return f"{addr.hex().upper()}{port:08X}{offset:016X}"


def encode_offset_msg_id(host: IpLike, port: int, physical_offset: int) -> str:
    """Offset message ID for a message stored at physical_offset on broker host:port."""
    return offset_msg_id_from_packed(pack_ip(host), port, physical_offset)


def decode_offset_msg_id(text: str) -> OffsetMsgId:
    """Decode a 32/56-char offset ID (case-insensitive); the IP width follows the length."""
    raw = parse_hex(text, OFFSET_ID_LENGTHS, "offset message ID")
    ip_len = 4 if len(raw) == 16 else 16
    port = int.from_bytes(raw[ip_len : ip_len + 4], "big", signed=True)
    offset = int.from_bytes(raw[ip_len + 4 :], "big", signed=True)
    return OffsetMsgId(
        host=format_ip(raw[:ip_len]),
        port=port,
        physical_offset=offset,
        ip_version=4 if ip_len == 4 else 6,
    )
