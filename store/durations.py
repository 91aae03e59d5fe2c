"""Durations as text, read the same way by the broker, the store, the SDK and the command line.

* pocketmq's durations (``pocketmq time advance 2h``, ``Broker.advance``, the SDK's
  ``Admin.advance_clock``): ``"2h"``, ``"90s"``, ``"1h30m"``, ``"250ms"``, ``"1d"`` or plain
  milliseconds;
* RocketMQ's ``messageDelayLevel``: ``"1s 5s 10s ... 2h"``, one number and one unit (s, m, h or
  d) per level;
* a message's ``DELAY`` property: one of those levels.

Pure: no imports of the project, so every layer may use it (``tests/test_layering.py``).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "DEFAULT_DELAY_LEVELS",
    "UNITS_MS",
    "delay_level",
    "parse_delay_levels",
    "parse_duration_ms",
]

UNITS_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# RocketMQ's messageDelayLevel; also the retry back-off of its 5.x consumers
# (CustomizedRetryPolicy), whatever a broker's levels are.
DEFAULT_DELAY_LEVELS: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_PART = re.compile(r"(\d+)(ms|s|m|h|d)")


def parse_duration_ms(text: str) -> int:
    """``"2h"``, ``"90s"``, ``"1h30m"``, ``"250ms"``, ``"1d"`` or plain milliseconds ->
    milliseconds; raises ``ValueError`` for anything else. Empty text is no time at all (0):
    a POCKETMQ_CLOCK advance without a duration runs what is due now."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    total = position = 0
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        total += int(match.group(1)) * UNITS_MS[match.group(2)]
        position = match.end()
    if position != len(text):
        raise ValueError(f"{text!r} is not a duration like 2h, 90s, 1h30m, 250ms or milliseconds")
    return total


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 1m 2h"`` -> milliseconds per level (units s, m, h, d as in RocketMQ)."""
    levels = []
    for token in text.split():
        match = _PART.fullmatch(token)  # one part of a duration, not in milliseconds
        if match is None or match.group(2) == "ms":
            raise ValueError(f"delay level {token!r} is not a number followed by s, m, h or d")
        levels.append(int(match.group(1)) * UNITS_MS[match.group(2)])
    if not levels:
        raise ValueError("at least one delay level is needed")
    return levels


def delay_level(text: str | None, max_level: int) -> int:
    """The delay level a ``DELAY`` property asks for: 0 for none (no property, empty, 0 or
    negative), a level above ``max_level`` clamped to it; ``ValueError`` if it is not an
    integer."""
    if not text:
        return 0
    level = int(text)
    return min(level, max_level) if level > 0 else 0
