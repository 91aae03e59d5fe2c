"""Java's ``String.hashCode``, which RocketMQ uses for consume-queue tag codes and index keys.

``hashCode`` is s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, modulo 2^32, read as a
signed int. For ASCII text (every topic and almost every key) the sum is taken in C with
``map(operator.mul, ...)`` over precomputed powers of 31, about twice as fast as a Python loop.
"""

from __future__ import annotations

import operator

__all__ = ["java_string_hash", "java_string_hash_unsigned", "tags_code"]

_MASK32 = 0xFFFFFFFF
_POWERS_MAX = 512
# _POWERS[-n:] are 31^(n-1) .. 31^0 modulo 2^32.
_POWERS = [pow(31, i, 1 << 32) for i in range(_POWERS_MAX)][::-1]


def java_string_hash_unsigned(text: str) -> int:
    """``String.hashCode()`` as an unsigned 32-bit value."""
    if text.isascii():
        data = text.encode("ascii")
        n = len(data)
        if n <= _POWERS_MAX:
            return sum(map(operator.mul, data, _POWERS[_POWERS_MAX - n :])) & _MASK32
        units: bytes | list[int] = data
    else:
        raw = text.encode("utf-16-be")
        units = [(raw[i] << 8) | raw[i + 1] for i in range(0, len(raw), 2)]
    h = 0
    for unit in units:
        h = (31 * h + unit) & _MASK32
    return h


def java_string_hash(text: str) -> int:
    """``String.hashCode()`` as a signed 32-bit int."""
    h = java_string_hash_unsigned(text)
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """The consume-queue tags code of a message: the tag's hash, or 0 when it has none."""
    if not tags:
        return 0
    return java_string_hash(tags)
