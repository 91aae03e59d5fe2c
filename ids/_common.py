"""Helpers shared by the ID codecs: strict hex parsing and IP packing."""

from __future__ import annotations

import ipaddress
import time

from pocketmq.ids.errors import InvalidMessageIdError

__all__ = ["IpLike", "format_ip", "pack_ip", "parse_hex", "wall_clock_ms"]

IpLike = str | bytes | ipaddress.IPv4Address | ipaddress.IPv6Address

_HEX = frozenset("0123456789abcdefABCDEF")


def parse_hex(text: str, lengths: tuple[int, ...], what: str) -> bytes:
    """Decode an ID's hex text, checking the length first so errors name the real problem."""
    if not isinstance(text, str):
        raise InvalidMessageIdError(f"not a string: {type(text).__name__}")
    n = len(text)
    if n not in lengths:
        expected = " or ".join(str(x) for x in lengths)
        raise InvalidMessageIdError(f"bad length {n}: a {what} has {expected} hex chars")
    # bytes.fromhex() would silently accept embedded spaces, so check every char.
    bad = next((c for c in text if c not in _HEX), None)
    if bad is not None:
        raise InvalidMessageIdError(f"not hex: bad character {bad!r} in {what}")
    return bytes.fromhex(text)


def pack_ip(ip: IpLike) -> bytes:
    """Return the 4- or 16-byte network form of an IP given as text, bytes or ipaddress object."""
    if isinstance(ip, bytes):
        if len(ip) not in (4, 16):
            raise ValueError(f"packed IP must be 4 or 16 bytes, got {len(ip)}")
        return ip
    if isinstance(ip, str):
        return ipaddress.ip_address(ip).packed
    return ip.packed


def format_ip(packed: bytes) -> str:
    """Text form of a 4- or 16-byte address (IPv6 in compressed form)."""
    return str(ipaddress.ip_address(packed))


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (the generators' default time source)."""
    return time.time_ns() // 1_000_000
