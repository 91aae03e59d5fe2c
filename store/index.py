"""The message index: find commitlog offsets by message key, in Apache RocketMQ's IndexFile layout.

Files live under ``index/`` and are named ``yyyyMMddHHmmssSSS`` (local time). Each is a fixed-size
hash table with chained entries; all integers are big-endian signed, as Java's ``ByteBuffer``
writes them, so a store written by RocketMQ opens here and ours opens there::

    offset                                  size              content
    0                                       HEADER_SIZE (40)  header, see below
    HEADER_SIZE + i * SLOT_SIZE             SLOT_SIZE (4)     slot i: newest entry number, 0 = none
    HEADER_SIZE + slots * SLOT_SIZE
                + n * ENTRY_SIZE            ENTRY_SIZE (20)   entry n (entry 0 is never used)

    header  +0  beginTimestamp   8   store time (ms) of the first entry
            +8  endTimestamp     8   store time (ms) of the last entry
            +16 beginPhyOffset   8   commitlog offset of the first entry
            +24 endPhyOffset     8   commitlog offset of the last entry
            +32 hashSlotCount    4   slots in use (old RocketMQ releases counted puts; unused)
            +36 indexCount       4   next entry number; starts at 1 (0 on disk also means 1)

    entry   +0  keyHash          4   abs(String.hashCode(topic + "#" + key)), 0 when abs overflows
            +4  phyOffset        8   commitlog offset of the message
            +12 timeDiff         4   (storeTimestamp - beginTimestamp) // 1000, clamped to [0, 2^31-1]
            +16 prevIndex        4   older entry in the same slot, 0 = end of chain

Slot of a key = keyHash % slots. The header does not record the slot count: it follows from the
file size. RocketMQ uses 5,000,000 slots and 20,000,000 entries (a 420,000,040-byte file).

One deliberate difference from RocketMQ's writer: RocketMQ computes the first entry's timeDiff of a
rolled-over file against the previous file's end time before resetting the header, so that entry
can read back a few seconds late; here the first entry of every file has timeDiff 0. Both readers
accept either.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from time import localtime, strftime

from pocketmq.store import paths
from pocketmq.store.errors import StoreError
from pocketmq.store.files import Backend, Segment
from pocketmq.store.javahash import (
    CHUNK,
    HIGH_DIGITS,
    LOW_DIGITS,
    POW31,
    WINDOW_BASE,
    WINDOW_DIGITS,
    java_string_hash,
    java_string_hash_unsigned,
)

__all__ = [
    "ENTRY",
    "ENTRY_OFFSETS",
    "ENTRY_SIZE",
    "HEADER",
    "HEADER_OFFSETS",
    "HEADER_SIZE",
    "ROCKETMQ_ENTRY_COUNT",
    "ROCKETMQ_SLOT_COUNT",
    "SLOT",
    "SLOT_SIZE",
    "IndexFile",
    "IndexFormatError",
    "IndexService",
    "index_file_name",
    "index_file_size",
    "index_key_hash",
]


def _layout(fields: tuple[tuple[str, str], ...]) -> tuple[struct.Struct, dict[str, int]]:
    """A big-endian struct and the byte offset of every field, derived from the field formats."""
    fmt = ">"
    offsets: dict[str, int] = {}
    for name, code in fields:
        offsets[name] = struct.calcsize(fmt)
        fmt += code
    return struct.Struct(fmt), offsets


HEADER, HEADER_OFFSETS = _layout(
    (
        ("begin_timestamp", "q"),
        ("end_timestamp", "q"),
        ("begin_phy_offset", "q"),
        ("end_phy_offset", "q"),
        ("hash_slot_count", "i"),
        ("index_count", "i"),
    )
)
ENTRY, ENTRY_OFFSETS = _layout(
    (
        ("key_hash", "i"),
        ("phy_offset", "q"),
        ("time_diff", "i"),
        ("prev_index", "i"),
    )
)
SLOT = struct.Struct(">i")

HEADER_SIZE = HEADER.size
SLOT_SIZE = SLOT.size
ENTRY_SIZE = ENTRY.size

ROCKETMQ_SLOT_COUNT = 5_000_000
ROCKETMQ_ENTRY_COUNT = 20_000_000
# RocketMQ's default keeps four entries per slot; a foreign file's layout is recovered from its size
# under that ratio, since the header does not record it.
_ENTRIES_PER_SLOT = ROCKETMQ_ENTRY_COUNT // ROCKETMQ_SLOT_COUNT

_INT_MAX = 2**31 - 1  # Java int: indexCount, timeDiff, and the mapped file size
_MASK32 = 0xFFFFFFFF
_SIGN32 = 0x80000000
_EMPTY = 0  # slot value / prevIndex meaning "no entry"
_FIRST_ENTRY = 1  # entry 0 is never used
_MS_PER_SECOND = 1000
_ZERO_ENTRY = bytes(ENTRY_SIZE)
_NAME_TIME_FORMAT = "%Y%m%d%H%M%S"  # + 3 digits of milliseconds

# Per topic, hashCode(topic + "#") * 31**n mod 2**32 for keys of n characters, n up to
# _PREFIX_TABLE_LENGTH (a UNIQ_KEY has 32), and the same plus javahash's WINDOW_BASE[n]: the
# part of a key's hash that depends on its topic and length only, added instead of multiplied
# for every key. (window terms, plain terms); ~5 KB a topic, for a bounded number of topics.
PrefixTables = tuple[tuple[int, ...], tuple[int, ...]]
_PREFIX_TABLE_LENGTH = 64
assert _PREFIX_TABLE_LENGTH <= CHUNK  # a key this long is one int() parse
_PREFIX_CACHE_LIMIT = 256
# Keys of up to this many messages wait in memory and are then put in one go (RocketMQ builds
# its index asynchronously too). Every reader, sync and cut of the index puts them first.
_PENDING_MAX = 256  # more gains little, and long-lived entries cost GC time

KeyEntry = tuple[int, int, int]  # (keyHash, phyOffset, storeTimestamp) of one entry to put

_unpack_slot = SLOT.unpack_from
_pack_slot = SLOT.pack
_unpack_entry = ENTRY.unpack_from
_pack_entry = ENTRY.pack
_pack_entry_into = ENTRY.pack_into
_pack_slot_into = SLOT.pack_into


class IndexFormatError(StoreError, ValueError):
    """A file under ``index/`` is not an index file this store can read."""


def index_file_size(slot_count: int, entry_count: int) -> int:
    return HEADER_SIZE + slot_count * SLOT_SIZE + entry_count * ENTRY_SIZE


def _abs_hash(unsigned: int) -> int:
    """Java ``Math.abs`` of a 32-bit hash given as unsigned; abs(MIN_VALUE) overflows and becomes 0."""
    if unsigned & _SIGN32:
        return 0 if unsigned == _SIGN32 else (1 << 32) - unsigned
    return unsigned


def index_key_hash(topic: str, key: str) -> int:
    """The keyHash RocketMQ stores for ``key`` of ``topic``."""
    return _abs_hash(java_string_hash(f"{topic}#{key}") & _MASK32)


def index_file_name(store_timestamp_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as RocketMQ names index files."""
    seconds, millis = divmod(store_timestamp_ms, _MS_PER_SECOND)
    return f"{strftime(_NAME_TIME_FORMAT, localtime(seconds))}{millis:03d}"


def _name_after(name: str) -> str:
    """The name one millisecond after ``name``: file names must sort in creation order."""
    try:
        moment = datetime.strptime(name[:-3], _NAME_TIME_FORMAT)
        millis = int(name[-3:])
    except ValueError:
        return name + "0"  # a foreign name; any longer string with it as prefix sorts after it
    later = moment + timedelta(milliseconds=millis + 1)
    return f"{later.strftime(_NAME_TIME_FORMAT)}{later.microsecond // 1000:03d}"


class IndexFile:
    """One index file. Header fields are mirrored as attributes; slots and entries stay in the file.

    :meth:`put_keys` writes the header once per batch.
    """

    __slots__ = (
        "name",
        "segment",
        "slot_count",
        "entry_count",
        "_entries_at",
        "begin_timestamp",
        "end_timestamp",
        "begin_phy_offset",
        "end_phy_offset",
        "hash_slot_count",
        "index_count",
    )

    def __init__(self, name: str, segment: Segment, slot_count: int, entry_count: int) -> None:
        if segment.size != index_file_size(slot_count, entry_count):
            raise IndexFormatError(
                f"index file {name}: {segment.size} bytes, expected"
                f" {index_file_size(slot_count, entry_count)} for {slot_count} slots"
                f" and {entry_count} entries"
            )
        self.name = name
        self.segment = segment
        self.slot_count = slot_count
        self.entry_count = entry_count
        self._entries_at = HEADER_SIZE + slot_count * SLOT_SIZE
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            index_count,
        ) = HEADER.unpack_from(segment.view, 0)
        # RocketMQ writes indexCount only on the first put, so a new file reads 0 = "no entries"
        self.index_count = max(index_count, _FIRST_ENTRY)
        problem = self._header_problem(index_count)
        if problem:
            raise IndexFormatError(f"index file {name}: inconsistent header: {problem}")

    def _header_problem(self, raw_index_count: int) -> str:
        if not 0 <= raw_index_count <= self.entry_count:
            return f"indexCount {raw_index_count} outside [0, {self.entry_count}]"
        if not 0 <= self.hash_slot_count <= self.index_count - _FIRST_ENTRY:
            return f"hashSlotCount {self.hash_slot_count} with indexCount {self.index_count}"
        if min(self.begin_timestamp, self.end_timestamp) < 0:
            return "negative timestamp"
        if min(self.begin_phy_offset, self.end_phy_offset) < 0:
            return "negative physical offset"
        if not self.is_empty and self.begin_phy_offset > self.end_phy_offset:
            return f"beginPhyOffset {self.begin_phy_offset} > endPhyOffset {self.end_phy_offset}"
        return ""

    @property
    def is_empty(self) -> bool:
        return self.index_count <= _FIRST_ENTRY

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.entry_count

    @property
    def entries(self) -> int:
        """Entries in use."""
        return self.index_count - _FIRST_ENTRY

    def slot(self, slot: int) -> int:
        return _unpack_slot(self.segment.view, HEADER_SIZE + slot * SLOT_SIZE)[0]

    def entry(self, number: int) -> tuple[int, int, int, int]:
        """(keyHash, phyOffset, timeDiff, prevIndex) of entry ``number``."""
        return _unpack_entry(self.segment.view, self._entries_at + number * ENTRY_SIZE)

    def write_header(self) -> None:
        # Straight into the mapping (this runs per message); flush() syncs the whole file.
        HEADER.pack_into(
            self.segment.view,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def put_key(self, key_hash: int, phy_offset: int, store_timestamp_ms: int) -> None:
        """Append one entry, make it its slot's head and write the header. Must not be full."""
        if self.put_keys([(key_hash, phy_offset, store_timestamp_ms)]) != 1:
            raise StoreError(f"index file {self.name} is full")

    def put_keys(self, entries: Sequence[KeyEntry], start: int = 0) -> int:
        """Append ``entries[start:]`` while there is room, each becoming its slot's head, then
        write the header; returns the position in ``entries`` where this file filled up."""
        count = self.index_count
        stop = min(len(entries), start + self.entry_count - count)
        if stop <= start:
            return start
        if count <= _FIRST_ENTRY:
            _hash, self.begin_phy_offset, self.begin_timestamp = entries[start]
        begin = self.begin_timestamp
        view = self.segment.view
        slots = self.slot_count
        entries_at = self._entries_at
        used = self.hash_slot_count
        unpack_slot = _unpack_slot
        pack_entry_into = _pack_entry_into
        pack_slot_into = _pack_slot_into
        last_timestamp = diff = None  # keys of one message share the store time
        for key_hash, phy_offset, store_timestamp_ms in entries[start:stop]:
            slot_at = HEADER_SIZE + (key_hash % slots) * SLOT_SIZE
            head = unpack_slot(view, slot_at)[0]
            if head <= _EMPTY or head >= count:  # a torn or stale slot starts a new chain
                head = _EMPTY
                used += 1
            if store_timestamp_ms != last_timestamp:
                last_timestamp = store_timestamp_ms
                diff = (store_timestamp_ms - begin) // _MS_PER_SECOND if begin > 0 else 0
                if diff < 0:
                    diff = 0
                elif diff > _INT_MAX:
                    diff = _INT_MAX
            pack_entry_into(view, entries_at + count * ENTRY_SIZE, key_hash, phy_offset, diff, head)
            pack_slot_into(view, slot_at, count)
            count += 1
        self.index_count = count
        self.hash_slot_count = used
        _hash, self.end_phy_offset, self.end_timestamp = entries[stop - 1]
        self.write_header()
        return stop

    def put_messages(
        self,
        messages: Sequence[tuple[str, Sequence[str], int, int]],
        prefix_tables: dict[str, PrefixTables],
        make_prefix_tables: Callable[[str], PrefixTables],
    ) -> tuple[int, int, Exception | None]:
        """Hash and append the keys of (topic, keys, phyOffset, storeTimestamp) messages; the
        caller checked that they all fit. Returns (messages done, keys of the next one done,
        None) or, when a key could not be hashed, where that happened and the error.

        This is IndexService's append path in one pass: hashCode(topic + "#" + key) is
        hashCode(topic + "#") * 31**len(key) + hashCode(key) mod 2**32, with hashCode(key) as
        javahash.ascii_hash computes it, inlined, and the first term (with the window's
        constant) taken from the topic's :data:`PrefixTables`.
        """
        count = self.index_count
        if count <= _FIRST_ENTRY and messages:
            _topic, _keys, self.begin_phy_offset, self.begin_timestamp = messages[0]
        begin = self.begin_timestamp
        view = self.segment.view
        slots = self.slot_count
        entries_at = self._entries_at
        used = self.hash_slot_count
        unpack_slot = _unpack_slot
        pack_entry_into = _pack_entry_into
        pack_slot_into = _pack_slot_into
        low, high, window = LOW_DIGITS, HIGH_DIGITS, WINDOW_DIGITS
        done = 0
        start = count  # the entry count when the message in hand began
        last_topic: str | None = None
        last_timestamp: int | None = None
        window_terms: tuple[int, ...] = ()
        plain_terms: tuple[int, ...] = ()
        diff = 0
        try:
            for done, (topic, keys, physical_offset, store_timestamp_ms) in enumerate(  # noqa: B007
                messages
            ):  # done: where an error stopped it
                # Messages in a row mostly share the topic and often the millisecond (a batch's
                # always the topic): both derived values are kept from the message before.
                if topic != last_topic:
                    tables = prefix_tables.get(topic)
                    if tables is None:
                        tables = make_prefix_tables(topic)
                    window_terms, plain_terms = tables
                    last_topic = topic
                if store_timestamp_ms != last_timestamp:
                    diff = (store_timestamp_ms - begin) // _MS_PER_SECOND if begin > 0 else 0
                    if not 0 <= diff <= _INT_MAX:
                        diff = 0 if diff < 0 else _INT_MAX
                    last_timestamp = store_timestamp_ms
                start = count
                for key in keys:
                    n = len(key)
                    if n <= _PREFIX_TABLE_LENGTH and key.isascii():
                        data = key.encode()
                        # A key starting above the window's last code ("N") is not in it: no
                        # translate to find that out (lower-case keys such as order ids).
                        if data < b"O" and (digits := data.translate(window)).isalnum():
                            # no "?": every code in the window
                            unsigned = (window_terms[n] + int(digits, 31)) & _MASK32
                        else:
                            unsigned = (
                                plain_terms[n]
                                + int(data.translate(low), 31)
                                + 31 * int(data.translate(high), 31)
                            ) & _MASK32
                    else:
                        unsigned = java_string_hash_unsigned(f"{topic}#{key}")
                    if unsigned & _SIGN32:
                        # Math.abs of the negative int; abs(MIN_VALUE) overflows, RocketMQ stores 0
                        unsigned = ((1 << 32) - unsigned) & _INT_MAX
                    slot_at = HEADER_SIZE + (unsigned % slots) * SLOT_SIZE
                    head = unpack_slot(view, slot_at)[0]
                    if head <= _EMPTY or head >= count:  # a torn or stale slot starts a chain
                        head = _EMPTY
                        used += 1
                    pack_entry_into(
                        view, entries_at + count * ENTRY_SIZE, unsigned, physical_offset, diff, head
                    )
                    pack_slot_into(view, slot_at, count)
                    count += 1
            done = len(messages)
        except Exception as error:
            return done, count - start, error
        finally:
            if count != self.index_count:
                self.index_count = count
                self.hash_slot_count = used
                # The newest message with a key written: the one stopped in (after some of its
                # keys), else the one before.
                stop = min(done + (count > start), len(messages))
                for message in reversed(messages[:stop]):
                    if message[1]:
                        _topic, _keys, self.end_phy_offset, self.end_timestamp = message
                        break
                self.write_header()
        return done, 0, None

    def time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """RocketMQ's overlap test of [begin_ms, end_ms] with [beginTimestamp, endTimestamp]."""
        first, last = self.begin_timestamp, self.end_timestamp
        return (
            (begin_ms < first and end_ms > last)
            or first <= begin_ms <= last
            or first <= end_ms <= last
        )

    def select(
        self, key_hash: int, begin_ms: int, end_ms: int, limit: int, found: list[int]
    ) -> None:
        """Append to ``found`` (up to ``limit`` in all) the offsets whose hash and time match."""
        count = self.index_count
        if count <= _FIRST_ENTRY:
            return
        view = self.segment.view
        number = _unpack_slot(view, HEADER_SIZE + (key_hash % self.slot_count) * SLOT_SIZE)[0]
        if number <= _EMPTY or number >= count:
            return
        base = self.begin_timestamp
        entries_at = self._entries_at
        while len(found) < limit:
            entry_hash, phy_offset, diff, prev = _unpack_entry(
                view, entries_at + number * ENTRY_SIZE
            )
            if diff < 0:
                break
            stored_at = base + diff * _MS_PER_SECOND
            if entry_hash == key_hash and begin_ms <= stored_at <= end_ms:
                found.append(phy_offset)
            # chains only point backwards; anything else is damage, and older entries are older
            if prev <= _EMPTY or prev >= number or stored_at < begin_ms:
                break
            number = prev

    def truncate_from(
        self, physical_offset: int, store_timestamp_of: Callable[[int], int | None] | None = None
    ) -> int:
        """Undo, newest first, every entry with phyOffset >= ``physical_offset``; return how many."""
        count = self.index_count
        segment = self.segment
        view = segment.view
        removed = 0
        while count > _FIRST_ENTRY:
            number = count - 1
            entry_at = self._entries_at + number * ENTRY_SIZE
            key_hash, phy_offset, _diff, prev = _unpack_entry(view, entry_at)
            if phy_offset < physical_offset:
                break
            slot_at = HEADER_SIZE + (key_hash % self.slot_count) * SLOT_SIZE
            # the newest entry heads its chain; put_key counted a slot in use when prev was empty
            if _unpack_slot(view, slot_at)[0] == number:
                segment.write(slot_at, _pack_slot(prev if 0 < prev < number else _EMPTY))
                if not 0 < prev < number and self.hash_slot_count > 0:
                    self.hash_slot_count -= 1
            segment.write(entry_at, _ZERO_ENTRY)
            count = number
            removed += 1
        if not removed:
            return 0
        self.index_count = count
        if count > _FIRST_ENTRY:
            _hash, last_offset, last_diff, _prev = self.entry(count - 1)
            self.end_phy_offset = last_offset
            # entries keep whole seconds only; the exact time needs the commitlog record
            exact = store_timestamp_of(last_offset) if store_timestamp_of is not None else None
            self.end_timestamp = (
                exact if exact is not None else self.begin_timestamp + last_diff * _MS_PER_SECOND
            )
        else:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count = 0
        self.write_header()
        return removed

    def flush(self) -> None:
        for segment, low, high in self.flush_ranges():
            segment.flush_range(low, high)

    def flush_ranges(self) -> list[tuple[Segment, int, int]]:
        # Puts write into the mapping directly, so sync the used part of the file.
        used = self._entries_at + self.index_count * ENTRY_SIZE
        return [(self.segment, 0, min(used, self.segment.size))]

    def close(self) -> None:
        self.segment.close()


class IndexService:
    """All index files of a store: put keys on the append path, query them, truncate, expire.

    ``slot_count`` and ``entry_count`` size new files: 500,000 slots and 2,000,000 entries
    (42,000,040 bytes) by default, ten times smaller than RocketMQ's 5,000,000 / 20,000,000
    (420 MB) to suit a laptop. Existing files of another size (a RocketMQ store) open with the
    layout their size implies. A file is named after the store time of the first key put into it;
    a full file (indexCount >= entry_count) makes the next key start a new file.

    The append path uses :meth:`put_later`: keys wait in memory and go into the files in bulk,
    at the latest before anything reads, syncs, cuts or closes the index, so every reader sees
    them. A crash loses only keys of messages after the checkpoint, which recovery indexes
    again from the commitlog.
    """

    def __init__(
        self, backend: Backend, *, slot_count: int = 500_000, entry_count: int = 2_000_000
    ) -> None:
        if slot_count < 1 or entry_count < _FIRST_ENTRY + 1:
            raise ValueError(f"need >= 1 slot and >= 2 entries, got {slot_count}/{entry_count}")
        if index_file_size(slot_count, entry_count) > _INT_MAX:
            raise ValueError("index file larger than RocketMQ can map (2 GiB)")
        self._backend = backend
        self.slot_count = slot_count
        self.entry_count = entry_count
        self._files: list[IndexFile] = []
        self._prefix_tables: dict[str, PrefixTables] = {}
        self._end_phy_offset = -1  # pending keys included
        self._pending: list[tuple[str, Sequence[str], int, int]] = []  # see put_later
        self._pending_keys = 0  # keys in _pending
        self._unwritten: list[KeyEntry] = []  # hashed, not written: creating a file failed
        # Files that filled up since the last flush_ranges: their tails still need a sync.
        self._filled: list[IndexFile] = []

    # ---- files

    @property
    def files(self) -> tuple[IndexFile, ...]:
        """Open files, oldest first."""
        self.drain()
        return tuple(self._files)

    @property
    def max_physical_offset(self) -> int:
        """Commitlog offset of the newest indexed message, -1 when nothing is indexed."""
        return self._end_phy_offset

    def _layout_for(self, name: str, size: int) -> tuple[int, int]:
        if size == index_file_size(self.slot_count, self.entry_count):
            return self.slot_count, self.entry_count
        per_slot = SLOT_SIZE + _ENTRIES_PER_SLOT * ENTRY_SIZE
        slots, rest = divmod(size - HEADER_SIZE, per_slot)
        if slots >= 1 and rest == 0:
            return slots, slots * _ENTRIES_PER_SLOT
        raise IndexFormatError(
            f"{paths.index_file(name)} is not an index file: {size} bytes matches neither"
            f" {self.slot_count} slots / {self.entry_count} entries"
            f" ({index_file_size(self.slot_count, self.entry_count)} bytes) nor any"
            f" {_ENTRIES_PER_SLOT}-entries-per-slot layout (RocketMQ's)"
        )

    def _open(self, name: str) -> IndexFile:
        rel = paths.index_file(name)
        try:
            size = self._backend.size_of(rel)
        except (OSError, KeyError) as error:
            raise IndexFormatError(f"{rel} is not an index file: {error!r}") from error
        slots, entries = self._layout_for(name, size)
        try:
            segment = self._backend.open_segment(rel)
        except (OSError, KeyError, ValueError) as error:
            raise IndexFormatError(f"{rel} is not an index file: {error!r}") from error
        try:
            return IndexFile(name, segment, slots, entries)
        except BaseException:
            segment.close()
            raise

    def load(self) -> None:
        """Open every file under ``index/``, oldest first; raise IndexFormatError on a stranger."""
        self.drop_pending()  # a reload starts from what the files hold
        self.close()
        try:
            for name in self._backend.list_names(paths.INDEX):
                self._files.append(self._open(name))
        except BaseException:
            self.close()
            raise
        self._refresh_end()

    def _refresh_end(self) -> None:
        self._end_phy_offset = next(
            (f.end_phy_offset for f in reversed(self._files) if not f.is_empty), -1
        )

    def _new_file(self, store_timestamp_ms: int) -> IndexFile:
        name = index_file_name(store_timestamp_ms)
        if self._files and name <= self._files[-1].name:
            name = _name_after(self._files[-1].name)  # same millisecond, or time went back
        size = index_file_size(self.slot_count, self.entry_count)
        segment = self._backend.create_segment(paths.index_file(name), size)
        try:
            index_file = IndexFile(name, segment, self.slot_count, self.entry_count)
        except BaseException:
            segment.close()
            raise
        if self._files:
            self._filled.append(self._files[-1])
        self._files.append(index_file)
        return index_file

    def _drop(self, index_file: IndexFile) -> None:
        self._files.remove(index_file)
        if index_file in self._filled:
            self._filled.remove(index_file)
        index_file.close()
        self._backend.remove(paths.index_file(index_file.name))

    # ---- append path

    def put(
        self, topic: str, keys: Iterable[str], physical_offset: int, store_timestamp_ms: int
    ) -> int:
        """Index one message under each non-empty key (KEYS tokens and UNIQ_KEY) now; return how
        many.

        A message below the newest indexed offset was indexed before (re-dispatch after a
        restart) and is skipped, as RocketMQ does.
        """
        if isinstance(keys, str):
            raise TypeError("keys must be a collection of keys, not one string")
        self.drain()
        if physical_offset < self._end_phy_offset:
            return 0
        keys = tuple(key for key in keys if key)
        entries = self._hash_keys([(topic, keys, physical_offset, store_timestamp_ms)])
        if entries:
            self._end_phy_offset = physical_offset
            self._write(entries)
        return len(entries)

    def put_later(
        self, topic: str, keys: Sequence[str], physical_offset: int, store_timestamp_ms: int
    ) -> None:
        """:meth:`put` for the append path: ``keys`` (non-empty strings, at least one) are
        hashed and written with those of later messages, by :meth:`drain`."""
        if physical_offset < self._end_phy_offset:
            return
        pending = self._pending
        pending.append((topic, keys, physical_offset, store_timestamp_ms))
        self._pending_keys += len(keys)
        self._end_phy_offset = physical_offset
        if len(pending) >= _PENDING_MAX:
            self.drain()

    def put_later_many(
        self, messages: Sequence[tuple[str, Sequence[str], int, int]], key_count: int
    ) -> None:
        """:meth:`put_later` for a batch: (topic, keys, physical offset, store time) of each
        message that has keys, in log order, added at once; ``key_count`` keys in all."""
        if not messages or messages[0][2] < self._end_phy_offset:
            for topic, keys, physical_offset, store_timestamp_ms in messages:
                self.put_later(topic, keys, physical_offset, store_timestamp_ms)
            return
        self._pending.extend(messages)
        self._pending_keys += key_count
        self._end_phy_offset = messages[-1][2]
        if len(self._pending) >= _PENDING_MAX:
            self.drain()

    def drain(self) -> None:
        """Write the keys that :meth:`put_later` holds back into the files."""
        if not self._pending and not self._unwritten:
            return
        pending, self._pending = self._pending, []
        key_count, self._pending_keys = self._pending_keys, 0
        current = self._files[-1] if self._files else None
        error: Exception | None = None
        if (
            not self._unwritten
            and current is not None
            and current.entry_count - current.index_count >= key_count
        ):
            # The common case: everything fits the newest file; hash and write in one pass.
            done, written, error = current.put_messages(
                pending, self._prefix_tables, self._prefix_tables_of
            )
            if error is None:
                return
            # A key that is not text stopped it: skip that key, the rest goes the careful way.
            topic, keys, physical_offset, store_timestamp_ms = pending[done]
            rest = (topic, keys[written + 1 :], physical_offset, store_timestamp_ms)
            pending = [rest, *pending[done + 1 :]]
        entries, self._unwritten = self._unwritten, []
        try:
            entries += self._hash_keys(pending)
        except Exception as failed:
            # A key that is not text (a caller's bug) must not cost the other messages their
            # entries: hash them one by one, skip the bad ones, and raise once they are written.
            error = failed
            for message in pending:
                with contextlib.suppress(Exception):
                    entries += self._hash_keys([message])
        self._write(entries)
        if error is not None:
            raise error

    def drop_pending(self) -> None:
        """Forget keys not yet written, as a killed process would (tests of crash recovery)."""
        self._pending = []
        self._pending_keys = 0
        self._unwritten = []
        self._refresh_end()

    def _prefix_tables_of(self, topic: str) -> PrefixTables:
        if len(self._prefix_tables) >= _PREFIX_CACHE_LIMIT:
            self._prefix_tables.clear()
        prefix = java_string_hash(topic + "#") & _MASK32
        plain = tuple([prefix * POW31[n] & _MASK32 for n in range(_PREFIX_TABLE_LENGTH + 1)])
        window = tuple([(term + WINDOW_BASE[n]) & _MASK32 for n, term in enumerate(plain)])
        tables = self._prefix_tables[topic] = (window, plain)
        return tables

    def _hash_keys(self, messages: list[tuple[str, Sequence[str], int, int]]) -> list[KeyEntry]:
        """The entries of (topic, keys, physical offset, store time) tuples, keys non-empty.
        The careful path (a file fills up, a key is not text): IndexFile.put_messages has the
        fast one."""
        return [
            (_abs_hash(java_string_hash_unsigned(topic + "#" + key)), physical_offset, ts)
            for topic, keys, physical_offset, ts in messages
            for key in keys  # "+", not an f-string: a key that is not text must raise
        ]

    def _write(self, entries: list[KeyEntry]) -> None:
        """Put hashed entries into the newest file, starting new files as they fill up. If a new
        file cannot be created, the rest is kept for the next drain."""
        done = 0
        try:
            while done < len(entries):
                current = self._files[-1] if self._files else None
                if current is None or current.is_full:
                    current = self._new_file(entries[done][2])
                done = current.put_keys(entries, done)
        except BaseException:
            self._unwritten = entries[done:] + self._unwritten
            raise

    # ---- queries

    def query(
        self, topic: str, key: str, begin_ms: int, end_ms: int, max_results: int = 64
    ) -> list[int]:
        """Commitlog offsets of messages indexed under ``key`` stored in [begin_ms, end_ms].

        Newest first, at most ``max_results`` (RocketMQ caps this at maxMsgsNumBatch = 64).
        Store times are known to the second only (an entry reads back as beginTimestamp + whole
        seconds), so the range is coarse. Only the 31-bit hash is compared: different keys can
        share it, so the caller must read each message and compare its real key.
        """
        found: list[int] = []
        if max_results <= 0:
            return found
        self.drain()
        key_hash = index_key_hash(topic, key)
        for index_file in reversed(self._files):
            if index_file.is_empty:
                continue
            if index_file.time_matched(begin_ms, end_ms):
                index_file.select(key_hash, begin_ms, end_ms, max_results, found)
            if index_file.begin_timestamp < begin_ms or len(found) >= max_results:
                break
        return found

    # ---- recovery and retention

    def truncate_after(
        self,
        physical_offset: int,
        *,
        store_timestamp_of: Callable[[int], int | None] | None = None,
    ) -> int:
        """Remove every entry whose phyOffset >= ``physical_offset``; return how many.

        Leaves the files exactly as if those messages had never been indexed, except that the
        header's endTimestamp is rebuilt from whole seconds unless ``store_timestamp_of`` maps a
        commitlog offset to its record's store time. Files left empty are deleted.
        """
        self.drain()
        removed = 0
        for index_file in reversed(self._files[:]):
            if not index_file.is_empty and index_file.end_phy_offset < physical_offset:
                break
            removed += index_file.truncate_from(physical_offset, store_timestamp_of)
            if not index_file.is_empty:
                break
            self._drop(index_file)
        self._refresh_end()
        return removed

    def delete_files_before(self, physical_offset: int) -> int:
        """Delete the oldest files whose endPhyOffset < ``physical_offset``, never the newest."""
        self.drain()
        deleted = 0
        while len(self._files) > 1 and self._files[0].end_phy_offset < physical_offset:
            self._drop(self._files[0])
            deleted += 1
        return deleted

    def flush(self) -> None:
        self.drain()
        for index_file in self._files:
            index_file.flush()
        self._filled.clear()

    def flush_ranges(self) -> list[tuple[Segment, int, int]]:
        # The newest file, and any that filled up since the last call: a checkpoint may cover
        # keys in them, so they must reach the disk too.
        self.drain()
        ranges = [r for index_file in self._filled for r in index_file.flush_ranges()]
        self._filled.clear()
        if self._files:
            ranges.extend(self._files[-1].flush_ranges())
        return ranges

    def close(self) -> None:
        """Flush and close every file; ``load`` opens them again."""
        try:
            self.drain()
        finally:
            files, self._files = self._files, []
            for index_file in files:
                index_file.flush()
                index_file.close()
            self._end_phy_offset = -1
