"""pocketmq's own admin requests about messages (JSON bodies; RocketMQ has no equivalent),
translated onto the query service (``broker/services/queries.py``):

* POCKETMQ_MESSAGE_INFO (9002): one message by commitlog offset, or by topic and unique key or
  key, with its state, reconsume times and where it is; ``action=delete`` marks it for deletion.
* POCKETMQ_DLQ (9003): ``list`` a group's dead-letter queue, or ``resend`` chosen messages (by
  unique key, or all) to their original topic keeping their properties; each outcome reported.
"""

from __future__ import annotations

import msgspec

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.handlers.common import error_response
from pocketmq.broker.protocol import RemotingCommand, ResponseCode
from pocketmq.broker.remoting.server import Connection

__all__ = ["handle_dlq", "handle_message_info"]


def _json_response(request: RemotingCommand, value: object) -> RemotingCommand:
    return request.make_response(ResponseCode.SUCCESS, body=msgspec.json.encode(value))


def handle_message_info(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    ext = request.ext_fields or {}
    queries = broker.queries
    try:
        if "offset" in ext:
            records = queries.find(offset=_offset(ext["offset"]))
        else:
            records = queries.find(topic=ext.get("topic"), key=ext.get("key"))
        if ext.get("action") == "delete":
            queries.delete(records)
    except BrokerError as error:
        return error_response(request, error)
    return _json_response(request, [queries.view(r) for r in records])


def _offset(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BrokerError(Kind.NOT_FOUND, f"no message there: {text!r} is not an offset") from None


def handle_dlq(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    ext = request.ext_fields or {}
    group = ext.get("group", "")
    action = ext.get("action", "list")
    try:
        if action == "list":
            return _json_response(request, broker.queries.dead_letters(group))
        if action == "resend":
            wanted = set(filter(None, ext.get("ids", "").split(",")))
            return _json_response(request, broker.queries.resend_dead_letters(group, wanted))
    except BrokerError as error:
        return error_response(request, error)
    return request.make_response(ResponseCode.INVALID_PARAMETER, f"unknown action {action!r}")
