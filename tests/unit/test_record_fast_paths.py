"""The record's fast paths agree with store/record.py's general codec they are built from.

The commitlog's append (the encoder written out for every put), the recovery scan's inline
check, the protocol codec's decoder (what the SDK reads a pulled body with) and the POP copy with
new reconsume times are each checked against the general encoder, ``check_record``, or
``decode_record``, on generated and corrupted records. (``record_intact`` and the SDK's pulled
record shortcut have theirs in test_record.py and test_fast_paths.py.)
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.broker.protocol import MalformedBodyError
from pocketmq.broker.protocol import message_codec as MC
from pocketmq.store.commitlog import CommitLog
from pocketmq.store.errors import CorruptRecordError
from pocketmq.store.files import MemoryBackend
from pocketmq.store.record import (
    BODY_AT_V4,
    FIELD_AT,
    MIN_RECORD_SIZE,
    PREFIX,
    MessageRecord,
    SysFlag,
    check_record,
    decode_record,
    encode_blank,
    encode_properties,
    encode_record,
    picking_struct,
    record_length,
    unpack_record,
    with_reconsume_times,
)
from pocketmq.store.recovery import scan_records

from .test_record import records

SEGMENT = 64 * 1024


def test_offsets_derive_from_the_documented_layout() -> None:
    # store/record.py's table, as rocketmq-store.md §1.3 has it
    assert FIELD_AT == {
        "total_size": 0,
        "magic": 4,
        "body_crc": 8,
        "queue_id": 12,
        "flag": 16,
        "queue_offset": 20,
        "physical_offset": 28,
        "sysflag": 36,
        "born_timestamp": 40,
        "born_address": 48,
        "born_port": 52,
        "store_timestamp": 56,
        "store_address": 64,
        "store_port": 68,
        "reconsume_times": 72,
        "prepared_transaction_offset": 76,
        "body_length": 84,
    }
    assert BODY_AT_V4 == 88 and MIN_RECORD_SIZE == 91 == record_length(0, 0, 0)
    assert [PREFIX[(b, s)].size for b, s in ((4, 4), (16, 4), (4, 16), (16, 16))] == [
        88,
        100,
        100,
        112,
    ]
    assert picking_struct("total_size", "magic", "body_crc", "sysflag", "body_length").format == (
        ">iII24xi44xi"
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(records(), min_size=1, max_size=6), st.booleans())
def test_the_commitlog_append_writes_what_encode_record_encodes(
    items: list[MessageRecord], append_crc: bool
) -> None:
    log = CommitLog(MemoryBackend(), segment_size=SEGMENT)
    for record in items:
        properties = encode_properties(record.properties).encode()
        offset, size = log.append(
            record.topic.encode(),
            record.queue_id,
            record.flag,
            record.queue_offset,
            record.sysflag,
            record.born_timestamp,
            record.born_host,
            record.store_timestamp,
            record.store_host,
            record.reconsume_times,
            record.prepared_transaction_offset,
            record.body,
            properties,
            append_crc,
        )
        placed = MessageRecord(**{**_fields(record), "physical_offset": offset})
        expected = encode_record(placed, properties_bytes=properties, append_crc=append_crc)
        assert bytes(log.view_at(offset, size)) == expected


def _fields(record: MessageRecord) -> dict[str, object]:
    return {name: getattr(record, name) for name in record.__struct_fields__}


@st.composite
def segments(draw: st.DrawFn) -> tuple[bytearray, list[int]]:
    """Records back to back (with their own positions as PHYSICALOFFSET), maybe a filler after
    them, then zeros; some bytes changed or the tail cut. Returns the bytes and the positions."""
    data = bytearray()
    starts = []
    for record in draw(st.lists(records(), max_size=5)):
        starts.append(len(data))
        placed = MessageRecord(**{**_fields(record), "physical_offset": len(data)})
        data += encode_record(placed, append_crc=draw(st.booleans()))
    if draw(st.booleans()):
        data += encode_blank(64) + bytes(56)
    data += bytes(draw(st.integers(0, 16)))
    for _ in range(draw(st.integers(0, 3))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    if data and draw(st.booleans()):
        del data[draw(st.integers(0, len(data) - 1)) :]
    return data, starts


def reference_scan(view: bytes, check_crc: bool) -> tuple[int, list[tuple[int, int]], str]:
    """The scan as a walk of check_record: (bytes, records, how it stopped)."""
    position, found = 0, []
    while True:
        if len(view) - position < 8:
            return position, found, "limit"
        try:
            size = check_record(view, position, check_crc=check_crc)
        except CorruptRecordError as error:
            if error.reason == "zero bytes (end of written data)":
                return position, found, "end"
            return position, found, "damage"
        if size == 0:
            return position, found, "blank"
        claimed = struct.unpack_from(">q", view, position + FIELD_AT["physical_offset"])[0]
        if claimed != position:
            return position, found, "damage"
        found.append((position, size))
        position += size


@settings(max_examples=300, deadline=None)
@given(segments(), st.booleans())
def test_the_recovery_scan_agrees_with_check_record(
    segment: tuple[bytearray, list[int]], check_crc: bool
) -> None:
    data, _ = segment
    found: list[tuple[int, int]] = []
    records_seen, scanned, stop = scan_records(
        memoryview(bytes(data)),
        base_offset=0,
        check_crc=check_crc,
        on_record=lambda p, s: found.append((p, s)),
    )
    position, expected, kind = reference_scan(bytes(data), check_crc)
    assert (scanned, found, stop.kind) == (position, expected, kind)
    assert records_seen == len(found)


def _message(record: MessageRecord) -> MC.MessageExt:
    return MC.MessageExt(
        topic=record.topic,
        body=record.body,
        flag=record.flag,
        properties=record.properties,
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        commitlog_offset=record.physical_offset,
        sys_flag=record.sysflag,
        born_timestamp=record.born_timestamp,
        born_host=MC.host_text(record.born_host.address),
        born_port=record.born_host.port,
        store_timestamp=record.store_timestamp,
        store_host=MC.host_text(record.store_host.address),
        store_port=record.store_host.port,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
    )


@settings(max_examples=200, deadline=None)
@given(records())
def test_the_protocol_encoder_is_the_store_encoder(record: MessageRecord) -> None:
    assert MC.encode_message_record(_message(record)) == encode_record(record)


@settings(max_examples=300, deadline=None)
@given(records(), st.data())
def test_the_protocol_decoder_reads_what_the_store_decoder_reads(
    record: MessageRecord, data: st.DataObject
) -> None:
    encoded = bytearray(encode_record(record, append_crc=data.draw(st.booleans())))
    for _ in range(data.draw(st.integers(0, 2))):
        encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del encoded[data.draw(st.integers(0, len(encoded))) :]
    raw = bytes(encoded)
    try:
        stored = decode_record(raw, check_crc=False)
    except CorruptRecordError as error:
        if "UTF-8" in error.reason:
            return  # the store refuses text that is not UTF-8; a reader replaces it
        with pytest.raises(MalformedBodyError):
            MC.decode_message(raw, decompress=False)
        with pytest.raises(CorruptRecordError):
            unpack_record(raw)
        return
    message = MC.decode_message(raw, decompress=False)
    assert (message.topic, message.body, message.properties) == (
        stored.topic,
        stored.body,
        stored.properties,
    )
    assert (message.born_host, message.born_port) == (
        MC.host_text(stored.born_host.address),
        stored.born_host.port,
    )
    assert (message.store_host, message.store_port) == (
        MC.host_text(stored.store_host.address),
        stored.store_host.port,
    )
    assert (
        message.queue_id,
        message.flag,
        message.queue_offset,
        message.commitlog_offset,
        message.sys_flag,
        message.born_timestamp,
        message.store_timestamp,
        message.reconsume_times,
        message.prepared_transaction_offset,
        message.store_size,
        message.body_crc & 0xFFFFFFFF,
    ) == (
        stored.queue_id,
        stored.flag,
        stored.queue_offset,
        stored.physical_offset,
        stored.sysflag,
        stored.born_timestamp,
        stored.store_timestamp,
        stored.reconsume_times,
        stored.prepared_transaction_offset,
        stored.total_size,
        stored.body_crc,
    )


@settings(max_examples=200, deadline=None)
@given(records(), st.integers(0, 2**31 - 1))
def test_a_copy_with_new_reconsume_times_is_that_record_encoded(
    record: MessageRecord, reconsume_times: int
) -> None:
    changed = MessageRecord(**{**_fields(record), "reconsume_times": reconsume_times})
    assert with_reconsume_times(encode_record(record), reconsume_times) == encode_record(changed)


def test_an_ipv6_record_too_small_for_its_hosts_is_corrupt_not_a_crash() -> None:
    record = encode_record(MessageRecord(topic="T", body=b""))
    flags = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6
    bad = record[:36] + flags.to_bytes(4, "big") + record[40:]
    with pytest.raises(CorruptRecordError, match="smaller than its fixed fields"):
        check_record(bad, 0)
    with pytest.raises(MalformedBodyError):
        MC.decode_message(bad)
