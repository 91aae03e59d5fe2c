"""What the toolkit's assertions read from a running broker; run on the broker's own loop.

Each check reads the broker's state (the store, consumer offsets, POP's lent messages, pending
transactions, the scheduler) and, until it holds or its wall-clock timeout passes, looks again
every 20 ms: the application under test runs meanwhile. A failure is an AssertionError that
says what was expected and what was found instead.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from pocketmq.broker.app import Broker
from pocketmq.store.record import decode_record
from pocketmq.store.topics import is_system_topic

__all__ = ["Delivered", "Inspector"]

_POLL_S = 0.02
_SHOWN_MAX = 10  # messages or queues a failure lists
_SCAN_MAX = 100_000  # messages of a topic one check reads
# advance_until_idle waits this long (wall clock) for an application's check-back answer
_ANSWER_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class Delivered:
    """A message as the broker holds it in its topic."""

    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    tags: str | None
    keys: list[str]
    properties: dict[str, str] = field(repr=False)
    msg_id: str | None  # the producer's unique key (UNIQ_KEY)
    offset_msg_id: str
    store_timestamp: int
    born_timestamp: int

    def describe(self) -> str:
        body = self.body[:40]
        more = "..." if len(self.body) > 40 else ""
        return (
            f"{self.topic}#{self.queue_id}@{self.queue_offset} tags={self.tags!r} "
            f"keys={self.keys} body={body!r}{more}"
        )


def _describe_filters(**filters: object) -> str:
    shown = [f"{name}={value!r}" for name, value in filters.items() if value is not None]
    return f" with {', '.join(shown)}" if shown else ""


class Inspector:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    # -- messages -------------------------------------------------------------------------------

    def messages(self, topic: str) -> list[Delivered]:
        """Every available message of ``topic``, by queue then offset (at most _SCAN_MAX)."""
        broker = self.broker
        store = broker.store
        found: list[Delivered] = []
        for queue_id in store.queue_ids(topic):
            offset = max(store.min_offset(topic, queue_id), 0)
            while len(found) < _SCAN_MAX:
                result = store.get_messages(topic, queue_id, offset, 256)
                for queue_offset, physical, view in result.messages:
                    record = decode_record(view, check_crc=False)
                    found.append(
                        Delivered(
                            topic=topic,
                            queue_id=queue_id,
                            queue_offset=queue_offset,
                            body=bytes(record.body),
                            tags=record.tags,
                            keys=list(record.keys),
                            properties=dict(record.properties),
                            msg_id=record.unique_key,
                            offset_msg_id=broker.offset_msg_id(physical),
                            store_timestamp=record.store_timestamp,
                            born_timestamp=record.born_timestamp,
                        )
                    )
                if result.next_offset <= offset or not result.messages:
                    break
                offset = result.next_offset
        return found

    def consumed(self, group: str, message: Delivered) -> bool:
        broker = self.broker
        committed = broker.offsets.query(group, message.topic, message.queue_id)
        if committed is None or committed <= message.queue_offset:
            return False
        key = (group, message.topic, message.queue_id, message.queue_offset)
        return key not in broker.pop.in_flight

    async def expect_delivered(
        self,
        topic: str,
        count: int | None,
        tags: str | None,
        keys: list[str] | None,
        body: bytes | None,
        properties: dict[str, str] | None,
        consumed_by: str | None,
        timeout: float,
    ) -> list[Delivered]:
        __tracebackhide__ = True  # pytest: the failure, not our frames
        if count is not None and count < 0:
            raise ValueError(f"count={count}: expected a number of messages, 0 or more")

        def matches(message: Delivered) -> bool:
            return (
                (tags is None or message.tags == tags)
                and (keys is None or all(k in message.keys for k in keys))
                and (body is None or message.body == body)
                and (
                    properties is None
                    or all(message.properties.get(k) == v for k, v in properties.items())
                )
            )

        deadline = time.monotonic() + timeout
        while True:
            everything = self.messages(topic)
            matching = [m for m in everything if matches(m)]
            done = [m for m in matching if consumed_by is None or self.consumed(consumed_by, m)]
            enough = len(done) == count if count is not None else bool(done)
            if enough:
                return done
            too_many = count is not None and len(matching) > count
            if too_many or time.monotonic() >= deadline:
                break
            await asyncio.sleep(_POLL_S)
        what = "a message" if count is None else f"{count} message{'s' * (count != 1)}"
        filters = _describe_filters(tags=tags, keys=keys, body=body, properties=properties)
        lines = [
            f"expected {what} in topic {topic!r}{filters}"
            + (f", consumed by group {consumed_by!r}" if consumed_by else "")
            + (f"; found {len(matching)} (more than expected)" if too_many else "")
            + ("" if too_many else f" within {timeout:g} s; found {len(matching)} matching")
            + (f", {len(done)} of them consumed by {consumed_by!r}" if consumed_by else ""),
        ]
        if not everything:
            known = sorted(t for t in self.broker.topics.topics if not is_system_topic(t))
            exists = topic in self.broker.topics.topics
            lines.append(
                f"the topic {'holds no message' if exists else 'does not exist'}; "
                f"topics with a config: {', '.join(known) or 'none'}"
            )
        else:
            lines.append(f"the topic holds {len(everything)}:")
            lines += [f"  {m.describe()}" for m in everything[:_SHOWN_MAX]]
            if len(everything) > _SHOWN_MAX:
                lines.append(f"  ... and {len(everything) - _SHOWN_MAX} more")
        raise AssertionError("\n".join(lines))

    # -- consumption ------------------------------------------------------------------------------

    def _leftovers(self, group: str | None) -> list[str]:
        broker = self.broker
        groups = [group] if group is not None else broker.progress.groups()
        left: list[str] = []
        for name in groups:
            progress = broker.progress.group(name)
            for queue in progress.queues:
                if queue.lag > 0 or queue.inflight > 0:
                    left.append(
                        f"group {name!r} {queue.topic}#{queue.queue_id}: "
                        f"{queue.lag} not consumed (committed offset {queue.consumer_offset} "
                        f"of {queue.broker_offset}), {queue.inflight} lent by POP and not "
                        "acknowledged"
                    )
        return left

    async def nothing_in_flight(self, group: str | None, timeout: float) -> None:
        __tracebackhide__ = True  # pytest: the failure, not our frames
        deadline = time.monotonic() + timeout
        while True:
            left = self._leftovers(group)
            if not left:
                return
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(_POLL_S)
        who = f"group {group!r}" if group else "every consumer group"
        shown = left[:_SHOWN_MAX] + (
            [f"... and {len(left) - _SHOWN_MAX} more queues"] * (len(left) > _SHOWN_MAX)
        )
        raise AssertionError(
            f"expected nothing in flight for {who} within {timeout:g} s; still in flight:\n  "
            + "\n  ".join(shown)
        )

    # -- transactions -----------------------------------------------------------------------------

    async def no_pending_transactions(self, timeout: float) -> None:
        __tracebackhide__ = True  # pytest: the failure, not our frames
        transactions = self.broker.transactions
        deadline = time.monotonic() + timeout
        while transactions.pending and time.monotonic() < deadline:
            await asyncio.sleep(_POLL_S)
        pending = list(transactions.pending.values())
        if not pending:
            return
        now = self.broker.clock_ms()
        lines = [
            f"transaction {half.transaction_id!r} to topic {half.real_topic!r} (producer group "
            f"{half.producer_group!r}): {half.check_times} check(s) so far, next check in "
            f"{max(half.next_check_ms - now, 0) / 1000:g} s of clock time"
            for half in pending[:_SHOWN_MAX]
        ]
        raise AssertionError(
            f"expected no pending transaction, found {len(pending)}:\n  " + "\n  ".join(lines)
        )

    # -- the clock --------------------------------------------------------------------------------

    async def advance_until_idle(self, limit_ms: int, items_max: int) -> int:
        __tracebackhide__ = True  # pytest: the failure, not our frames
        broker = self.broker
        scheduler = broker.scheduler
        start = broker.clock_ms()
        fired = 0
        pending = broker.transactions.pending
        while scheduler.pending() and fired < items_max:
            due = scheduler.next_due_ms()
            now = broker.clock_ms()
            if due is None or due - start > limit_ms:
                break
            checked = {txid: half.check_times for txid, half in pending.items()}
            fired += await broker.advance(max(due - now, 0))
            # A check-back went to the application: its answer comes in wall time. Wait for it
            # before the clock runs on, or each next check would be due before any answer.
            asked = [h for txid, h in pending.items() if h.check_times > checked.get(txid, 0)]
            deadline = time.monotonic() + _ANSWER_WAIT_S
            while time.monotonic() < deadline and any(
                h.transaction_id in pending and h.answers < h.check_times for h in asked
            ):
                await asyncio.sleep(_POLL_S)
        if not scheduler.pending():
            return fired
        due = scheduler.next_due_ms()
        raise AssertionError(
            f"the broker is not idle after {fired} scheduled items and "
            f"{(broker.clock_ms() - start) / 1000:g} s of clock time (limit {limit_ms / 1000:g} s, "
            f"{items_max} items): {scheduler.pending()} still scheduled, the next "
            + (f"in {(due - broker.clock_ms()) / 1000:g} s" if due is not None else "unknown")
            + "; something keeps rescheduling (transaction checks, POP redeliveries, retries)"
        )
