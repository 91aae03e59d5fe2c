"""Property tests (hypothesis) for the ids codecs: round trips, nearly time, decode fuzzing."""

from __future__ import annotations

import ipaddress
import json
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.ids import (
    V5_EPOCH,
    InvalidMessageIdError,
    decode_message_id,
    decode_offset_msg_id,
    decode_uniq_id,
    decode_v5_id,
    encode_offset_msg_id,
    encode_uniq_id,
    encode_v5_id,
    month_relative_ms,
    month_start_ms,
    nearly_time_ms,
    offset_msg_id_from_packed,
)

fast = settings(database=None, deadline=None, max_examples=150)

ips = st.ip_addresses()
ports = st.integers(0, 0xFFFF)
offsets = st.integers(0, (1 << 63) - 1)
u32 = st.integers(0, 0xFFFFFFFF)
u16 = st.integers(0, 0xFFFF)
# Fixed offsets from -12:00 to +14:00 in 15-minute steps, plus UTC.
zones = st.integers(-48, 56).map(lambda q: timezone(timedelta(minutes=15 * q)))
# 2001..2099 in epoch ms.
instants = st.integers(978_307_200_000, 4_102_444_799_999)


def ip_len(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> int:
    return 32 if ip.version == 4 else 56


@fast
@given(ips, ports, offsets)
def test_offset_round_trip(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int, offset: int
) -> None:
    text = encode_offset_msg_id(str(ip), port, offset)
    assert len(text) == ip_len(ip)
    assert text == text.upper()
    assert text == offset_msg_id_from_packed(ip.packed, port, offset)
    d = decode_offset_msg_id(text.lower())
    assert (ipaddress.ip_address(d.host), d.port, d.physical_offset, d.ip_version) == (
        ip,
        port,
        offset,
        ip.version,
    )


@fast
@given(ips, st.integers(0, 1 << 31), st.integers(-(1 << 31), 0xFFFFFFFF), u32, u16, instants)
def test_uniq_round_trip(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
    pid: int,
    disc: int,
    month_ms: int,
    counter: int,
    now: int,
) -> None:
    text = encode_uniq_id(ip, pid, disc, month_ms, counter)
    assert len(text) == ip_len(ip)
    d = decode_uniq_id(text.lower(), now_ms=now, tz=UTC)
    assert (
        ipaddress.ip_address(d.ip),
        d.ip_version,
        d.pid,
        d.discriminator,
        d.month_ms,
        d.counter,
    ) == (
        ip,
        ip.version,
        pid & 0xFFFF,
        disc & 0xFFFFFFFF,
        month_ms,
        counter,
    )
    assert d.nearly_time_ms == nearly_time_ms(month_ms, now, UTC)
    assert d.nearly_time == datetime.fromtimestamp(0, UTC) + timedelta(
        milliseconds=d.nearly_time_ms
    )


@fast
@given(
    st.integers(0, (1 << 48) - 1), st.integers(0, 1 << 31), st.integers(-(1 << 40), 1 << 40), u32
)
def test_v5_round_trip(mac: int, pid: int, seconds: int, seq: int) -> None:
    text = encode_v5_id(mac, pid, seconds, seq)
    assert len(text) == 34 and text.startswith("01") and text == text.upper()
    d = decode_v5_id(text.lower())
    assert int(d.mac.replace(":", ""), 16) == mac
    assert (d.version, d.pid, d.seconds, d.sequence) == (1, pid & 0xFFFF, seconds & 0xFFFFFFFF, seq)
    assert d.time == V5_EPOCH + timedelta(seconds=seconds & 0xFFFFFFFF)
    assert encode_v5_id(d.mac, d.pid, d.seconds, d.sequence) == text


@fast
@given(instants, zones, st.data())
def test_nearly_time_is_exact_until_the_same_position_next_month(
    made: int, tz: timezone, data: st.DataObject
) -> None:
    value = month_relative_ms(made, tz)
    assert 0 <= value < 31 * 86_400_000
    assert month_start_ms(made, tz) + value == made
    # Exact for any "now" after the ID and not later than its position in the next month; when
    # the next month is too short to have that position (made on 31 January, say), only until
    # that month ends.
    next_start = month_start_ms(made, tz, months=1)
    after_next = month_start_ms(made, tz, months=2)
    latest = min(next_start + value, after_next - 1)
    now = data.draw(st.integers(made + 1, latest), label="now")
    assert nearly_time_ms(value, now, tz) == made
    if next_start + value < after_next:
        # One ms later the rule picks the next month instead (documented limit).
        assert nearly_time_ms(value, latest + 1, tz) == latest


@fast
@given(instants, zones)
def test_month_start_is_local_midnight_on_the_first(t: int, tz: timezone) -> None:
    start = datetime.fromtimestamp(month_start_ms(t, tz) / 1000, tz)
    local = datetime.fromtimestamp(t // 1000, tz)
    assert (start.day, start.hour, start.minute, start.second) == (1, 0, 0, 0)
    assert (start.year, start.month) == (local.year, local.month)


@fast
@given(ips, st.integers(1, 0xFFFF), st.integers(0, (1 << 56) - 1))
def test_decode_recognises_offset_ids(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int, offset: int
) -> None:
    text = encode_offset_msg_id(ip, port, offset)
    d = decode_message_id(text.lower(), now_ms=1_700_000_000_000, tz=UTC)
    assert (d["scheme"], d["port"], d["physical_offset"]) == ("offset", port, offset)
    assert d["alternative"]["scheme"] == "uniq_v4"
    assert json.loads(json.dumps(d)) == d


@fast
@given(ips, st.integers(0, 1 << 31).filter(lambda p: p & 0xFFFF), u32, u32, u16)
def test_decode_recognises_uniq_keys_with_nonzero_pid_bits(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
    pid: int,
    disc: int,
    month_ms: int,
    counter: int,
) -> None:
    text = encode_uniq_id(ip, pid, disc, month_ms, counter)
    d = decode_message_id(text, now_ms=1_700_000_000_000, tz=UTC)
    assert (d["scheme"], d["pid"], d["discriminator"], d["counter"]) == (
        "uniq_v4",
        pid & 0xFFFF,
        disc,
        counter,
    )
    assert d["alternative"]["scheme"] == "offset"


@fast
@given(st.integers(0, (1 << 48) - 1), u16, u32, u32)
def test_decode_recognises_v5(mac: int, pid: int, seconds: int, seq: int) -> None:
    d = decode_message_id(encode_v5_id(mac, pid, seconds, seq).lower())
    assert (d["scheme"], d["pid"], d["seconds"], d["sequence"]) == ("v5", pid, seconds, seq)
    assert d["time_ms"] == (1_609_459_200 + seconds) * 1000
    assert "alternative" not in d


_ID_CHARS = "0123456789abcdefABCDEF xg"
near_ids = st.sampled_from([0, 31, 32, 33, 34, 35, 56]).flatmap(
    lambda n: st.text(_ID_CHARS, min_size=n, max_size=n)
)


@fast
@given(st.one_of(st.text(max_size=60), near_ids))
def test_decode_only_raises_invalid_message_id(text: str) -> None:
    try:
        d = decode_message_id(text, now_ms=1_700_000_000_000, tz=UTC)
    except InvalidMessageIdError as exc:
        assert "\n" not in str(exc) and str(exc)
    else:
        assert d["scheme"] in {"v5", "uniq_v4", "offset"}
        assert len(d["id"]) in {32, 34, 56}
