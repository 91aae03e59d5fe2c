"""Durations given by callers: ``"2h"``, ``"90s"``, ``"1h30m"``, ``"250ms"``, milliseconds as an
int, seconds as a float, or a ``timedelta``. The text form is the broker's
(``pocketmq time advance 2h``), read by ``store.durations.parse_duration_ms``."""

from __future__ import annotations

from datetime import timedelta

from pocketmq.store.durations import parse_duration_ms

from .errors import ClientUsageError

__all__ = ["Duration", "duration_ms", "seconds_to_ms"]

Duration = str | int | timedelta


def duration_ms(value: Duration) -> int:
    """``value`` in milliseconds: text with units, an int of milliseconds, or a timedelta.

    Raises ``ClientUsageError`` for anything else or a negative duration.
    """
    if isinstance(value, bool):
        raise ClientUsageError(f"not a duration: {value!r}")
    if isinstance(value, timedelta):
        ms = round(value.total_seconds() * 1000)
    elif isinstance(value, int):
        ms = value
    elif isinstance(value, str):
        try:
            # Empty text is refused here: the broker would read it as 0.
            ms = parse_duration_ms(value) if value.strip() else -1
        except ValueError:
            ms = -1
        if ms < 0:
            raise ClientUsageError(
                f"{value!r} is not a duration like 2h, 90s, 1h30m, 250ms or milliseconds"
            )
    else:
        raise ClientUsageError(f"not a duration: {value!r} (use '90s', milliseconds or timedelta)")
    if ms < 0:
        raise ClientUsageError(f"a duration cannot be negative: {value!r}")
    return ms


def seconds_to_ms(value: float | timedelta, what: str) -> int:
    """Seconds (int, float or timedelta) -> whole milliseconds, which must be positive."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ClientUsageError(f"{what} must be seconds (a number) or a timedelta: {value!r}")
    ms = round(seconds * 1000)
    if ms < 1:
        raise ClientUsageError(f"{what} must be at least 1 ms: {value!r}")
    return ms
