"""END_TRANSACTION (37), pocketmq's POCKETMQ_TX admin request (list, check-now), and the
remoting front's check source: CHECK_TRANSACTION_STATE to a producer over its connection."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import msgspec

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.handlers.common import bad_request, error_response
from pocketmq.broker.protocol import (
    MalformedHeaderError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)
from pocketmq.broker.protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.clients import ClientRegistry
from pocketmq.broker.services.transactions import CheckTarget, HalfMessage, TransactionError
from pocketmq.store.record import MessageRecord, RecordLimits, encode_record

__all__ = ["RemotingCheckSource", "handle_end_transaction", "handle_tx_admin"]

log = logging.getLogger("pocketmq.broker")


def handle_end_transaction(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = EndTransactionRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    try:
        outcome = broker.transactions.end(
            header.commit_log_offset,
            header.producer_group,
            header.commit_or_rollback,
            from_check=header.from_transaction_check,
        )
    except TransactionError as error:
        log.warning("END_TRANSACTION from %s refused: %s", connection.remote_address, error)
        return error_response(request, error)
    log.debug("transaction %s: %s", header.msg_id, outcome)
    return request.make_response(ResponseCode.SUCCESS, outcome)


def handle_tx_admin(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    ext = request.ext_fields or {}
    action = ext.get("action", "list")
    service = broker.transactions
    if action == "list":
        rows = [
            {
                "transaction_id": half.transaction_id,
                "producer_group": half.producer_group,
                "topic": half.real_topic,
                "check_times": half.check_times,
                "next_check_ms": half.next_check_ms,
                "born_timestamp": half.born_timestamp,
                "offset_msg_id": broker.offset_msg_id(half.physical_offset),
            }
            for half in sorted(service.pending.values(), key=lambda h: h.born_timestamp)
        ]
        return request.make_response(ResponseCode.SUCCESS, body=msgspec.json.encode(rows))
    if action == "check-now":
        half = service.find(ext.get("id", ""))
        if half is None:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND, f"no pending transaction {ext.get('id')!r}"
            )
        outcome = service.check(half)
        return request.make_response(
            ResponseCode.SUCCESS,
            body=msgspec.json.encode([{"transaction_id": half.transaction_id, "outcome": outcome}]),
        )
    return request.make_response(ResponseCode.INVALID_PARAMETER, f"unknown action {action!r}")


class RemotingCheckSource:
    """The remoting producers of a group as transaction check targets: each check is a
    CHECK_TRANSACTION_STATE (oneway) over the producer's connection, with the half message
    as sent in the body (RocketMQ's Broker2Client.checkProducerTransactionState)."""

    def __init__(
        self,
        clients: ClientRegistry,
        offset_msg_id: Callable[[int], str],
        broker_name: str,
        limits: RecordLimits,
    ) -> None:
        self.clients = clients
        self.offset_msg_id = offset_msg_id
        self.broker_name = broker_name
        self.limits = limits

    def __call__(self, producer_group: str) -> list[CheckTarget]:
        # the registry's channels are the remoting server's connections
        return [
            functools.partial(self._check, connection)
            for connection in self.clients.producers_of(producer_group)
            if isinstance(connection, Connection)
        ]

    def _check(self, connection: Connection, real: MessageRecord, half: HalfMessage) -> None:
        header = CheckTransactionStateRequestHeader(
            topic=real.topic,
            tran_state_table_offset=half.queue_offset,
            commit_log_offset=half.physical_offset,
            msg_id=real.unique_key,
            transaction_id=half.transaction_id,
            offset_msg_id=self.offset_msg_id(half.physical_offset),
            broker_name=self.broker_name,
        )
        connection.send_oneway(
            RemotingCommand(
                code=RequestCode.CHECK_TRANSACTION_STATE,
                ext_fields=header.to_ext_fields(),
                body=encode_record(real, limits=self.limits),
            )
        )
