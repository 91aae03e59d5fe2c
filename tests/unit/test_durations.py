"""store/durations.py: the one reader of durations, delay levels and DELAY properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.store.durations import (
    DEFAULT_DELAY_LEVELS,
    delay_level,
    parse_delay_levels,
    parse_duration_ms,
)

UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def reference_duration_ms(text: str) -> int:
    """The broker clock's reader as it was (broker/services/clock.py before issue 14)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    total, number, i = 0, "", 0
    while i < len(text):
        char = text[i]
        if char.isdigit():
            number += char
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else char
        if unit not in UNITS or not number:
            raise ValueError(text)
        total += int(number) * UNITS[unit]
        number = ""
        i += len(unit)
    if number:
        raise ValueError(text)
    return total


def outcome(text: str) -> int | str:
    try:
        return reference_duration_ms(text)
    except ValueError:
        return "error"


@given(st.text(alphabet="0123456789msdh x", max_size=12))
def test_durations_read_as_the_broker_read_them(text: str) -> None:
    try:
        got: int | str = parse_duration_ms(text)
    except ValueError:
        got = "error"
    assert got == outcome(text)


@pytest.mark.parametrize(
    ("text", "ms"),
    [("2h", 7_200_000), ("90s", 90_000), ("1h30m", 5_400_000), ("250ms", 250), ("1d", 86_400_000)],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms
    assert parse_duration_ms("1500") == 1500 and parse_duration_ms(" ") == 0


@pytest.mark.parametrize("text", ["soon", "5x", "h2", "1h 30m", "-1", "1.5s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration_ms(text)


def test_delay_levels_are_rocketmqs() -> None:
    assert parse_delay_levels(DEFAULT_DELAY_LEVELS) == [
        s * 1000
        for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800)
    ] + [3_600_000, 7_200_000]
    assert parse_delay_levels(" 2d  1s ") == [2 * 86_400_000, 1000]
    for bad in ("", "1500", "250ms", "1h30m", "5x", "s"):
        with pytest.raises(ValueError):
            parse_delay_levels(bad)


def test_a_delay_property_names_a_level() -> None:
    assert [delay_level(t, 18) for t in (None, "", "0", "-3", "1", "18", "99")] == [
        0,
        0,
        0,
        0,
        1,
        18,
        18,
    ]
    with pytest.raises(ValueError):
        delay_level("soon", 18)
