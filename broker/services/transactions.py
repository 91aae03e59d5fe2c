"""Transactional messages: half messages, commit, rollback and check-back (RocketMQ's
TransactionalMessageService, EndTransactionProcessor and check service).

* A send with the PREPARED sysflag is stored as a half message in ``RMQ_SYS_TRANS_HALF_TOPIC``
  (queue 0), with ``REAL_TOPIC``, ``REAL_QID`` and ``__transactionId__``, its transaction bits
  reset so that it enters the half queue; it is unavailable (state 10).
* Commit writes the message to its real topic as a new record (COMMIT sysflag, the half
  message's offset as prepared transaction offset); commit and rollback both write an op
  record (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``, body ``<half queue offset>,``) and mark
  the half message for deletion (state 30).
* Check-back: the first check after ``transaction_timeout_ms`` (6 s) from the half message's
  store time (RocketMQ counts from its born time, the producer's clock; the store time is the
  broker's, the one a manual clock moves, and on one machine the two barely differ), or
  ``CHECK_IMMUNITY_TIME_IN_SECONDS``; then every ``check_interval_ms``. Each check
  re-appends the half message with ``TRANSACTION_CHECK_TIMES`` raised (as RocketMQ) and asks
  a live producer of its group, found through the check sources that each front registers
  (the remoting front sends CHECK_TRANSACTION_STATE over the producer's connection, the gRPC
  front a RecoverOrphanedTransactionCommand over its telemetry stream).
  After ``check_max`` (15) checks the message is copied to ``TRANS_CHECK_MAX_TIME_TOPIC`` and
  discarded (state 30). A group with no live producer is checked again an interval later, and
  that does not count as a check.
* A transaction is tracked by its id, not by the copy: an answer about any copy ends it, and
  once a commit or rollback is stored it is never checked again.

State lives in the records themselves (half copies and their states), so a restart resumes the
checks where they were.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from pocketmq.broker.errors import Kind, TransactionError
from pocketmq.broker.services.clock import Scheduler
from pocketmq.broker.services.faults import Fault, FaultKind, FaultPlan
from pocketmq.broker.services.topics import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TopicManager,
)
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError
from pocketmq.store.message_store import MessageStore, PutMessage, PutResult, copy_of
from pocketmq.store.record import MessageRecord, SysFlag, encode_properties
from pocketmq.store.state import MessageState

__all__ = [
    "TX_TRANSITIONS",
    "CheckTarget",
    "HalfMessage",
    "TransactionError",
    "TransactionService",
    "TxStatus",
]

log = logging.getLogger("pocketmq.broker")

COMMIT = SysFlag.TRANSACTION_COMMIT_TYPE
ROLLBACK = SysFlag.TRANSACTION_ROLLBACK_TYPE
UNKNOWN = SysFlag.TRANSACTION_NOT_TYPE


class TxStatus(enum.Enum):
    PENDING = "pending"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"
    DISCARDED = "discarded"


# The one table of a transaction's status changes: a pending transaction stays pending (an
# UNKNOWN answer, a check) or ends once, by a commit, a rollback or its last check; an ended one
# never changes again. ``_move`` checks every change against it.
TX_TRANSITIONS: dict[TxStatus, frozenset[TxStatus]] = {
    TxStatus.PENDING: frozenset(TxStatus),
    TxStatus.COMMITTED: frozenset(),
    TxStatus.ROLLED_BACK: frozenset(),
    TxStatus.DISCARDED: frozenset(),
}
# What a producer's answer (commitOrRollback of END_TRANSACTION) asks for.
_ANSWERS = {UNKNOWN: TxStatus.PENDING, COMMIT: TxStatus.COMMITTED, ROLLBACK: TxStatus.ROLLED_BACK}


@dataclass(slots=True)
class HalfMessage:
    transaction_id: str
    producer_group: str
    physical_offset: int  # the latest copy
    queue_offset: int
    check_times: int
    born_timestamp: int
    next_check_ms: int
    real_topic: str
    status: TxStatus = TxStatus.PENDING
    # Check-back answers that reached the broker (any outcome, dropped ones too): a tool that
    # moves a manual clock waits for them before the next check is due.
    answers: int = 0


# Asks one producer about a transaction: given the half message as sent, and its state.
CheckTarget = Callable[[MessageRecord, "HalfMessage"], None]


class TransactionService:
    def __init__(
        self,
        store: MessageStore,
        *,
        scheduler: Scheduler,
        now_ms: Callable[[], int],
        put: Callable[[PutMessage], PutResult],
        topics: TopicManager,
        offset_msg_id: Callable[[int], str],
        timeout_ms: int,
        check_interval_ms: int,
        check_max: int,
        faults: FaultPlan | None = None,
    ) -> None:
        self.store = store
        # Planned check-back faults: ``end`` tests ``faults.checks`` (an empty list) for answers.
        self.faults = faults or FaultPlan(now_ms=now_ms)
        self.scheduler = scheduler
        self.now_ms = now_ms
        self.put = put  # the writer's put_internal: a commit may be delayed or timed
        self.topics = topics
        self.offset_msg_id = offset_msg_id
        self.timeout_ms = timeout_ms
        self.check_interval_ms = check_interval_ms
        self.check_max = check_max
        self.pending: dict[str, HalfMessage] = {}
        self.checks_sent = 0
        self._armed: dict[str, int] = {}
        # Each front's producers: a source maps a producer group to its live check targets.
        self.check_sources: list[Callable[[str], list[CheckTarget]]] = []

    # -- half messages -----------------------------------------------------------------------

    def prepare(self, message: PutMessage, properties: dict[str, str]) -> PutMessage:
        """The half message as stored (TransactionalMessageBridge.parseHalfMessageInner)."""
        half = dict(properties)
        half["REAL_TOPIC"] = message.topic
        half["REAL_QID"] = str(message.queue_id)
        half["__transactionId__"] = properties.get("UNIQ_KEY", "")
        return PutMessage(
            topic=TRANS_HALF_TOPIC,
            body=message.body,
            queue_id=0,
            flag=message.flag,
            properties=half,
            properties_text=encode_properties(half),
            sysflag=message.sysflag & ~SysFlag.TRANSACTION_MASK,
            born_timestamp=message.born_timestamp,
            born_host=message.born_host,
            reconsume_times=message.reconsume_times,
        )

    def stored(
        self, record_offset: int, queue_offset: int, properties: dict[str, str], born_ms: int
    ) -> None:
        self.store.set_state(
            record_offset, MessageState.UNAVAILABLE, "half message: transaction not ended"
        )
        txid = (
            properties.get("__transactionId__") or properties.get("UNIQ_KEY") or str(record_offset)
        )
        half = HalfMessage(
            transaction_id=txid,
            producer_group=properties.get("PGROUP", ""),
            physical_offset=record_offset,
            queue_offset=queue_offset,
            check_times=int(properties.get("TRANSACTION_CHECK_TIMES", "0") or 0),
            born_timestamp=born_ms,
            next_check_ms=self._first_check_ms(properties, born_ms),
            real_topic=properties.get("REAL_TOPIC", ""),
        )
        self.pending[txid] = half
        self._arm(half)

    def _first_check_ms(self, properties: dict[str, str], born_ms: int) -> int:
        immunity = properties.get("CHECK_IMMUNITY_TIME_IN_SECONDS")
        if immunity:
            try:
                return born_ms + int(immunity) * 1000
            except ValueError:
                pass
        return born_ms + self.timeout_ms

    def start(self) -> None:
        """After a restart: every half copy still unavailable is a pending transaction."""
        store = self.store
        queue = store.consume_queues.get(TRANS_HALF_TOPIC, 0)
        if queue is None:
            return
        now = self.now_ms()
        for logical, (physical, _size, _code) in queue.entries(queue.min_offset):
            if store.state_of(physical) is not MessageState.UNAVAILABLE:
                continue
            try:
                record = store.read(physical)
            except (CorruptRecordError, OffsetOutOfRangeError) as error:
                log.error("half message at %d unreadable: %s", physical, error)
                continue
            props = record.properties
            txid = props.get("__transactionId__") or props.get("UNIQ_KEY") or str(physical)
            half = HalfMessage(
                txid,
                props.get("PGROUP", ""),
                physical,
                logical,
                int(props.get("TRANSACTION_CHECK_TIMES", "0") or 0),
                record.born_timestamp,
                0,
                props.get("REAL_TOPIC", ""),
            )
            # The first check of a copy that was never checked keeps its original due time;
            # otherwise the next one is an interval after the restart.
            half.next_check_ms = (
                self._first_check_ms(props, record.store_timestamp)
                if half.check_times == 0
                else now + self.check_interval_ms
            )
            self.pending[txid] = half
        for half in self.pending.values():
            self._arm(half)

    # -- end ------------------------------------------------------------------------------

    def end(
        self,
        commit_log_offset: int,
        producer_group: str,
        outcome: int,
        *,
        from_check: bool,
        planned_faults: bool = True,
    ) -> str:
        """Commit (8), roll back (12) or leave (0) the transaction of the half copy at
        ``commit_log_offset``. Returns what happened, for the log and admin tools."""
        store = self.store
        try:
            record = store.read(commit_log_offset)
        except (OffsetOutOfRangeError, CorruptRecordError) as error:
            raise TransactionError(
                Kind.BAD_REQUEST,
                f"no half message at commit log offset {commit_log_offset}: {error}",
            ) from None
        if record.topic != TRANS_HALF_TOPIC:
            raise TransactionError(
                Kind.BAD_REQUEST, f"the message at {commit_log_offset} is not a half message"
            )
        if record.properties.get("PGROUP") != producer_group:
            raise TransactionError(
                Kind.BAD_REQUEST,
                f"the half message belongs to producer group {record.properties.get('PGROUP')!r}",
            )
        txid = (
            record.properties.get("__transactionId__")
            or record.properties.get("UNIQ_KEY")
            or str(commit_log_offset)
        )
        half = self.pending.get(txid)
        if half is None:
            return "already ended"  # a late or repeated answer: never a second commit
        if from_check and planned_faults:
            half.answers += 1
        if from_check and planned_faults and self.faults.checks:
            fault = self.faults.take_check_answer(half.real_topic, txid)
            if fault is not None:
                return self._faulted_answer(fault, commit_log_offset, producer_group, outcome)
        status = _ANSWERS.get(outcome)
        if status is None:
            raise TransactionError(
                Kind.INVALID_PARAMETER, f"commitOrRollback {outcome} is not 0, 8 or 12"
            )
        self._move(half, status)
        if status is TxStatus.PENDING:
            return "unknown: will be checked"
        if status is TxStatus.COMMITTED:
            self._commit(record, half)
        else:
            store.set_state(half.physical_offset, MessageState.MARKED_FOR_DELETION, "rolled back")
        self._write_op(half.queue_offset)
        del self.pending[txid]
        return status.value

    def _faulted_answer(
        self, fault: Fault, commit_log_offset: int, producer_group: str, outcome: int
    ) -> str:
        """A check-back answer a planned fault drops (the transaction stays pending: the next
        check comes at its time) or holds ``delay_ms`` on the broker's clock."""
        if fault.kind == FaultKind.DROP_CHECK.value:
            return "answer dropped (a planned fault): checked again later"

        def answer_now() -> None:
            try:
                self.end(
                    commit_log_offset,
                    producer_group,
                    outcome,
                    from_check=True,
                    planned_faults=False,
                )
            except TransactionError as error:
                log.warning("a held check-back answer was refused: %s", error)

        self.scheduler.at(self.now_ms() + fault.delay_ms, answer_now)
        return f"answer held {fault.delay_ms} ms (a planned fault)"

    @staticmethod
    def _move(half: HalfMessage, status: TxStatus) -> None:
        """Change a transaction's status as ``TX_TRANSITIONS`` allows, or raise."""
        if status not in TX_TRANSITIONS[half.status]:
            raise TransactionError(
                Kind.ILLEGAL_STATE,
                f"transaction {half.transaction_id} is {half.status.value}: it cannot be "
                f"{status.value}",
            )
        half.status = status

    def _commit(self, record: MessageRecord, half: HalfMessage) -> None:
        properties = dict(record.properties)
        topic = properties.pop("REAL_TOPIC", half.real_topic)
        queue_id = int(properties.pop("REAL_QID", "0") or 0)
        for name in ("TRAN_MSG", "TRANSACTION_CHECK_TIMES", "TRAN_PREPARED_QUEUE_OFFSET"):
            properties.pop(name, None)
        config = self.topics.create_on_send(topic, None)
        if config is not None and queue_id >= config.write_queue_nums:
            queue_id = 0
        message = copy_of(
            record,
            topic=topic,
            queue_id=queue_id,
            properties=properties,
            sysflag=(record.sysflag & ~SysFlag.TRANSACTION_MASK) | COMMIT,
            prepared_transaction_offset=half.physical_offset,
        )
        self.put(message)
        self.store.set_state(half.physical_offset, MessageState.MARKED_FOR_DELETION, "committed")

    def _write_op(self, half_queue_offset: int) -> None:
        self.store.put(
            PutMessage(
                topic=TRANS_OP_HALF_TOPIC,
                body=f"{half_queue_offset},".encode(),
                properties={"TAGS": "d"},
            )
        )

    # -- check-back -----------------------------------------------------------------------------

    def _arm(self, half: HalfMessage) -> None:
        due = half.next_check_ms
        if self._armed.get(half.transaction_id) == due:
            return
        self._armed[half.transaction_id] = due
        txid = half.transaction_id
        self.scheduler.at(
            due, lambda: self._check_due(txid, due), alive=lambda: self._still_due(txid, due)
        )

    def _still_due(self, txid: str, due: int) -> bool:
        half = self.pending.get(txid)
        return half is not None and half.next_check_ms == due

    def _check_due(self, txid: str, due: int) -> None:
        half = self.pending.get(txid)
        if half is None or half.next_check_ms != due:
            return  # ended, or rescheduled (check-now)
        self.check(half)

    def check(self, half: HalfMessage) -> str:
        """One check of ``half`` now (also what ``pocketmq tx check-now`` does)."""
        now = self.now_ms()
        producers = self.check_targets(half.producer_group)
        if not producers:
            half.next_check_ms = now + self.check_interval_ms
            self._arm(half)
            return f"no live producer in group {half.producer_group!r}; checking again later"
        if half.check_times >= self.check_max:
            self._discard(half)
            return f"checked {half.check_times} times; moved to {TRANS_CHECK_MAX_TIME_TOPIC}"
        store = self.store
        record = store.read(half.physical_offset)
        properties = dict(record.properties)
        properties["TRANSACTION_CHECK_TIMES"] = str(half.check_times + 1)
        properties["TRAN_PREPARED_QUEUE_OFFSET"] = str(half.queue_offset)
        copy = copy_of(record, topic=TRANS_HALF_TOPIC, queue_id=0, properties=properties)
        result = store.put(copy)
        store.set_state(
            result.physical_offset, MessageState.UNAVAILABLE, "half message: transaction not ended"
        )
        store.set_state(
            half.physical_offset, MessageState.MARKED_FOR_DELETION, "superseded by a check copy"
        )
        half.physical_offset, half.queue_offset = result.physical_offset, result.queue_offset
        half.check_times += 1
        half.next_check_ms = now + self.check_interval_ms
        self._arm(half)
        target = producers[self.checks_sent % len(producers)]
        target(self._as_sent(half, store.read(half.physical_offset)), half)
        self.checks_sent += 1
        return f"check {half.check_times} sent"

    def check_targets(self, producer_group: str) -> list[CheckTarget]:
        """Live producers of a group that can be asked about a transaction, from every front
        (gRPC producers' group is the topic name, as RocketMQ's proxy registers them)."""
        targets: list[CheckTarget] = []
        for source in self.check_sources:
            targets.extend(source(producer_group))
        return targets

    def _as_sent(self, half: HalfMessage, record: MessageRecord) -> MessageRecord:
        """The half message as the producer sent it: real topic and queue restored."""
        return MessageRecord(
            topic=record.properties.get("REAL_TOPIC", half.real_topic),
            body=record.body,
            queue_id=int(record.properties.get("REAL_QID", "0") or 0),
            flag=record.flag,
            properties=record.properties,
            sysflag=record.sysflag,
            born_timestamp=record.born_timestamp,
            born_host=record.born_host,
            store_timestamp=record.store_timestamp,
            store_host=record.store_host,
            reconsume_times=record.reconsume_times,
            queue_offset=half.queue_offset,
            physical_offset=half.physical_offset,
        )

    def _discard(self, half: HalfMessage) -> None:
        self._move(half, TxStatus.DISCARDED)
        store = self.store
        record = store.read(half.physical_offset)
        properties = dict(record.properties)
        store.put(
            copy_of(record, topic=TRANS_CHECK_MAX_TIME_TOPIC, queue_id=0, properties=properties)
        )
        store.set_state(
            half.physical_offset,
            MessageState.MARKED_FOR_DELETION,
            f"discarded after {half.check_times} checks",
        )
        self._write_op(half.queue_offset)
        self.pending.pop(half.transaction_id, None)

    def find(self, key: str) -> HalfMessage | None:
        """A pending transaction by transaction id / unique key, or by a copy's offset message id."""
        if key in self.pending:
            return self.pending[key]
        for half in self.pending.values():
            if self.offset_msg_id(half.physical_offset) == key.upper():
                return half
        return None
