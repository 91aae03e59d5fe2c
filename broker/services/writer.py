"""Writing a message as RocketMQ's broker does, whoever sends it: a producer through any front,
or the broker itself (deliveries, retries, dead letters, resends).

A plain message goes straight to the store; a half message is stored as the transaction
service prepares it; a delay level sends it through ``SCHEDULE_TOPIC_XXXX``; a delivery time
through the timer. The schedule, timer and transaction services write their own copies through
this writer again, so they are attached after construction (``attach``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pocketmq.broker.errors import BrokerError
from pocketmq.broker.services.outage import Outage
from pocketmq.broker.services.schedule import ScheduleService
from pocketmq.broker.services.timer import TIMER_PROPERTIES, TimerService
from pocketmq.broker.services.transactions import TransactionService
from pocketmq.store.errors import StoreError
from pocketmq.store.message_store import MessageStore, PutMessage, PutResult
from pocketmq.store.record import SysFlag

__all__ = ["MessageWriter"]

log = logging.getLogger("pocketmq.broker")

_TX_MASK = int(SysFlag.TRANSACTION_MASK)
# What makes a put more than a store.put: a delay level or a timer property.
_SPECIAL_PROPERTIES = frozenset(("DELAY", *TIMER_PROPERTIES))


class MessageWriter:
    """``put(message, properties)``: store a message with its delay, timer or transaction."""

    def __init__(
        self,
        store: MessageStore,
        *,
        now_ms: Callable[[], int],
        arrived: Callable[[str, int], None],
    ) -> None:
        self.store = store
        self.now_ms = now_ms
        self.arrived = arrived  # wakes pulls held for (topic, queue)
        self.schedule: ScheduleService | None = None
        self.timer: TimerService | None = None
        self.transactions: TransactionService | None = None
        self.refused = Outage(
            "storing the retry copies of messages consumers sent back",
            "the client that asked for each is told it failed",
        )

    def attach(
        self, schedule: ScheduleService, timer: TimerService, transactions: TransactionService
    ) -> None:
        self.schedule, self.timer, self.transactions = schedule, timer, transactions

    def put(self, message: PutMessage, properties: dict[str, str]) -> PutResult:
        """Store a message as a send does. Raises ``DelayError``/``TimerError`` for a bad
        property and the store's errors."""
        if not message.sysflag & _TX_MASK and _SPECIAL_PROPERTIES.isdisjoint(properties):
            # A plain message (no transaction, delay or timer): the path of nearly every send.
            result = self.store.put(message)
            self.arrived(message.topic, message.queue_id)
            return result
        schedule, timer, transactions = self.schedule, self.timer, self.transactions
        assert schedule is not None and timer is not None and transactions is not None
        level = schedule.level_of(properties)
        tx_type = message.sysflag & SysFlag.TRANSACTION_MASK
        if tx_type == SysFlag.TRANSACTION_PREPARED_TYPE:
            half = transactions.prepare(message, properties)
            result = self.store.put(half)
            assert half.properties is not None
            transactions.stored(
                result.physical_offset,
                result.queue_offset,
                half.properties,
                result.store_timestamp,  # the broker's clock: it is what the manual clock moves
            )
            return result
        if tx_type in (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE):
            if level:
                # A delay level wins over the timer properties, which are dropped (HookUtils).
                for name in TIMER_PROPERTIES:
                    properties.pop(name, None)
                result = self.store.put(schedule.transform(message, properties, level))
                schedule.stored(level, result.physical_offset, result.store_timestamp)
                return result
            now = self.now_ms()
            deliver_ms = timer.deliver_ms_of(properties, now)
            if deliver_ms is not None and deliver_ms > now:
                result = self.store.put(timer.transform(message, properties, deliver_ms))
                timer.stored(result.physical_offset, deliver_ms)
                return result
        result = self.store.put(message)
        self.arrived(message.topic, message.queue_id)
        return result

    def put_internal(self, message: PutMessage) -> PutResult:
        """A message the broker writes itself (deliveries, retries, DLQ): its own properties."""
        assert message.properties is not None
        return self.put(message, message.properties)

    def put_logged(self, message: PutMessage) -> PutResult | None:
        """``put_internal`` for a copy made on a client's behalf: a failure is logged and
        answered as None, so the caller can tell the client without raising."""
        try:
            result = self.put_internal(message)
        except OSError as error:
            # A full or read-only disk (StoreFullError is one too): it refuses every message
            # alike, so it is said once per episode, not once per message.
            self.refused.failed(error)
            return None
        except (BrokerError, StoreError) as error:  # a bad delay or timer: this message's fault
            log.error("could not store a message for %s: %s", message.topic, error)
            return None
        self.refused.worked()
        return result
