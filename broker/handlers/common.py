"""What every remoting request handler shares: the one table from the broker's error kinds to
RocketMQ's response codes, and the answers built from it."""

from __future__ import annotations

import logging

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.protocol import RemotingCommand, ResponseCode
from pocketmq.broker.remoting.server import Connection

__all__ = ["RESPONSE_CODES", "bad_request", "error_response"]

log = logging.getLogger("pocketmq.broker")

# Which response code a RocketMQ broker answers for each kind of refusal.
RESPONSE_CODES: dict[Kind, int] = {
    Kind.BAD_REQUEST: ResponseCode.SYSTEM_ERROR,  # RocketMQ's answer to what it cannot decode
    Kind.INVALID_PARAMETER: ResponseCode.INVALID_PARAMETER,
    Kind.ILLEGAL_TOPIC: ResponseCode.SYSTEM_ERROR,  # TopicValidator's answer
    Kind.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    Kind.ILLEGAL_QUEUE: ResponseCode.SYSTEM_ERROR,  # "request queueId[...] is illegal"
    Kind.GROUP_NOT_FOUND: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    Kind.BAD_SUBSCRIPTION: ResponseCode.SUBSCRIPTION_PARSE_FAILED,
    Kind.NO_SUBSCRIPTION: ResponseCode.SUBSCRIPTION_NOT_EXIST,
    Kind.FORBIDDEN: ResponseCode.NO_PERMISSION,
    Kind.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    Kind.NOT_FOUND: ResponseCode.QUERY_NOT_FOUND,
    Kind.BAD_HANDLE: ResponseCode.INVALID_PARAMETER,
    Kind.STALE_HANDLE: ResponseCode.ILLEGAL_OPERATION,
    Kind.ILLEGAL_STATE: ResponseCode.ILLEGAL_OPERATION,
    Kind.ILLEGAL_LITE_TOPIC: ResponseCode.MESSAGE_ILLEGAL,
    Kind.LITE_TOPIC_QUOTA_EXCEEDED: ResponseCode.LMQ_QUOTA_EXCEEDED,
    Kind.BUSY: ResponseCode.POLLING_FULL,
    Kind.SERVICE_UNAVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    Kind.STORE_FAILED: ResponseCode.SYSTEM_ERROR,
}


def error_response(request: RemotingCommand, error: BrokerError) -> RemotingCommand:
    """The answer to ``request`` that a service refused with ``error``."""
    return request.make_response(RESPONSE_CODES[error.kind], str(error))


def bad_request(
    request: RemotingCommand, error: Exception, connection: Connection | None = None
) -> RemotingCommand:
    """A header or body that does not parse: SYSTEM_ERROR naming what was wrong, as RocketMQ
    answers a request it cannot decode. Logged: a client that keeps being refused (a heartbeat
    nobody can read) otherwise fails with nothing in the broker's log to say why."""
    log.warning(
        "request code %d from %s refused: %s",
        request.code,
        connection.remote_address if connection is not None else "a client",
        error,
    )
    return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad request: {error}")
