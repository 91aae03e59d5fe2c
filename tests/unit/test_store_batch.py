"""The batched append (``MessageStore.put_many``): the same bytes as a loop of ``put``.

A batch is encoded in one pass and written at once; these tests hold it to the loop of single
puts it replaces: the same commitlog segments, consume queues and index files byte for byte,
the same results (store times included: a record takes its own, as in the loop) and the same
answers to reads and key queries, over random batches (sizes,
properties, hosts, transaction types, the record CRC on or off) that cross commitlog segments
and consume-queue files. The one difference is by design: a batch that does not fit the rest
of a segment starts in the next one (the reference rolls over the same way first), and a batch
larger than a segment is written as parts that each fill one.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pocketmq.store.config import StoreConfig
from pocketmq.store.errors import LimitExceededError
from pocketmq.store.files import MemoryBackend
from pocketmq.store.message_store import MessageStore, PutMessage, PutResult
from pocketmq.store.record import (
    END_FILE_MIN_BLANK_LENGTH,
    Host,
    MessageRecord,
    RecordLimits,
    SysFlag,
    decode_record,
    encode_properties,
    encode_record,
)
from pocketmq.store.state import STATE_TOPIC, MessageState, encode_state_body

SEGMENT = 64 * 1024
LIMITS = RecordLimits(body_size_max=8192, properties_size_max=1024)
LONG_TOPIC = "%RETRY%" + "g" * 140  # a V2 record: its topic length needs a short
V6 = Host(bytes(range(16)), 7)


class Clock:
    """Ticks at every read: each record gets its own store time, in a batch as in a loop."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 3
        return self.now


def config(append_crc: bool, store_v6: bool) -> StoreConfig:
    return StoreConfig(
        commitlog_segment_size=SEGMENT,
        consume_queue_entries_per_file=8,
        index_slot_count=31,
        index_entry_count=400,
        limits=LIMITS,
        append_record_crc=append_crc,
        store_host=V6 if store_v6 else Host(b"\x7f\x00\x00\x01", 10911),
    )


@st.composite
def messages(draw: st.DrawFn) -> PutMessage:
    properties: dict[str, str] = {}
    if draw(st.booleans()):
        properties["TAGS"] = draw(st.sampled_from(["a", "b", "tag-c"]))
    if draw(st.booleans()):
        properties["KEYS"] = " ".join(
            draw(st.lists(st.sampled_from(["k1", "k2", "order-9"]), max_size=3))
        )
    if draw(st.booleans()):
        properties["UNIQ_KEY"] = f"{draw(st.integers(0, 50)):032X}"
    if draw(st.booleans()):
        properties["x"] = draw(st.text("xyz\u00e9", max_size=20))
    text: str | None = encode_properties(properties)
    shape = draw(st.sampled_from(["text", "text without last separator", "dict only"]))
    if shape == "text without last separator" and text:
        text = text[:-1]  # as 5.x clients send it
    elif shape == "dict only":
        text = None
    return PutMessage(
        topic=draw(st.sampled_from(["A", "B", LONG_TOPIC])),
        body=draw(st.binary(max_size=40)) * draw(st.sampled_from([1, 10, 60])),
        queue_id=draw(st.integers(0, 2)),
        flag=draw(st.integers(-3, 3)),
        properties=properties,
        properties_text=text,
        sysflag=draw(
            st.sampled_from(
                [0, 0, 0, 0, SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE]
                + [SysFlag.TRANSACTION_ROLLBACK_TYPE, SysFlag.MULTI_TAGS]
            )
        ),
        born_timestamp=draw(st.integers(0, 2**41)),
        born_host=draw(st.sampled_from([Host(b"\x0a\x00\x00\x05", 5555), V6])),
        reconsume_times=draw(st.integers(0, 16)),
        prepared_transaction_offset=draw(st.integers(0, 2**40)),
    )


def stored_size(message: PutMessage, cfg: StoreConfig) -> int:
    """The record's length by the general encoder (not the batch path's arithmetic)."""
    text = message.properties_text
    if text is None:
        text = encode_properties(message.properties or {})
    record = MessageRecord(
        topic=message.topic,
        body=message.body,
        born_host=message.born_host,
        store_host=cfg.store_host,
    )
    return len(
        encode_record(
            record, properties_bytes=text.encode(), append_crc=cfg.append_record_crc, limits=LIMITS
        )
    )


def reference_put_many(store: MessageStore, batch: list[PutMessage]) -> list[PutResult]:
    """A loop of put, preceded by the roll-over a batch makes when it does not fit."""
    sizes = [stored_size(m, store.config) for m in batch]
    room = SEGMENT - END_FILE_MIN_BLANK_LENGTH
    parts: list[list[int]] = [[]]
    used = 0
    for i, size in enumerate(sizes):
        if parts[-1] and used + size > room:
            parts.append([])
            used = 0
        parts[-1].append(i)
        used += size
    results = []
    for part in parts:
        store.commitlog.make_room(sum(sizes[i] for i in part))
        results += [store.put(batch[i]) for i in part]
    return results


def files_of(backend: MemoryBackend) -> dict[PurePosixPath, bytes]:
    return {path: bytes(data) for path, data in backend._segments.items()}


@settings(
    max_examples=60,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    batches=st.lists(st.lists(messages(), min_size=1, max_size=40), min_size=1, max_size=8),
    append_crc=st.booleans(),
    store_v6=st.booleans(),
    body_scale=st.sampled_from([1, 1, 40]),
)
def test_put_many_writes_what_a_loop_of_put_writes(
    batches: list[list[PutMessage]], append_crc: bool, store_v6: bool, body_scale: int
) -> None:
    cfg = config(append_crc, store_v6)
    if body_scale > 1:  # bodies of up to ~2 KB: batches that pass segment ends and sizes
        batches = [
            [
                PutMessage(**{**_fields(m), "body": m.body[:50] * body_scale})  # type: ignore[arg-type]
                for m in batch
            ]
            for batch in batches
        ]
    clock_a, clock_b = Clock(), Clock()
    batched = MessageStore.in_memory(config=cfg, clock_ms=clock_a)
    looped = MessageStore.in_memory(config=cfg, clock_ms=clock_b)
    for batch in batches:
        got = batched.put_many([_copy(m) for m in batch])
        want = reference_put_many(looped, [_copy(m) for m in batch])
        assert got == want
        for result in got:
            assert decode_record(
                batched.commitlog.view_at(result.physical_offset, result.total_size)
            )
    batched.flush_all()
    looped.flush_all()
    assert isinstance(batched.backend, MemoryBackend) and isinstance(looped.backend, MemoryBackend)
    got_files, want_files = files_of(batched.backend), files_of(looped.backend)
    assert sorted(got_files) == sorted(want_files)
    assert [p for p in got_files if got_files[p] != want_files[p]] == []
    for topic in ("A", "B", LONG_TOPIC):
        for queue_id in range(3):
            a = batched.get_messages(topic, queue_id, 0, 1000, max_bytes=1 << 30)
            b = looped.get_messages(topic, queue_id, 0, 1000, max_bytes=1 << 30)
            assert [(q, p, bytes(v)) for q, p, v in a.messages] == [
                (q, p, bytes(v)) for q, p, v in b.messages
            ]
        for key in ("k1", "order-9", f"{7:032X}"):
            assert [r.physical_offset for r in batched.query_by_key(topic, key)] == [
                r.physical_offset for r in looped.query_by_key(topic, key)
            ]


def _fields(message: PutMessage) -> dict[str, object]:
    return {name: getattr(message, name) for name in message.__struct_fields__}


def _copy(message: PutMessage) -> PutMessage:
    """Each store gets its own objects (the broker hands put its messages to keep)."""
    fields = _fields(message)
    if message.properties is not None:
        fields["properties"] = dict(message.properties)
    return PutMessage(**fields)  # type: ignore[arg-type]


def test_a_batch_takes_consecutive_queue_offsets_and_a_store_time_per_record() -> None:
    with MessageStore.in_memory(clock_ms=Clock()) as store:
        store.put(PutMessage(topic="T", body=b"first"))
        results = store.put_many([PutMessage(topic="T", body=b"%d" % i) for i in range(5)])
        assert [r.store_timestamp for r in results] == [
            1_700_000_000_000 + 3 * i for i in range(2, 7)
        ]
        assert store.last_store_timestamp == results[-1].store_timestamp
        assert [r.queue_offset for r in results] == [1, 2, 3, 4, 5]
        assert [r.physical_offset for r in results[1:]] == [r.end_offset for r in results[:-1]]
        assert store.put_many([]) == []


def test_a_batch_never_straddles_a_segment() -> None:
    cfg = config(True, False)
    with MessageStore.in_memory(config=cfg) as store:
        filler = store.put(PutMessage(topic="T", body=bytes(6000)))
        while store.commitlog.room_left() > 3000:
            filler = store.put(PutMessage(topic="T", body=bytes(1000)))
        batch = [PutMessage(topic="T", body=bytes(500)) for _ in range(8)]  # ~5 KB: no room left
        results = store.put_many(batch)
        assert {r.physical_offset // SEGMENT for r in results} == {1}
        assert results[0].physical_offset == SEGMENT
        # the END-OF-FILE filler closes the first segment right after the first record
        blank = store.commitlog.view_at(filler.end_offset, END_FILE_MIN_BLANK_LENGTH)
        assert int.from_bytes(blank[4:8], "big") == 0xCBD43194


def test_a_batch_larger_than_a_segment_is_written_in_segment_sized_parts() -> None:
    with MessageStore.in_memory(config=config(True, False)) as store:
        batch = [PutMessage(topic="T", body=bytes(3000)) for _ in range(50)]  # ~155 KB
        results = store.put_many(batch)
        segments = [r.physical_offset // SEGMENT for r in results]
        assert segments == sorted(segments) and set(segments) == {0, 1, 2}
        for result in results:  # no record crosses a segment end
            assert result.physical_offset // SEGMENT == (result.end_offset - 1) // SEGMENT
        assert [r.queue_offset for r in results] == list(range(50))


def test_one_bad_message_refuses_the_whole_batch() -> None:
    with MessageStore.in_memory(config=config(True, False)) as store:
        store.put(PutMessage(topic="T", body=b"before"))
        end = store.max_physical_offset
        for bad in (
            PutMessage(topic="T", body=bytes(LIMITS.body_size_max + 1)),
            PutMessage(topic="bad topic", body=b"x"),
            PutMessage(topic="T", body=b"x", properties={"p": "v" * 2000}),
        ):
            with pytest.raises(LimitExceededError):
                store.put_many([PutMessage(topic="T", body=b"ok"), bad])
            assert store.max_physical_offset == end
            assert store.max_offset("T", 0) == 1


def test_state_records_in_a_batch_apply() -> None:
    with MessageStore.in_memory() as store:
        target = store.put(PutMessage(topic="T", body=b"m")).physical_offset
        store.set_state(target, MessageState.UNAVAILABLE)
        assert store.state_of(target) is MessageState.UNAVAILABLE
        # a state change written through put_many (as a batch of the broker's own records)
        body = encode_state_body(target, MessageState.AVAILABLE)
        store.put_many([PutMessage(topic=STATE_TOPIC, body=body)])
        assert store.state_of(target) is MessageState.AVAILABLE
