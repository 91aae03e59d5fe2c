"""Commitlog records to Arrow record batches, column by column (numpy and pyarrow, no pyspark).

Record boundaries come from :class:`FastWalker` (all starts of a window at once, found by their
magic code and self-address and checked to chain exactly) or, where that does not apply, from
the record-by-record :func:`sparkexport.scan.walk`. Everything after it is vectorised: fixed
fields come from one gather of the 88-byte record heads, strings and bodies are cut out of the
mapped file by Arrow ``take``, properties are split by Arrow compute kernels, and only the CRC
is a loop (``store.crc.crc32`` per record). Rows the options drop are dropped right after the topic and store
time are known, before the expensive columns are built.

The schema (:data:`ARROW_SCHEMA`) is what Spark expects for :data:`SPARK_SCHEMA_DDL` byte for
byte: int for 4-byte fields, long for 8-byte ones and for unsigned 4-byte ones (magic, CRC),
``timestamp[us, UTC]``, 32-bit offsets.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pocketmq.sparkexport.scan import (
    STATE_LABELS,
    TRANSACTION_LABELS,
    WALK_MORE,
    WALK_RANGE,
    RangePlan,
    RangeStats,
    ReadOptions,
    scan_range,
    walk,
)
from pocketmq.store.crc import crc32 as fast_crc32
from pocketmq.store.record import (
    BODY_AT_V4,
    BORN_ADDRESS_AT,
    CRC_PROPERTY_LENGTH,
    CRC_PROPERTY_NAME,
    CRC_PROPERTY_PREFIX,
    FIELD_AT,
    FIELDS,
    HOST_SIZE_V4,
    HOST_SIZE_V6,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    PHYSICAL_OFFSET_AT,
    RECONSUME_TIMES_AT_V4,
    STORE_ADDRESS_AT_V4,
    STORE_TIMESTAMP_AT_V4,
    Host,
    SysFlag,
)
from pocketmq.store.topics import is_system_topic

__all__ = [
    "ARROW_SCHEMA",
    "REPORT_ARROW_SCHEMA",
    "SPARK_SCHEMA_DDL",
    "read_buffer",
    "read_range",
    "report_batch",
]

_STRING = pa.string()
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_KEYS_TYPE = pa.list_(pa.field("element", _STRING))
_MAP_TYPE = pa.map_(_STRING, _STRING)

# (name, Arrow type, Spark DDL type)
COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("physical_offset", pa.int64(), "bigint"),
    ("size", pa.int32(), "int"),
    ("magic", pa.int64(), "bigint"),
    ("version", pa.int32(), "int"),
    ("body_crc", pa.int64(), "bigint"),
    ("crc_ok", pa.bool_(), "boolean"),
    ("queue_id", pa.int32(), "int"),
    ("queue_offset", pa.int64(), "bigint"),
    ("flag", pa.int32(), "int"),
    ("sysflag", pa.int32(), "int"),
    ("transaction_type", _STRING, "string"),
    ("born_timestamp", _TIMESTAMP, "timestamp"),
    ("born_timestamp_ms", pa.int64(), "bigint"),
    ("born_host", _STRING, "string"),
    ("store_timestamp", _TIMESTAMP, "timestamp"),
    ("store_timestamp_ms", pa.int64(), "bigint"),
    ("store_host", _STRING, "string"),
    ("reconsume_times", pa.int32(), "int"),
    ("prepared_transaction_offset", pa.int64(), "bigint"),
    ("topic", _STRING, "string"),
    ("tags", _STRING, "string"),
    ("keys", _KEYS_TYPE, "array<string>"),
    ("properties", _MAP_TYPE, "map<string,string>"),
    ("body", pa.binary(), "binary"),
    ("msg_id", _STRING, "string"),
    ("offset_msg_id", _STRING, "string"),
    ("state", _STRING, "string"),
    ("state_reason", _STRING, "string"),
    ("segment", _STRING, "string"),
]
ARROW_SCHEMA = pa.schema([pa.field(name, kind) for name, kind, _ in COLUMNS])
SPARK_SCHEMA_DDL = ", ".join(f"{name} {ddl}" for name, _, ddl in COLUMNS)

REPORT_COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("segment", _STRING, "string"),
    ("range_start", pa.int64(), "bigint"),  # physical offsets of the partition's byte range
    ("range_end", pa.int64(), "bigint"),
    ("records", pa.int64(), "bigint"),
    ("bytes", pa.int64(), "bigint"),
    ("bad_crc", pa.int64(), "bigint"),
    ("torn_tail", _STRING, "string"),
    ("torn_tail_bytes", pa.int64(), "bigint"),
    ("damaged", _KEYS_TYPE, "array<string>"),
    ("foreign_file", _STRING, "string"),
]
REPORT_ARROW_SCHEMA = pa.schema([pa.field(name, kind) for name, kind, _ in REPORT_COLUMNS])
REPORT_SPARK_SCHEMA_DDL = ", ".join(f"{name} {ddl}" for name, _, ddl in REPORT_COLUMNS)

_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_MIN_MS, _MAX_MS = -62_135_596_800_000, 253_402_300_799_999  # years 1 to 9999
_TX_LABELS = pa.array([TRANSACTION_LABELS[k << 2] for k in range(4)], _STRING)
_STATE_CODES = sorted(STATE_LABELS)
_STATE_LABEL_ARRAY = pa.array([STATE_LABELS[c] for c in _STATE_CODES], _STRING)
_STATE_INDEX = np.zeros(max(_STATE_CODES) + 1, dtype=np.int8)
for _i, _code in enumerate(_STATE_CODES):
    _STATE_INDEX[_code] = _i
_CRC_PREFIX_WORD = int.from_bytes(CRC_PROPERTY_NAME.encode(), "big")  # "__CRC32#", 8 bytes
_CRC_DIGITS_AT = len(CRC_PROPERTY_PREFIX)  # "__CRC32#" 0x01, then ten digits
_CRC_KEY_PREFIX = CRC_PROPERTY_NAME + "\x01"
# From the reconsume times to the body: RECONSUMETIMES, PREPARED TX OFFSET, the body length.
_RECONSUME_TO_BODY = BODY_AT_V4 - RECONSUME_TIMES_AT_V4


def _fixed_dtype() -> np.dtype:
    """Every fixed field of a record with IPv4 hosts, up to the body length (88 bytes), as
    ``store.record.FIELDS`` lays them out: one gather per run of records. A host (address and
    port) is read as one 8-byte key; records with an IPv6 host have the fields after BORNHOST
    elsewhere."""
    kinds = {"i": ">i4", "I": ">u4", "q": ">i8"}
    names, formats, offsets = [], [], []
    for name, code in FIELDS:
        if name.endswith("_port"):
            continue  # read with its address
        names.append(name.removesuffix("_address") + "_host" if name.endswith("_address") else name)
        formats.append(">u8" if name.endswith("_address") else kinds[code])
        offsets.append(FIELD_AT[name])
    return np.dtype(
        {"names": names, "formats": formats, "offsets": offsets, "itemsize": BODY_AT_V4}
    )


_FIXED = _fixed_dtype()


class Words:
    """Big-endian integers at *every* byte position of a buffer: overlapping, unaligned numpy
    views (stride 1), so reading a field of n records is one gather of n values."""

    def __init__(self, buf: Any) -> None:
        self.u8 = np.frombuffer(buf, dtype=np.uint8)
        size = len(self.u8)
        self.size = size

        def view(kind: Any, width: int) -> np.ndarray:
            return np.ndarray(
                shape=(max(size - width + 1, 0),), dtype=kind, buffer=buf, strides=(1,)
            )

        self.i8 = view(">i8", 8)
        self.u8be = view(">u8", 8)
        self.i4 = view(">i4", 4)
        self.u4 = view(">u4", 4)
        self.i2 = view(">i2", 2)
        self.fixed = view(_FIXED, _FIXED.itemsize)

    def get(self, kind: str, at: np.ndarray) -> np.ndarray:
        """Values of ``kind`` (i8, u8be, i4, u4, i2) at positions ``at`` (clipped into range)."""
        table = getattr(self, kind)
        return table[np.minimum(at, len(table) - 1)].astype(np.int64)

    def release(self) -> None:
        for name in ("u8", "i8", "u8be", "i4", "u4", "i2", "fixed"):
            setattr(self, name, None)


class FastWalker:
    """:func:`sparkexport.scan.walk` without the per-record loop, where it can.

    Every record names its own address (PHYSICALOFFSET = segment start + position), so record
    starts can be found all at once: the magic code's first byte, then the full magic code and
    the self-address, checked with numpy over a window. The candidates are taken only if they
    chain exactly from where the walk stands (each start + TOTALSIZE = the next start), which
    is what the record-by-record walk would have followed; anything else (a filler, damage, a
    store whose offsets do not match its file names) falls back to :func:`walk`."""

    def __init__(self, words: Words, segment_start: int) -> None:
        self.words = words
        self.segment_start = segment_start
        self.average = 512  # record size, learnt as we go: sizes the search window

    def __call__(
        self, buf: Any, pos: int, stop: int, end: int, max_records: int, max_bytes: int
    ) -> tuple[Any, Any, int, str]:
        window = min(max_bytes, max_records * self.average * 5 // 4 + 4096)
        limit = min(stop, pos + window, end - 8 + 1)
        words = self.words
        if limit - pos < 4096:
            return walk(buf, pos, stop, end, max_records, max_bytes)
        hits = np.flatnonzero(words.u8[pos + 4 : limit + 4] == 0xDA) + pos
        hits = hits[hits + PHYSICAL_OFFSET_AT + 8 <= end]
        magic = words.u4[hits + 4]
        hits = hits[(magic == MAGIC_V1) | (magic == MAGIC_V2)]
        hits = hits[words.i8[hits + PHYSICAL_OFFSET_AT] == hits + self.segment_start]
        if not len(hits) or hits[0] != pos:
            return walk(buf, pos, stop, end, max_records, max_bytes)
        hits = hits[:max_records]
        sizes = words.i4[hits].astype(np.int64)
        ends = hits + sizes
        if not (
            (sizes >= MIN_RECORD_SIZE).all()
            and (ends <= end).all()
            and (ends[:-1] == hits[1:]).all()
        ):
            return walk(buf, pos, stop, end, max_records, max_bytes)
        next_pos = int(ends[-1])
        self.average = max(MIN_RECORD_SIZE, (next_pos - pos) // len(hits))
        # Past the chain's end: the range end, or whatever is there, found by the next call.
        return hits, sizes, next_pos, WALK_RANGE if next_pos >= stop else WALK_MORE


def _system_mask(topics: pa.Array) -> np.ndarray:
    """Which rows are in a system topic, by ``store.topics.is_system_topic`` itself (the one
    definition: RocketMQ's set, the ``rmq_sys_`` prefix, ``<cluster>_REPLY_TOPIC``), asked once
    per distinct topic of the batch."""
    encoded = pc.dictionary_encode(topics)
    system = np.fromiter((is_system_topic(t) for t in encoded.dictionary.to_pylist()), dtype=bool)
    return system[encoded.indices.to_numpy(zero_copy_only=False)]


def _slices(
    region: pa.Buffer, base: int, starts: np.ndarray, ends: np.ndarray, kind: pa.DataType
) -> pa.Array:
    """Byte ranges ``[starts, ends)`` of a run of records as an Arrow array (one copy, in C++).

    The ranges ascend and do not overlap, so ``region`` is described zero-copy as ranges and the
    gaps between them; ``take`` keeps the ranges."""
    count = len(starts)
    if count == 0:
        return pa.array([], kind)
    bounds = np.empty(2 * count, dtype=np.int64)
    bounds[0::2] = starts - base
    bounds[1::2] = ends - base
    source = pa.Array.from_buffers(
        kind, 2 * count - 1, [None, pa.py_buffer(bounds.astype(np.int32)), region]
    )
    result = source.take(pa.array(np.arange(0, 2 * count - 1, 2, dtype=np.int64)))
    if kind == _STRING:
        try:
            result.validate(full=True)
        except pa.ArrowInvalid:
            # Not UTF-8 (damage the body CRC does not cover): decode with replacement.
            raw = result.view(pa.binary())
            result = pa.array([v.decode("utf-8", "replace") for v in raw.to_pylist()], type=_STRING)
    return result


def _fixed_strings(count: int, width: int, data: bytes) -> pa.Array:
    offsets = (np.arange(count + 1, dtype=np.int64) * width).astype(np.int32)
    return pa.Array.from_buffers(_STRING, count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


@dataclass(slots=True)
class Layout:
    """Where each field of a run of sound records is (positions in the buffer)."""

    pos: np.ndarray
    size: np.ndarray
    fixed: np.ndarray  # _FIXED records; after born_timestamp only right where all_v4
    all_v4: bool
    magic: np.ndarray
    sysflag: np.ndarray
    born_v6: np.ndarray
    store_ts_at: np.ndarray
    store_host_at: np.ndarray
    store_v6: np.ndarray
    reconsume_at: np.ndarray
    body_at: np.ndarray
    body_len: np.ndarray
    topic_start: np.ndarray
    topic_len: np.ndarray
    props_start: np.ndarray
    props_len: np.ndarray

    def take(self, index: np.ndarray | slice) -> Layout:
        return Layout(
            *(
                value if name == "all_v4" else value[index]
                for name in self.__slots__
                for value in (getattr(self, name),)
            )
        )

    def __len__(self) -> int:
        return len(self.pos)

    @property
    def end(self) -> np.ndarray:
        return self.pos + self.size


def layout(words: Words, positions: list[int], sizes: list[int]) -> tuple[int, Layout]:
    """Check the records at ``positions`` as ``check_record`` does (magic, then every length);
    returns how many leading records are sound, and their layout."""
    pos = np.asarray(positions, dtype=np.int64)
    size = np.asarray(sizes, dtype=np.int64)
    if not len(pos):
        raise ValueError("no records to lay out")
    end = pos + size
    fixed = words.fixed[np.minimum(pos, len(words.fixed) - 1)]
    magic = fixed["magic"].astype(np.int64)
    sysflag = fixed["sysflag"].astype(np.int64)
    born_v6 = (sysflag & SysFlag.BORNHOST_V6) != 0
    store_v6 = (sysflag & SysFlag.STOREHOST_V6) != 0
    all_v4 = not (born_v6.any() or store_v6.any())
    if all_v4:
        store_ts_at = pos + STORE_TIMESTAMP_AT_V4
        store_host_at = pos + STORE_ADDRESS_AT_V4
        reconsume_at = pos + RECONSUME_TIMES_AT_V4
        body_at = pos + BODY_AT_V4
        body_len = fixed["body_length"].astype(np.int64)
    else:
        store_ts_at = pos + BORN_ADDRESS_AT + np.where(born_v6, HOST_SIZE_V6, HOST_SIZE_V4)
        store_host_at = store_ts_at + (STORE_ADDRESS_AT_V4 - STORE_TIMESTAMP_AT_V4)
        reconsume_at = store_host_at + np.where(store_v6, HOST_SIZE_V6, HOST_SIZE_V4)
        body_at = reconsume_at + _RECONSUME_TO_BODY
        body_len = words.get("i4", body_at - 4)
    topic_at = body_at + body_len
    ok = ((magic == MAGIC_V1) | (magic == MAGIC_V2)) & (body_at <= end)
    ok &= (body_len >= 0) & (topic_at + 3 <= end)
    topic_at = np.where(ok, topic_at, pos)
    v2 = magic == MAGIC_V2
    v1_len = words.u8[np.minimum(topic_at, words.size - 1)].view(np.int8).astype(np.int64)
    topic_len = np.where(v2, words.get("i2", topic_at), v1_len)
    topic_start = topic_at + np.where(v2, 2, 1)
    props_at = topic_start + topic_len
    ok &= (topic_len >= 0) & (props_at + 2 <= end)
    props_at = np.where(ok, props_at, pos)
    props_len = words.get("i2", props_at)
    ok &= props_at + 2 + props_len == end
    good = len(pos) if ok.all() else int(np.argmin(ok))
    result = Layout(
        pos,
        size,
        fixed,
        all_v4,
        magic,
        sysflag,
        born_v6,
        store_ts_at,
        store_host_at,
        store_v6,
        reconsume_at,
        body_at,
        body_len,
        topic_start,
        topic_len,
        props_at + 2,
        props_len,
    )
    return good, result if good == len(pos) else result.take(slice(0, good))


def _hosts(
    words: Words, at: np.ndarray, v6: np.ndarray
) -> tuple[pa.Array, list[bytes], np.ndarray]:
    """Host strings (``ip:port``, ``[ip6]:port``); also the packed address+port of each row as
    stored (``raws[which[row]]``), for the offset message IDs."""
    count = len(at)
    which = np.zeros(count, dtype=np.int64)
    raws: list[bytes] = []
    v4 = ~v6
    if v4.all() and count:
        keys = words.u8be[at]
        first = keys[0]
        if (keys == first).all():  # the usual case: one host for the whole run
            raws.append(int(first).to_bytes(8, "big"))
        else:
            unique, inverse = np.unique(keys.astype(np.uint64), return_inverse=True)
            raws.extend(int(k).to_bytes(8, "big") for k in unique)
            which[:] = inverse.reshape(-1)
    else:
        for row in range(count):
            start = int(at[row])
            raw = bytes(words.u8[start : start + (HOST_SIZE_V6 if v6[row] else HOST_SIZE_V4)])
            which[row] = len(raws)
            raws.append(raw)
    labels = [str(Host(raw[:-4], int.from_bytes(raw[-4:], "big", signed=True))) for raw in raws]
    if len(labels) == 1:
        text = labels[0].encode("ascii")
        return _fixed_strings(count, len(text), text * count), raws, which
    return pa.array(labels, _STRING).take(pa.array(which)), raws, which


def _offset_msg_ids(physical: np.ndarray, raws: list[bytes], which: np.ndarray) -> pa.Array:
    """``ids.offset_msg_id_from_packed`` for every row: store host bytes + offset, upper hex."""
    count = len(physical)
    octets = physical.astype(">i8").view(np.uint8).reshape(count, 8)
    digits = np.empty((count, 16), dtype=np.uint8)
    digits[:, 0::2] = _HEX[octets >> 4]
    digits[:, 1::2] = _HEX[octets & 15]
    prefixes = [raw.hex().upper().encode("ascii") for raw in raws]
    widths = {len(p) for p in prefixes}
    if len(widths) == 1:
        width = widths.pop()
        table = np.frombuffer(b"".join(prefixes), dtype=np.uint8).reshape(len(prefixes), width)
        text = np.empty((count, width + 16), dtype=np.uint8)
        text[:, :width] = table[which]
        text[:, width:] = digits
        return _fixed_strings(count, width + 16, text.tobytes())
    values = [
        prefixes[w].decode() + d.tobytes().decode()
        for w, d in zip(which.tolist(), digits, strict=True)
    ]
    return pa.array(values, _STRING)


def _timestamps(ms: np.ndarray) -> pa.Array:
    bad = (ms < _MIN_MS) | (ms > _MAX_MS)
    micros = np.where(bad, 0, ms) * 1000
    return pa.array(micros, pa.int64(), mask=bad if bad.any() else None).cast(_TIMESTAMP)


def _properties(props: pa.Array, count: int) -> pa.Array:
    """RocketMQ's parse: pairs split on 0x02; a pair needs 0x01 neither first nor last."""
    pairs = pc.split_pattern(props, "\x02")
    flat = pc.list_flatten(pairs)
    parents = pc.list_parent_indices(pairs)
    where = pc.find_substring(flat, "\x01")
    keep = pc.and_(pc.greater(where, 0), pc.less(where, pc.subtract(pc.binary_length(flat), 1)))
    # The store's whole-record CRC is not part of the message (as ``decode_record`` has it).
    keep = pc.and_(keep, pc.invert(pc.starts_with(flat, _CRC_KEY_PREFIX)))
    kept = flat.filter(keep)
    kept_parents = parents.filter(keep).to_numpy(zero_copy_only=False)
    halves = pc.list_flatten(pc.split_pattern(kept, "\x01", max_splits=1))
    keys = halves.take(pa.array(np.arange(0, len(halves), 2)))
    values = halves.take(pa.array(np.arange(1, len(halves), 2)))
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(kept_parents, minlength=count), out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets.astype(np.int32)), keys, values, type=_MAP_TYPE)


def _keys(keys_text: pa.Array, count: int) -> pa.Array:
    """The KEYS property split on spaces (MessageConst.KEY_SEPARATOR), empty tokens dropped."""
    tokens = pc.split_pattern(keys_text, " ")
    flat = pc.list_flatten(tokens)
    parents = pc.list_parent_indices(tokens)
    keep = pc.greater(pc.binary_length(flat), 0)
    kept = flat.filter(keep)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(
        np.bincount(parents.filter(keep).to_numpy(zero_copy_only=False), minlength=count),
        out=offsets[1:],
    )
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), kept, type=_KEYS_TYPE)


def _states(plan: RangePlan, physical: np.ndarray) -> tuple[np.ndarray, list[str | None] | None]:
    states = plan.states
    codes = np.ones(len(physical), dtype=np.int64)
    reasons: list[str | None] | None = None
    if states.span_starts:
        starts = np.asarray(states.span_starts, dtype=np.int64)
        index = np.searchsorted(starts, physical, side="right") - 1
        ends = np.asarray(states.span_ends, dtype=np.int64)
        inside = (index >= 0) & (physical < ends[np.maximum(index, 0)])
        if inside.any():
            span_codes = np.asarray(states.span_codes, dtype=np.int64)
            codes[inside] = span_codes[index[inside]]
            reasons = [None] * len(physical)
            for row in np.flatnonzero(inside).tolist():
                reasons[row] = states.span_reasons[index[row]]
    if states.singles:
        targets = np.fromiter(states.singles, dtype=np.int64, count=len(states.singles))
        hits = np.flatnonzero(np.isin(physical, targets))
        if len(hits):
            reasons = reasons or [None] * len(physical)
            for row in hits.tolist():
                code, reason = states.singles[int(physical[row])]
                codes[row] = code
                reasons[row] = reason
    return codes, reasons


class BatchBuilder:
    """Turns runs of sound records of one buffer into record batches (and counts bad CRCs)."""

    def __init__(self, buf: Any, plan: RangePlan, options: ReadOptions, stats: RangeStats) -> None:
        self.buf = buf
        self.words = Words(buf)
        self.view = memoryview(buf)
        self.plan = plan
        self.options = options
        self.stats = stats
        self.segment = plan.path.encode("utf-8")
        self.wanted = (
            pa.array(sorted(options.topics), _STRING) if options.topics is not None else None
        )

    def close(self) -> None:
        self.view.release()
        self.words.release()

    def validate(self, positions: list[int], sizes: list[int]) -> tuple[int, Layout]:
        return layout(self.words, positions, sizes)

    def crc_ok(self, rows: Layout) -> np.ndarray:
        """Body CRC, or the whole-record CRC where the store wrote one (``storeFormat.json``)."""
        plan = self.plan
        physical = plan.segment_start + rows.pos
        end = rows.end
        if plan.record_crc_from is None:
            needs = np.zeros(len(rows), dtype=bool)
        else:
            needs = physical >= plan.record_crc_from
            if plan.record_crc_until is not None:
                needs &= physical < plan.record_crc_until
        starts = np.where(needs, rows.pos, rows.body_at)
        stops = np.where(needs, end - CRC_PROPERTY_LENGTH, rows.body_at + rows.body_len)
        crc32, buf = fast_crc32, self.buf  # slicing the mmap (a copy) beats memoryview slices
        computed = np.fromiter(
            [crc32(buf[a:b]) for a, b in zip(starts.tolist(), stops.tolist(), strict=True)],
            dtype=np.int64,
            count=len(rows),
        )

        computed &= 0x7FFFFFFF
        ok = computed == rows.fixed["body_crc"].astype(np.int64)
        if needs.any():
            rows_needing = np.flatnonzero(needs)
            ok[rows_needing] = self._record_crc(
                end[rows_needing], rows.props_len[rows_needing], computed[rows_needing]
            )
        return ok

    def _record_crc(
        self, end: np.ndarray, props_len: np.ndarray, computed: np.ndarray
    ) -> np.ndarray:
        """The ``__CRC32#`` property closing each record (key, 0x01, ten digits least
        significant first, 0x02) is there and equals ``computed``."""
        words = self.words
        at = np.maximum(end - CRC_PROPERTY_LENGTH, 0)
        present = (
            (props_len >= CRC_PROPERTY_LENGTH)
            & (words.u8be[at] == _CRC_PREFIX_WORD)
            & (words.u8[at + len(CRC_PROPERTY_NAME)] == 1)
            & (words.u8[end - 1] == 2)
        )
        first = words.u8be[at + _CRC_DIGITS_AT].astype(np.uint64)  # digits 0-7
        last = words.i2[at + _CRC_DIGITS_AT + 8].astype(np.int64)  # digits 8-9
        stored = np.zeros(len(end), dtype=np.int64)
        for k in range(10):
            if k < 8:
                digit = ((first >> np.uint64(56 - 8 * k)) & np.uint64(0xFF)).astype(np.int64)
            else:
                digit = (last >> (8 * (9 - k))) & 0xFF
            digit -= 48
            present &= (digit >= 0) & (digit <= 9)
            stored += digit * 10**k
        return present & (stored == computed)

    def build(self, rows: Layout) -> pa.RecordBatch | None:
        options = self.options
        words = self.words
        base = int(rows.pos[0])
        region = pa.py_buffer(self.view[base : int(rows.end[-1])])
        count = len(rows)
        topics = _slices(region, base, rows.topic_start, rows.topic_start + rows.topic_len, _STRING)
        store_ms = (
            rows.fixed["store_timestamp"].astype(np.int64)
            if rows.all_v4
            else words.get("i8", rows.store_ts_at)
        )
        physical = self.plan.segment_start + rows.pos
        state_codes, state_reasons = _states(self.plan, physical)
        if options.filters_rows:
            keep = np.ones(count, dtype=bool)
            if self.wanted is not None:
                keep &= pc.is_in(topics, value_set=self.wanted).to_numpy(zero_copy_only=False)
            if not options.include_system_topics:
                keep &= ~_system_mask(topics)
            if options.start_ms is not None:
                keep &= store_ms >= options.start_ms
            if options.end_ms is not None:
                keep &= store_ms < options.end_ms
            if options.states is not None:
                keep &= np.isin(state_codes, np.fromiter(options.states, dtype=np.int64))
            if not keep.all():
                index = np.flatnonzero(keep)
                if len(index) == 0:
                    return None
                rows = rows.take(index)
                topics = topics.take(pa.array(index))
                store_ms, physical, state_codes = (
                    store_ms[index],
                    physical[index],
                    state_codes[index],
                )
                if state_reasons is not None:
                    state_reasons = [state_reasons[i] for i in index.tolist()]
                count = len(rows)
        self.stats.rows += count
        crc_ok = self.crc_ok(rows)
        self.stats.bad_crc += int(count - crc_ok.sum())
        pos = rows.pos
        sysflag = rows.sysflag.astype(np.int32)
        fixed = rows.fixed
        born_ms = fixed["born_timestamp"].astype(np.int64)
        if rows.all_v4:
            reconsume = fixed["reconsume_times"].astype(np.int32)
            prepared = fixed["prepared_transaction_offset"].astype(np.int64)
        else:
            reconsume = words.get("i4", rows.reconsume_at).astype(np.int32)
            prepared = words.get("i8", rows.reconsume_at + 4)
        born_hosts, _, _ = _hosts(words, pos + BORN_ADDRESS_AT, rows.born_v6)
        store_hosts, store_raws, store_which = _hosts(words, rows.store_host_at, rows.store_v6)
        properties = _properties(
            _slices(region, base, rows.props_start, rows.props_start + rows.props_len, _STRING),
            count,
        )
        body = _slices(region, base, rows.body_at, rows.body_at + rows.body_len, pa.binary())
        offset_ids = _offset_msg_ids(physical, store_raws, store_which)
        unique_keys = pc.map_lookup(properties, pa.scalar("UNIQ_KEY"), "last")
        columns = [
            pa.array(physical),
            pa.array(rows.size.astype(np.int32)),
            pa.array(rows.magic),
            pa.array(np.where(rows.magic == MAGIC_V2, 2, 1).astype(np.int32)),
            pa.array(fixed["body_crc"].astype(np.int64)),
            pa.array(crc_ok),
            pa.array(fixed["queue_id"].astype(np.int32)),
            pa.array(fixed["queue_offset"].astype(np.int64)),
            pa.array(fixed["flag"].astype(np.int32)),
            pa.array(sysflag),
            _TX_LABELS.take(pa.array((sysflag >> 2) & 3)),
            _timestamps(born_ms),
            pa.array(born_ms),
            born_hosts,
            _timestamps(store_ms),
            pa.array(store_ms),
            store_hosts,
            pa.array(reconsume),
            pa.array(prepared),
            topics,
            pc.map_lookup(properties, pa.scalar("TAGS"), "last"),
            _keys(pc.map_lookup(properties, pa.scalar("KEYS"), "last"), count),
            properties,
            body,
            pc.coalesce(unique_keys, offset_ids),
            offset_ids,
            _STATE_LABEL_ARRAY.take(pa.array(_STATE_INDEX[state_codes])),
            pa.array(state_reasons, _STRING)
            if state_reasons is not None
            else pa.nulls(count, _STRING),
            _fixed_strings(count, len(self.segment), self.segment * count),
        ]
        del region
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def read_buffer(
    buf: Any, plan: RangePlan, options: ReadOptions, stats: RangeStats
) -> Iterator[pa.RecordBatch]:
    """Record batches for ``plan``'s range of ``buf`` (the whole segment file's bytes)."""
    builder = BatchBuilder(buf, plan, options, stats)
    try:
        for rows in scan_range(
            buf,
            plan,
            stats,
            builder.validate,
            max_records=options.batch_rows,
            max_bytes=options.batch_bytes,
            walker=FastWalker(builder.words, plan.segment_start),
        ):
            batch = builder.build(rows)
            if batch is not None:
                yield batch
    finally:
        builder.close()


def read_range(
    plan: RangePlan, options: ReadOptions, stats: RangeStats
) -> Iterator[pa.RecordBatch]:
    """Record batches for one partition, read through a read-only mmap of its segment file."""
    with open(plan.path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        yield from read_buffer(mapped, plan, options, stats)
    finally:
        mapped.close()


def count_range(buf: Any, plan: RangePlan, stats: RangeStats) -> None:
    """Walk and check a range without building columns (the ``report`` option)."""
    options = ReadOptions(include_system_topics=True)
    builder = BatchBuilder(buf, plan, options, stats)
    try:
        for rows in scan_range(
            buf,
            plan,
            stats,
            builder.validate,
            max_records=65_536,
            max_bytes=64 << 20,
            walker=FastWalker(builder.words, plan.segment_start),
        ):
            stats.bad_crc += int(len(rows) - builder.crc_ok(rows).sum())
    finally:
        builder.close()


def report_batch(reports: list[RangeStats], foreign_files: list[str]) -> pa.RecordBatch:
    rows: dict[str, list[Any]] = {name: [] for name, _, _ in REPORT_COLUMNS}
    for stats in reports:
        values = {
            "segment": stats.segment,
            "range_start": stats.lo,
            "range_end": stats.hi,
            "records": stats.records,
            "bytes": stats.bytes,
            "bad_crc": stats.bad_crc,
            "torn_tail": stats.torn_tail,
            "torn_tail_bytes": stats.torn_tail_bytes,
            "damaged": list(stats.damaged),
            "foreign_file": None,
        }
        for name, value in values.items():
            rows[name].append(value)
    for path in foreign_files:
        for name, _, _ in REPORT_COLUMNS:
            rows[name].append(path if name == "foreign_file" else [] if name == "damaged" else None)
    return pa.RecordBatch.from_arrays(
        [pa.array(rows[name], kind) for name, kind, _ in REPORT_COLUMNS],
        schema=REPORT_ARROW_SCHEMA,
    )
