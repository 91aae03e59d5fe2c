"""Transactional messages: ``TransactionProducer``.

    async def check(message: MessageView) -> TransactionResolution:
        # asked by the broker when it does not know a transaction's outcome
        return TransactionResolution.COMMIT if await db.order_exists(message.keys[0]) else ...

    async def place_order(message: Message) -> TransactionResolution:
        await db.insert_order(...)
        return TransactionResolution.COMMIT

    async with TransactionProducer("order-producers", namesrv="127.0.0.1:9876",
                                   checker=check) as producer:
        result = await producer.send_in_transaction(
            Message(topic="Orders", body=b"...", keys=["order-42"]), place_order)
        result.resolution   # COMMIT, ROLLBACK or UNKNOWN

Behaviour follows RocketMQ's ``TransactionMQProducer`` (remoting.md §3.6, rocketmq-store.md §6):

* the half message is a SEND_MESSAGE_V2 with sysflag PREPARED (0x4) and properties
  ``TRAN_MSG=true`` and ``PGROUP=<group>``; consumers do not see it;
* then the local transaction runs; its answer goes to the broker as a oneway END_TRANSACTION
  (37): COMMIT (8) makes the message visible, ROLLBACK (12) drops it, UNKNOWN (0) leaves it to
  the check-back. A local transaction that raises counts as UNKNOWN and its exception text
  is the request's remark; one that returns anything but a ``TransactionResolution`` (None,
  say) counts as UNKNOWN too. A half message that was stored but not durably (a status other
  than SEND_OK) is rolled back without running the local transaction, as in RocketMQ;
* the broker asks about a transaction it has no answer for (CHECK_TRANSACTION_STATE, 39,
  over this producer's own connection; first after 6 s, then every check interval, at most 15
  times). ``checker`` answers with a ``MessageView`` of the half message (``msg_id`` = the
  transaction id); the SDK replies with END_TRANSACTION ``fromTransactionCheck=true``,
  copying commitLogOffset, tranStateTableOffset, msgId and transactionId from the check.
  A checker that raises answers UNKNOWN (checked again later);
* a producer the broker does not know gets no checks: ``start()`` heartbeats the group to
  every master broker registered with the name server (and again every
  ``heartbeat_interval_s``), so a restarted process with the same group resolves the
  transactions its predecessor left open.

Transactions can also be ended by hand: ``tx = await producer.send_half(message)``, then
``await tx.commit()`` / ``tx.rollback()``; ending one twice raises ``ClientUsageError``.

A ``TransactionProducer`` is a ``Producer``: ``send`` and ``send_batch`` still send ordinary
messages.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Final

from pocketmq.broker.protocol import RemotingCommand, RequestCode
from pocketmq.broker.protocol.codes import MessageSysFlag, TransactionType
from pocketmq.broker.protocol.errors import RemoteProtocolError
from pocketmq.broker.protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)
from pocketmq.broker.protocol.message_codec import decode_message
from pocketmq.ids import InvalidMessageIdError, decode_offset_msg_id

from .connection import Connection, make_request
from .errors import ClientError, ClientUsageError, ConnectionLostError
from .message import (
    PROPERTY_UNIQ_KEY,
    Message,
    MessageQueue,
    MessageView,
    ReceivedMessage,
    SendResult,
    SendStatus,
)
from .producer import Producer

__all__ = [
    "PROPERTY_PRODUCER_GROUP",
    "PROPERTY_TRANSACTION_PREPARED",
    "Transaction",
    "TransactionChecker",
    "TransactionProducer",
    "TransactionResolution",
    "TransactionSendResult",
]

log = logging.getLogger("pocketmq.client.transaction")

PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP: Final = "PGROUP"
# Timer properties (5.x): a transactional message cannot also wait for a delivery time.
_TIMER_PROPERTIES: Final = ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")


class TransactionResolution(StrEnum):
    """A local transaction's outcome (RocketMQ 5.x ``TransactionResolution``; 4.x's
    ``LocalTransactionState`` COMMIT_MESSAGE / ROLLBACK_MESSAGE / UNKNOW)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"

    @property
    def wire(self) -> int:
        """END_TRANSACTION's ``commitOrRollback``: 8, 12 or 0."""
        return _WIRE[self]


_WIRE: Final = {
    TransactionResolution.COMMIT: int(TransactionType.COMMIT),
    TransactionResolution.ROLLBACK: int(TransactionType.ROLLBACK),
    TransactionResolution.UNKNOWN: int(TransactionType.NOT),
}

TransactionChecker = Callable[[MessageView], Awaitable[TransactionResolution]]
LocalTransaction = Callable[[Message], Awaitable[TransactionResolution]]


@dataclass(frozen=True, kw_only=True)
class TransactionSendResult(SendResult):
    """The half message's ``SendResult`` plus what the local transaction decided.

    ``local_error`` is the exception the local transaction raised (then ``resolution`` is
    UNKNOWN); ``end_sent`` is False when END_TRANSACTION could not be written (the broker's
    check-back resolves the transaction then).
    """

    resolution: TransactionResolution
    local_error: BaseException | None = None
    end_sent: bool = True

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["resolution"] = str(self.resolution)
        out["local_error"] = None if self.local_error is None else repr(self.local_error)
        out["end_sent"] = self.end_sent
        return out


def _as_resolution(value: object, what: str) -> TransactionResolution:
    if isinstance(value, TransactionResolution):
        return value
    if isinstance(value, str):
        try:
            return TransactionResolution(value.upper())
        except ValueError:
            pass
    log.warning("%s returned %r, not a TransactionResolution: treated as UNKNOWN", what, value)
    return TransactionResolution.UNKNOWN


async def _run_callback(
    fn: Callable[[Any], Any], argument: object, what: str
) -> tuple[TransactionResolution, str | None, Exception | None]:
    """(resolution, remark, error): a callback that raises answers UNKNOWN."""
    try:
        result = fn(argument)
        if inspect.isawaitable(result):
            result = await result
    except asyncio.CancelledError:
        raise
    except Exception as e:
        log.exception("%s failed: answering UNKNOWN", what)
        return TransactionResolution.UNKNOWN, f"{what} failed: {type(e).__name__}: {e}", e
    return _as_resolution(result, what), None, None


class Transaction:
    """A half message sent by ``TransactionProducer.send_half``, waiting for its end.

    ``commit()`` or ``rollback()`` ends it (once: a second end raises ``ClientUsageError``);
    ``end(TransactionResolution.UNKNOWN)`` only says "not decided yet" and may be followed by
    a commit or rollback. Without an end the broker asks the producer's checker.
    """

    def __init__(self, producer: TransactionProducer, send_result: SendResult) -> None:
        self._producer = producer
        self.send_result = send_result
        self.resolution: TransactionResolution | None = None  # the last end sent
        self._final: TransactionResolution | None = None

    def __repr__(self) -> str:
        return f"Transaction({self.transaction_id!r}, resolution={self.resolution})"

    @property
    def transaction_id(self) -> str:
        return self.send_result.transaction_id or self.send_result.msg_id

    @property
    def msg_id(self) -> str:
        return self.send_result.msg_id

    @property
    def ended(self) -> bool:
        """True once committed or rolled back."""
        return self._final is not None

    async def commit(self) -> None:
        await self.end(TransactionResolution.COMMIT)

    async def rollback(self) -> None:
        await self.end(TransactionResolution.ROLLBACK)

    async def end(self, resolution: TransactionResolution, *, remark: str | None = None) -> None:
        """Send END_TRANSACTION (oneway) to the broker that holds the half message."""
        if not isinstance(resolution, TransactionResolution):
            raise ClientUsageError(f"expected a TransactionResolution, got {resolution!r}")
        if self._final is not None:
            raise ClientUsageError(
                f"transaction {self.transaction_id} already ended with {self._final}; "
                "a transaction is committed or rolled back once"
            )
        final = resolution is not TransactionResolution.UNKNOWN
        if final:
            self._final = resolution  # before the await: a concurrent second end fails
        try:
            await self._producer._end_transaction(self.send_result, resolution, remark)
        except BaseException:
            if final:
                self._final = None
            raise
        self.resolution = resolution


class TransactionProducer(Producer):
    """A ``Producer`` that also sends transactional messages; an async context manager.

    ``checker`` (required before ``start()``): ``async def check(message: MessageView) ->
    TransactionResolution``. Other options are ``Producer``'s.
    """

    def __init__(
        self,
        group: str,
        *,
        checker: TransactionChecker | None = None,
        namesrv: str | Sequence[str] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(group, namesrv=namesrv, **options)
        self.checker = checker
        self.checks_answered = 0
        self._core.pool.handlers[RequestCode.CHECK_TRANSACTION_STATE] = self._on_check

    def _require_checker(self) -> None:
        if self.checker is None:
            raise ClientUsageError(
                "a TransactionProducer needs a checker: the broker asks it about transactions "
                "left without an answer (TransactionProducer(group, checker=async_fn))"
            )
        if not callable(self.checker):
            raise ClientUsageError(f"checker must be an async callable, got {self.checker!r}")

    def _check_start(self) -> None:
        self._require_checker()

    async def _start(self) -> None:
        """Heartbeat the group to every master broker, so that they can check back."""
        await super()._start()
        await self._discover_brokers()

    async def _discover_brokers(self) -> None:
        """Heartbeat every master broker the name server knows that has not had one yet."""
        try:
            masters = await self._core.master_brokers()
        except (ClientError, RemoteProtocolError) as e:
            log.warning(
                "brokers of %s not discovered (no checks until they are): %s", self.group, e
            )
            return
        for addr in masters.values():
            if addr not in self._heartbeats:
                await self._ensure_heartbeat(addr)

    async def _heartbeat_all(self) -> None:
        await self._discover_brokers()
        await super()._heartbeat_all()

    # -- sending -----------------------------------------------------------------------------

    def _check_transactional(self, message: object) -> Message:
        if isinstance(message, list | tuple):
            raise ClientUsageError(
                "a batch cannot be sent in a transaction: send one message per transaction"
            )
        if not isinstance(message, Message):
            raise ClientUsageError(f"expected a Message, got {type(message).__name__}")
        if message.delay_level:
            raise ClientUsageError(
                "a transactional message cannot have a delay level: it is delivered on commit"
            )
        timers = [p for p in _TIMER_PROPERTIES if p in message.properties]
        if timers:
            raise ClientUsageError(
                f"a transactional message cannot have a delivery time ({', '.join(timers)})"
            )
        return message

    async def send_half(self, message: Message) -> Transaction:
        """Send ``message`` as a half message; end the returned ``Transaction`` yourself."""
        self._check_open()
        self._require_checker()
        message = self._check_transactional(message)
        props = self._properties(message)
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = self.group
        properties = self._properties_text(props)
        pick, may_move = self._pick_for(message, None, None, None)
        body = bytes(message.body)

        def build(mq: MessageQueue) -> RemotingCommand:
            header = self._header(
                mq,
                properties,
                flag=message.flag,
                sys_flag=int(MessageSysFlag.TRANSACTION_PREPARED_TYPE),
            )
            return make_request(RequestCode.SEND_MESSAGE_V2, header, body=body)

        result = await self._send_with_retries(
            message.topic, pick, build, props[PROPERTY_UNIQ_KEY], may_move=may_move
        )
        return Transaction(self, result)

    async def send_in_transaction(
        self, message: Message, local_transaction: LocalTransaction
    ) -> TransactionSendResult:
        """Send the half message, run ``local_transaction(message)``, end the transaction.

        Raises what ``send`` raises if the half message cannot be sent (the local transaction
        then does not run). Whatever the local transaction does, the result says what was
        sent: its exception is ``result.local_error``, not raised.
        """
        self._check_open()
        self._require_checker()
        self._check_transactional(message)
        if not callable(local_transaction):
            raise ClientUsageError("local_transaction must be an async callable(message)")
        tx = await self.send_half(message)
        error: Exception | None = None
        remark: str | None = None
        if tx.send_result.status is not SendStatus.SEND_OK:
            # stored, but not as durably as asked: RocketMQ rolls such a half message back
            resolution = TransactionResolution.ROLLBACK
        else:
            resolution, remark, error = await _run_callback(
                local_transaction, message, "local transaction"
            )
        end_sent = True
        try:
            await tx.end(resolution, remark=remark)
        except ClientError as e:
            log.warning(
                "transaction %s: %s not sent (the broker will check back): %s",
                tx.transaction_id,
                resolution,
                e,
            )
            end_sent = False
        sent = {f.name: getattr(tx.send_result, f.name) for f in fields(SendResult)}
        return TransactionSendResult(
            **sent, resolution=resolution, local_error=error, end_sent=end_sent
        )

    async def _end_transaction(
        self, result: SendResult, resolution: TransactionResolution, remark: str | None
    ) -> None:
        self._check_open()
        try:
            commit_log_offset = decode_offset_msg_id(result.offset_msg_id).physical_offset
        except InvalidMessageIdError as e:
            raise ClientUsageError(f"the half message's offset id is unusable: {e}") from None
        header = EndTransactionRequestHeader(
            topic=result.queue.topic,
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=resolution.wire,
            from_transaction_check=False,
            msg_id=result.msg_id,
            transaction_id=result.transaction_id,
            broker_name=result.queue.broker_name,
        )
        addr = self._core.routes.broker_addr(result.queue.broker_name)
        if addr is None:
            raise ConnectionLostError(result.queue.broker_name, "broker has no master address")
        cmd = make_request(RequestCode.END_TRANSACTION, header)
        cmd.remark = remark
        await self._core.invoke_oneway(addr, cmd)

    # -- check-back --------------------------------------------------------------------------

    async def _on_check(self, conn: Connection, cmd: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE (oneway) from a broker: ask the checker, answer oneway."""
        try:
            request = CheckTransactionStateRequestHeader.from_ext_fields(cmd.ext_fields)
            half = decode_message(cmd.body or b"")
        except RemoteProtocolError as e:
            log.warning("%s: malformed CHECK_TRANSACTION_STATE dropped: %s", conn.addr, e)
            return None
        group = half.properties.get(PROPERTY_PRODUCER_GROUP)
        if group is not None and group != self.group:
            log.warning("%s: check for producer group %r, not %r", conn.addr, group, self.group)
            return None
        if self._closing or self.checker is None:
            return None
        view = ReceivedMessage.from_ext(
            half, MessageQueue(half.topic, request.broker_name or "", half.queue_id)
        )
        resolution, remark, _ = await _run_callback(self.checker, view, "transaction checker")
        header = EndTransactionRequestHeader(
            topic=request.topic or half.topic,
            producer_group=self.group,
            tran_state_table_offset=request.tran_state_table_offset,
            commit_log_offset=request.commit_log_offset,
            commit_or_rollback=resolution.wire,
            from_transaction_check=True,
            msg_id=half.properties.get(PROPERTY_UNIQ_KEY) or request.msg_id or half.offset_msg_id,
            transaction_id=request.transaction_id,
            broker_name=request.broker_name,
        )
        answer = make_request(RequestCode.END_TRANSACTION, header)
        answer.remark = remark
        try:
            await conn.invoke_oneway(answer)
        except ClientError as e:
            log.warning("answer to the check of %s not sent: %s", view.msg_id, e)
            return None
        self.checks_answered += 1
        log.debug("check of %s answered %s", view.msg_id, resolution)
        return None
