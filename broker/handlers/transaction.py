"""END_TRANSACTION (37) and pocketmq's POCKETMQ_TX admin request (list, check-now)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from pocketmq.broker.handlers.common import bad_request
from pocketmq.broker.protocol import MalformedHeaderError, RemotingCommand, ResponseCode
from pocketmq.broker.protocol.headers import EndTransactionRequestHeader
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.transactions import TransactionError

if TYPE_CHECKING:
    from pocketmq.broker.app import Broker

__all__ = ["handle_end_transaction", "handle_tx_admin"]

log = logging.getLogger("pocketmq.broker")


def handle_end_transaction(
    broker: Broker, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = EndTransactionRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error)
    try:
        outcome = broker.transactions.end(
            header.commit_log_offset,
            header.producer_group,
            header.commit_or_rollback,
            from_check=header.from_transaction_check,
        )
    except TransactionError as error:
        log.warning("END_TRANSACTION from %s refused: %s", connection.remote_address, error)
        return request.make_response(error.code, str(error))
    log.debug("transaction %s: %s", header.msg_id, outcome)
    return request.make_response(ResponseCode.SUCCESS, outcome)


def handle_tx_admin(
    broker: Broker, request: RemotingCommand, connection: Connection
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
