"""The message-state transports (broker/http/transport.py): JSON and binary round trips, the
byte layout docs/http.md gives, the 128-bit id rules, and a cut or malformed body refused."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.broker.http.transport import (
    TransportMessage,
    decode_binary,
    encode_binary,
    from_json,
    message_id,
    to_json,
    transport_message,
)
from pocketmq.store.record import MessageRecord
from pocketmq.store.state import MessageState

OFFSET_ID = "7F00000100002A9F0000000000000000"


def record(**properties: str) -> MessageRecord:
    return MessageRecord(
        topic="T",
        body=b"hello",
        properties=properties,
        queue_offset=7,
        store_timestamp=1_700_000_000_123,
    )


def test_a_record_becomes_the_post_fields() -> None:
    message = transport_message(
        record(UNIQ_KEY="0A0B0C0D" * 4, KEYS="k"), MessageState.POISONED, OFFSET_ID
    )
    as_json = to_json(message)
    assert as_json["offset"] == 7
    assert as_json["state"] == "poisoned"
    assert as_json["timestamp"] == 1_700_000_000_123_000
    assert as_json["id"] == int("0A0B0C0D" * 4, 16)
    assert as_json["checksum"] == zlib.crc32(b"hello")
    assert as_json["headers"]["KEYS"] == {"kind": "string", "value": "aw=="}
    assert as_json["payload"] == "aGVsbG8="
    assert from_json(as_json) == message


def test_the_binary_layout_is_little_endian_in_the_post_order() -> None:
    message = TransportMessage(
        offset=1,
        state=MessageState.MARKED_FOR_DELETION,
        timestamp_us=2,
        id=3,
        checksum=4,
        headers={"a": "b"},
        payload=b"xy",
    )
    data = encode_binary(message)
    header_block = struct.pack("<I", 1) + b"a" + bytes([2]) + struct.pack("<I", 1) + b"b"
    expected = (
        struct.pack("<QBQ", 1, 30, 2)
        + (3).to_bytes(16, "little")
        + struct.pack("<I", 4)
        + struct.pack("<I", len(header_block))
        + header_block
        + struct.pack("<I", 2)
        + b"xy"
    )
    assert data == expected
    assert decode_binary(data) == [message]


def test_ids_follow_the_documented_rules() -> None:
    v5 = "01" + "AB" * 16
    assert message_id(record(UNIQ_KEY=v5), OFFSET_ID) == int("AB" * 16, 16)
    assert message_id(record(), OFFSET_ID) == int(OFFSET_ID, 16)  # no UNIQ_KEY: the offset id
    assert message_id(record(UNIQ_KEY="not hex" * 5), OFFSET_ID) == int(OFFSET_ID, 16)


def test_a_message_without_properties_has_null_headers() -> None:
    message = transport_message(record(), MessageState.AVAILABLE, OFFSET_ID)
    assert to_json(message)["headers"] is None
    assert decode_binary(encode_binary(message))[0].headers is None


@pytest.mark.parametrize("cut", [1, 20, 41, 45])
def test_a_cut_body_is_refused_with_where(cut: int) -> None:
    data = encode_binary(transport_message(record(KEYS="k"), MessageState.AVAILABLE, OFFSET_ID))
    with pytest.raises(ValueError, match="at byte"):
        decode_binary(data[:-cut])


def test_an_unknown_header_kind_is_refused() -> None:
    data = bytearray(
        encode_binary(transport_message(record(K="v"), MessageState.AVAILABLE, OFFSET_ID))
    )
    kind_at = 8 + 1 + 8 + 16 + 4 + 4 + 4 + 1
    data[kind_at] = 9
    with pytest.raises(ValueError, match="kind 9"):
        decode_binary(bytes(data))


@given(
    st.lists(
        st.builds(
            TransportMessage,
            offset=st.integers(0, 2**64 - 1),
            state=st.sampled_from(list(MessageState)),
            timestamp_us=st.integers(0, 2**64 - 1),
            id=st.integers(0, 2**128 - 1),
            checksum=st.integers(0, 2**32 - 1),
            headers=st.none() | st.dictionaries(st.text(min_size=1), st.text(), min_size=1),
            payload=st.binary(),
        ),
        max_size=5,
    )
)
def test_binary_and_json_round_trip(messages: list[TransportMessage]) -> None:
    data = b"".join(encode_binary(m) for m in messages)
    assert decode_binary(data) == messages
    assert [from_json(to_json(m)) for m in messages] == messages
