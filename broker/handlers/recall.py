"""RECALL_MESSAGE (370): cancel a delayed message by its recall handle (RocketMQ 5.x)."""

from __future__ import annotations

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.handlers.common import bad_request
from pocketmq.broker.protocol import MalformedHeaderError, RemotingCommand, ResponseCode
from pocketmq.broker.protocol.headers import (
    RecallMessageRequestHeader,
    RecallMessageResponseHeader,
)
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.recall import RecallOutcome, RecallService

__all__ = ["handle_recall"]

# RecallMessageProcessor's answers; NOT_WAITING is pocketmq's (RocketMQ answers success).
_CODES = {
    RecallOutcome.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    RecallOutcome.BAD_HANDLE: ResponseCode.ILLEGAL_OPERATION,
    RecallOutcome.NOT_WAITING: ResponseCode.ILLEGAL_OPERATION,
}


def handle_recall(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = RecallMessageRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    service = RecallService(
        topics=broker.topics,
        timer=broker.timer,
        broker_name=broker.config.broker_name,
        now_ms=broker.now_ms,
    )
    outcome, message_id, reason = service.recall(header.topic, header.recall_handle)
    if outcome is not RecallOutcome.RECALLED:
        return request.make_response(_CODES[outcome], reason)
    ext = RecallMessageResponseHeader(msg_id=message_id).to_ext_fields()
    return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)
