"""POP consumption (RocketMQ 5.x): messages are lent to a consumer for an invisible time.

``pop`` hands out messages and remembers each as in flight until its deadline (pop time +
invisible time). ``ack`` ends it; ``change_invisible`` moves its deadline (and gives a new
receipt handle). A message still in flight at its deadline is redelivered: through the retry
topic ``%RETRY%<group>_<topic>`` with reconsume times + 1, or, for FIFO (``order``) pops, in
place on its queue. After the group's maximum attempts (16) it goes to ``%DLQ%<group>``.

FIFO: a queue popped in order mode is handed out again only when everything taken from it has
been acknowledged, so the messages of one message group (which producers send to one queue)
are consumed one after another.

Durability: every pop appends a checkpoint record and every ack an ack record to the revive
topic ``rmq_sys_REVIVE_LOG_<cluster>`` (tags ``ck`` and ``ack``, as RocketMQ). After a restart
the records are replayed: messages in flight get their deadlines again, pop positions resume
past what was handed out, and nothing acknowledged is delivered again.

Receipt handle: ``"<start offset> <pop time> <invisible ms> <revive qid> <retry flag> <broker>
<queue id> <queue offset>"`` (RocketMQ's ExtraInfoUtil layout). A handle that does not parse is
INVALID_PARAMETER; one that no longer matches a message in flight (acknowledged, expired,
changed, or never issued here) is ILLEGAL_OPERATION, and nothing changes. RocketMQ accepts such
stale acks silently; pocketmq says so, because a test that acks too late should know.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from time import perf_counter

import msgspec

from pocketmq.broker.errors import Kind, PopError
from pocketmq.broker.services.clock import Scheduler
from pocketmq.broker.services.groups import GroupManager
from pocketmq.broker.services.offsets import OffsetManager
from pocketmq.broker.services.retry import RetryService
from pocketmq.broker.services.sql_filter import SqlExpression
from pocketmq.broker.services.stats import BrokerStats
from pocketmq.broker.services.topics import TopicManager, topic_message_type
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError
from pocketmq.store.message_store import MessageStore, PutMessage, PutResult, copy_of
from pocketmq.store.record import MessageRecord, with_reconsume_times

__all__ = ["PopError", "PopService", "ReceiptHandle", "pop_retry_topic"]

log = logging.getLogger("pocketmq.broker")

INVISIBLE_MS_MIN = 1
INVISIBLE_MS_MAX = 12 * 3_600_000  # the proxy's maximum invisible time


def pop_retry_topic(group: str, topic: str) -> str:
    """RocketMQ's pop retry topic, V1 naming (KeyBuilder.buildPopRetryTopicV1)."""
    return f"%RETRY%{group}_{topic}"


class ReceiptHandle(msgspec.Struct, frozen=True):
    start_offset: int
    pop_time: int
    invisible_ms: int
    revive_qid: int
    retry: bool
    broker_name: str
    queue_id: int
    queue_offset: int

    def __str__(self) -> str:
        return (
            f"{self.start_offset} {self.pop_time} {self.invisible_ms} {self.revive_qid} "
            f"{1 if self.retry else 0} {self.broker_name} {self.queue_id} {self.queue_offset}"
        )

    @classmethod
    def parse(cls, text: str) -> ReceiptHandle:
        parts = text.split(" ")
        if len(parts) != 8:
            raise ValueError(f"receipt handle {text!r} has {len(parts)} fields, expected 8")
        try:
            start, pop_time, invisible, revive, retry = (int(p) for p in parts[:5])
            return cls(
                start,
                pop_time,
                invisible,
                revive,
                retry != 0,
                parts[5],
                int(parts[6]),
                int(parts[7]),
            )
        except ValueError:
            raise ValueError(f"receipt handle {text!r} has a field that is not a number") from None


class _Record(msgspec.Struct, tag_field="t", omit_defaults=True):
    group: str
    topic: str
    queue_id: int


class _Checkpoint(_Record, tag="ck"):
    offsets: list[int]
    pop_time: int
    invisible_ms: int
    order: bool = False
    attempt: int = 0  # FIFO redelivery in place: how many times these were handed out before


class _Ack(_Record, tag="ack"):
    offset: int
    pop_time: int
    invisible_ms: int = 0
    # FIFO: not an acknowledgement but the end of a lending whose time ran out; the message is
    # handed out again in place, this many times handed out so far.
    redeliver: int = 0


_RECORD = msgspec.json.Decoder(_Checkpoint | _Ack)


@dataclass(slots=True)
class InFlight:
    group: str
    topic: str  # the topic popped (the retry topic for a retried message)
    queue_id: int
    queue_offset: int
    pop_time: int
    invisible_ms: int
    order: bool
    attempt: int = 0

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.group, self.topic, self.queue_id, self.queue_offset)


@dataclass(slots=True)
class PoppedMessage:
    raw: bytes
    handle: ReceiptHandle
    topic: str
    queue_id: int
    queue_offset: int


@dataclass(slots=True, kw_only=True)
class PopService:
    store: MessageStore
    scheduler: Scheduler
    now_ms: Callable[[], int]
    put: Callable[[PutMessage], PutResult]  # the writer's put_internal
    arrived: Callable[[str, int], None]  # wakes pulls and pops held for (topic, queue)
    topics: TopicManager
    groups: GroupManager
    offsets: OffsetManager
    retry: RetryService  # dead letters
    cluster_name: str
    broker_name: str
    in_flight_max: int
    in_flight: dict[tuple[str, str, int, int], InFlight] = field(default_factory=dict)
    positions: dict[tuple[str, str, int], int] = field(default_factory=dict)  # next offset to pop
    # FIFO queues: acknowledged offsets past the position (they may be acked out of order)
    fifo_acked: dict[tuple[str, str, int], set[int]] = field(default_factory=dict)
    attempts: dict[tuple[str, str, int, int], int] = field(default_factory=dict)
    redelivered: int = 0
    # messages and bytes out per group and topic, the read latency (POP and gRPC receive)
    stats: BrokerStats | None = None

    @property
    def revive_topic(self) -> str:
        return f"rmq_sys_REVIVE_LOG_{self.cluster_name}"

    # -- records --------------------------------------------------------------------------

    def _append(self, record: _Record, tag: str) -> None:
        body = msgspec.json.encode(record)
        self.store.put(PutMessage(topic=self.revive_topic, body=body, properties={"TAGS": tag}))

    def start(self) -> None:
        """Replay the revive log: rebuild positions and messages in flight, arm their deadlines."""
        store = self.store
        queue = store.consume_queues.get(self.revive_topic, 0)
        if queue is None:
            return
        for _, (physical, _size, _code) in queue.entries(queue.min_offset):
            try:
                record = _RECORD.decode(store.read(physical).body)
            except (
                CorruptRecordError,
                OffsetOutOfRangeError,
                msgspec.DecodeError,
                msgspec.ValidationError,
            ):
                continue
            self._replay(record)
        for item in list(self.in_flight.values()):
            self._arm(item)

    def _replay(self, record: _Checkpoint | _Ack) -> None:
        base = (record.group, record.topic, record.queue_id)
        if isinstance(record, _Checkpoint):
            for offset in record.offsets:
                item = InFlight(
                    *base,
                    offset,
                    record.pop_time,
                    record.invisible_ms,
                    record.order,
                    record.attempt,
                )
                self.in_flight[item.key] = item
                if not record.order:
                    self.positions[base] = max(self.positions.get(base, 0), offset + 1)
        else:
            found = self.in_flight.get((*base, record.offset))
            if found is not None and (found.pop_time, found.invisible_ms) == (
                record.pop_time,
                record.invisible_ms,
            ):
                del self.in_flight[found.key]
                if record.redeliver:
                    self.attempts[found.key] = record.redeliver
                elif found.order:
                    self._fifo_acked(base, record.offset)

    # -- pop ------------------------------------------------------------------------------

    def queues_for(self, group: str, topic: str, queue_id: int) -> list[tuple[str, int]]:
        """(topic, queue) pairs to pop from, the retry topic first as RocketMQ often does."""
        config = self.topics.get(topic)
        if config is None:
            raise PopError(Kind.TOPIC_NOT_FOUND, f"topic[{topic}] not exist, apply first please!")
        queues = [queue_id] if queue_id >= 0 else list(range(config.read_queue_nums))
        if topic_message_type(config) == "PRIORITY":
            queues.reverse()  # RIP-80: a PRIORITY topic's higher queues hold higher priorities
        if queue_id >= config.read_queue_nums:
            raise PopError(
                Kind.ILLEGAL_QUEUE,
                f"queueId[{queue_id}] is illegal, {topic} has {config.read_queue_nums} read queues",
            )
        pairs = [(pop_retry_topic(group, topic), 0)] if queue_id < 0 else []
        return pairs + [(topic, q) for q in queues]

    def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_count: int,
        invisible_ms: int,
        order: bool,
        tags: set[int] | None,
        sql: SqlExpression | None = None,
        now: int | None = None,
    ) -> list[PoppedMessage]:
        """Lend up to ``max_count`` messages; ``tags`` (consume-queue codes) or ``sql`` (an
        SQL92 expression over each record's properties) say which. ``now``: the pop time, for
        a caller that pops several topics as one request (a lite pop answers one pop time)."""
        if not INVISIBLE_MS_MIN <= invisible_ms <= INVISIBLE_MS_MAX:
            raise PopError(
                Kind.INVALID_PARAMETER,
                f"invisibleTime {invisible_ms} ms is outside [{INVISIBLE_MS_MIN}, {INVISIBLE_MS_MAX}]",
            )
        room = self.in_flight_max - len(self.in_flight)
        if room <= 0:
            # Back-pressure: lent messages stay in memory until acknowledged or expired.
            raise PopError(
                Kind.BUSY,
                f"{len(self.in_flight)} messages are in flight (pop_in_flight_max); ack some first",
            )
        max_count = min(max_count, room)
        popped: list[PoppedMessage] = []
        now = self.now_ms() if now is None else now
        for source_topic, queue in self.queues_for(group, topic, queue_id):
            if len(popped) >= max_count:
                break
            if self.topics.get(source_topic) is None:
                continue
            popped.extend(
                self._pop_queue(
                    group,
                    source_topic,
                    queue,
                    max_count - len(popped),
                    invisible_ms,
                    order,
                    tags,
                    now,
                    sql,
                )
            )
        return popped

    def _pop_queue(
        self,
        group: str,
        topic: str,
        queue_id: int,
        count: int,
        invisible_ms: int,
        order: bool,
        tags: set[int] | None,
        now: int,
        sql: SqlExpression | None = None,
    ) -> list[PoppedMessage]:
        base = (group, topic, queue_id)
        store = self.store
        if order and any(k[:3] == base for k in self.in_flight):
            return []  # FIFO: this queue waits for its acknowledgements
        position = self.positions.get(base)
        if position is None:
            committed = self.offsets.query(group, topic, queue_id)
            position = committed if committed is not None else store.min_offset(topic, queue_id)
        started = perf_counter()
        result = store.get_messages(topic, queue_id, position, count, tags_codes=tags, group=group)
        stats = self.stats
        if stats is not None:
            stats.read((perf_counter() - started) * 1000.0)
        if sql is not None and result.messages:
            # Refused records are skipped as a tag miss is: the position moves past them.
            kept = [entry for entry in result.messages if sql.matches_record(entry[2])]
            result = replace(result, messages=kept)
        if not result.messages:
            if stats is not None:
                stats.missed()
            if result.next_offset > position and not order:
                self.positions[base] = result.next_offset  # skip filtered-out messages
            return []
        offsets = [queue_offset for queue_offset, _, _ in result.messages]
        attempt = (
            max((self.attempts.get((*base, o), 0) for o in offsets), default=0) if order else 0
        )
        self._append(
            _Checkpoint(group, topic, queue_id, offsets, now, invisible_ms, order, attempt), "ck"
        )
        popped = []
        for queue_offset, _physical, view in result.messages:
            item = InFlight(group, topic, queue_id, queue_offset, now, invisible_ms, order, attempt)
            self.in_flight[item.key] = item
            self._arm(item)
            raw = bytes(view)
            if order and attempt:
                raw = with_reconsume_times(raw, attempt)
            handle = ReceiptHandle(
                offsets[0],
                now,
                invisible_ms,
                0,
                topic.startswith("%RETRY%"),
                self.broker_name,
                queue_id,
                queue_offset,
            )
            popped.append(PoppedMessage(raw, handle, topic, queue_id, queue_offset))
        if stats is not None:
            stats.got(group, topic, len(popped), sum(len(p.raw) for p in popped))
        if not order:
            self.positions[base] = result.next_offset
            self.offsets.commit(group, topic, queue_id, result.next_offset)
        else:
            self.positions[base] = position
        return popped

    # -- peek and notification ---------------------------------------------------------------

    def _position(self, group: str, topic: str, queue_id: int) -> int:
        """Where the next POP of this queue starts (PopMessageProcessor.getPopOffset)."""
        position = self.positions.get((group, topic, queue_id))
        if position is None:
            committed = self.offsets.query(group, topic, queue_id)
            position = (
                committed if committed is not None else self.store.min_offset(topic, queue_id)
            )
        return position

    def peek(
        self, group: str, topic: str, queue_id: int, max_count: int
    ) -> tuple[list[bytes], int]:
        """What a POP would hand out next, lending nothing (PEEK_MESSAGE): the raw records,
        the retry topic's first, and how many messages wait past the POP positions."""
        raws: list[bytes] = []
        rest = 0
        for source_topic, queue in self.queues_for(group, topic, queue_id):
            if self.topics.get(source_topic) is None:
                continue
            position = self._position(group, source_topic, queue)
            rest += max(0, self.store.max_offset(source_topic, queue) - position)
            if len(raws) >= max_count:
                continue
            result = self.store.get_messages(
                source_topic, queue, position, max_count - len(raws), group=group
            )
            raws.extend(bytes(view) for _, _, view in result.messages)
        return raws, rest

    def has_message(self, group: str, topic: str, queue_id: int, order: bool) -> bool:
        """Whether a POP would find something (NOTIFICATION): a queue with messages past its POP
        position; in order mode not one that waits for acknowledgements."""
        for source_topic, queue in self.queues_for(group, topic, queue_id):
            if self.topics.get(source_topic) is None:
                continue
            base = (group, source_topic, queue)
            if order and any(k[:3] == base for k in self.in_flight):
                continue
            if self.store.max_offset(source_topic, queue) > self._position(*base):
                return True
        return False

    def batch_ack(
        self,
        group: str,
        topic: str,
        retry: bool,
        queue_id: int,
        offsets: list[int],
        pop_time: int,
        invisible_ms: int,
    ) -> int:
        """Acknowledge ``offsets`` of one POP of one queue (BATCH_ACK_MESSAGE); how many were
        still lent by that POP. As RocketMQ, the others are skipped quietly: a batch carries no
        per-offset answer."""
        source = (
            pop_retry_topic(group, topic) if retry and not topic.startswith("%RETRY%") else topic
        )
        acked = 0
        for offset in offsets:
            item = self.in_flight.get((group, source, queue_id, offset))
            if item is None or (item.pop_time, item.invisible_ms) != (pop_time, invisible_ms):
                continue
            self._append_ack(item)
            self._finish(item)
            acked += 1
        return acked

    # -- ack and change -----------------------------------------------------------------------

    def _find(self, group: str, topic: str, handle: ReceiptHandle) -> InFlight:
        source = (
            pop_retry_topic(group, topic)
            if handle.retry and not topic.startswith("%RETRY%")
            else topic
        )
        item = self.in_flight.get((group, source, handle.queue_id, handle.queue_offset))
        if item is None or (item.pop_time, item.invisible_ms) != (
            handle.pop_time,
            handle.invisible_ms,
        ):
            raise PopError(
                Kind.STALE_HANDLE,
                "receipt handle is stale: the message was already acknowledged, its invisible time "
                "ran out, its handle was replaced, or this broker never issued it",
            )
        return item

    def _append_ack(self, item: InFlight, *, redeliver: int = 0) -> None:
        """The revive-log record that ends this lending of ``item``."""
        ack = _Ack(
            item.group,
            item.topic,
            item.queue_id,
            item.queue_offset,
            item.pop_time,
            item.invisible_ms,
            redeliver,
        )
        self._append(ack, "ack")

    def ack(self, group: str, topic: str, handle_text: str) -> None:
        handle = _parse(handle_text)
        item = self._find(group, topic, handle)
        self._append_ack(item)
        self._finish(item)

    def change_invisible(
        self, group: str, topic: str, handle_text: str, invisible_ms: int
    ) -> ReceiptHandle:
        if not INVISIBLE_MS_MIN <= invisible_ms <= INVISIBLE_MS_MAX:
            raise PopError(
                Kind.INVALID_PARAMETER,
                f"invisibleTime {invisible_ms} ms is outside [{INVISIBLE_MS_MIN}, {INVISIBLE_MS_MAX}]",
            )
        handle = _parse(handle_text)
        item = self._find(group, topic, handle)
        now = self.now_ms()
        # RocketMQ's appendCheckPointThenAckOrigin: a new checkpoint, then the old one acked.
        self._append(
            _Checkpoint(
                item.group,
                item.topic,
                item.queue_id,
                [item.queue_offset],
                now,
                invisible_ms,
                item.order,
                item.attempt,
            ),
            "ck",
        )
        self._append_ack(item)
        renewed = InFlight(
            item.group,
            item.topic,
            item.queue_id,
            item.queue_offset,
            now,
            invisible_ms,
            item.order,
            item.attempt,
        )
        self.in_flight[renewed.key] = renewed
        self._arm(renewed)
        return msgspec.structs.replace(handle, pop_time=now, invisible_ms=invisible_ms)

    def _finish(self, item: InFlight) -> None:
        self.in_flight.pop(item.key, None)
        self.attempts.pop(item.key, None)
        if item.order:
            base = (item.group, item.topic, item.queue_id)
            self._fifo_acked(base, item.queue_offset)
            self.offsets.commit(item.group, item.topic, item.queue_id, self.positions.get(base, 0))
            self.arrived(item.topic, item.queue_id)  # a held FIFO pop may go on

    def _fifo_acked(self, base: tuple[str, str, int], offset: int) -> None:
        acked = self.fifo_acked.setdefault(base, set())
        acked.add(offset)
        position = self.positions.get(base)
        if position is None:
            committed = self.offsets.query(*base)
            position = (
                committed if committed is not None else self.store.min_offset(base[1], base[2])
            )
        while position in acked:
            acked.discard(position)
            position += 1
        self.positions[base] = position

    # -- expiry ---------------------------------------------------------------------------------

    def _arm(self, item: InFlight) -> None:
        self.scheduler.at(
            item.deadline,
            self._expiry_for(item),
            alive=lambda: self.in_flight.get(item.key) is item,
        )

    def _expiry_for(self, item: InFlight) -> Callable[[], None]:
        def expire() -> None:
            if self.in_flight.get(item.key) is not item:
                return  # acknowledged or renewed meanwhile
            self._redeliver(item)

        return expire

    def _record_of(self, item: InFlight) -> MessageRecord | None:
        result = self.store.get_messages(
            item.topic, item.queue_id, item.queue_offset, 1, only_available=False
        )
        if not result.messages or result.messages[0][0] != item.queue_offset:
            return None
        return self.store.read(result.messages[0][1])

    def forward_to_dead_letter(
        self, group: str, topic: str, handle_text: str, *, by: str, reason: str
    ) -> None:
        """Send a message in flight to the group's DLQ now and end its lending (the 5.x
        ForwardMessageToDeadLetterQueue: a FIFO consumer that gave up on it). ``by`` and
        ``reason`` go into the state's reason as ``dead_letter`` writes them."""
        item = self._find(group, topic, _parse(handle_text))
        record = self._record_of(item)
        if record is not None:
            properties = dict(record.properties)
            properties.setdefault("RETRY_TOPIC", item.topic)
            properties.setdefault("ORIGIN_MESSAGE_ID", properties.get("UNIQ_KEY", ""))
            self.retry.dead_letter(record, properties, item.group, by=by, reason=reason)
        self._append_ack(item)
        self._finish(item)

    def _redeliver(self, item: InFlight) -> None:
        group_config = self.groups.find_or_create(item.group)
        max_times = group_config.retry_max_times if group_config is not None else 16
        record = self._record_of(item)
        if record is None:
            self._append_ack(item)
            self._finish(item)
            return
        attempts = (item.attempt + 1) if item.order else record.reconsume_times + 1
        self.redelivered += 1
        original_topic = record.properties.get("RETRY_TOPIC", item.topic)
        properties = dict(record.properties)
        properties.setdefault("RETRY_TOPIC", original_topic)
        properties.setdefault("ORIGIN_MESSAGE_ID", properties.get("UNIQ_KEY", ""))
        properties.setdefault("1ST_POP_TIME", str(item.pop_time))
        if attempts > max_times:
            self.retry.dead_letter(
                record,
                properties,
                item.group,
                reason=(
                    f"not acknowledged after {attempts} "
                    f"{'delivery' if attempts == 1 else 'deliveries'} (retry limit {max_times})"
                ),
            )
        elif item.order:
            # FIFO: the same message again, in place, once its invisible time is over.
            self.attempts[item.key] = attempts
            self._append_ack(item, redeliver=attempts)
            self.in_flight.pop(item.key, None)
            self.arrived(item.topic, item.queue_id)
            return
        else:
            retry = pop_retry_topic(item.group, original_topic)
            self.topics.create_on_send(retry, 1)
            properties.pop("WAIT", None)
            self.put(
                copy_of(
                    record, topic=retry, queue_id=0, properties=properties, reconsume_times=attempts
                )
            )
        self._append_ack(item)
        self._finish(item)


def _parse(handle_text: str) -> ReceiptHandle:
    try:
        return ReceiptHandle.parse(handle_text)
    except ValueError as error:
        raise PopError(Kind.BAD_HANDLE, str(error)) from None
