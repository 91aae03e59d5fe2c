"""The pure part of the exporter (no Spark, no Arrow): options, plans, walking, resync, states."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.sparkexport.scan import (
    RangePlan,
    RangeStats,
    ReadOptions,
    StateSnapshot,
    find_record,
    first_unsound,
    is_system_topic,
    parse_time_ms,
    plan_store,
    scan_range,
    split_ranges,
    walk,
)
from pocketmq.store.state import MessageState, StateChange, StateTable
from tests.spark.stores import rocketmq_store, segment_paths

fast = settings(database=None, deadline=None, max_examples=60)


def pure_validate(buf: bytes):  # type: ignore[no-untyped-def]
    def validate(positions: list[int], sizes: list[int]) -> tuple[int, list[int]]:
        good = first_unsound(buf, positions)
        return good, positions[:good]

    return validate


def plan_for(path: Path | str, start: int, lo: int, hi: int, *, last: bool) -> RangePlan:
    return RangePlan(str(path), start, lo, hi, last, StateSnapshot())


def positions_in(buf: bytes, plan: RangePlan, stats: RangeStats | None = None) -> list[int]:
    stats = stats or RangeStats(plan.path, plan.lo, plan.hi)
    found: list[int] = []
    for run in scan_range(buf, plan, stats, pure_validate(buf), max_records=7, max_bytes=1 << 20):
        found.extend(run)
    return found


# -- options -------------------------------------------------------------------------------


def test_options_are_parsed_case_insensitively() -> None:
    options = ReadOptions.from_options(
        {
            "path": "/x",
            "Topics": "A, B,,",
            "startTime": "2023-11-14T22:13:20",
            "ENDTIME": "1700000001000",
            "includeSystemTopics": "TRUE",
            "states": "poisoned, Marked-For-Deletion",
            "maxPartitionBytes": "64m",
            "batchRows": "1000",
        }
    )
    assert options.topics == frozenset({"A", "B"})
    assert options.start_ms == 1_700_000_000_000
    assert options.end_ms == 1_700_000_001_000
    assert options.include_system_topics
    assert options.states == {MessageState.POISONED, MessageState.MARKED_FOR_DELETION}
    assert options.max_partition_bytes == 64 << 20
    assert options.batch_rows == 1000
    assert not options.report
    assert ReadOptions.from_options({}).filters_rows  # system topics are left out by default
    assert not ReadOptions.from_options({"includeSystemTopics": "true"}).filters_rows


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "A"}, "unknown pocketmq option"),
        ({"states": "lost"}, "is not one of"),
        ({"maxPartitionBytes": "lots"}, "is not a size"),
        ({"maxPartitionBytes": "0"}, "must be positive"),
        ({"startTime": "yesterday"}, "ISO-8601"),
        ({"report": "maybe"}, "not true or false"),
    ],
)
def test_bad_options_are_refused_with_a_reason(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReadOptions.from_options(options)


def test_times_and_system_topics() -> None:
    assert parse_time_ms("t", "2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    assert parse_time_ms("t", "-5") == -5
    assert is_system_topic("rmq_sys_MESSAGE_STATE")
    assert is_system_topic("SCHEDULE_TOPIC_XXXX")
    assert is_system_topic("RMQ_SYS_TRANS_HALF_TOPIC")
    assert not is_system_topic("%DLQ%group")
    assert not is_system_topic("%RETRY%group")


@given(size=st.integers(1, 10_000), limit=st.integers(1, 3_000))
@fast
def test_split_ranges_cover_the_segment(size: int, limit: int) -> None:
    pieces = split_ranges(size, limit)
    assert pieces[0][0] == 0 and pieces[-1][1] == size
    assert all(a < b <= a + limit for a, b in pieces)
    assert all(pieces[i][1] == pieces[i + 1][0] for i in range(len(pieces) - 1))


# -- walking a RocketMQ segment ------------------------------------------------------------


@pytest.fixture(scope="module")
def rocketmq(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("rocketmq")
    return root, rocketmq_store(root)


def test_the_walk_finds_every_record_and_stops_at_the_filler(rocketmq) -> None:  # type: ignore[no-untyped-def]
    root, expected = rocketmq
    found = []
    paths = segment_paths(root)
    for i, path in enumerate(paths):
        buf = path.read_bytes()
        start = int(path.name)
        found.extend(
            start + p
            for p in positions_in(buf, plan_for(path, start, 0, len(buf), last=i == len(paths) - 1))
        )
    assert found == [row["physical_offset"] for row in expected]


def test_plan_store_lists_segments_and_splits_large_ones(rocketmq) -> None:  # type: ignore[no-untyped-def]
    root, _ = rocketmq
    (root / "commitlog" / "README.txt").write_text("not a segment")
    try:
        plan = plan_store(root, ReadOptions())
        assert len(plan.ranges) == len(segment_paths(root))
        assert plan.foreign_files == [str(root / "commitlog" / "README.txt")]
        assert [r.last_segment for r in plan.ranges] == [False] * (len(plan.ranges) - 1) + [True]
        split = plan_store(root, ReadOptions(max_partition_bytes=1000))
        assert len(split.ranges) == len(plan.ranges) * 5  # 4096-byte segments
        assert plan.ranges[0].record_crc_from is None  # RocketMQ writes no record CRC
    finally:
        (root / "commitlog" / "README.txt").unlink()


@given(cuts=st.lists(st.integers(1, 4095), max_size=6))
@fast
def test_any_byte_ranges_give_each_record_exactly_once(rocketmq, cuts: list[int]) -> None:  # type: ignore[no-untyped-def]
    root, _ = rocketmq
    path = segment_paths(root)[0]
    buf = path.read_bytes()
    whole = positions_in(buf, plan_for(path, 0, 0, len(buf), last=False))
    bounds = [0, *sorted(set(cuts)), len(buf)]
    pieces = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        if lo < hi:
            pieces.extend(positions_in(buf, plan_for(path, 0, lo, hi, last=False)))
    assert pieces == whole


def test_find_record_needs_the_physical_offset_to_match(rocketmq) -> None:  # type: ignore[no-untyped-def]
    root, expected = rocketmq
    path = segment_paths(root)[1]
    buf = path.read_bytes()
    start = int(path.name)
    first = next(r["physical_offset"] for r in expected if r["physical_offset"] >= start) - start
    assert find_record(buf, 0, len(buf), start) == first
    assert find_record(buf, 1, len(buf), start) > first
    assert find_record(buf, 0, len(buf), start + 1) is None  # wrong file name: nothing matches
    assert walk(buf, 0, len(buf), len(buf), 3, 1 << 20)[3] == "more"


# -- damage ----------------------------------------------------------------------------------


def test_damage_in_the_middle_is_skipped_and_reported(rocketmq) -> None:  # type: ignore[no-untyped-def]
    root, _ = rocketmq
    path = segment_paths(root)[0]
    buf = bytearray(path.read_bytes())
    whole = positions_in(bytes(buf), plan_for(path, 0, 0, len(buf), last=False))
    third = whole[2]
    buf[third : third + 4] = b"\xff\xff\xff\x7f"  # TOTALSIZE of the third record
    stats = RangeStats(str(path), 0, len(buf))
    found = positions_in(bytes(buf), plan_for(path, 0, 0, len(buf), last=False), stats)
    assert found == whole[:2] + whole[3:]
    assert len(stats.damaged) == 1
    assert f"at position {third}" in stats.damaged[0]
    assert f"{whole[3] - third} bytes skipped" in stats.damaged[0]
    assert stats.torn_tail is None


def test_a_torn_tail_is_skipped_and_counted_and_zeros_are_the_end(rocketmq) -> None:  # type: ignore[no-untyped-def]
    root, _ = rocketmq
    path = segment_paths(root)[-1]
    buf = bytearray(path.read_bytes())
    clean = RangeStats(str(path), 0, len(buf))
    whole = positions_in(bytes(buf), plan_for(path, 0, 0, len(buf), last=True), clean)
    assert clean.torn_tail is None and clean.damaged == []
    end = len(bytes(buf).rstrip(b"\0"))
    buf[end : end + 50] = bytes(range(1, 51))  # half a record's worth of garbage
    torn = RangeStats(str(path), 0, len(buf))
    assert positions_in(bytes(buf), plan_for(path, 0, 0, len(buf), last=True), torn) == whole
    assert torn.torn_tail_bytes == 50
    assert "50 bytes after it" in torn.torn_tail
    # The same bytes in a segment that is not the last are damage, not a torn tail.
    middle = RangeStats(str(path), 0, len(buf))
    positions_in(bytes(buf), plan_for(path, 0, 0, len(buf), last=False), middle)
    assert middle.torn_tail is None and "rest of the segment unreadable" in middle.damaged[0]


# -- states ----------------------------------------------------------------------------------


changes = st.lists(
    st.tuples(
        st.integers(0, 40),
        st.sampled_from(list(MessageState)),
        st.one_of(st.just(0), st.integers(1, 15)),
    ),
    max_size=25,
)


@given(changes)
@fast
def test_the_snapshot_answers_as_the_state_table(
    items: list[tuple[int, MessageState, int]],
) -> None:
    table = StateTable()
    for target, state, width in items:
        table.apply(StateChange(target, state, f"r{target}", 0, target + width if width else 0))
    snapshot = StateSnapshot.from_table(table)
    sliced = snapshot.slice(10, 30)
    for offset in range(60):
        change = table.change_of(offset)
        expected = (int(change.state), change.reason) if change else (1, None)
        assert snapshot.lookup(offset) == expected
        if 10 <= offset < 30:
            assert sliced.lookup(offset) == expected


# -- importing without Spark -----------------------------------------------------------------


def test_without_pyspark_the_message_says_what_to_install(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["pyspark"] = None  # as if it were not installed
        import pocketmq.sparkexport.scan, pocketmq.sparkexport.cli
        from pocketmq import sparkexport
        try:
            sparkexport.register
        except ImportError as error:
            print("register:", error)
        try:
            import pocketmq.sparkexport.source
        except ImportError as error:
            print("source:", error)
        (__import__("pathlib").Path({str(tmp_path)!r}) / "commitlog").mkdir()
        print("exit", sparkexport.cli.export_main({str(tmp_path)!r}, {str(tmp_path / "out")!r}, "parquet", None, False))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    hint = "from a pocketmq checkout: python3 -m pip install -e '.[spark]'"
    assert "register: the pocketmq Spark exporter needs pyspark" in result.stdout
    assert hint in result.stdout.splitlines()[0]
    assert hint in result.stdout.splitlines()[1]
    assert "exit 2" in result.stdout
    assert hint in result.stderr
