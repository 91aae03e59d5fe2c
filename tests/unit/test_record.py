from __future__ import annotations

import zlib

import crcmod.predefined
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.store.crc import crc32 as store_crc32
from pocketmq.store.errors import CorruptRecordError, LimitExceededError
from pocketmq.store.record import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    Host,
    MessageRecord,
    RecordLimits,
    SysFlag,
    body_crc,
    check_record,
    decode_properties,
    decode_record,
    encode_blank,
    encode_properties,
    encode_record,
    record_intact,
    record_length,
)

CRC32_REFERENCE = crcmod.predefined.mkCrcFun("crc-32")


def test_masked_crc_of_the_fact_sheet_example() -> None:
    assert zlib.crc32(b"msg0") == 0xB2DAEB07
    assert body_crc(b"msg0") == 0x32DAEB07 == 853207815


def test_v1_fixed_length_is_91_and_v2_is_92() -> None:
    assert record_length(0, 0, 0) == 91
    assert record_length(0, 128, 0) == 92 + 128
    assert record_length(0, 0, 0, SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6) == 91 + 24


def test_field_positions_of_an_ipv4_record() -> None:
    record = MessageRecord(
        topic="TopicTest",
        body=b"msg0",
        queue_id=3,
        flag=7,
        properties={"TAGS": "TagA"},
        born_timestamp=1_700_000_000_000,
        born_host=Host.parse("10.0.0.1:5000"),
        store_timestamp=1_700_000_000_123,
        store_host=Host.parse("10.0.0.5:10911"),
        reconsume_times=2,
        prepared_transaction_offset=99,
        queue_offset=41,
        physical_offset=123456,
    )
    data = encode_record(record)
    assert int.from_bytes(data[0:4], "big") == len(data) == 91 + 4 + 9 + len("TAGS\x01TagA\x02")
    assert int.from_bytes(data[4:8], "big") == MAGIC_V1
    assert int.from_bytes(data[8:12], "big") == 853207815
    assert int.from_bytes(data[12:16], "big") == 3
    assert int.from_bytes(data[16:20], "big") == 7
    assert int.from_bytes(data[20:28], "big") == 41
    assert int.from_bytes(data[28:36], "big") == 123456
    assert int.from_bytes(data[40:48], "big") == 1_700_000_000_000
    assert data[48:52] == bytes([10, 0, 0, 1]) and int.from_bytes(data[52:56], "big") == 5000
    assert int.from_bytes(data[56:64], "big") == 1_700_000_000_123
    assert data[64:68] == bytes([10, 0, 0, 5]) and int.from_bytes(data[68:72], "big") == 10911
    assert int.from_bytes(data[72:76], "big") == 2
    assert int.from_bytes(data[76:84], "big") == 99
    assert int.from_bytes(data[84:88], "big") == 4 and data[88:92] == b"msg0"
    assert data[92] == 9 and data[93:102] == b"TopicTest"
    assert int.from_bytes(data[102:104], "big") == len("TAGS\x01TagA\x02")
    assert data[104:] == b"TAGS\x01TagA\x02"


def test_long_retry_topic_uses_v2_and_ipv6_sets_sysflag_bits() -> None:
    record = MessageRecord(
        topic="%RETRY%" + "g" * 150,
        body=b"x",
        born_host=Host.parse("[::1]:1"),
        store_host=Host.parse("[fe80::2]:10911"),
    )
    decoded = decode_record(encode_record(record))
    assert decoded.magic == MAGIC_V2
    assert decoded.sysflag & SysFlag.BORNHOST_V6 and decoded.sysflag & SysFlag.STOREHOST_V6
    assert str(decoded.store_host) == "[fe80::2]:10911"
    assert decoded.topic == record.topic


def test_properties_follow_rocketmqs_parse_rule() -> None:
    assert encode_properties({"A": "1", "B": "2"}) == "A\x011\x02B\x012\x02"
    # Empty keys or values, and pairs without a separator, are dropped.
    assert decode_properties("A\x011\x02\x01x\x02y\x01\x02junk\x02B\x012") == {"A": "1", "B": "2"}


def test_limits_are_named_and_nothing_is_encoded() -> None:
    limits = RecordLimits(body_size_max=10)
    with pytest.raises(LimitExceededError) as error:
        encode_record(MessageRecord(topic="T", body=b"x" * 11), limits=limits)
    assert error.value.limit == "body_size_max" and error.value.value == 11
    with pytest.raises(LimitExceededError, match="topic_size_max"):
        encode_record(MessageRecord(topic="T" * 128, body=b""))
    with pytest.raises(LimitExceededError, match="allowed set"):
        encode_record(MessageRecord(topic="bad topic", body=b""))
    with pytest.raises(LimitExceededError, match="properties_size_max"):
        encode_record(MessageRecord(topic="T", body=b"", properties={"K": "v" * 40000}))
    with pytest.raises(LimitExceededError, match="topic_size_max"):
        encode_record(MessageRecord(topic="%DLQ%" + "g" * 251, body=b""))


def test_check_record_reasons() -> None:
    data = bytearray(encode_record(MessageRecord(topic="T", body=b"hello")))
    assert check_record(data, 0) == len(data)
    flipped = bytearray(data)
    flipped[88] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        check_record(flipped, 0)
    assert check_record(flipped, 0, check_crc=False) == len(data)
    with pytest.raises(CorruptRecordError, match="does not fit"):
        check_record(data[:-1], 0)
    bad_magic = bytearray(data)
    bad_magic[4:8] = b"\0\0\0\1"
    with pytest.raises(CorruptRecordError, match="magic"):
        check_record(bad_magic, 0)
    assert check_record(encode_blank(1000) + bytes(992), 0) == 0
    assert int.from_bytes(encode_blank(1000)[4:8], "big") == BLANK_MAGIC


hosts = st.one_of(
    st.builds(Host, st.binary(min_size=4, max_size=4), st.integers(0, 65535)),
    st.builds(Host, st.binary(min_size=16, max_size=16), st.integers(0, 65535)),
)
topic_text = st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=127)
prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(0, 2**62)


@st.composite
def records(draw: st.DrawFn) -> MessageRecord:
    return MessageRecord(
        topic=draw(topic_text),
        body=draw(st.binary(max_size=300)),
        queue_id=draw(i32),
        flag=draw(i32),
        properties=draw(st.dictionaries(prop_text, prop_text, max_size=5)),
        sysflag=draw(st.integers(0, 0xF) | st.just(SysFlag.TRANSACTION_COMMIT_TYPE)),
        born_timestamp=draw(i64),
        born_host=draw(hosts),
        store_timestamp=draw(i64),
        store_host=draw(hosts),
        reconsume_times=draw(i32),
        prepared_transaction_offset=draw(i64),
        queue_offset=draw(i64),
        physical_offset=draw(i64),
    )


@settings(max_examples=300, deadline=None)
@given(records())
def test_decode_encode_round_trip(record: MessageRecord) -> None:
    data = encode_record(record)
    decoded = decode_record(data)
    assert decoded.total_size == len(data)
    assert decoded.body_crc == body_crc(record.body)
    expected_flags = record.sysflag | (SysFlag.BORNHOST_V6 if record.born_host.is_v6 else 0)
    expected_flags |= SysFlag.STOREHOST_V6 if record.store_host.is_v6 else 0
    assert decoded.sysflag == expected_flags
    for name in (
        "topic",
        "body",
        "queue_id",
        "flag",
        "properties",
        "born_timestamp",
        "born_host",
        "store_timestamp",
        "store_host",
        "reconsume_times",
        "prepared_transaction_offset",
        "queue_offset",
        "physical_offset",
    ):
        assert getattr(decoded, name) == getattr(record, name), name
    assert encode_record(decoded) == data


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1))
def test_fast_crc_agrees_with_crcmod(body: bytes, start: int) -> None:
    assert zlib.crc32(body) == CRC32_REFERENCE(body)
    assert store_crc32(body) == CRC32_REFERENCE(body)
    assert store_crc32(memoryview(body)[1:]) == CRC32_REFERENCE(body[1:])
    assert store_crc32(body, start) == zlib.crc32(body, start)  # chained, as zlib's
    assert body_crc(body) == CRC32_REFERENCE(body) & 0x7FFFFFFF


def test_the_hot_paths_use_isal_when_it_is_installed() -> None:
    # pyproject depends on isal; the zlib fallback is for platforms without its wheels.
    from isal import isal_zlib

    assert store_crc32 is isal_zlib.crc32


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(prop_text, prop_text, max_size=8))
def test_properties_round_trip(properties: dict[str, str]) -> None:
    assert decode_properties(encode_properties(properties)) == properties


@settings(max_examples=200, deadline=None)
@given(records(), st.data())
def test_any_single_byte_change_in_the_body_is_caught(
    record: MessageRecord, data: st.DataObject
) -> None:
    encoded = bytearray(encode_record(record))
    if not record.body:
        return
    body_at = 88 + (12 if record.born_host.is_v6 else 0) + (12 if record.store_host.is_v6 else 0)
    index = data.draw(st.integers(body_at, body_at + len(record.body) - 1))
    encoded[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError):
        check_record(encoded, 0)


def check_record_says_intact(view: bytes, require_record_crc: bool) -> bool:
    try:
        return check_record(view, 0, require_record_crc=require_record_crc) == len(view)
    except CorruptRecordError:
        return False


@settings(max_examples=300, deadline=None)
@given(records(), st.booleans(), st.data())
def test_the_read_check_agrees_with_check_record(
    record: MessageRecord, append_crc: bool, data: st.DataObject
) -> None:
    encoded = bytearray(encode_record(record, append_crc=append_crc))
    # flipped bytes anywhere (lengths, magic, CRC digits...), a cut or a longer view
    for _ in range(data.draw(st.integers(0, 3))):
        index = data.draw(st.integers(0, len(encoded) - 1))
        encoded[index] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        encoded = encoded[: data.draw(st.integers(0, len(encoded)))]
    elif data.draw(st.booleans()):
        encoded += b"\x00" * data.draw(st.integers(1, 30))
    for require in (True, False):
        expected = check_record_says_intact(bytes(encoded), require)
        assert record_intact(memoryview(encoded), require) is expected
        assert record_intact(bytes(encoded), require) is expected
