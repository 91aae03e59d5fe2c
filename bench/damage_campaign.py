"""Seeded damage on stopped stores: what a restarted broker finds, serves and loses.

    python bench/damage_campaign.py                 # 87 cases, seed 1
    python bench/damage_campaign.py --cases 300 --seed 7 --verbose

One store is written once through the SDK (two topics, six queues, small commitlog segments,
a consumer group's committed offsets) and stopped cleanly. Each case copies it, damages the
copy in one seeded way (a flipped bit or a zeroed range in a commitlog segment, a cut or
missing segment, a consume-queue entry swapped with another queue's, pointing into the middle
of a record or holding a huge size, a consume-queue file cut to an odd size or deleted, a
config file with a changed letter, digit or cut short, a lost ``storeFormat.json`` together
with a damaged whole-record CRC, a damaged checkpoint), starts the real broker on it in this
process and reads every queue from offset 0 with the SDK (BODYCRC checked, its default), then
compares with what was written. Each case gets one outcome, the worst that happened:

    crashed        the broker did not start, with an error that is not a clear refusal
    served         a message was handed over that is not the one written at that place,
                   or whose bytes were damaged
    lost silently  a message could not be read (or a committed offset moved) and nothing
                   was said
    lost, reported an intact message could not be read, and the damage was reported
    stuck          a queue kept failing at one offset
    detected       the damage was reported (a WARNING from the broker or a refusal to start
                   that says what is wrong) and every intact message was read
    no effect      nothing to report: every message read, offsets unchanged

A message whose own bytes were damaged is not counted as lost when the damage was reported:
it cannot be read back, only reported. The printed table is the campaign's figure; ``--verbose`` prints each case.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import shutil
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pocketmq.broker.app import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.client import Admin, Message, MessageQueue, Producer, PullConsumer, PullStatus
from pocketmq.client.errors import ClientError, CorruptMessageError
from pocketmq.store.config import StoreConfig
from pocketmq.store.reader import StoreReader
from pocketmq.store.record import RecordLimits

TOPICS = {"BigT": 4, "SmallT": 2}
GROUP = "CampaignGroup"
SEGMENT = 256 * 1024
LIMITS = RecordLimits(body_size_max=16 * 1024)
ENTRY = struct.Struct(">qiq")
OUTCOMES = (
    "crashed",
    "served",
    "lost silently",
    "lost, reported",
    "stuck",
    "detected",
    "no effect",
)


def store_config() -> StoreConfig:
    return StoreConfig(commitlog_segment_size=SEGMENT, limits=LIMITS)


@dataclass(frozen=True)
class Written:
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    physical_offset: int
    size: int


@dataclass
class Case:
    number: int
    kind: str
    detail: str = ""
    damaged: set[tuple[str, int, int]] = field(default_factory=set)  # unreadable by design
    warnings: list[str] = field(default_factory=list)
    refused: str | None = None
    crashed: str | None = None
    served_wrong: int = 0
    lost: int = 0
    sdk_detected: int = 0
    stuck_queues: int = 0
    offsets_moved: int = 0

    unread_damaged: int = 0  # damaged messages not served (fine, if the damage was reported)

    @property
    def detected(self) -> bool:
        return bool(self.warnings or self.refused or self.sdk_detected)

    @property
    def outcome(self) -> str:
        if self.crashed:
            return "crashed"
        if self.served_wrong:
            return "served"
        if (self.lost or self.offsets_moved or self.unread_damaged) and not self.detected:
            return "lost silently"
        if self.lost:
            return "lost, reported"
        if self.stuck_queues:
            return "stuck"
        if self.detected:
            return "detected"
        return "no effect"


# -- the store every case starts from -----------------------------------------------------------


async def write_base(folder: Path, messages: int, rng: random.Random) -> dict[str, dict[int, int]]:
    config = BrokerConfig(port=0, data_dir=folder, store=store_config(), flush="sync")
    async with Broker(config, namesrv=True) as broker:
        namesrv = broker.namesrv_address
        async with Admin(namesrv=namesrv) as admin:
            for topic, queues in TOPICS.items():
                await admin.create_topic(topic, queues)
        async with Producer("CampaignProducer", namesrv=namesrv) as producer:
            for seq in range(messages):
                topic = rng.choice(list(TOPICS))
                queue_id = rng.randrange(TOPICS[topic])
                pad = bytes(rng.randrange(256) for _ in range(rng.randrange(40, 600)))
                body = f"{topic}|{queue_id}|{seq}|".encode() + pad
                mq = MessageQueue(topic, config.broker_name, queue_id)
                await producer.send(Message(topic=topic, body=body, keys=[f"k{seq}"]), queue=mq)
        # a committed position for the group: half of each queue
        committed: dict[str, dict[int, int]] = {}
        for topic, queues in TOPICS.items():
            for queue_id in range(queues):
                half = broker.store.max_offset(topic, queue_id) // 2
                broker.offsets.commit(GROUP, topic, queue_id, half)
                committed.setdefault(topic, {})[queue_id] = half
    return committed


def ground_truth(folder: Path) -> list[Written]:
    out = []
    for read in StoreReader(folder).iter_records():
        record = read.record
        if record.topic in TOPICS:
            out.append(
                Written(
                    record.topic,
                    record.queue_id,
                    record.queue_offset,
                    record.body,
                    read.physical_offset,
                    read.size,
                )
            )
    return out


# -- damage -------------------------------------------------------------------------------------


def segments(folder: Path) -> list[Path]:
    return sorted((folder / "commitlog").iterdir())


def cq_file(folder: Path, topic: str, queue_id: int) -> Path:
    return sorted((folder / "consumequeue" / topic / str(queue_id)).iterdir())[0]


def hit(case: Case, written: list[Written], start: int, end: int) -> None:
    """Mark the messages whose bytes overlap the physical range [start, end) as damaged."""
    for w in written:
        if w.physical_offset < end and start < w.physical_offset + w.size:
            case.damaged.add((w.topic, w.queue_id, w.queue_offset))


def flip_bit(case: Case, folder: Path, written: list[Written], rng: random.Random) -> None:
    target = rng.choice(written)
    at = target.physical_offset + rng.randrange(target.size)
    flip_at(folder, at, 1 << rng.randrange(8))
    case.detail = (
        f"bit at commitlog offset {at} ({target.topic}#{target.queue_id}@{target.queue_offset})"
    )
    hit(case, written, at, at + 1)


def flip_at(folder: Path, physical: int, mask: int) -> None:
    start = physical - physical % SEGMENT
    path = folder / "commitlog" / f"{start:020d}"
    with path.open("r+b") as f:
        f.seek(physical - start)
        byte = f.read(1)[0]
        f.seek(physical - start)
        f.write(bytes([byte ^ mask]))


def zero_range(case: Case, folder: Path, written: list[Written], rng: random.Random) -> None:
    target = rng.choice(written)
    at = target.physical_offset + rng.randrange(target.size)
    length = rng.randrange(16, 4096)
    start = at - at % SEGMENT
    length = min(length, SEGMENT - (at - start))
    with (folder / "commitlog" / f"{start:020d}").open("r+b") as f:
        f.seek(at - start)
        f.write(bytes(length))
    case.detail = f"{length} zero bytes at commitlog offset {at}"
    hit(case, written, at, at + length)


def cut_last_segment(case: Case, folder: Path, written: list[Written], rng: random.Random) -> None:
    last = segments(folder)[-1]
    start = int(last.name)
    used = max(w.physical_offset + w.size for w in written) - start
    keep = rng.randrange(max(1, used))
    with last.open("r+b") as f:
        f.truncate(keep)
    case.detail = f"last segment cut to {keep} of {used} written bytes (clean stop)"
    hit(case, written, start + keep, 1 << 62)


def delete_segment(case: Case, folder: Path, written: list[Written], rng: random.Random) -> None:
    files = segments(folder)
    which = rng.choice(["first", "last", "middle"] if len(files) > 2 else ["first", "last"])
    path = {"first": files[0], "last": files[-1], "middle": files[len(files) // 2]}[which]
    start = int(path.name)
    path.unlink()
    case.detail = f"{which} segment {path.name} deleted"
    hit(case, written, start, start + SEGMENT)


def cq_entries(folder: Path, topic: str, queue_id: int) -> tuple[Path, bytearray]:
    path = cq_file(folder, topic, queue_id)
    return path, bytearray(path.read_bytes())


def cq_swap(case: Case, folder: Path, written: list[Written], rng: random.Random) -> None:
    small_q, big_q = rng.randrange(TOPICS["SmallT"]), rng.randrange(TOPICS["BigT"])
    small_path, small = cq_entries(folder, "SmallT", small_q)
    big_path, big = cq_entries(folder, "BigT", big_q)
    i = rng.randrange(count_of(written, "SmallT", small_q))
    j = rng.randrange(count_of(written, "BigT", big_q))
    a, b = slice(i * 20, i * 20 + 20), slice(j * 20, j * 20 + 20)
    small[a], big[b] = big[b], small[a]
    small_path.write_bytes(small)
    big_path.write_bytes(big)
    case.detail = f"entry SmallT#{small_q}@{i} swapped with BigT#{big_q}@{j}"


def count_of(written: list[Written], topic: str, queue_id: int) -> int:
    return sum(1 for w in written if w.topic == topic and w.queue_id == queue_id)


def cq_rewrite(
    case: Case, folder: Path, written: list[Written], rng: random.Random, how: str
) -> None:
    topic = rng.choice(list(TOPICS))
    queue_id = rng.randrange(TOPICS[topic])
    path, data = cq_entries(folder, topic, queue_id)
    i = rng.randrange(count_of(written, topic, queue_id))
    offset, size, tags = ENTRY.unpack_from(data, i * 20)
    if how == "middle":
        offset += rng.randrange(1, size)
    else:
        size = rng.choice([0x7FFFFFF0, 1 << 24, size * 50])
    ENTRY.pack_into(data, i * 20, offset, size, tags)
    path.write_bytes(data)
    case.detail = f"entry {topic}#{queue_id}@{i}: " + (
        f"offset into its record ({offset})" if how == "middle" else f"size {size}"
    )


def cq_file_damage(
    case: Case, folder: Path, written: list[Written], rng: random.Random, how: str
) -> None:
    topic = rng.choice(list(TOPICS))
    queue_id = rng.randrange(TOPICS[topic])
    path = cq_file(folder, topic, queue_id)
    if how == "delete":
        path.unlink()
        case.detail = f"consume queue file {topic}/{queue_id}/{path.name} deleted"
        return
    data = path.read_bytes()
    used = count_of(written, topic, queue_id) * 20
    keep = rng.randrange(used) if how == "short" else len(data) - rng.randrange(1, 20)
    path.write_bytes(data[:keep])
    case.detail = f"consume queue file {topic}/{queue_id} cut to {keep} bytes ({how})"


def config_damage(
    case: Case, folder: Path, written: list[Written], rng: random.Random, how: str
) -> None:
    name = rng.choice(["consumerOffset.json", "topics.json"])
    path = folder / "config" / name
    text = path.read_text()
    if how == "letter":
        key = "offsetTable" if name == "consumerOffset.json" else "topicConfigTable"
        at = text.index(key) + rng.randrange(len(key))
        letter = chr((ord(text[at]) - 97 + rng.randrange(1, 26)) % 26 + 97)
        text = text[:at] + letter + text[at + 1 :]
        case.detail = f"{name}: a letter of {key!r} changed"
    elif how == "digit":
        digits = [i for i, c in enumerate(text) if c.isdigit()]
        at = rng.choice(digits)
        text = text[:at] + str((int(text[at]) + rng.randrange(1, 10)) % 10) + text[at + 1 :]
        case.detail = f"{name}: a digit at {at} changed"
    else:
        keep = rng.randrange(len(text))
        text = text[:keep]
        case.detail = f"{name}: cut to {keep} characters"
    path.write_text(text)


def format_loss(case: Case, folder: Path, written: list[Written], rng: random.Random) -> None:
    (folder / "config" / "storeFormat.json").unlink(missing_ok=True)
    for bak in (folder / "config").glob("storeFormat.json*"):
        bak.unlink()
    target = rng.choice(written)
    # the whole-record CRC is the last property: damage a byte of its value (the record's end)
    at = target.physical_offset + target.size - 1 - rng.randrange(8)
    flip_at(folder, at, 0x01)
    case.detail = f"storeFormat.json deleted and the record CRC of the record at {target.physical_offset} damaged"
    hit(case, written, at, at + 1)


def checkpoint_damage(case: Case, folder: Path, written: list[Written], rng: random.Random) -> None:
    path = folder / "checkpoint"
    data = bytearray(path.read_bytes())
    at = rng.randrange(72)  # the bytes in use (RocketMQ's five longs and pocketmq's copies)
    data[at] ^= 1 << rng.randrange(8)
    path.write_bytes(data)
    case.detail = f"checkpoint byte {at} flipped"


Damage = Callable[[Case, Path, list[Written], random.Random], None]
DAMAGES: dict[str, Damage] = {
    "commitlog bit": flip_bit,
    "commitlog zeros": zero_range,
    "last segment cut": cut_last_segment,
    "segment missing": delete_segment,
    "queue entry swapped": cq_swap,
    "queue entry mid-record": lambda c, f, w, r: cq_rewrite(c, f, w, r, "middle"),
    "queue entry huge size": lambda c, f, w, r: cq_rewrite(c, f, w, r, "huge"),
    "queue file odd size": lambda c, f, w, r: cq_file_damage(c, f, w, r, "odd"),
    "queue file short": lambda c, f, w, r: cq_file_damage(c, f, w, r, "short"),
    "queue file missing": lambda c, f, w, r: cq_file_damage(c, f, w, r, "delete"),
    "config letter": lambda c, f, w, r: config_damage(c, f, w, r, "letter"),
    "config digit": lambda c, f, w, r: config_damage(c, f, w, r, "digit"),
    "config cut": lambda c, f, w, r: config_damage(c, f, w, r, "cut"),
    "storeFormat lost": format_loss,
    "checkpoint bit": checkpoint_damage,
}


# -- one case -----------------------------------------------------------------------------------


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("pocketmq") and not record.name.startswith("pocketmq.client"):
            self.messages.append(record.getMessage())


async def run_case(
    case: Case, folder: Path, written: list[Written], committed: dict[str, dict[int, int]]
) -> None:
    handler = Collect()
    logging.getLogger().addHandler(handler)
    try:
        config = BrokerConfig(port=0, data_dir=folder, store=store_config())
        try:
            broker = Broker(config, namesrv=True)
            await broker.start()
        except Exception as error:  # noqa: BLE001 - sorting refusals from crashes is the point
            text = f"{type(error).__name__}: {error}"
            clear = type(error).__name__.endswith(("ConfigFileError", "StoreError")) or (
                "Error" in type(error).__name__ and str(error) and "Traceback" not in str(error)
            )
            if clear and not isinstance(error, (KeyError, IndexError, AttributeError, TypeError)):
                case.refused = text
            else:
                case.crashed = text
            return
        try:
            await read_back(case, broker, written, committed)
        finally:
            await broker.close()
    finally:
        logging.getLogger().removeHandler(handler)
        case.warnings = handler.messages


async def read_back(
    case: Case, broker: Broker, written: list[Written], committed: dict[str, dict[int, int]]
) -> None:
    expected = {(w.topic, w.queue_id, w.queue_offset): w.body for w in written}
    seen: set[tuple[str, int, int]] = set()
    async with PullConsumer(namesrv=broker.namesrv_address, client_ip="127.0.0.1") as puller:
        for topic, queues in TOPICS.items():
            for queue_id in range(queues):
                mq = MessageQueue(topic, broker.config.broker_name, queue_id)
                await read_queue(case, puller, mq, expected, seen)
    for key in expected:
        if key in case.damaged:
            if key in seen:  # its bytes were damaged, yet it was handed over
                case.served_wrong += 1
            else:
                case.unread_damaged += 1
        elif key not in seen:
            case.lost += 1
    for topic, queues in committed.items():
        for queue_id, offset in queues.items():
            if broker.offsets.query(GROUP, topic, queue_id) != offset:
                case.offsets_moved += 1


async def read_queue(
    case: Case,
    puller: PullConsumer,
    mq: MessageQueue,
    expected: dict[tuple[str, int, int], bytes],
    seen: set[tuple[str, int, int]],
) -> None:
    offset, failures, stuck = 0, 0, False
    for _ in range(400):  # bounded: a queue here holds at most a few hundred messages
        try:
            result = await puller.pull(mq, offset, 32)
        except CorruptMessageError as error:
            case.sdk_detected += 1
            for message in error.messages:
                check(case, mq, message.queue_offset, message.body, expected, seen)
            offset = (error.queue_offset if error.queue_offset is not None else offset) + 1
            continue
        except ClientError:
            failures += 1
            if failures >= 3:
                stuck = True
                offset += 1
                failures = 0
            continue
        failures = 0
        if result.status is PullStatus.FOUND:
            for message in result.messages:
                check(case, mq, message.queue_offset, message.body, expected, seen)
            offset = result.next_offset
        elif result.status is PullStatus.NO_MATCHED_MSG or (
            result.status is PullStatus.OFFSET_ILLEGAL and result.next_offset > offset
        ):
            offset = result.next_offset
        else:
            break
    case.stuck_queues += stuck


def check(
    case: Case,
    mq: MessageQueue,
    queue_offset: int,
    body: bytes,
    expected: dict[tuple[str, int, int], bytes],
    seen: set[tuple[str, int, int]],
) -> None:
    key = (mq.topic, mq.queue_id, queue_offset)
    if expected.get(key) != body or key in seen:
        case.served_wrong += 1
    seen.add(key)


# -- the campaign -------------------------------------------------------------------------------


async def campaign(args: argparse.Namespace) -> int:
    root = logging.getLogger()  # warnings are collected per case, not printed
    root.setLevel(logging.WARNING)
    root.addHandler(logging.NullHandler())
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pocketmq-damage-") as tmp:
        base = Path(tmp) / "base"
        committed = await write_base(base, args.messages, random.Random(args.seed))
        written = ground_truth(base)
        print(
            f"store: {len(written)} messages in {len(segments(base))} segments of "
            f"{SEGMENT // 1024} KiB, {sum(TOPICS.values())} queues; seed {args.seed}"
        )
        kinds = list(DAMAGES)
        cases: list[Case] = []
        for number in [args.case] if args.case is not None else range(args.cases):
            rng = random.Random(args.seed * 1_000_003 + number)
            kind = kinds[number % len(kinds)] if number < len(kinds) else rng.choice(kinds)
            case = Case(number, kind)
            folder = Path(tmp) / f"case-{number}"
            shutil.copytree(base, folder)
            DAMAGES[kind](case, folder, written, rng)
            await run_case(case, folder, written, committed)
            shutil.rmtree(folder, ignore_errors=True)
            cases.append(case)
            if args.verbose or case.outcome not in ("detected", "no effect"):
                print(
                    f"  case {number:3d} {kind:24s} {case.outcome:13s} {case.detail}; "
                    f"lost {case.lost}, wrong {case.served_wrong}, offsets moved "
                    f"{case.offsets_moved}, warnings {len(case.warnings)}"
                    + (f", refused: {case.refused}" if case.refused else "")
                    + (f", crashed: {case.crashed}" if case.crashed else "")
                )
            if args.case is not None:
                print("\n".join(f"    WARNING {w}" for w in case.warnings))
    print_table(cases)
    print(f"({time.monotonic() - started:.0f} s)")
    bad = sum(c.outcome not in ("detected", "no effect") for c in cases)
    return 1 if bad else 0


def print_table(cases: list[Case]) -> None:
    by_kind: dict[str, Counter[str]] = {}
    for case in cases:
        by_kind.setdefault(case.kind, Counter())[case.outcome] += 1
    width = max(len(k) for k in by_kind) + 2
    print(f"\n{'damage':{width}s}" + "".join(f"{o:>15s}" for o in OUTCOMES))
    total: Counter[str] = Counter()
    for kind, counts in by_kind.items():
        total.update(counts)
        print(f"{kind:{width}s}" + "".join(f"{counts[o]:15d}" for o in OUTCOMES))
    print(f"{'all ' + str(len(cases)):{width}s}" + "".join(f"{total[o]:15d}" for o in OUTCOMES))
    lost = sum(c.lost for c in cases)
    wrong = sum(c.served_wrong for c in cases)
    print(f"intact messages lost: {lost}; messages served wrongly: {wrong}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=87)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--case", type=int, help="run only this case, and show its warnings")
    args = parser.parse_args()
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    return asyncio.run(campaign(args))


if __name__ == "__main__":
    sys.exit(main())
