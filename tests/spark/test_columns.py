"""The columnar parser (numpy + pyarrow, no Spark): every column against the store's own
``decode_record``, byte ranges, CRCs, filters, and following a live commitlog."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from pocketmq.sparkexport.columns import ARROW_SCHEMA, count_range, read_buffer, read_range  # noqa: E402
from pocketmq.sparkexport.scan import (  # noqa: E402
    RangePlan,
    RangeStats,
    ReadOptions,
    StateSnapshot,
    plan_store,
)
from pocketmq.sparkexport.stream import StoreTail  # noqa: E402
from pocketmq.store.message_store import MessageStore, PutMessage  # noqa: E402
from pocketmq.store.record import (  # noqa: E402
    Host,
    MessageRecord,
    SysFlag,
    decode_record,
    encode_blank,
    encode_properties,
    encode_record,
)
from tests.spark.stores import (  # noqa: E402
    SMALL,
    Clock,
    expected_rows,
    flip_byte,
    normalise,
    rocketmq_store,
    row_of,
    segment_paths,
    varied_messages,
    write_store,
)

fast = settings(database=None, deadline=None, max_examples=40)
EVERYTHING = ReadOptions(include_system_topics=True)


def rows_of(batches) -> list[dict]:  # type: ignore[no-untyped-def]
    rows = []
    for batch in batches:
        assert batch.schema.equals(ARROW_SCHEMA)
        rows.extend(normalise(row) for row in batch.to_pylist())
    return rows


def read_store_rows(root: Path, options: ReadOptions | None = None) -> tuple[list[dict], list]:
    options = options or ReadOptions()
    plan = plan_store(root, options)
    rows, stats = [], []
    for part in plan.ranges:
        stat = RangeStats(part.path, part.lo, part.hi)
        rows.extend(rows_of(read_range(part, options, stat)))
        stats.append(stat)
    return rows, stats


# -- random records against decode_record ----------------------------------------------------

hosts = st.one_of(
    st.builds(lambda a, p: Host(a, p), st.binary(min_size=4, max_size=4), st.integers(0, 65535)),
    st.builds(lambda a, p: Host(a, p), st.binary(min_size=16, max_size=16), st.integers(0, 65535)),
)
names = st.text(alphabet="abcXYZ09_-%|", min_size=1, max_size=12)
values = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x00\x01\x02"), max_size=12
)
records = st.builds(
    MessageRecord,
    topic=st.one_of(
        names, st.text(alphabet="ab", min_size=121, max_size=200).map("%RETRY%".__add__)
    ),
    body=st.binary(max_size=300),
    queue_id=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=st.dictionaries(names, values, max_size=5),
    sysflag=st.sampled_from(
        [
            0,
            SysFlag.TRANSACTION_PREPARED_TYPE,
            SysFlag.TRANSACTION_COMMIT_TYPE,
            SysFlag.TRANSACTION_ROLLBACK_TYPE,
            SysFlag.MULTI_TAGS,
        ]
    ),
    born_timestamp=st.integers(-(2**40), 2**45),
    born_host=hosts,
    store_timestamp=st.integers(0, 2**45),
    store_host=hosts,
    reconsume_times=st.integers(0, 20),
    prepared_transaction_offset=st.integers(0, 2**40),
    queue_offset=st.integers(0, 2**40),
)


def segment_of(
    items: list[MessageRecord], start: int, *, append_crc: bool, raw_props: list[bytes | None]
):  # type: ignore[no-untyped-def]
    data = bytearray()
    expected = []
    for record, raw in zip(items, raw_props, strict=True):
        record.physical_offset = start + len(data)
        encoded = encode_record(record, append_crc=append_crc, properties_bytes=raw)
        expected.append(row_of(decode_record(encoded), record.physical_offset, True, "seg"))
        data += encoded
    data += encode_blank(64)
    data += bytes(56)
    return bytes(data), expected


@given(
    items=st.lists(records, min_size=1, max_size=12),
    odd=st.lists(
        st.sampled_from(
            [
                None,
                b"a\x01b\x02c\x01d",
                b"\x01x\x02k\x01\x02",
                b"TAGS\x01t\x02TAGS\x01u\x02KEYS\x01 a  b \x02",
                b"noval\x02x\x01y",
                b"",
                b"a\x01\x01b",
            ]
        ),
        min_size=12,
        max_size=12,
    ),
    append_crc=st.booleans(),
    batch_rows=st.integers(1, 5),
)
@fast
def test_every_column_matches_decode_record(items, odd, append_crc, batch_rows) -> None:  # type: ignore[no-untyped-def]
    start = 1 << 30
    raw = [None if o is None else o for o in odd[: len(items)]]
    buf, expected = segment_of(items, start, append_crc=append_crc, raw_props=raw)
    crc_from = 0 if append_crc else None
    plan = RangePlan("seg", start, 0, len(buf), True, StateSnapshot(), crc_from)
    options = ReadOptions(include_system_topics=True, batch_rows=batch_rows)
    stats = RangeStats("seg", start, start + len(buf))
    got = rows_of(read_buffer(buf, plan, options, stats))
    assert got == expected
    assert stats.records == len(items) and stats.bad_crc == 0 and stats.torn_tail is None


def test_properties_follow_rocketmq_parse_rules() -> None:
    record = MessageRecord(topic="T", body=b"x")
    text = encode_properties({"KEYS": " k1  k2 ", "TAGS": "t"}) + "\x01lonely\x02novalue\x01\x02x"
    buf, expected = segment_of([record], 0, append_crc=False, raw_props=[text.encode()])
    got = rows_of(
        read_buffer(
            buf,
            RangePlan("seg", 0, 0, len(buf), True, StateSnapshot()),
            EVERYTHING,
            RangeStats("seg", 0, 0),
        )
    )
    assert got[0]["properties"] == {"KEYS": " k1  k2 ", "TAGS": "t"}
    assert got[0]["keys"] == ["k1", "k2"]
    assert got == expected


# -- a store written through MessageStore ------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store")
    write_store(root, varied_messages(200))
    return root


def test_a_written_store_reads_back_with_states_and_ids(store: Path) -> None:
    rows, stats = read_store_rows(store)
    assert rows == expected_rows(store)
    assert len(segment_paths(store)) > 2
    by_state = {row["state"]: row for row in rows if row["state"] != "available"}
    assert by_state["poisoned"]["state_reason"] == "16 retries"
    assert by_state["marked_for_deletion"]["state_reason"] == "gone"
    assert "unavailable" not in by_state  # made available again
    assert any(row["version"] == 2 for row in rows)
    assert any(row["born_host"].startswith("[2001:db8::7]") for row in rows)
    assert sum(s.bad_crc for s in stats) == 0
    everything, _ = read_store_rows(store, EVERYTHING)
    assert everything == expected_rows(store, system=True)
    assert any(row["topic"] == "rmq_sys_MESSAGE_STATE" for row in everything)


def test_filters(store: Path) -> None:
    rows, _ = read_store_rows(store)
    orders, _ = read_store_rows(
        store, ReadOptions(topics=frozenset({"Orders", "rmq_sys_MESSAGE_STATE"}))
    )
    assert orders == [r for r in rows if r["topic"] == "Orders"]  # system topics stay out
    middle = sorted(r["store_timestamp_ms"] for r in rows)[10:20]
    timed, _ = read_store_rows(store, ReadOptions(start_ms=middle[0], end_ms=middle[-1]))
    assert [r["store_timestamp_ms"] for r in timed] == middle[:-1]
    poisoned, _ = read_store_rows(store, ReadOptions(states=frozenset({20, 30})))
    assert {r["state"] for r in poisoned} == {"poisoned", "marked_for_deletion"}
    assert len(poisoned) == 2


def test_small_byte_ranges_give_the_same_rows(store: Path) -> None:
    rows, _ = read_store_rows(store)
    split, _ = read_store_rows(store, ReadOptions(max_partition_bytes=3000, batch_rows=7))
    assert len(plan_store(store, ReadOptions(max_partition_bytes=3000)).ranges) > 3 * len(
        segment_paths(store)
    )
    assert split == rows


def test_bad_crc_is_a_row_and_the_record_crc_guards_the_header(store: Path, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(store, root)
    rows, _ = read_store_rows(root)
    body_hit, header_hit = rows[3], rows[6]
    segment = Path(body_hit["segment"])
    flip_byte(segment, body_hit["physical_offset"] - int(segment.name) + 100)  # in the body
    segment = Path(header_hit["segment"])
    flip_byte(segment, header_hit["physical_offset"] - int(segment.name) + 13)  # QUEUEID
    after, stats = read_store_rows(root)
    assert len(after) == len(rows)
    bad = [r["physical_offset"] for r in after if not r["crc_ok"]]
    assert bad == [body_hit["physical_offset"], header_hit["physical_offset"]]
    assert sum(s.bad_crc for s in stats) == 2


def test_count_range_reports_without_building_columns(store: Path) -> None:
    plan = plan_store(store, ReadOptions())
    records = 0
    for part in plan.ranges:
        stats = RangeStats(part.path, part.lo, part.hi)
        with (
            open(part.path, "rb") as handle,
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf,
        ):
            count_range(buf, part, stats)
        records += stats.records
    assert records == len(expected_rows(store, system=True))


def test_a_rocketmq_store_reads_back(tmp_path: Path) -> None:
    expected = rocketmq_store(tmp_path)
    rows, stats = read_store_rows(tmp_path)
    for row in expected:
        row["state"], row["state_reason"] = "available", None
    assert rows == expected
    assert any(
        r["store_host"] == "[fe80::1]:10911" and r["offset_msg_id"].startswith("FE80") for r in rows
    )
    assert all(s.torn_tail is None and not s.damaged for s in stats)


# -- following a live commitlog ------------------------------------------------------------------


def test_the_tail_advances_over_complete_records_only(tmp_path: Path) -> None:
    tail = StoreTail(tmp_path)
    assert tail.advance(0, None) == (0, 0)  # nothing written yet
    with MessageStore.open(tmp_path, config=SMALL, clock_ms=Clock()) as store:
        results = store.put_many(PutMessage(topic="T", body=bytes(3000)) for _ in range(50))
        end = results[-1].end_offset
        assert tail.advance(0, None) == (end, 50)
        assert tail.advance(results[10].physical_offset, 5) == (results[15].physical_offset, 5)
        # A last record whose CRC property is not written yet is held back.
        last = results[-1]
        segment = segment_paths(tmp_path)[-1]
        position = last.physical_offset - int(segment.name) + last.total_size - 5
        flip_byte(segment, position)
        assert tail.advance(results[40].physical_offset, None) == (last.physical_offset, 9)
        flip_byte(segment, position)
        more = store.put(PutMessage(topic="T", body=b"later"))
        assert tail.advance(end, None) == (more.end_offset, 1)
    assert tail.advance(0, 20)[1] == 20


def test_the_fast_walk_is_not_fooled_by_a_body_that_looks_like_a_record() -> None:
    from pocketmq.sparkexport.columns import FastWalker, Words, layout
    from pocketmq.sparkexport.scan import scan_range, walk

    start = 4096
    data = bytearray()
    for i in range(120):
        body = bytes(100 + i % 7)
        record = MessageRecord(topic="T", body=body, physical_offset=start + len(data))
        if i == 60:  # a body holding a fake record header that names its own address
            fake_at = len(data) + 88 + 10  # BODY starts 88 bytes into a V1/IPv4 record
            fake = bytearray(encode_record(MessageRecord(topic="F", body=b"x" * 20)))
            fake[28:36] = (start + fake_at).to_bytes(8, "big")
            record = MessageRecord(
                topic="T",
                body=bytes(10) + bytes(fake) + bytes(30),
                physical_offset=start + len(data),
            )
        data += encode_record(record)
    data += encode_blank(200) + bytes(192)
    buf = bytes(data)
    plan = RangePlan("seg", start, 0, len(buf), True, StateSnapshot())
    words = Words(buf)

    def positions(walker) -> list[int]:  # type: ignore[no-untyped-def]
        found: list[int] = []
        stats = RangeStats("seg", 0, 0)
        for rows in scan_range(
            buf,
            plan,
            stats,
            lambda p, s: layout(words, p, s),
            max_records=50,
            max_bytes=1 << 20,
            walker=walker,
        ):
            found.extend(rows.pos.tolist())
        assert stats.damaged == [] and stats.torn_tail is None
        return found

    careful = positions(walk)
    assert len(careful) == 120
    assert positions(FastWalker(words, start)) == careful
    fooled = FastWalker(words, start)(buf, 0, len(buf), len(buf), 1000, 1 << 20)
    # The fake start broke the chain: walked record by record (up to the filler, which the
    # size-only walk passes on to the structure check).
    assert list(fooled[0])[: len(careful)] == careful
    clean = FastWalker(words, start)(buf, 0, careful[60], len(buf), 1000, 1 << 20)
    assert isinstance(clean[0], np.ndarray) and clean[0].tolist() == careful[:60]


def test_bytes_that_are_not_utf8_never_crash_the_reader() -> None:
    from pocketmq.store.errors import CorruptRecordError

    record = MessageRecord(topic="T", body=b"payload")
    props = b"k\x01\xff\xfe\x02TAGS\x01t\x02"
    buf = encode_record(record, properties_bytes=props) + encode_blank(64) + bytes(56)
    with pytest.raises(CorruptRecordError):
        decode_record(buf, 0)  # the store's reader refuses it
    plan = RangePlan("seg", 0, 0, len(buf), True, StateSnapshot())
    (row,) = rows_of(read_buffer(buf, plan, EVERYTHING, RangeStats("seg", 0, 0)))
    assert row["properties"] == {"k": "\ufffd\ufffd", "TAGS": "t"}
    assert row["tags"] == "t" and row["crc_ok"]  # the body CRC does not cover properties
