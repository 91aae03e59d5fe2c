"""Seeded crash tests of the batched append: a process killed while a batch is copied in.

``CommitLog.write_batch`` copies a batch into its segment in one go, all but the first record's
TOTALSIZE and magic first, then those 8 bytes in one store (a kill stops a process between two
instructions, never inside one). A kill can stop the first copy after any byte; each test
rebuilds the files such a kill leaves (the store as it was before the batch, the segment holding
the batch's bytes in copy order up to the cut, zeros after) and recovers them. Nothing of a torn
batch may be accepted: no record of it is read or served, no queue or index entry points at it,
the queues end where they ended before it, and the store appends again after it. A whole batch
(the head stored) is accepted whole. A failure prints ``SEED=<n>``; rerun one seed with
``pytest tests/sim/test_batch_crash.py -k 'seed_17'``.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from pocketmq.store.config import StoreConfig
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError
from pocketmq.store.message_store import MessageStore, PutMessage, PutResult
from pocketmq.store.record import END_FILE_MIN_BLANK_LENGTH, RecordLimits

SEEDS = range(24)
CUTS_PER_SEED = 4
SEGMENT = 128 * 1024
CONFIG = StoreConfig(
    commitlog_segment_size=SEGMENT,
    consume_queue_entries_per_file=64,
    index_slot_count=97,
    index_entry_count=2000,
    limits=RecordLimits(body_size_max=4096, properties_size_max=1024),
)
TOPICS = ("A", "B")


@dataclass(frozen=True)
class Stored:
    result: PutResult
    topic: str
    queue_id: int
    body: bytes
    key: str


def message(rng: random.Random, n: int, tag: str) -> PutMessage:
    return PutMessage(
        topic=rng.choice(TOPICS),
        queue_id=rng.randrange(3),
        body=rng.randbytes(rng.randrange(0, 2000)),
        properties={"KEYS": f"{tag}-{n}", "TAGS": f"t{n % 3}"},
    )


def write_history(store: MessageStore, rng: random.Random) -> list[Stored]:
    """Single puts and batches, a flush (checkpoint) now and then."""
    stored: list[Stored] = []
    n = 0
    for _ in range(rng.randrange(5, 40)):
        batch = [message(rng, n + i, "old") for i in range(rng.choice([1, 1, 3, 17]))]
        n += len(batch)
        results = store.put_many(batch) if len(batch) > 1 else [store.put(batch[0])]
        for m, r in zip(batch, results, strict=True):
            assert m.properties is not None
            stored.append(Stored(r, m.topic, m.queue_id, m.body, m.properties["KEYS"]))
        if rng.random() < 0.2:
            store.flush_all()
    return stored


def segment_path(root: Path, offset: int) -> Path:
    return root / "commitlog" / f"{offset - offset % SEGMENT:020d}"


def torn_copy(before: Path, live: Path, torn: Path, start: int, batch: bytes, cut: int) -> None:
    """The files a kill leaves after ``cut`` bytes of the batch's copy: the store as before the
    batch, the commitlog as written (an END-OF-FILE filler, a new segment), the batch's bytes
    but its first 8 copied up to the cut; ``cut == len(batch)``: the head is stored too."""
    shutil.copytree(before, torn)
    shutil.rmtree(torn / "commitlog")
    shutil.copytree(live / "commitlog", torn / "commitlog")
    head = END_FILE_MIN_BLANK_LENGTH
    copied = bytearray(len(batch))
    if cut == len(batch):
        copied[:] = batch
    else:
        assert cut <= len(batch) - head
        copied[head : head + cut] = batch[head : head + cut]
    with open(segment_path(torn, start), "r+b") as handle:
        handle.seek(start % SEGMENT)
        handle.write(copied)


def cuts(rng: random.Random, size: int) -> list[int]:
    """Where the copy stops: anywhere in the records but the head, at its edges, and whole."""
    tail = size - END_FILE_MIN_BLANK_LENGTH
    chosen = {rng.randrange(tail + 1) for _ in range(CUTS_PER_SEED - 2)}
    chosen.add(rng.choice([0, 1, tail - 1, tail]))
    chosen.add(size)
    return sorted(chosen)


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed_{s}")
def test_a_batch_cut_anywhere_is_not_accepted(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    live = tmp_path / "live"
    store = MessageStore.open(live, config=CONFIG)
    history = write_history(store, rng)
    if rng.random() < 0.5:  # a batch that must roll over to a new segment
        while store.commitlog.room_left() > 20_000:
            history += write_history(store, rng)[-1:]
    queue_ends = {(t, q): store.max_offset(t, q) for t in TOPICS for q in range(3)}
    before = tmp_path / "before"
    shutil.copytree(live, before)  # as a kill right now would leave it (pending keys lost)
    batch = [message(rng, i, "new") for i in range(rng.randrange(1, 50))]
    results = store.put_many(batch)
    start, end = results[0].physical_offset, results[-1].end_offset
    with open(segment_path(live, start), "rb") as handle:
        handle.seek(start % SEGMENT)
        written = handle.read(end - start)
    store.crash_for_test()
    for cut in cuts(rng, end - start):
        context = f"SEED={seed} cut={cut}/{end - start} batch of {len(batch)} at {start}"
        torn = tmp_path / f"torn-{cut}"
        torn_copy(before, live, torn, start, written, cut)
        whole = cut == end - start
        with MessageStore.open(torn, config=CONFIG) as recovered:
            assert recovered.recovery_report.abnormal, context
            for old in history:  # everything before the batch stays
                assert recovered.read(old.result.physical_offset).body == old.body, context
            for m, r in zip(batch, results, strict=True):
                assert m.properties is not None
                found = recovered.query_by_key(m.topic, m.properties["KEYS"])
                if whole:
                    assert recovered.read(r.physical_offset).body == m.body, context
                    assert [x.physical_offset for x in found] == [r.physical_offset], context
                else:
                    with pytest.raises((CorruptRecordError, OffsetOutOfRangeError)):
                        recovered.read(r.physical_offset)
                    assert found == [], context
            if whole:
                assert recovered.max_physical_offset == end, context
                for m, r in zip(batch, results, strict=True):
                    got = recovered.get_messages(m.topic, m.queue_id, r.queue_offset, 1)
                    assert [p for _, p, _ in got.messages] == [r.physical_offset], context
            else:
                assert recovered.max_physical_offset == start, context
                for (topic, queue_id), queue_end in queue_ends.items():
                    assert recovered.max_offset(topic, queue_id) == queue_end, context
                    got = recovered.get_messages(topic, queue_id, queue_end, 8)
                    assert got.messages == [], context
            again = recovered.put(PutMessage(topic="A", body=b"after", properties={"KEYS": "k"}))
            assert again.physical_offset == recovered.max_physical_offset - again.total_size
            if not whole:
                assert again.queue_offset == queue_ends[("A", 0)], context
        with MessageStore.open(torn, config=CONFIG) as reopened:
            assert not reopened.recovery_report.abnormal, context
            assert reopened.read(again.physical_offset).body == b"after", context
