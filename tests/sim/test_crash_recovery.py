"""Seeded crash tests: write a store, crash, damage it at a random point, recover, check.

Every record that ends before the damage must survive byte for byte (through reads by offset,
consume queues and the index); nothing damaged may be served; the store must accept appends
again and survive a clean restart. A failure prints ``SEED=<n>``; rerun one seed with
``pytest tests/sim -k 'seed_17'``.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from pocketmq.store.config import StoreConfig
from pocketmq.store.message_store import MessageStore, PutMessage
from pocketmq.store.record import RecordLimits
from pocketmq.store.state import TRANSITIONS, MessageState

SEEDS = range(120)
SEGMENT = 128 * 1024
CONFIG = StoreConfig(
    commitlog_segment_size=SEGMENT,
    consume_queue_entries_per_file=64,
    index_slot_count=97,
    index_entry_count=300,
    limits=RecordLimits(body_size_max=4096, properties_size_max=1024),
)


@dataclass
class Written:
    offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    key: str


class Clock:
    def __init__(self, rng: random.Random) -> None:
        self.now = 1_700_000_000_000 + rng.randrange(10**6)

    def __call__(self) -> int:
        self.now += 3
        return self.now


StateChanges = dict[int, list[tuple[int, MessageState]]]  # target -> [(end of state record, state)]


def write_store(root: Path, rng: random.Random) -> tuple[list[Written], StateChanges]:
    store = MessageStore.open(root, config=CONFIG, clock_ms=Clock(rng))
    written: list[Written] = []
    states: StateChanges = {}
    for i in range(rng.randrange(40, 400)):
        topic = rng.choice(["A", "B", "%RETRY%g1"])
        queue_id = rng.randrange(3)
        body = rng.randbytes(rng.randrange(0, 3000))
        key = f"key-{i}"
        result = store.put(
            PutMessage(
                topic=topic,
                queue_id=queue_id,
                body=body,
                properties={"KEYS": key, "TAGS": f"t{i % 3}"},
            )
        )
        written.append(
            Written(
                result.physical_offset,
                result.total_size,
                topic,
                queue_id,
                result.queue_offset,
                body,
                key,
            )
        )
        if rng.random() < 0.05:
            target = rng.choice(written).offset
            # a change the state table allows from where the message is
            allowed = TRANSITIONS[store.state_of(target)] & {
                MessageState.POISONED,
                MessageState.UNAVAILABLE,
                MessageState.AVAILABLE,
            }
            if allowed:
                state = rng.choice(sorted(allowed))
                change = store.set_state(target, state)
                states.setdefault(target, []).append((change.end_offset, state))
        if rng.random() < 0.1:
            store.flush_to()
        if rng.random() < 0.02:
            store.flush_all()
    store.crash_for_test()
    return written, states


def damage(root: Path, rng: random.Random, end_offset: int) -> tuple[int, str]:
    """Truncate (zero the rest of the file from a point) or flip bytes at a random offset.
    Returns the physical offset of the damage and its kind."""
    point = rng.randrange(0, end_offset)
    segment_start = point - point % SEGMENT
    path = root / "commitlog" / f"{segment_start:020d}"
    position = point - segment_start
    kind = rng.choice(["truncate", "flip", "garbage"])
    with open(path, "r+b") as handle:
        handle.seek(position)
        if kind == "truncate":
            # A torn write: the file keeps its size, the bytes after the point never arrived.
            handle.truncate(position)
            handle.truncate(SEGMENT)
        elif kind == "flip":
            original = handle.read(1)
            handle.seek(position)
            handle.write(bytes([original[0] ^ (1 << rng.randrange(8))]))
        else:
            handle.write(rng.randbytes(rng.randrange(1, 64)))
    return point, kind


def served_records(store: MessageStore) -> dict[int, bytes]:
    """Every record the consume queues serve, by physical offset."""
    served: dict[int, bytes] = {}
    for topic, queue_id in list(store.consume_queues.queues):
        offset = store.min_offset(topic, queue_id)
        while offset < store.max_offset(topic, queue_id):
            result = store.get_messages(topic, queue_id, offset, 64, only_available=False)
            for _, physical, view in result.messages:
                served[physical] = bytes(view)
            offset = result.next_offset
    return served


@pytest.mark.sim
@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed_{s}")
def test_crash_then_damage_then_recover(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    root = tmp_path / "store"
    written, states = write_store(root, rng)
    originals = {}
    for w in written:
        with open(root / "commitlog" / f"{w.offset - w.offset % SEGMENT:020d}", "rb") as handle:
            handle.seek(w.offset % SEGMENT)
            originals[w.offset] = handle.read(w.size)
    end = written[-1].offset + written[-1].size
    point, kind = damage(root, rng, end)
    scan = "full" if seed % 2 else "tail"
    config = StoreConfig(
        **{**{f: getattr(CONFIG, f) for f in CONFIG.__struct_fields__}, "recovery_scan": scan}
    )
    context = f"SEED={seed} damage={kind}@{point} scan={scan}"
    with MessageStore.open(root, config=config, clock_ms=Clock(rng)) as store:
        report = store.recovery_report
        served = served_records(store)
        for w in written:
            intact = w.offset + w.size <= point
            if intact:
                record = store.read(w.offset)
                assert record.body == w.body, context
                assert (
                    served.get(w.offset) == originals[w.offset]
                    or w.topic == "rmq_sys_MESSAGE_STATE"
                ), context
                assert any(
                    r.physical_offset == w.offset for r in store.query_by_key(w.topic, w.key)
                ), context
        for physical, raw in served.items():
            assert raw == originals.get(physical, raw), (
                f"{context}: changed bytes served at {physical}"
            )
        damaged_record = next((w for w in written if w.offset <= point < w.offset + w.size), None)
        if damaged_record is not None:
            hit = served.get(damaged_record.offset)
            assert hit is None or hit == originals[damaged_record.offset], context
        for target, changes in states.items():
            if all(end <= point for end, _ in changes):
                # Every change of this message was stored before the damage: the last one holds.
                assert store.state_of(target) is changes[-1][1], f"{context}: state of {target}"
        assert report.end_offset == store.max_physical_offset, context
        # The store takes appends again, and they survive a clean restart.
        appended = store.put(
            PutMessage(topic="A", body=b"after-recovery", properties={"KEYS": "after"})
        )
    with MessageStore.open(root, config=config) as store:
        assert store.read(appended.physical_offset).body == b"after-recovery", context
        assert store.recovery_report.torn_tail is None, context
        assert not store.recovery_report.abnormal, context
    assert not os.path.exists(root / "abort"), context
