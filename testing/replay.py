"""Replay a store's traffic against a broker, with its timing, on the manual clock.

:func:`replay` reads a store folder (pocketmq's or Apache RocketMQ's: the same commitlog
layout, read by ``pocketmq.store.reader``) and sends each message of the application's topics
again, in store order, to the broker behind a name server, through the SDK. Between two
messages the broker's manual clock is advanced by the gap between their original store times
and the replay waits that gap divided by ``speed`` on the wall clock, so the application sees
the incident's traffic with its relative timing, ``speed`` times faster. A broker on the system
clock gets the wall-clock pacing only.

What is sent again is what consumers saw: the records of the application's topics, with their
body, tags, keys, user properties and unique key (``UNIQ_KEY``, so deduplication by message ID
behaves as it did), to the same queue id. A delayed or transactional message appears when it
was delivered (its copy in the real topic), not when it was sent; system topics, retry and
dead-letter topics are left out (consumers make those again).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from pocketmq.client import Admin, Message, Producer
from pocketmq.client.message import MessageQueue
from pocketmq.store.reader import ReadRecord, StoreReader
from pocketmq.store.record import MessageRecord
from pocketmq.store.topics import is_system_topic

__all__ = ["ReplayReport", "replay", "replayable"]

_REPLAY_GROUP = "pocketmq-replay"
_QUEUES_MIN = 8
# What a broker or producer set on the original that must not be sent again: it would change
# routing (DELAY, the transaction flags) or lie about the copy (offsets, the real topic).
_BROKER_PROPERTIES = {
    "MIN_OFFSET",
    "MAX_OFFSET",
    "REAL_TOPIC",
    "REAL_QID",
    "DELAY",
    "TRAN_MSG",
    "PGROUP",
    "__transactionId__",
    "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "CONSUME_START_TIME",
    "WAIT",
    "RETRY_TOPIC",
    "ORIGIN_MESSAGE_ID",
    "MSG_REGION",
    "TRACE_ON",
    "TAGS",
    "KEYS",
    "__CRC32#",
}


@dataclass(slots=True)
class ReplayReport:
    sent: dict[str, int] = field(default_factory=dict)  # topic -> messages sent
    skipped_system: int = 0  # records of system, retry and dead-letter topics
    skipped_topics: int = 0  # records of topics not asked for
    skipped_bad: int = 0  # records whose CRC failed
    clock_advanced_ms: int = 0  # how far the manual clock moved (0 on a system clock)
    manual_clock: bool = False
    first_store_ms: int | None = None
    last_store_ms: int | None = None

    @property
    def total(self) -> int:
        return sum(self.sent.values())

    def summary(self) -> str:
        span = (
            (self.last_store_ms - self.first_store_ms) / 1000
            if self.first_store_ms is not None and self.last_store_ms is not None
            else 0
        )
        topics = ", ".join(f"{t} {n}" for t, n in sorted(self.sent.items())) or "none"
        clock = (
            f"manual clock advanced {self.clock_advanced_ms / 1000:g} s"
            if self.manual_clock
            else "the broker runs on the system clock: wall-clock pacing only"
        )
        return (
            f"replayed {self.total} message(s) spanning {span:g} s ({topics}); {clock}; "
            f"skipped {self.skipped_system} of system/retry/DLQ topics, "
            f"{self.skipped_topics} of other topics, {self.skipped_bad} with a bad CRC"
        )


def _user_topic(topic: str) -> bool:
    return not (is_system_topic(topic) or topic.startswith("%RETRY%") or topic.startswith("%DLQ%"))


def replayable(
    store: str | os.PathLike[str], topics: Sequence[str] | None, report: ReplayReport
) -> Iterator[MessageRecord]:
    """The records a replay sends, in store order, counting what it skips in ``report``."""
    wanted = set(topics) if topics else None
    items: Iterable[ReadRecord] = StoreReader(store).iter_records()
    for item in items:
        record = item.record
        if not _user_topic(record.topic):
            report.skipped_system += 1
        elif wanted is not None and record.topic not in wanted:
            report.skipped_topics += 1
        elif not item.crc_ok:
            report.skipped_bad += 1
        else:
            yield record


def _message(record: MessageRecord) -> Message:
    properties = {
        k: v
        for k, v in record.properties.items()
        if k not in _BROKER_PROPERTIES and not k.startswith("TIMER_")
    }
    return Message(
        topic=record.topic,
        body=bytes(record.body),
        tags=record.tags,
        keys=list(record.keys),
        properties=properties,
        flag=record.flag,
    )


def _to_queue(queue_id: int) -> Callable[[Sequence[MessageQueue], Message], MessageQueue]:
    def select(queues: Sequence[MessageQueue], _message: Message) -> MessageQueue:
        for queue in queues:
            if queue.queue_id == queue_id:
                return queue
        return queues[queue_id % len(queues)]

    return select


async def replay(
    store: str | os.PathLike[str],
    *,
    namesrv: str,
    speed: float = 1.0,
    topics: Sequence[str] | None = None,
    limit: int | None = None,
    progress: Callable[[int, MessageRecord], None] | None = None,
    credentials: tuple[str, str] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> ReplayReport:
    """Send the application messages of ``store`` again to the brokers behind ``namesrv``,
    ``speed`` times faster than they came (``math.inf``: no waiting; the manual clock still
    moves by every original gap). ``topics``: only these. ``limit``: at most this many
    messages. Topics are created first, with as many queues as the store used (at least 8).
    ``credentials``: (access key, secret key) of a broker with ACL. Returns what was sent and
    skipped."""
    if not speed > 0:
        raise ValueError(f"speed {speed}: expected a number above 0 (inf: as fast as possible)")
    if limit is not None and limit < 1:
        raise ValueError(f"limit {limit}: expected 1 or more messages")
    report = ReplayReport()
    # A first pass for the topics and queues to create: routes must exist before the sends.
    queues: dict[str, int] = {}
    scan = ReplayReport()
    for count, record in enumerate(replayable(store, topics, scan)):
        if limit is not None and count >= limit:
            break
        queues[record.topic] = max(queues.get(record.topic, 0), record.queue_id + 1)
    admin_client = Admin(namesrv, credentials=credentials)
    producer_client = Producer(_REPLAY_GROUP, namesrv=namesrv, credentials=credentials)
    async with admin_client as admin, producer_client as producer:
        clocks = await admin.clock()
        report.manual_clock = bool(clocks) and all(state.manual for state in clocks.values())
        for topic, needed in sorted(queues.items()):
            await admin.create_topic(topic, max(needed, _QUEUES_MIN))
        previous: int | None = None
        started = time.monotonic()
        for record in replayable(store, topics, report):
            if limit is not None and report.total >= limit:
                break
            stored = record.store_timestamp
            if previous is not None and stored > previous:
                gap = stored - previous
                if report.manual_clock:
                    await admin.advance_clock(gap)
                    report.clock_advanced_ms += gap
                if not math.isinf(speed):
                    # paced from the start, so rounding and send times do not add up
                    due = started + (stored - (report.first_store_ms or stored)) / 1000 / speed
                    await sleep(max(due - time.monotonic(), 0.0))
            previous = max(previous or stored, stored)
            if report.first_store_ms is None:
                report.first_store_ms = stored
            report.last_store_ms = stored
            await producer.send(_message(record), selector=_to_queue(record.queue_id))
            report.sent[record.topic] = report.sent.get(record.topic, 0) + 1
            if progress is not None:
                progress(report.total, record)
    return report
