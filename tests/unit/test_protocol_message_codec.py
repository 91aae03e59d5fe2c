"""Properties string, batch body (T10) and pulled commitlog records."""

from __future__ import annotations

import contextlib
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.broker.protocol import LocalProtocolError, MalformedBodyError
from pocketmq.broker.protocol.codes import MessageSysFlag
from pocketmq.broker.protocol.message_codec import (
    BatchMessage,
    MessageExt,
    body_crc,
    decode_batch,
    decode_message,
    decode_messages,
    decode_properties,
    encode_batch,
    encode_message_record,
    encode_properties,
    offset_msg_id,
)

# -- properties ------------------------------------------------------------------------------


def test_properties_encoding() -> None:
    assert (
        encode_properties({"WAIT": "true", "TAGS": "TagA", "KEYS": None})
        == "WAIT\x01true\x02TAGS\x01TagA\x02"
    )
    assert encode_properties({}) == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "TAGS\x01TAG\x02WAIT\x01true\x02KEYS\x01ffff\x02",
            {"TAGS": "TAG", "WAIT": "true", "KEYS": "ffff"},
        ),
        ("a\x01b", {"a": "b"}),  # no trailing separator
        ("a\x01b\x01c\x02", {"a": "b\x01c"}),  # the first 0x01 splits
        ("\x01b\x02", {}),  # 0x01 first: empty name
        ("ab\x01\x02", {}),  # 0x01 last: empty value
        ("a\x01\x02x\x01y\x02", {"x": "y"}),  # fewer than 3 chars
        ("abc\x02", {}),  # no 0x01
        ("a\x01\x01\x02", {"a": "\x01"}),
        ("\x02\x02a\x01b\x02\x02", {"a": "b"}),
        ("a\x01b\x02a\x01c\x02", {"a": "c"}),  # later wins, as in a HashMap
        ("", {}),
    ],
)
def test_properties_parse_rules(text: str, expected: dict[str, str]) -> None:
    assert decode_properties(text) == expected


@pytest.mark.parametrize("props", [{"a\x01": "v"}, {"a\x02": "v"}, {"a": "v\x02"}])
def test_properties_that_would_corrupt_the_string(props: dict[str, str]) -> None:
    with pytest.raises(LocalProtocolError):
        encode_properties(props)


NAMES = st.text(min_size=1, max_size=12).filter(lambda s: "\x01" not in s and "\x02" not in s)
VALUES = st.text(min_size=1, max_size=20).filter(lambda s: "\x02" not in s)


@given(st.dictionaries(NAMES, VALUES, max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


# -- batch body ------------------------------------------------------------------------------


def test_t10_batch_inner_record() -> None:
    data = encode_batch([BatchMessage(body=b"hi", flag=0, properties={"WAIT": "true"})])
    expected = "00000022 00000000 00000000 00000000 00000002 6869 000A 57414954 01 74727565 02"
    assert data.hex().upper() == expected.replace(" ", "")
    assert decode_batch(data) == [BatchMessage(body=b"hi", flag=0, properties={"WAIT": "true"})]


def test_batch_of_several() -> None:
    messages = [
        BatchMessage(body=b"one", flag=1, properties={"UNIQ_KEY": "A1", "WAIT": "true"}),
        BatchMessage(body=b"", flag=-5, properties={}),
        BatchMessage(body=bytes(range(256)), properties={"TAGS": "\u4e2d"}),
    ]
    data = encode_batch(messages)
    assert decode_batch(data) == messages
    assert decode_batch(memoryview(data)) == messages
    assert decode_batch(b"") == []
    # TOTALSIZE of each unit: 22 fixed bytes + body + properties
    assert struct.unpack_from(">i", data, 0)[0] == 22 + 3 + len(
        encode_properties(messages[0].properties)
    )


def test_truncated_batches() -> None:
    data = encode_batch([BatchMessage(body=b"hello", properties={"WAIT": "true"})] * 2)
    for cut in range(1, len(data)):
        if cut == len(data) // 2:
            assert len(decode_batch(data[:cut])) == 1
            continue
        with pytest.raises(MalformedBodyError):
            decode_batch(data[:cut])


def test_batch_negative_lengths() -> None:
    bad_body = struct.pack(">iiiii", 22, 0, 0, 0, -1) + b"\x00\x00"
    with pytest.raises(MalformedBodyError):
        decode_batch(bad_body)
    bad_props = struct.pack(">iiiii", 22, 0, 0, 0, 0) + b"\xff\xff"
    with pytest.raises(MalformedBodyError):
        decode_batch(bad_props)


def test_batch_properties_limit() -> None:
    with pytest.raises(LocalProtocolError):
        encode_batch([BatchMessage(body=b"x", properties={"k": "v" * 40000})])


BATCH = st.builds(
    BatchMessage,
    body=st.binary(max_size=50),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=st.dictionaries(NAMES, VALUES, max_size=4),
)


@given(st.lists(BATCH, max_size=6))
def test_batch_round_trip(messages: list[BatchMessage]) -> None:
    assert decode_batch(encode_batch(messages)) == messages


@given(st.binary(max_size=120))
def test_batch_garbage(data: bytes) -> None:
    with contextlib.suppress(MalformedBodyError):
        decode_batch(data)


# -- commitlog records -----------------------------------------------------------------------


def test_crc_and_offset_msg_id_examples() -> None:
    # rocketmq-store.md §1.5 and §8.2
    assert zlib.crc32(b"msg0") == 0xB2DAEB07
    assert body_crc(b"msg0") == 0x32DAEB07 == 853207815
    assert offset_msg_id("10.0.0.5", 10911, 0x12345) == "0A00000500002A9F0000000000012345"
    assert len(offset_msg_id("::1", 10911, 1)) == 56


def hand_built_record(
    *,
    topic: bytes = b"TopicTest",
    body: bytes = b"msg0",
    props: bytes = b"UNIQ_KEY\x01AC110001\x02TAGS\x01TagA\x02",
    born: bytes = bytes([192, 168, 1, 10]),
    store: bytes = bytes([10, 0, 0, 5]),
    sys_flag: int = 0,
    v2: bool = False,
) -> bytes:
    """A record assembled field by field from rocketmq-store.md §1.3 (independent of the encoder)."""
    fields = [
        struct.pack(">I", 0xDAA320AB if v2 else 0xDAA320A7),
        struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),
        struct.pack(">i", 3),  # queue id
        struct.pack(">i", 0),  # flag
        struct.pack(">q", 42),  # queue offset
        struct.pack(">q", 0x12345),  # physical offset
        struct.pack(">i", sys_flag),
        struct.pack(">q", 1700000000000),  # born timestamp
        born + struct.pack(">i", 50000),
        struct.pack(">q", 1700000000005),  # store timestamp
        store + struct.pack(">i", 10911),
        struct.pack(">i", 1),  # reconsume times
        struct.pack(">q", 0),  # prepared transaction offset
        struct.pack(">i", len(body)) + body,
        (struct.pack(">h", len(topic)) if v2 else bytes([len(topic)])) + topic,
        struct.pack(">h", len(props)) + props,
    ]
    rest = b"".join(fields)
    return struct.pack(">i", 4 + len(rest)) + rest


EXPECTED = MessageExt(
    topic="TopicTest",
    body=b"msg0",
    flag=0,
    properties={"UNIQ_KEY": "AC110001", "TAGS": "TagA"},
    queue_id=3,
    queue_offset=42,
    commitlog_offset=0x12345,
    sys_flag=0,
    born_timestamp=1700000000000,
    born_host="192.168.1.10",
    born_port=50000,
    store_timestamp=1700000000005,
    store_host="10.0.0.5",
    store_port=10911,
    reconsume_times=1,
    prepared_transaction_offset=0,
    body_crc=0x32DAEB07,
    store_size=91 + 4 + 9 + 28,  # V1, IPv4: 91 + body + topic + properties
    offset_msg_id="0A00000500002A9F0000000000012345",
)


def test_decode_v1_ipv4_record() -> None:
    record = hand_built_record()
    assert len(record) == EXPECTED.store_size
    assert decode_message(record) == EXPECTED
    assert encode_message_record(EXPECTED) == record
    message = decode_messages(record)[0]
    assert (message.msg_id, message.tags, message.keys) == ("AC110001", "TagA", None)


def test_decode_v2_and_ipv6() -> None:
    born6 = bytes(15) + b"\x01"  # ::1
    store6 = bytes.fromhex("20010db8000000000000000000000005")
    flags = MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6
    record = hand_built_record(
        topic=b"%RETRY%" + b"g" * 130, born=born6, store=store6, sys_flag=flags, v2=True
    )
    message = decode_message(record)
    assert message.topic == "%RETRY%" + "g" * 130
    assert (message.born_host, message.store_host) == ("::1", "2001:db8::5")
    assert message.offset_msg_id == (store6 + struct.pack(">iq", 10911, 0x12345)).hex().upper()
    assert len(message.offset_msg_id) == 56
    assert message.store_size == len(record) == 92 + 24 + 4 + 137 + 28
    assert encode_message_record(message) == record


def test_one_ipv6_host_only() -> None:
    record = hand_built_record(store=bytes(16), sys_flag=MessageSysFlag.STOREHOST_V6)
    message = decode_message(record)
    assert (message.born_host, message.store_host) == ("192.168.1.10", "::")
    assert encode_message_record(message) == record


def test_compressed_body_is_inflated() -> None:
    payload = b"hello " * 1000
    packed = zlib.compress(payload, 5)
    record = hand_built_record(body=packed, sys_flag=MessageSysFlag.COMPRESSED)
    assert decode_message(record).body == payload
    assert decode_message(record).sys_flag & MessageSysFlag.COMPRESSED
    assert decode_message(record, decompress=False).body == packed
    zlib_typed = hand_built_record(
        body=packed, sys_flag=MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_ZLIB
    )
    assert decode_message(zlib_typed).body == payload
    lz4 = hand_built_record(
        body=packed, sys_flag=MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_LZ4
    )
    with pytest.raises(MalformedBodyError):
        decode_message(lz4)
    assert decode_message(lz4, decompress=False).body == packed
    broken = hand_built_record(body=b"not zlib", sys_flag=MessageSysFlag.COMPRESSED)
    with pytest.raises(MalformedBodyError):
        decode_message(broken)


def test_crc_checked_only_on_request() -> None:
    record = bytearray(hand_built_record())
    record[8] ^= 0x01  # flip a BODYCRC bit
    assert decode_message(bytes(record)).body == b"msg0"  # the Java client does not check
    with pytest.raises(MalformedBodyError) as info:
        decode_message(bytes(record), check_crc=True)
    assert info.value.offset == 8


def test_pulled_body_of_several_records_and_garbage_tail() -> None:
    one = hand_built_record()
    two = hand_built_record(body=b"second", props=b"")
    body = one + two
    messages = decode_messages(body)
    assert [m.body for m in messages] == [b"msg0", b"second"]
    assert messages[1].properties == {}
    assert decode_messages(b"") == []
    # Java stops at the first bad record and keeps what it has
    assert [m.body for m in decode_messages(body + b"\x00\x00\x00\x10garbage")] == [
        b"msg0",
        b"second",
    ]
    assert [m.body for m in decode_messages(one + two[:-3])] == [b"msg0"]
    with pytest.raises(MalformedBodyError):
        decode_messages(body + b"\x00\x00", strict=True)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: r[:-1],  # truncated
        lambda r: r[:4] + b"\xcb\xd4\x31\x94" + r[8:],  # blank magic
        lambda r: r[:4] + b"\x00\x00\x00\x00" + r[8:],  # no magic
        lambda r: struct.pack(">i", len(r) + 1) + r[4:] + b"\x00",  # size disagrees with the fields
        lambda r: struct.pack(">i", 10) + r[4:],  # size too small
        lambda r: r + b"x",  # trailing byte after a single record
    ],
)
def test_malformed_records(mutate: object) -> None:
    record = mutate(hand_built_record())  # type: ignore[operator]
    with pytest.raises(MalformedBodyError):
        decode_message(record)


def test_encode_rejects_bad_hosts() -> None:
    with pytest.raises(LocalProtocolError):
        encode_message_record(MessageExt(topic="t", body=b"", born_host="localhost"))


HOSTS = st.ip_addresses().map(str)
MESSAGES = st.builds(
    MessageExt,
    topic=st.text(min_size=1, max_size=140),
    body=st.binary(max_size=64),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=st.dictionaries(NAMES, VALUES, max_size=4),
    queue_id=st.integers(0, 2**31 - 1),
    queue_offset=st.integers(0, 2**63 - 1),
    commitlog_offset=st.integers(0, 2**63 - 1),
    sys_flag=st.sampled_from([0, 0x4, 0x8, 0x2]),
    born_timestamp=st.integers(0, 2**63 - 1),
    born_host=HOSTS,
    born_port=st.integers(0, 65535),
    store_timestamp=st.integers(0, 2**63 - 1),
    store_host=HOSTS,
    store_port=st.integers(0, 65535),
    reconsume_times=st.integers(0, 16),
    prepared_transaction_offset=st.integers(0, 2**63 - 1),
)


@settings(max_examples=50)
@given(st.lists(MESSAGES, max_size=4))
def test_record_round_trip(messages: list[MessageExt]) -> None:
    body = b"".join(encode_message_record(m) for m in messages)
    decoded = decode_messages(body, strict=True, check_crc=True)
    assert len(decoded) == len(messages)
    for original, got in zip(messages, decoded, strict=True):
        assert got.topic == original.topic and got.body == original.body
        assert got.properties == original.properties
        assert (got.queue_id, got.queue_offset, got.commitlog_offset) == (
            original.queue_id,
            original.queue_offset,
            original.commitlog_offset,
        )
        assert got.born_host == str(original.born_host) and got.store_host == original.store_host
        assert (got.born_port, got.store_port) == (original.born_port, original.store_port)
        assert got.offset_msg_id == offset_msg_id(
            original.store_host, original.store_port, original.commitlog_offset
        )
        assert encode_message_record(got) == encode_message_record(original)


@given(st.binary(max_size=200))
def test_record_garbage(data: bytes) -> None:
    with contextlib.suppress(MalformedBodyError):
        decode_messages(data, strict=True)
    decode_messages(data)  # the lenient mode never raises
